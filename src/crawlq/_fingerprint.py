"""Canonical URLs and request fingerprints.

Canonicalisation runs on every enqueue, so the common case (an ASCII URL with
nothing to normalise) takes a fast path of string operations; anything that
needs percent-encoding work goes through a slower, exact path.

Canonical form (mode ``"crawlq"``):

- scheme and host lower-cased, non-ASCII host IDNA-encoded, default port dropped;
- empty path becomes ``/``; ``.`` and ``..`` segments are resolved;
- percent-encoding normalised without double-encoding: ``%XX`` of an unreserved
  character is decoded, every other ``%XX`` is upper-cased and kept, a stray
  ``%`` becomes ``%25``, and characters that may not appear in a URL (space,
  ``"<>\\^`{|}``, non-ASCII) are UTF-8 percent-encoded. ``%26`` and ``%2526``
  therefore stay distinct, and ``+`` is not confused with ``%20``;
- the query is sorted by parameter name, stably (repeated names keep their
  order), after dropping ignored parameters; an empty query is dropped;
- the fragment is dropped unless ``keep_fragments`` is set;
- the path's case is kept.

The fingerprint is 16 bytes of BLAKE2b over method, canonical URL, body and the
chosen headers. Mode ``"scrapy"`` reproduces Scrapy's default
``RequestFingerprinter`` byte for byte (20-byte SHA-1, w3lib canonicalisation).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec

from ._errors import ConfigError, InvalidRequest

if TYPE_CHECKING:
    from ._request import Request

__all__ = ["Fingerprinter"]

# Characters that may stand literally in a canonical path, query or fragment.
_PLAIN: Final = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?\[\]]*")
# What the slow path rewrites: a %XX escape, or one character that is not plain.
_REWRITE: Final = re.compile(r"%[0-9A-Fa-f]{2}|[^A-Za-z0-9\-._~!$&'()*+,;=:@/?\[\]]")
_UNRESERVED: Final = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)
_DEFAULT_PORTS: Final = {"http": "80", "https": "443"}
_GLOB_CHARS: Final = frozenset("*?[")


def _escape_table() -> dict[str, str]:
    table: dict[str, str] = {}
    for byte in range(256):
        canonical = chr(byte) if byte in _UNRESERVED else f"%{byte:02X}"
        digits = f"{byte:02x}"
        high, low = digits[0], digits[1]
        for h in {high, high.upper()}:
            for lo in {low, low.upper()}:
                table["%" + h + lo] = canonical
    return table


_ESCAPES: Final = _escape_table()


def _rewrite_one(match: re.Match[str]) -> str:
    text = match.group()
    canonical = _ESCAPES.get(text)
    if canonical is not None:
        return canonical
    try:
        return "".join(f"%{b:02X}" for b in text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidRequest(f"URL contains an unpaired surrogate {text!r}") from None


def _split_scheme(url: str) -> tuple[str, str]:
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or (scheme != "http" and scheme != "https"):
        raise InvalidRequest(f"url {url!r} is not an absolute http(s) URL; crawlq queues http(s)")
    return scheme, rest


def _normalise(component: str) -> str:
    if _PLAIN.fullmatch(component):
        return component
    return _REWRITE.sub(_rewrite_one, component)


def _remove_dot_segments(path: str) -> str:
    output: list[str] = []
    for segment in path.split("/")[1:]:
        if segment == "..":
            if output:
                output.pop()
        elif segment != ".":
            output.append(segment)
    if path.endswith(("/.", "/..")):
        output.append("")
    return "/" + "/".join(output)


class _ParamFilter:
    """Which query parameters take part in the fingerprint."""

    __slots__ = ("_keep", "_names", "_patterns", "given")

    def __init__(self, patterns: Iterable[str], *, keep: bool) -> None:
        patterns = list(patterns)
        #: The names and globs as given, sorted: what a job records.
        self.given = sorted(set(patterns)) if all(isinstance(p, str) for p in patterns) else []
        names: set[str] = set()
        globs: list[str] = []
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern:
                raise ConfigError(
                    f"query parameter patterns must be non-empty str, not {pattern!r}"
                )
            if _GLOB_CHARS.isdisjoint(pattern):
                names.add(pattern)
            else:
                globs.append(fnmatch.translate(pattern))
        self._names = frozenset(names)
        self._patterns = re.compile("|".join(globs)) if globs else None
        self._keep = keep

    def matches(self, name: str) -> bool:
        return name in self._names or (
            self._patterns is not None and self._patterns.fullmatch(name) is not None
        )

    def admits(self, name: str) -> bool:
        return self.matches(name) is self._keep


class Fingerprinter:
    """Computes canonical URLs and request fingerprints.

    ``ignore_query_params`` drops the named parameters from the canonical URL
    (glob patterns such as ``utm_*`` allowed); ``keep_query_params`` keeps only
    the named ones. ``include_headers`` adds those request headers (names,
    case-insensitive) to the fingerprint. ``mode="scrapy"`` matches Scrapy's
    default request fingerprinter exactly and needs the ``crawlq[scrapy]`` extra.

    Raises `ConfigError` if both ``ignore_query_params`` and
    ``keep_query_params`` are given, for an unknown mode, or when the scrapy
    mode's dependency is missing.
    """

    __slots__ = (
        "_canonicalize_scrapy",
        "_filter",
        "_headers",
        "include_headers",
        "keep_fragments",
        "mode",
    )

    def __init__(
        self,
        *,
        mode: Literal["crawlq", "scrapy"] = "crawlq",
        keep_fragments: bool = False,
        ignore_query_params: Iterable[str] = (),
        keep_query_params: Iterable[str] | None = None,
        include_headers: Iterable[str] = (),
    ) -> None:
        if mode not in ("crawlq", "scrapy"):
            raise ConfigError(f"fingerprint mode must be 'crawlq' or 'scrapy', not {mode!r}")
        ignore = list(ignore_query_params)
        if ignore and keep_query_params is not None:
            raise ConfigError(
                "give either ignore_query_params or keep_query_params, not both: "
                "keep_query_params already drops every parameter it does not name"
            )
        if mode == "scrapy" and (ignore or keep_query_params is not None):
            raise ConfigError(
                "mode='scrapy' reproduces Scrapy's fingerprints, which use every query "
                "parameter; drop ignore_query_params/keep_query_params or use mode='crawlq'"
            )
        self.mode = mode
        self.keep_fragments = bool(keep_fragments)
        self._filter: _ParamFilter | None
        if keep_query_params is not None:
            self._filter = _ParamFilter(keep_query_params, keep=True)
        elif ignore:
            self._filter = _ParamFilter(ignore, keep=False)
        else:
            self._filter = None
        self.include_headers = tuple(sorted({h.lower() for h in include_headers}))
        self._headers = self.include_headers
        self._canonicalize_scrapy: Callable[..., str] | None = None
        if mode == "scrapy":
            try:
                from w3lib.url import canonicalize_url
            except ImportError:
                raise ConfigError(
                    "fingerprint mode 'scrapy' needs w3lib: pip install 'crawlq[scrapy]'"
                ) from None
            self._canonicalize_scrapy = canonicalize_url

    def __repr__(self) -> str:
        return f"Fingerprinter(mode={self.mode!r}, keep_fragments={self.keep_fragments})"

    def describe(self) -> dict[str, Any]:
        """Return the settings that decide fingerprints, for a job to record and check.

        `from_description` turns the result back into an equal fingerprinter.
        """
        query = self._filter
        return {
            "mode": self.mode,
            "keep_fragments": self.keep_fragments,
            "ignore_query_params": query.given if query is not None and not query._keep else [],
            "keep_query_params": query.given if query is not None and query._keep else None,
            "include_headers": list(self.include_headers),
        }

    @classmethod
    def from_description(cls, description: Mapping[str, Any]) -> Fingerprinter:
        """Rebuild the fingerprinter that `describe` described.

        Raises `ConfigError` for a description this crawlq cannot rebuild.
        """
        try:
            return cls(
                mode=description["mode"],
                keep_fragments=description["keep_fragments"],
                ignore_query_params=description["ignore_query_params"],
                keep_query_params=description["keep_query_params"],
                include_headers=description["include_headers"],
            )
        except (KeyError, TypeError) as exc:
            raise ConfigError(
                f"fingerprint settings {description!r} are not a crawlq description ({exc})"
            ) from None

    def canonical_url(self, url: str) -> str:
        """Return the canonical form of ``url`` used for deduplication.

        Raises `InvalidRequest` for a URL that is not absolute http(s) with a
        host, or whose port is not a number.
        """
        if self._canonicalize_scrapy is not None:
            return self._canonicalize_scrapy(url, keep_fragments=self.keep_fragments)
        return self.canonical_and_host(url)[0]

    def canonical_and_host(self, url: str) -> tuple[str, str]:
        """Return ``(canonical_url, host)``: the host is the lower-cased hostname.

        Raises `InvalidRequest` for a URL that is not absolute http(s) with a
        host, or whose port is not a number.
        """
        # Split with string methods: this runs on every add, and is about
        # twice as fast as a regular expression for the usual URL.
        if url.startswith("https://"):
            scheme = "https"
            rest = url[8:]
        elif url.startswith("http://"):
            scheme = "http"
            rest = url[7:]
        else:
            scheme, rest = _split_scheme(url)
        fragment = None
        cut = rest.find("#")
        if cut != -1:
            fragment = rest[cut + 1 :]
            rest = rest[:cut]
        query = None
        cut = rest.find("?")
        if cut != -1:
            query = rest[cut + 1 :]
            rest = rest[:cut]
        cut = rest.find("/")
        if cut != -1:
            authority = rest[:cut]
            path = rest[cut:]
            if "/." in path:
                path = _remove_dot_segments(path)
            if not _PLAIN.fullmatch(path):
                path = _REWRITE.sub(_rewrite_one, path)
        else:
            authority = rest
            path = "/"
        if authority.isascii() and ":" not in authority and "@" not in authority and authority:
            host = hostname = authority.lower()
        else:
            host, hostname = _host(authority, scheme, url)
        canonical = scheme + "://" + host + path
        if query:
            query = self._canonical_query(query)
            if query:
                canonical += "?" + query
        if fragment is not None and self.keep_fragments:
            canonical += "#" + _normalise(fragment)
        return canonical, hostname

    def _canonical_query(self, query: str) -> str:
        # Normalise before splitting so that sorting and filtering see canonical
        # names; %26 and %3D stay encoded, so '&' and '=' still split correctly.
        if not _PLAIN.fullmatch(query):
            query = _REWRITE.sub(_rewrite_one, query)
        if self._filter is None:
            if "&" not in query:
                return query
            if not ("&&" in query or query[0] == "&" or query[-1] == "&"):
                # Usually already in order: check before building a sorted copy.
                previous = ""
                for pair in query.split("&"):
                    name = pair.partition("=")[0]
                    if name < previous:
                        break
                    previous = name
                else:
                    return query
        pairs = [p for p in query.split("&") if p]
        keys = [p.partition("=")[0] for p in pairs]
        if self._filter is not None:
            admits = self._filter.admits
            kept = [(k, p) for k, p in zip(keys, pairs, strict=True) if admits(k)]
            keys = [k for k, _ in kept]
            pairs = [p for _, p in kept]
        if len(pairs) > 1 and sorted(keys) != keys:
            order = sorted(range(len(pairs)), key=keys.__getitem__)
            pairs = [pairs[i] for i in order]
        return "&".join(pairs)

    def fingerprint(self, request: Request) -> bytes:
        """Return the request's fingerprint (16 bytes; 20 in scrapy mode)."""
        return self.fingerprint_and_host(request)[0]

    def fingerprint_and_host(self, request: Request) -> tuple[bytes, str]:
        """Return ``(fingerprint, host)`` from one parse of the URL."""
        if self._canonicalize_scrapy is not None:
            return self._scrapy_fingerprint(request), self.canonical_and_host(request.url)[1]
        canonical, host = self.canonical_and_host(request.url)
        if request.body or self._headers:
            data = _encode(
                (
                    request.method,
                    canonical,
                    request.body,
                    [(name, _header(request, name)) for name in self._headers],
                )
            )
        else:
            data = (request.method + " " + canonical).encode()
        return hashlib.blake2b(data, digest_size=16).digest(), host

    def _scrapy_fingerprint(self, request: Request) -> bytes:
        assert self._canonicalize_scrapy is not None
        headers: dict[str, list[str]] = {}
        for name in self._headers:
            value = _header(request, name)
            if value is not None:
                headers[name.encode().hex()] = [value.encode("utf-8").hex()]
        if request.meta.get("verbatim_url"):
            url = request.url
        else:
            url = self._canonicalize_scrapy(request.url, keep_fragments=self.keep_fragments)
        data = {
            "method": request.method,
            "url": url,
            "body": request.body.hex(),
            "headers": headers,
        }
        return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).digest()


