"""crawlee's `Request` to crawlq's `Request` and back, without loss and without pickle.

The wire fields go where crawlq keeps them: ``url``, ``method``, ``headers``
(crawlee's lower-cased `HttpHeaders`) and the payload as crawlq's ``body``
(bytes, so a payload that is not UTF-8 survives). Everything else crawlee
keeps on a request (``unique_key``, ``user_data`` with its label and
crawlee's own ``__crawlee`` data: retries allowed, session rotations,
session id, crawl depth, forefront, enqueue strategy, state...;
``retry_count``, ``no_retry``, ``loaded_url``, ``handled_at``) is crawlee's
own JSON form of the request (pydantic's ``model_dump(mode="json",
by_alias=True)``), kept as ``meta["crawlee"]``: plain str, int, float, bool,
None, lists and dicts, which crawlq's msgpack codec stores as they are.
Decoding is pydantic validation of that JSON form: nothing is imported or
run. A request built by a newer crawlee with fields this one does not know
is refused by pydantic, not misread.

crawlq's ``depth`` mirrors crawlee's ``crawl_depth`` (for ``crawlq
inspect``); ``priority`` is 1 for a request added or reclaimed with
``forefront`` and 0 otherwise. The dedup fingerprint is a hash of
``unique_key`` alone (`fingerprint`), so crawlq refuses exactly the requests
crawlee's own queues refuse.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

from crawlee import Request as CrawleeRequest

from ..._errors import SerializationError
from ..._request import Request

__all__ = ["FOREFRONT_PRIORITY", "META_KEY", "fingerprint", "from_crawlq", "to_crawlq"]

#: The ``meta`` key holding crawlee's fields.
META_KEY: Final = "crawlee"
#: crawlq priority of a request added or reclaimed with ``forefront=True``.
FOREFRONT_PRIORITY: Final = 1
#: Fields that travel as crawlq's own request fields, not in ``meta``.
_WIRE_FIELDS: Final = frozenset({"url", "method", "headers", "payload"})
#: Set in the kept fields when the payload is ``b""`` (None is an empty body).
_EMPTY_PAYLOAD: Final = "emptyPayload"
#: Told apart from any other use of the fingerprint space.
_FINGERPRINT_PREFIX: Final = b"crawlee-unique-key\x00"


def fingerprint(unique_key: str) -> bytes:
    """The 16-byte crawlq fingerprint of a crawlee ``unique_key``.

    BLAKE2b of the key's UTF-8 bytes (lone surrogates kept as they are), so
    two requests are duplicates in crawlq exactly when their ``unique_key``
    strings are equal.
    """
    data = _FINGERPRINT_PREFIX + unique_key.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).digest()


def to_crawlq(request: CrawleeRequest, *, forefront: bool = False) -> Request:
    """Build the crawlq request that stores ``request``.

    Raises `crawlq.InvalidRequest` for what crawlq cannot store (a URL over
    ``max_url_length`` is refused when added), `crawlq.SerializationError`
    when crawlee's JSON form of the request cannot be made.
    """
    try:
        kept: dict[str, Any] = request.model_dump(
            mode="json", by_alias=True, exclude=set(_WIRE_FIELDS)
        )
    except ValueError as exc:  # pydantic's errors derive from ValueError
        raise SerializationError(
            f"crawlee request {request.url!r} cannot be stored: its user_data is not "
            f"JSON-serializable ({exc})"
        ) from exc
    payload = request.payload
    if payload is not None and not payload:
        kept[_EMPTY_PAYLOAD] = True
    return Request(
        request.url,
        method=request.method,
        headers=dict(request.headers),
        body=payload or b"",
        priority=FOREFRONT_PRIORITY if forefront else 0,
        meta={META_KEY: kept},
        # Not request.crawl_depth: that fills in the caller's user_data["__crawlee"].
        depth=((kept.get("userData") or {}).get("__crawlee") or {}).get("crawlDepth", 0),
    )


def from_crawlq(request: Request) -> CrawleeRequest:
    """Rebuild the crawlee request that `to_crawlq` stored.

    Raises `crawlq.SerializationError` for a crawlq request that was not
    stored by this adapter, or whose kept fields crawlee refuses.
    """
    kept = request.meta.get(META_KEY)
    if not isinstance(kept, dict):
        raise SerializationError(
            f"request {request.url!r} in the frontier was not added by crawlq's crawlee "
            "adapter (no meta['crawlee']); use a frontier of its own for each crawler"
        )
    fields = dict(kept)
    empty = bool(fields.pop(_EMPTY_PAYLOAD, False))
    fields["url"] = request.url
    fields["method"] = request.method
    fields["headers"] = request.headers
    fields["payload"] = request.body if request.body or empty else None
    try:
        return CrawleeRequest.model_validate(fields)
    except ValueError as exc:
        raise SerializationError(
            f"request {request.url!r} in the frontier is not a crawlee request this version "
            f"of crawlee reads ({exc})"
        ) from exc
