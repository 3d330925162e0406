"""A Redis crawl's crawler state (``spider.state``) and its Bloom filter's figures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..._errors import CorruptStore
from .conn import Link
from .open import Dedup

__all__ = ["bloom_stats", "load_state", "save_state"]


def load_state(link: Link, prefix: bytes, where: str) -> dict[str, Any]:
    """Return the crawl's saved state ({} if none); `CorruptStore` if it is not ours."""
    data = link.command(b"GET", prefix + b"state", doing="loading the state")
    if data is None:
        return {}
    try:
        state = msgspec.msgpack.decode(data)
    except msgspec.DecodeError as exc:
        raise CorruptStore(
            f"the crawler state of {where} is not msgpack ({exc}); "
            "save_state() a new one to replace it"
        ) from None
    if not isinstance(state, dict):
        raise CorruptStore(f"the crawler state of {where} is not a mapping")
    return state


def save_state(link: Link, function: bytes, prefix: bytes, state: Mapping[str, Any]) -> None:
    """Replace the crawl's state in one SET, inside a function a full server still runs."""
    data = msgspec.msgpack.encode(dict(state))
    link.command(b"FCALL", function, 1, prefix, data, doing="saving the state")


def bloom_stats(link: Link, prefix: bytes, dedup: Dedup) -> dict[str, float]:
    """The Bloom filter's figures: fill, estimated false-positive rate, shape.

    ``bloom_fill_ratio`` is the share of bits set (counting them costs
    O(filter size) on the server); ``bloom_false_positive_rate`` estimates
    the chance that a new URL is taken for a duplicate, from that ratio.
    """
    ones = link.command(b"BITCOUNT", prefix + b"bloom", doing="reading stats")
    fill: float = ones / dedup.bits
    return {
        "bloom_fill_ratio": fill,
        "bloom_false_positive_rate": fill**dedup.hashes,
        "bloom_capacity": float(dedup.capacity),
        "bloom_error_rate": dedup.error_rate,
    }