_encode: Final = msgspec.msgpack.encode


def _header(request: Request, name: str) -> str | None:
    for key, value in request.headers.items():
        if key.lower() == name:
            return value
    return None


def _host(authority: str, scheme: str, url: str) -> tuple[str, str]:
    """Return the canonical authority and the bare hostname."""
    if "@" in authority:
        userinfo, _, authority = authority.rpartition("@")
    else:
        userinfo = ""
    if not authority.islower():
        authority = authority.lower()
    if not authority.isascii():
        authority = _idna(authority, url)
    hostname = authority
    if authority and authority[-1] != "]":
        colon = authority.rfind(":")
        if colon != -1:
            hostname = authority[:colon]
            port = authority[colon + 1 :]
            if not port or port == _DEFAULT_PORTS[scheme]:
                authority = hostname
            elif not (port.isascii() and port.isdigit()) or int(port) > 65535:
                raise InvalidRequest(f"url {url!r} has an invalid port {port!r}")
            elif port[0] == "0":
                port = str(int(port))
                authority = hostname if port == _DEFAULT_PORTS[scheme] else hostname + ":" + port
    if not hostname:
        raise InvalidRequest(f"url {url!r} has no host; give the full URL with its host name")
    return (userinfo + "@" + authority if userinfo else authority), hostname


def _idna(authority: str, url: str) -> str:
    host, sep, port = authority.rpartition(":") if ":" in authority else (authority, "", "")
    try:
        encoded = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise InvalidRequest(f"url {url!r} has a host that is not valid IDNA") from None
    return encoded + sep + port
