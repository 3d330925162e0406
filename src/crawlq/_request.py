"""The request a frontier stores, and its versioned msgpack codec.

A `Request` is validated once, when it is built, so that every store can trust
it. The codec writes a request as a msgpack array whose first element is the
schema version; decoding checks every field's type, so a job directory or a
shared Redis can hand crawlq data but never make it run code (no pickle).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urljoin

import msgspec

from ._due import due_time
from ._errors import CorruptStore, IncompatibleStore, InvalidRequest, StoreError
from ._meta import check_encodable, check_meta_keys, serialization_error

__all__ = [
    "MAX_URL_LENGTH",
    "PRIORITY_MAX",
    "PRIORITY_MIN",
    "SCHEMA_VERSION",
    "Request",
    "check_encodable",
]

#: Version of the encoded request layout; bumped on any incompatible change.
#: 2 added ``not_before`` and the revisit interval; version 1 still decodes.
SCHEMA_VERSION: Final = 2

#: Priorities are 32-bit signed ints so that every store can order them exactly.
PRIORITY_MIN: Final = -(2**31)
PRIORITY_MAX: Final = 2**31 - 1

#: Longest URL a frontier stores by default, in characters (32 KiB); the
#: ``max_url_length`` option of `open_frontier` changes it. Browsers and
#: servers give up near 8-64 KiB, and every stored request costs its URL.
MAX_URL_LENGTH: Final = 32 * 1024

_HTTP: Final = "http://"
_HTTPS: Final = "https://"
_AUTHORITY_END: Final = frozenset("/?#")
#: What a browser strips from both ends of an href (C0 controls and space),
#: and the characters it removes anywhere in it (tab and newlines).
_HREF_STRIP: Final = "".join(map(chr, range(0x21)))
_HREF_REMOVE: Final = str.maketrans("", "", "\t\n\r")


def _check_url(url: object) -> None:
    if type(url) is not str:
        raise InvalidRequest(f"url must be a str, not {type(url).__name__}: {url!r}")
    if url.startswith(_HTTPS):
        start = 8
    elif url.startswith(_HTTP):
        start = 7
    else:
        lowered = url[:8].lower()
        if lowered.startswith(_HTTPS):
            start = 8
        elif lowered.startswith(_HTTP):
            start = 7
        else:
            raise InvalidRequest(
                f"url {url!r} is not an absolute http(s) URL; give the full URL, "
                "e.g. 'https://example.com/page' (resolve relative links against the page URL)"
            )
    if len(url) == start or url[start] in _AUTHORITY_END or url[start] == "@":
        raise InvalidRequest(f"url {url!r} has no host; give the full URL with its host name")
    if "\n" in url or "\r" in url or "\x00" in url:
        raise InvalidRequest(
            f"url {_clip(url)!r} holds a line break or NUL, which would let it forge "
            "another HTTP request; percent-encode it (%0A, %0D, %00) or drop the link"
        )


def _clip(text: str) -> str:
    """The start of a long text, to quote in a message."""
    return text if len(text) <= 200 else text[:200] + "..."


def _forges_lines(text: str) -> bool:
    return "\n" in text or "\r" in text or "\x00" in text


def _check_priority(priority: object) -> None:
    if type(priority) is not int:
        raise InvalidRequest(
            f"priority must be an int, not {type(priority).__name__} ({priority!r}); "
            "round it or convert it with int()"
        )
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise InvalidRequest(
            f"priority {priority} is outside the 32-bit range "
            f"[{PRIORITY_MIN}, {PRIORITY_MAX}]; scale your priorities down"
        )


def _check_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    if not headers:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidRequest(
            f"headers must be a mapping of str to str, not {type(headers).__name__}"
        )
    checked = dict(headers)
    for name, value in checked.items():
        if type(name) is not str or type(value) is not str:
            raise InvalidRequest(
                f"header {name!r}: {value!r} is not str to str; decode bytes headers first"
            )
        if _forges_lines(name) or _forges_lines(value):
            raise InvalidRequest(
                f"header {_clip(name)!r}: {_clip(value)!r} holds a line break or NUL, which "
                "would let it forge other headers or requests; remove them from the header"
            )
    return checked


class Request:
    """One request to fetch: the unit a frontier stores and hands out.

    ``url`` is the exact wire URL and is never rewritten; deduplication uses a
    canonical form of it computed separately (see `Fingerprinter`). A higher
    ``priority`` comes out first. ``meta`` holds str, bytes, int, float,
    bool, None, and lists and dicts of them: values every store hands back
    unchanged (a tuple, set, datetime or Decimal is refused when added).
    ``callback`` and ``errback`` are names, for crawlers that dispatch by
    name. ``dont_filter`` bypasses deduplication. ``depth`` is carried for the crawler's own use.
    ``not_before`` (a POSIX timestamp or an aware `datetime.datetime`) keeps
    the request in the frontier, not handed out, until that time (judged by
    the Redis server's clock on Redis); it is then handed out as any other.
    ``revisit_interval`` is read-only: the refetch interval a `crawlq.Revisit`
    policy keeps with the request (None until its first ``ack(changed=)``).

    Raises `InvalidRequest` for a URL that is not absolute http(s) with a host,
    a URL or header holding a line break (CR, LF) or NUL, a priority that is
    not an int in the 32-bit range, a naive datetime, NaN or infinite
    ``not_before``, or fields of the wrong type. The URL's
    length (at most `MAX_URL_LENGTH` by default) and the encodability of
    ``meta`` are checked when the request is added.
    """

    __slots__ = (
        "_lease",
        "body",
        "callback",
        "depth",
        "dont_filter",
        "errback",
        "headers",
        "meta",
        "method",
        "not_before",
        "priority",
        "revisit_interval",
        "url",
    )

    url: str
    method: str
    headers: dict[str, str]
    body: bytes
    priority: int
    meta: dict[str, Any]
    callback: str | None
    errback: str | None
    dont_filter: bool
    depth: int
    not_before: float | None
    revisit_interval: float | None
    # The `crawlq._lease.Lease` this request was handed out under (a store
    # may mark a queued object with something else); None until popped. It
    # rides on the request because ack(request) must tell "acked twice"
    # (harmless) from "never popped" (LeaseError) without the frontier keeping
    # a record of every request it ever handed out.
    _lease: object

    def __init__(
        self,
        url: str,
        *,
        method: str = "GET",
        headers: Mapping[str, str] | None = None,
        body: bytes | str = b"",
        priority: int = 0,
        meta: dict[str, Any] | None = None,
        callback: str | None = None,
        errback: str | None = None,
        dont_filter: bool = False,
        depth: int = 0,
        not_before: float | datetime.datetime | None = None,
    ) -> None:
        _check_url(url)
        self.url = url
        if method != "GET":
            if type(method) is not str or not method.isalpha():
                raise InvalidRequest(
                    f"method must be an HTTP method name such as 'POST', not {method!r}"
                )
            method = method.upper()
        self.method = method
        self.headers = _check_headers(headers) if headers else {}
        if type(body) is not bytes:
            if isinstance(body, str):
                body = body.encode("utf-8")
            elif isinstance(body, bytes | bytearray | memoryview):
                body = bytes(body)
            else:
                raise InvalidRequest(f"body must be bytes or str, not {type(body).__name__}")
        self.body = body
        if type(priority) is not int or not PRIORITY_MIN <= priority <= PRIORITY_MAX:
            _check_priority(priority)
        self.priority = priority
        if meta is None:
            meta = {}
        elif type(meta) is not dict:
            if not isinstance(meta, Mapping):
                raise InvalidRequest(f"meta must be a dict, not {type(meta).__name__}")
            meta = dict(meta)
        self.meta = meta
        if callback is not None and type(callback) is not str:
            raise InvalidRequest(f"callback must be a method name (str), not {callback!r}")
        if errback is not None and type(errback) is not str:
            raise InvalidRequest(f"errback must be a method name (str), not {errback!r}")
        self.callback = callback
        self.errback = errback
        self.dont_filter = bool(dont_filter)
        if type(depth) is not int or depth < 0:
            raise InvalidRequest(f"depth must be a non-negative int, not {depth!r}")
        self.depth = depth
        self.not_before = None if not_before is None else due_time(not_before)
        self.revisit_interval = None
        self._lease = None

    @classmethod
    def from_link(cls, href: str, *, base: str, **fields: Any) -> Request | None:
        """Return the request for a link ``href`` found on the page at ``base``; None to skip it.

        ``href`` is resolved against ``base`` as a browser does (relative,
        root-relative and scheme-relative links; surrounding whitespace and
        tabs or newlines inside are dropped). Returns None, for the crawler
        to skip, when the link leads to no page to fetch: an empty or
        fragment-only href (``#top``: the same page), a scheme other than
        http(s) (``mailto:``, ``javascript:``, ``tel:``, ``data:``...), or a
        malformed URL (one ``Request`` refuses). ``fields`` are the other
        `Request` fields (``depth=``, ``priority=``...). Raises
        `InvalidRequest` if ``base`` is not an absolute http(s) URL, or for a
        bad value in ``fields``: mistakes of the caller, not of the page.
        """
        _check_url(base)
        if type(href) is not str:
            raise InvalidRequest(f"href must be a str, not {type(href).__name__}: {href!r}")
        href = href.strip(_HREF_STRIP).translate(_HREF_REMOVE)
        if not href or href.startswith("#"):
            return None
        try:
            url = urljoin(base, href)
        except ValueError:  # e.g. an unclosed IPv6 bracket
            return None
        lowered = url[:8].lower()
        if not lowered.startswith((_HTTP, _HTTPS)):
            return None
        try:
            return cls(url, **fields)
        except InvalidRequest:
            if not fields:
                return None
        try:
            cls(url)
        except InvalidRequest:
            return None  # the URL is what is wrong
        return cls(url, **fields)  # raises for the bad field

    def replace(self, **changes: Any) -> Request:
        """Return a new request with the given fields changed; it carries no lease.

        The revisit interval is carried over.
        """
        fields: dict[str, Any] = {
            "method": self.method,
            "headers": self.headers,
            "body": self.body,
            "priority": self.priority,
            "meta": dict(self.meta),
            "callback": self.callback,
            "errback": self.errback,
            "dont_filter": self.dont_filter,
            "depth": self.depth,
            "not_before": self.not_before,
        }
        fields.update(changes)
        url = fields.pop("url", self.url)
        request = Request(url, **fields)
        request.revisit_interval = self.revisit_interval
        return request

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Request):
            return NotImplemented
        return _fields(self) == _fields(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        extra = f" priority={self.priority}" if self.priority else ""
        return f"<Request {self.method} {self.url}{extra}>"


def _fields(request: Request) -> tuple[Any, ...]:
    return (
        request.url,
        request.method,
        request.headers,
        request.body,
        request.priority,
        request.meta,
        request.callback,
        request.errback,
        request.dont_filter,
        request.depth,
        request.not_before,
        request.revisit_interval,
    )


class _WireRequest(msgspec.Struct, array_like=True, frozen=True):
    """An encoded request (schema 1 or 2), checked field by field on decode.

    Version 1 had no due time and no revisit interval: its arrays end at
    ``depth`` and decode with both None.
    """

    version: int
    url: str
    method: str
    headers: dict[str, str]
    body: bytes
    priority: int
    meta: dict[str, Any]
    callback: str | None
    errback: str | None
    dont_filter: bool
    depth: int
    not_before: float | None = None
    revisit_interval: float | None = None


_encoder: Final = msgspec.msgpack.Encoder()
_decoder: Final = msgspec.msgpack.Decoder(_WireRequest)
_raw_decoder: Final = msgspec.msgpack.Decoder()


def encode_request(request: Request) -> bytes:
    """Encode a request as versioned msgpack.

    Raises `SerializationError`, naming the offending ``meta`` key, when a value
    cannot be encoded.
    """
    if request.meta:
        check_meta_keys(request)
    try:
        return _encoder.encode(
            (
                SCHEMA_VERSION,
                request.url,
                request.method,
                request.headers,
                request.body,
                request.priority,
                request.meta,
                request.callback,
                request.errback,
                request.dont_filter,
                request.depth,
                request.not_before,
                request.revisit_interval,
            )
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise serialization_error(request, exc) from None


def decode_request(data: bytes) -> Request:
    """Decode a request written by `encode_request`.

    Raises `IncompatibleStore` for a request of a newer schema (upgrade
    crawlq), `CorruptStore` for data that is not a crawlq request.
    """
    try:
        wire = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise _decode_error(data, exc) from None
    if wire.version != SCHEMA_VERSION and wire.version != 1:
        raise _decode_error(data, None)
    request = Request.__new__(Request)
    request.url = wire.url
    request.method = wire.method
    request.headers = wire.headers
    request.body = wire.body
    request.priority = wire.priority
    request.meta = wire.meta
    request.callback = wire.callback
    request.errback = wire.errback
    request.dont_filter = wire.dont_filter
    request.depth = wire.depth
    request.not_before = wire.not_before
    request.revisit_interval = wire.revisit_interval
    request._lease = None
    return request


def _decode_error(data: bytes, exc: Exception | None) -> StoreError:
    try:
        raw = _raw_decoder.decode(data)
        version = raw[0] if isinstance(raw, list) and raw else None
    except msgspec.DecodeError:
        version = None
    if isinstance(version, int) and version > SCHEMA_VERSION:
        return IncompatibleStore(
            f"stored request uses schema version {version}, newer than this crawlq "
            f"understands ({SCHEMA_VERSION}); upgrade crawlq to read it"
        )
    return CorruptStore(
        f"stored request is not a valid crawlq request ({exc}); the store is corrupt"
    )
