"""The asyncio layer: a `Scheduler` that waits, in front of a synchronous `Frontier`.

Coroutines ``await get()`` and are woken when a request is ready; blocking
store work (SQLite commits, Redis round trips) runs on one store thread with
group commit, never on the caller's event loop. This part may import the core
(``crawlq._*``) and ``crawlq.stores.base``; no store, adapter or CLI module.
"""

from .scheduler import Scheduler, SchedulerStats

__all__ = ["Scheduler", "SchedulerStats"]
