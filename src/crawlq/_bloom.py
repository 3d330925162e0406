"""A Bloom filter over fingerprints, to keep lookups of new URLs off the disk.

It answers "definitely not seen" or "maybe seen": a false positive only sends
a lookup to the authoritative table on disk, it never calls a new URL a
duplicate. Fingerprints are already uniform hashes, so the bit positions come
straight from their bytes (double hashing), with no hashing of our own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

__all__ = ["BloomFilter"]

_MIN_BITS: Final = 1 << 16


class BloomFilter:
    """A Bloom filter sized for ``capacity`` members at ``error_rate`` false positives."""

    __slots__ = ("_bits", "_count", "_hashes", "_size", "capacity", "error_rate")

    def __init__(self, capacity: int, error_rate: float = 0.01) -> None:
        self.capacity = max(1, capacity)
        self.error_rate = error_rate
        size = max(_MIN_BITS, math.ceil(-self.capacity * math.log(error_rate) / math.log(2) ** 2))
        self._size = size
        self._hashes = max(1, round(size / self.capacity * math.log(2)))
        self._bits = bytearray((size + 7) // 8)
        self._count = 0

    def __len__(self) -> int:
        """Members added (an upper bound on distinct members)."""
        return self._count

    def _positions(self, fingerprint: bytes) -> list[int]:
        first = int.from_bytes(fingerprint[:8], "little")
        step = int.from_bytes(fingerprint[8:16], "little") | 1
        size = self._size
        return [(first + i * step) % size for i in range(self._hashes)]

    def add(self, fingerprint: bytes) -> None:
        """Record a fingerprint."""
        bits = self._bits
        for position in self._positions(fingerprint):
            bits[position >> 3] |= 1 << (position & 7)
        self._count += 1

    def update(self, fingerprints: Iterable[bytes]) -> None:
        """Record many fingerprints."""
        for fingerprint in fingerprints:
            self.add(fingerprint)

    def __contains__(self, fingerprint: bytes) -> bool:
        """False means never added; True means maybe added."""
        bits = self._bits
        for position in self._positions(fingerprint):
            if not bits[position >> 3] & (1 << (position & 7)):
                return False
        return True

    def estimated_error_rate(self) -> float:
        """The false-positive rate expected at the current fill."""
        return float((1 - math.exp(-self._hashes * self._count / self._size)) ** self._hashes)
