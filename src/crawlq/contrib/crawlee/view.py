"""What the adapter knows of its frontier's counts, read off the event loop and cached.

crawlee asks `is_finished`, `is_empty` and the counts about twice a second
per crawler, and more often while it works. Each question is answered from
one `Reading` (queued, leased, the crawl's `Counters`, when the next request
is ready), kept for ``refresh`` seconds: one store read (a SQLite query, a
Redis round trip) per ``refresh`` at most, done on the adapter's own thread,
never on the loop. A memory frontier is read on the loop (it never blocks).

Reading that says "busy" may be a little old: that only delays the end of a
crawl. A reading that says "nothing left" is believed only when it was taken
after this process's latest add, fetch, handled or reclaim (`changed`), so
the crawl never ends early because of an old count.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from dataclasses import dataclass

from ..._frontier import Frontier
from ...stores.base import Counters

__all__ = ["FrontierView", "Reading"]


@dataclass(frozen=True, slots=True)
class Reading:
    """One look at the frontier: counts, counters and when a pop may succeed."""

    #: Requests waiting (paced hosts' included).
    queued: int
    #: Requests handed out and not finished, by every worker of the crawl.
    leased: int
    #: The crawl's counters (accepted, acked...), every worker's.
    counters: Counters
    #: `time.monotonic` time from which a pop may return a request; None:
    #: not before something is added or finished.
    ready_at: float | None
    #: `time.monotonic` time the reading started.
    taken_at: float
    #: The view's change number when the reading started.
    change: int

    @property
    def busy(self) -> bool:
        """True while anything is queued or leased."""
        return self.queued + self.leased > 0

    def ready_in(self, now: float) -> float | None:
        """Seconds until a pop may succeed (0.0: now; None: not by itself)."""
        if not self.queued or self.ready_at is None:
            return None
        return max(0.0, self.ready_at - now)


class FrontierView:
    """Cached readings of one frontier (see the module doc)."""

    def __init__(self, frontier: Frontier, executor: Executor | None, refresh: float) -> None:
        self._frontier = frontier
        self._executor = executor
        self._refresh = refresh
        self._change = 0
        self._latest: Reading | None = None
        self._reading: asyncio.Future[Reading] | None = None
        self._reading_change = -1

    def changed(self) -> None:
        """This process changed the frontier: the next "nothing left" needs a new reading."""
        self._change += 1

    def stale(self) -> None:
        """Forget the latest reading (a fetch found nothing where it said something)."""
        self._latest = None

    @property
    def latest(self) -> Reading | None:
        """The latest reading, however old."""
        return self._latest

    async def read(self, *, current: bool = False) -> Reading:
        """A reading at most ``refresh`` seconds old; ``current``: taken after the last change."""
        latest = self._latest
        now = time.monotonic()
        if (
            latest is not None
            and now - latest.taken_at < self._refresh
            and (not current or latest.change == self._change)
        ):
            return latest
        if self._executor is None:  # memory: read here, it never blocks
            self._latest = self._take(self._change)
            return self._latest
        reading = self._reading
        if reading is None or reading.done() or (current and self._reading_change != self._change):
            reading = self._start(self._executor)
        return await asyncio.shield(reading)

    def _start(self, executor: Executor) -> asyncio.Future[Reading]:
        loop = asyncio.get_running_loop()
        change = self._change
        future = asyncio.wrap_future(executor.submit(self._take, change), loop=loop)
        self._reading, self._reading_change = future, change
        future.add_done_callback(self._keep)
        return future

    def _keep(self, future: asyncio.Future[Reading]) -> None:
        if self._reading is future:
            self._reading = None
        if future.cancelled() or future.exception() is not None:
            return
        reading = future.result()
        if self._latest is None or reading.taken_at >= self._latest.taken_at:
            self._latest = reading

    def _take(self, change: int) -> Reading:
        """Read the frontier (on the adapter's thread for a store that does I/O)."""
        taken_at = time.monotonic()
        stats = self._frontier.stats()
        ready_in = self._frontier.next_ready_in() if stats.queued else None
        ready_at = None if ready_in is None else time.monotonic() + ready_in
        return Reading(stats.queued, stats.leased, stats.counters, ready_at, taken_at, change)
