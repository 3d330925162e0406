"""Which ``meta`` values a request may carry: those every store hands back unchanged.

The memory store keeps the request object and the durable stores decode
msgpack; refusing what msgpack would change (a tuple, a datetime...) when a
request is added keeps every store handing back the same meta.
"""

from __future__ import annotations

import datetime
import decimal
from typing import TYPE_CHECKING, Any, Final, NoReturn

import msgspec

from ._errors import SerializationError

if TYPE_CHECKING:
    from ._request import Request

__all__ = ["check_encodable", "check_meta_keys", "serialization_error"]

_encoder: Final = msgspec.msgpack.Encoder()


def check_encodable(request: Request) -> None:
    """Raise `SerializationError` if the request's meta cannot be encoded.

    The memory store keeps the request object itself: this refuses the same
    values as `encode_request`, so that every store hands back the same meta.
    """
    meta = request.meta
    if meta:
        check_meta_keys(request)
        try:
            _encoder.encode(meta)
        except (TypeError, ValueError, OverflowError) as exc:
            raise serialization_error(request, exc) from None


def check_meta_keys(request: Request) -> None:
    """Refuse meta that would not come back from msgpack as it went in.

    Keys must be str. Values may be str, bytes, int, float, bool, None, and
    lists and dicts of those (nested dicts may also have int, float, bytes or
    None keys), at most `_MAX_META_DEPTH` levels deep: msgpack would turn a
    tuple or set into a list and a datetime or Decimal into a str, so the
    memory store (which keeps the object) and the durable stores (which
    decode it) would disagree. Raises `SerializationError` naming the key.
    """
    scalars = _META_SCALARS
    for key, value in request.meta.items():
        if type(key) is not str:
            raise SerializationError(
                f"meta key {key!r} of {request.url} is not a str; meta keys must be strings"
            )
        if type(value) not in scalars:
            _check_meta_value(value, request, key, 1)


#: Types a meta value may have that msgpack hands back as the same type.
_META_SCALARS: Final = frozenset({str, bytes, int, float, bool, type(None)})
#: Deepest nesting of lists and dicts in meta (a list holding itself is endless).
_MAX_META_DEPTH: Final = 32
_META_HINTS: Final = {
    tuple: "a list",
    set: "a list",
    frozenset: "a list",
    datetime.datetime: "a str (value.isoformat())",
    datetime.date: "a str (value.isoformat())",
    datetime.time: "a str (value.isoformat())",
    decimal.Decimal: "a str (str(value))",
    bytearray: "bytes",
    memoryview: "bytes",
}


def _check_meta_value(value: Any, request: Request, key: str, depth: int) -> None:
    kind = type(value)
    if kind in _META_SCALARS:
        return
    if depth > _MAX_META_DEPTH:
        raise SerializationError(
            f"meta[{key!r}] of {request.url} nests lists or dicts more than "
            f"{_MAX_META_DEPTH} deep (does it contain itself?); flatten it"
        )
    if kind is list:
        for item in value:
            if type(item) not in _META_SCALARS:
                _check_meta_value(item, request, key, depth + 1)
        return
    if kind is dict:
        for name, item in value.items():
            if type(name) not in _META_SCALARS:
                _refuse_meta_value(name, request, key)
            if type(item) not in _META_SCALARS:
                _check_meta_value(item, request, key, depth + 1)
        return
    _refuse_meta_value(value, request, key)


def _refuse_meta_value(value: Any, request: Request, key: str) -> NoReturn:
    kind = type(value)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else kind.__module__ + "." + kind.__qualname__
    )
    hint = _META_HINTS.get(kind)
    if hint is not None:
        raise SerializationError(
            f"meta[{key!r}] of {request.url} holds a {name}, which a durable store would "
            f"hand back as {hint}: convert it to {hint} yourself, so that every store "
            "hands back the same request"
        )
    raise SerializationError(
        f"meta[{key!r}] of {request.url} holds a {name}, which crawlq cannot store; "
        "keep meta to msgpack types (str, bytes, int, float, bool, None, list, dict)"
    )


def serialization_error(request: Request, exc: Exception) -> SerializationError:
    for key, value in request.meta.items():
        try:
            _encoder.encode(value)
        except (TypeError, ValueError, OverflowError) as inner:
            return SerializationError(
                f"meta[{key!r}] of {request.url} cannot be stored: {inner}; "
                "keep meta to msgpack types (str, bytes, int, float, bool, None, list, dict)"
            )
    return SerializationError(f"request {request.url} cannot be stored: {exc}")
