"""Bookkeeping of the Scrapy scheduler: recently seen fingerprints, batched stats."""

from __future__ import annotations

from typing import Any, Final

__all__ = ["Counts", "RecentlySeen"]


class RecentlySeen:
    """The last `SIZE` fingerprints known to be recorded as seen by the store.

    Most requests a crawl enqueues are links to pages it has already met:
    a hit here refuses such a duplicate without building, encoding or
    looking anything up in the store (a disk read for a SQLite job, a round
    trip on Redis). It is exact: a fingerprint enters once the store has
    recorded it or holds it for its next write (which records it, as new or
    as a duplicate), and a store never forgets one. About 7 MB at its size.
    """

    SIZE: Final = 65_536

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: dict[bytes, None] = {}

    def __contains__(self, fingerprint: bytes) -> bool:
        return fingerprint in self._keys

    def add(self, fingerprint: bytes) -> None:
        keys = self._keys
        if len(keys) >= self.SIZE:
            del keys[next(iter(keys))]  # the oldest: dicts keep insertion order
        keys[fingerprint] = None


class Counts:
    """Scrapy stats incremented in batches.

    Each ``crawler.stats.inc_value`` call goes through Scrapy's deprecation
    wrappers; on the hot path the scheduler adds to plain ints here instead
    and hands them to the stats collector every `EVERY` increments and at
    close, so the stats lag by at most that many operations.
    """

    EVERY: Final = 256

    __slots__ = ("_pending", "counts", "stats")

    def __init__(self, stats: Any) -> None:
        self.stats = stats  # None: not counted
        self.counts: dict[str, int] = {}
        self._pending = 0

    def add(self, key: str) -> None:
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        self._pending += 1
        if self._pending >= self.EVERY:
            self.flush()

    def subtract(self, key: str) -> None:
        """Take one back from ``key`` (a request counted as enqueued, found a duplicate later)."""
        counts = self.counts
        counts[key] = counts.get(key, 0) - 1
        self._pending += 1

    def flush(self) -> None:
        if self.stats is not None:
            inc = self.stats.inc_value
            for key, count in self.counts.items():
                if count:
                    inc(key, count)
        self.counts = {}
        self._pending = 0
