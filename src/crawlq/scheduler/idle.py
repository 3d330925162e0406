"""`join_idle`: a worker pool that waits for work fed from outside (``join(idle_for=)``).

A pool of asyncio workers on a shared crawl fed by other processes
(``crawlq add``, a feeder's ``add_many``) must not end when the crawl runs
dry for a moment: it ends once the crawl has had nothing to do for
``idle_for`` seconds straight, the asyncio form of Scrapy's
``CRAWLQ_IDLE_CLOSE`` (scrapy-redis's ``MAX_IDLE_TIME_BEFORE_CLOSE``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final

from .._frontier import Frontier

__all__ = ["join_idle"]

#: Longest gap between two looks at the store while idle, in seconds.
_LOOK_MAX: Final = 0.5


async def join_idle(
    join: Callable[[], Awaitable[None]],
    frontier: Frontier,
    idle_for: float,
    closed: Callable[[], bool],
    *,
    off_loop: bool,
) -> None:
    """Return once ``join`` has returned and nothing happened for ``idle_for`` seconds (0: never).

    "Something happened" is any add accepted, request handed out, or work
    left to do (queued, scheduled but revisits, leased), read from the
    store's shared counters, so work taken by another process counts too;
    then it waits for ``join`` again. The store is read at most every half
    second, off the event loop (a worker thread) if ``off_loop`` (a store
    that does I/O), else on it (the memory store, which only the loop's
    thread may touch). Returns when ``closed()`` turns true, after ``join``
    did; raises what ``join`` raises.
    """
    loop = asyncio.get_running_loop()

    async def activity() -> tuple[int, int, int, int]:
        if off_loop:
            return await loop.run_in_executor(None, _activity, frontier)
        return _activity(frontier)

    while True:
        await join()
        started = loop.time()
        before = await activity()
        while True:
            if closed():
                return
            left = idle_for - (loop.time() - started) if idle_for else _LOOK_MAX
            if left <= 0:
                return
            await asyncio.sleep(min(left, _LOOK_MAX))
            if await activity() != before:
                break  # work came: wait for it to be done, then idle again


def _activity(frontier: Frontier) -> tuple[int, int, int, int]:
    """What changes whenever work arrives or is taken: accepted, popped, to do, leased."""
    stats = frontier.stats()
    todo = stats.queued + stats.scheduled - stats.revisits
    return stats.counters.accepted, stats.counters.popped, todo, stats.leased
