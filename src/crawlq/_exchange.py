"""What the job commands read and write: the JSONL request format and `JobReport`.

``crawlq export`` writes one request per line and ``crawlq import`` reads the
same lines back. Each line is a JSON object (UTF-8) with these keys; every key
but ``url`` is left out when it holds its default, to keep lines short:

=============== ============================================ ===============
key             value                                        default
=============== ============================================ ===============
``url``         str, absolute http(s) URL                    (required)
``method``      str                                          ``"GET"``
``headers``     object of str to str                         ``{}``
``body_base64`` str: the body bytes, base64 (RFC 4648)       empty body
``priority``    int in the 32-bit range                      ``0``
``meta``        object (see below)                           ``{}``
``callback``    str                                          null
``errback``     str                                          null
``dont_filter`` bool                                         false
``depth``       int >= 0                                     ``0``
``not_before``  number: POSIX seconds; not handed out before null (due now)
``revisit_interval`` number > 0: a `crawlq.Revisit` interval null
=============== ============================================ ===============

``not_before`` of an exported request is when it is due: for a request
released with a delay or acked with a refetch, that time, not the one it was
added with. Imported, it is scheduled until then (a revisit comes back as a
request due later, no longer counted among ``revisits``).

Lines are written in ASCII (other characters as JSON escapes, ``\\uXXXX``), so no
tool can split a line where a JSON string holds U+2028 or the like. Any other
key is an error. ``meta`` holds JSON values, plus tagged objects for
what JSON cannot hold; a tagged object has exactly one key:

- ``{"$bytes": "<base64>"}`` is a bytes value;
- ``{"$float": "nan" | "inf" | "-inf"}`` is a float that is not finite;
- ``{"$dict": {...}}`` is the inner object taken literally, keys and all: a
  meta dict whose only key is ``$bytes``, ``$float`` or ``$dict`` is written
  this way so that it is not read back as a tag.

Dict keys inside ``meta`` must be strings (JSON has no other keys).

`JobReport` is what ``crawlq inspect`` shows. Each store that can be
inspected provides ``inspect(url: str, *, top: int = 10) -> JobReport`` in
its module; the CLI renders the report the same way for every store.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ._errors import InvalidRequest, SerializationError
from ._request import Request, encode_request

__all__ = [
    "HostReport",
    "JobReport",
    "decode_line",
    "encode_line",
]

_BYTES: Final = "$bytes"
_FLOAT: Final = "$float"
_DICT: Final = "$dict"
_TAGS: Final = frozenset((_BYTES, _FLOAT, _DICT))
_NON_FINITE: Final = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_KEYS: Final = (
    "url",
    "method",
    "headers",
    "body_base64",
    "priority",
    "meta",
    "callback",
    "errback",
    "dont_filter",
    "depth",
    "not_before",
    "revisit_interval",
)


@dataclass(frozen=True, slots=True)
class HostReport:
    """One host of a job, as ``crawlq inspect`` lists it."""

    name: str
    #: Requests stored for the host (queued, and leased ones not yet acked).
    requests: int
    #: Seconds until pacing lets the host be popped again; 0.0: ready now;
    #: None: the store does not say.
    ready_in: float | None


@dataclass(frozen=True, slots=True)
class JobReport:
    """A read-only snapshot of a job, produced by a store's ``inspect(url, *, top)``.

    ``counts`` and ``settings`` are ordered ``label -> value`` pairs, so that
    each store shows what it knows (a shared store may know its leases, for
    instance). ``priorities`` is ``(priority, requests)``, highest first.
    ``notes`` are sentences printed under the tables.
    """

    #: The job's URL, as `open_frontier` would take it.
    store: str
    counts: Mapping[str, int]
    #: The busiest hosts first, at most ``top`` of them.
    hosts: Sequence[HostReport]
    #: Hosts with stored requests, of which ``hosts`` lists the busiest.
    host_total: int
    priorities: Sequence[tuple[int, int]]
    #: Distinct priorities not listed in ``priorities``, and their requests.
    priorities_omitted: tuple[int, int] = (0, 0)
    settings: Mapping[str, str] = field(default_factory=dict)
    notes: Sequence[str] = ()


# -- writing ------------------------------------------------------------------


def encode_line(request: Request) -> str:
    """Return ``request`` as one JSONL line (without the newline).

    Raises `SerializationError` when ``meta`` holds a value JSON cannot carry
    even with the tags above (a dict key that is not a str, or a type such as
    a datetime), naming the ``meta`` key.
    """
    line: dict[str, Any] = {"url": request.url}
    if request.method != "GET":
        line["method"] = request.method
    if request.headers:
        line["headers"] = request.headers
    if request.body:
        line["body_base64"] = base64.b64encode(request.body).decode("ascii")
    if request.priority:
        line["priority"] = request.priority
    if request.meta:
        meta = {}
        for key, value in request.meta.items():
            try:
                meta[key] = _to_json(value)
            except TypeError as exc:
                raise SerializationError(
                    f"meta[{key!r}] of {request.url} cannot be exported: {exc}"
                ) from None
        line["meta"] = _escape_tag_like(meta)
    if request.callback is not None:
        line["callback"] = request.callback
    if request.errback is not None:
        line["errback"] = request.errback
    if request.dont_filter:
        line["dont_filter"] = True
    if request.depth:
        line["depth"] = request.depth
    if request.not_before is not None:
        line["not_before"] = request.not_before
    if request.revisit_interval is not None:
        line["revisit_interval"] = request.revisit_interval
    # ASCII only: no U+2028, NEL... that a line splitter could take for a line end.
    return json.dumps(line, separators=(",", ":"), allow_nan=False)


def _escape_tag_like(value: dict[str, Any]) -> dict[str, Any]:
    if len(value) == 1 and next(iter(value)) in _TAGS:
        return {_DICT: value}
    return value


def _to_json(value: Any) -> Any:
    """Return ``value`` with bytes and non-finite floats tagged; TypeError if impossible."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {_FLOAT: "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, bytes | bytearray | memoryview):
        return {_BYTES: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, list | tuple):
        return [_to_json(item) for item in value]
    if isinstance(value, dict):
        converted = {}
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError(f"dict key {key!r} is not a str, and JSON keys must be")
            converted[key] = _to_json(item)
        return _escape_tag_like(converted)
    raise TypeError(f"{type(value).__name__} values have no JSON form")


