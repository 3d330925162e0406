"""Bookkeeping of the Scrapy scheduler: recently seen fingerprints, batched stats."""

from __future__ import annotations

from typing import Any, Final

from ..._recent import Generations

__all__ = ["Counts", "RecentlySeen"]


class RecentlySeen(Generations):
    """Fingerprints known to be recorded as seen by the store, for `TTL` seconds at most.

    Most requests a crawl enqueues are links to pages it has already met:
    a hit here refuses such a duplicate without building, encoding or
    looking anything up in the store (a disk read for a SQLite job, a round
    trip on Redis). A fingerprint enters once the store has recorded it or
    holds it for its next write (which records it, as new or as a
    duplicate), and is trusted for at most `TTL` seconds: a ``forget`` made
    elsewhere (another process, or ``frontier.forget``) reaches this
    scheduler by then (about 7 MB at most, see `Generations`). Not
    ``enabled`` (a crawl whose dedup expires, ``seen_ttl``: a fingerprint
    seen a moment ago may be new again now), it holds nothing.
    """

    SIZE: Final = 65_536
    TTL: Final = 30.0

    __slots__ = ("_enabled",)

    def __init__(self, *, enabled: bool = True, size: int = SIZE, ttl: float = TTL) -> None:
        super().__init__(size, ttl)
        self._enabled = enabled

    def add(self, fingerprint: bytes) -> None:
        if self._enabled:
            super().add(fingerprint)


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
