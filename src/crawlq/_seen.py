"""Exact sets of fingerprints for in-memory deduplication.

A Python ``set`` of 16-byte ``bytes`` costs about 100 bytes per member. This
set keeps the fingerprints packed in ``bytearray`` buckets chosen by their
leading bits: a lookup is one C-level search of a bucket of a few dozen
fingerprints, and a member costs about 20 bytes. When buckets grow past an
average of 64 members, their number doubles (each splits in two by the next
bit), so lookups stay short at any size.

`ExpiringFingerprints` is the set for ``seen_ttl``: a fingerprint counts as
seen for that long after it was recorded.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final

__all__ = ["ExpiringFingerprints", "FingerprintSet"]

_WIDTH: Final = 16  # bytes of a fingerprint that are kept and compared
_INITIAL_BITS: Final = 10
_SPLIT_AT: Final = 64  # average members per bucket
_EMPTY: Final = bytearray()


class FingerprintSet:
    """An exact set of fingerprints; the first 16 bytes of each are kept."""

    __slots__ = ("_bits", "_buckets", "_count", "_limit", "_shift")

    def __init__(self) -> None:
        self._count = 0
        self._set_bits(_INITIAL_BITS)
        self._buckets = [bytearray() for _ in range(1 << _INITIAL_BITS)]

    def _set_bits(self, bits: int) -> None:
        self._bits = bits
        self._shift = 8 * _WIDTH - bits
        self._limit = _SPLIT_AT << bits

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        """Bytes held by the buckets (payload and allocation slack excluded)."""
        return self._count * _WIDTH

    def add(self, fingerprint: bytes) -> bool:
        """Add ``fingerprint``; return False if it was already present."""
        if len(fingerprint) != _WIDTH:
            fingerprint = _widen(fingerprint)
        bucket = self._buckets[int.from_bytes(fingerprint, "big") >> self._shift]
        found = bucket.find(fingerprint)
        while found != -1:
            if not found % _WIDTH:
                return False
            found = bucket.find(fingerprint, found + 1)
        bucket += fingerprint
        self._count += 1
        if self._count > self._limit:
            self._split()
        return True

    def __contains__(self, fingerprint: object) -> bool:
        if not isinstance(fingerprint, bytes):
            return False
        if len(fingerprint) != _WIDTH:
            fingerprint = _widen(fingerprint)
        bucket = self._buckets[int.from_bytes(fingerprint, "big") >> self._shift]
        found = bucket.find(fingerprint)
        while found != -1:
            if not found % _WIDTH:
                return True
            found = bucket.find(fingerprint, found + 1)
        return False

    def discard(self, fingerprint: bytes) -> bool:
        """Remove ``fingerprint``; return False if it was not present."""
        if len(fingerprint) != _WIDTH:
            fingerprint = _widen(fingerprint)
        bucket = self._buckets[int.from_bytes(fingerprint, "big") >> self._shift]
        found = bucket.find(fingerprint)
        while found != -1:
            if not found % _WIDTH:
                del bucket[found : found + _WIDTH]
                self._count -= 1
                return True
            found = bucket.find(fingerprint, found + 1)
        return False

    def _split(self) -> None:
        # Bucket i splits into 2i and 2i+1 by the next leading bit.
        bit_index = self._bits  # 0-based index of the deciding bit
        byte_index, bit = divmod(bit_index, 8)
        mask = 0x80 >> bit
        buckets = self._buckets
        split: list[bytearray] = []
        for index, bucket in enumerate(buckets):
            # Free each old bucket as soon as it is split, so the set never
            # holds two full copies of itself.
            buckets[index] = _EMPTY
            low = bytearray()
            high = bytearray()
            for start in range(0, len(bucket), _WIDTH):
                if bucket[start + byte_index] & mask:
                    high += bucket[start : start + _WIDTH]
                else:
                    low += bucket[start : start + _WIDTH]
            split.append(low)
            split.append(high)
        self._buckets = split
        self._set_bits(self._bits + 1)


def _widen(fingerprint: bytes) -> bytes:
    if len(fingerprint) > _WIDTH:
        return fingerprint[:_WIDTH]
    return fingerprint.ljust(_WIDTH, b"\0")


class ExpiringFingerprints:
    """Fingerprints that count as seen for ``ttl`` seconds after they were recorded.

    A dict of recording times, and the same times in recording order in a
    deque, so expired fingerprints are dropped from the front as time
    passes: memory holds the fingerprints of the last ``ttl`` seconds.
    """

    __slots__ = ("_clock", "_order", "_recorded", "_ttl")

    def __init__(self, ttl: float, clock: Callable[[], float]) -> None:
        self._ttl = ttl
        self._clock = clock
        self._recorded: dict[bytes, float] = {}
        self._order: deque[tuple[float, bytes]] = deque()

    def _expire(self, now: float) -> None:
        order = self._order
        recorded = self._recorded
        horizon = now - self._ttl
        while order and order[0][0] <= horizon:
            at, fingerprint = order.popleft()
            if recorded.get(fingerprint) == at:
                del recorded[fingerprint]

    def add(self, fingerprint: bytes) -> bool:
        """Record ``fingerprint`` now; return False if it is seen (recorded within ``ttl``)."""
        fingerprint = fingerprint[:_WIDTH]
        now = self._clock()
        self._expire(now)
        if fingerprint in self._recorded:
            return False
        self._recorded[fingerprint] = now
        self._order.append((now, fingerprint))
        return True

    def __contains__(self, fingerprint: object) -> bool:
        if not isinstance(fingerprint, bytes):
            return False
        self._expire(self._clock())
        return fingerprint[:_WIDTH] in self._recorded

    def discard(self, fingerprint: bytes) -> bool:
        """Remove ``fingerprint``; return False if it was not seen."""
        self._expire(self._clock())
        return self._recorded.pop(fingerprint[:_WIDTH], None) is not None

    def __len__(self) -> int:
        self._expire(self._clock())
        return len(self._recorded)