# -- reading ------------------------------------------------------------------


def decode_line(text: str) -> Request:
    """Parse one JSONL line into a `Request`, checking it as `add` would.

    Everything `Request` checks is checked (URL, method, headers, priority,
    depth...), plus the line's own rules: a JSON object, known keys of the
    right types, valid base64, well-formed tags in ``meta``, a valid
    ``meta["download_slot"]``, and a request that the store codec can encode.
    Raises `InvalidRequest` naming what is wrong (without a line number: the
    caller knows it).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise InvalidRequest("not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise InvalidRequest(f"a line must be a JSON object, not {_json_type(data)}")
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise InvalidRequest(
            f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            f"known keys are {', '.join(_KEYS)}"
        )
    if "url" not in data:
        raise InvalidRequest("the 'url' key is missing")
    fields: dict[str, Any] = {}
    for key in ("method", "headers", "priority", "callback", "errback", "depth", "not_before"):
        if key in data:
            fields[key] = data[key]
    if "headers" in fields and not isinstance(fields["headers"], dict):
        raise InvalidRequest(
            f"headers must be an object of str to str, not {_json_type(fields['headers'])}"
        )
    if "body_base64" in data:
        fields["body"] = _body(data["body_base64"])
    if "meta" in data:
        fields["meta"] = _meta(data["meta"])
    if "dont_filter" in data:
        if type(data["dont_filter"]) is not bool:
            raise InvalidRequest(f"dont_filter must be true or false, not {data['dont_filter']!r}")
        fields["dont_filter"] = data["dont_filter"]
    request = Request(data["url"], **fields)
    if "revisit_interval" in data:
        interval = data["revisit_interval"]
        if interval is not None:
            if (
                isinstance(interval, bool)
                or not isinstance(interval, int | float)
                or not math.isfinite(interval)
                or interval <= 0
            ):
                raise InvalidRequest(f"revisit_interval must be a number > 0, not {interval!r}")
            request.revisit_interval = float(interval)
    slot = request.meta.get("download_slot")
    if slot is not None and (type(slot) is not str or not slot):
        raise InvalidRequest(f"meta['download_slot'] must be a non-empty str, not {slot!r}")
    encode_request(request)  # raises SerializationError for what msgpack cannot hold
    return request


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number")


def _body(value: object) -> bytes:
    if type(value) is not str:
        raise InvalidRequest(f"body_base64 must be a base64 string, not {_json_type(value)}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest(f"body_base64 is not valid base64: {exc}") from None


def _meta(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequest(f"meta must be an object, not {_json_type(value)}")
    try:
        decoded = _from_json(value)
    except ValueError as exc:
        raise InvalidRequest(f"meta: {exc}") from None
    if not isinstance(decoded, dict):
        raise InvalidRequest(f"meta must be an object, not the tagged value {value!r}")
    return decoded


def _from_json(value: Any) -> Any:
    """Undo `_to_json`; ValueError for a malformed tag."""
    if isinstance(value, list):
        return [_from_json(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        tag, inner = next(iter(value.items()))
        if tag == _BYTES:
            if type(inner) is not str:
                raise ValueError(
                    f'{{"$bytes": ...}} needs a base64 string, not {json.dumps(inner)}'
                )
            try:
                return base64.b64decode(inner, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError(
                    f'{{"$bytes": {json.dumps(inner)}}} is not base64: {exc}'
                ) from None
        if tag == _FLOAT:
            if inner not in _NON_FINITE:
                raise ValueError(
                    f'{{"$float": ...}} must be "nan", "inf" or "-inf", not {json.dumps(inner)}'
                )
            return _NON_FINITE[inner]
        if tag == _DICT:
            if not isinstance(inner, dict):
                raise ValueError(f'{{"$dict": ...}} needs an object, not {json.dumps(inner)}')
            return {key: _from_json(item) for key, item in inner.items()}
    return {key: _from_json(item) for key, item in value.items()}
