"""Checks and result shapes shared by the frontier's batch calls and crawler state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ._errors import InvalidRequest, SerializationError
from ._request import Request

__all__ = ["as_request", "check_fingerprint_count", "check_state", "with_skipped"]


def as_request(item: object) -> Request:
    """``Request(item)`` for a URL string; `InvalidRequest` for anything else."""
    if isinstance(item, Request):
        return item
    if isinstance(item, str):
        return Request(item)
    raise InvalidRequest(
        f"expected a crawlq.Request or a URL string, not {type(item).__name__}: {item!r}"
    )


def check_fingerprint_count(fingerprints: Sequence[bytes], batch: list[Any]) -> None:
    if len(fingerprints) != len(batch):
        raise InvalidRequest(f"{len(fingerprints)} fingerprints given for {len(batch)} requests")


def with_skipped(added: list[bool], skipped: list[int]) -> list[bool | None]:
    """``added`` with None put back at each skipped position (ascending)."""
    out: list[bool | None] = []
    results = iter(added)
    position = 0
    for index in skipped:
        while position < index:
            out.append(next(results))
            position += 1
        out.append(None)
        position += 1
    out.extend(results)
    return out


def check_state(state: object, what: str = "state") -> None:
    """Raise `SerializationError` unless ``state`` is a str-keyed mapping msgpack can store.

    ``what`` names the state in the message (``spider.state`` for Scrapy).
    """
    if not isinstance(state, Mapping):
        raise SerializationError(f"{what} must be a mapping, not {type(state).__name__}")
    for key, value in state.items():
        if type(key) is not str:
            raise SerializationError(f"{what} key {key!r} is not a str")
        try:
            msgspec.msgpack.encode(value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise SerializationError(
                f"{what}[{key!r}] cannot be stored: {exc}; keep only msgpack-able "
                "values (None, bool, int, float, str, bytes, lists and dicts of them)"
            ) from None
