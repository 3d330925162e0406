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
    """A Bloom filter sized for ``capacity`` members at ``error_rate`` false positives.

    The bit array has a power-of-two size, so positions are masked rather
    than divided: ``first + i * step`` for ``i`` below the number of hashes,
    with ``first`` and ``step`` read from the fingerprint's two halves.
    """

    __slots__ = ("_bits", "_count", "_hashes", "_mask", "capacity", "error_rate")

    def __init__(self, capacity: int, error_rate: float = 0.01) -> None:
        self.capacity = max(1, capacity)
        self.error_rate = error_rate
        wanted = -self.capacity * math.log(error_rate) / math.log(2) ** 2
        size = max(_MIN_BITS, 1 << math.ceil(math.log2(wanted)))
        self._mask = size - 1
        # The fewest hashes that keep the error rate at capacity: each costs
        # a step of Python on every lookup.
        ratio = size / self.capacity
        self._hashes = next(
            k for k in range(1, 64) if (1 - math.exp(-k / ratio)) ** k <= error_rate or k > ratio
        )
        self._bits = bytearray(size // 8)
        self._count = 0

    def __len__(self) -> int:
        """Members added (an upper bound on distinct members)."""
        return self._count

    def add(self, fingerprint: bytes) -> None:
        """Record a fingerprint."""
        bits = self._bits
        mask = self._mask
        position = int.from_bytes(fingerprint[:8], "little")
        step = int.from_bytes(fingerprint[8:16], "little") | 1
        for _ in range(self._hashes):
            index = position & mask
            bits[index >> 3] |= 1 << (index & 7)
            position += step
        self._count += 1

    def update(self, fingerprints: Iterable[bytes]) -> None:
        """Record many fingerprints."""
        for fingerprint in fingerprints:
            self.add(fingerprint)

    def __contains__(self, fingerprint: bytes) -> bool:
        """False means never added; True means maybe added."""
        bits = self._bits
        mask = self._mask
        position = int.from_bytes(fingerprint[:8], "little")
        step = int.from_bytes(fingerprint[8:16], "little") | 1
        for _ in range(self._hashes):
            index = position & mask
            if not bits[index >> 3] >> (index & 7) & 1:
                return False
            position += step
        return True

    def estimated_error_rate(self) -> float:
        """The false-positive rate expected at the current fill."""
        size = self._mask + 1
        return float((1 - math.exp(-self._hashes * self._count / size)) ** self._hashes)
