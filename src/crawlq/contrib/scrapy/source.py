"""The Scrapy scheduler's sources: each frontier it hands requests out of, and its priority map."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..._frontier import Frontier
from ..._request import Request

if TYPE_CHECKING:
    import scrapy

__all__ = ["Source", "crawlq_priority"]

_PRIORITY_MIN: Final = -(2**30)
_PRIORITY_MAX: Final = 2**30 - 1


def crawlq_priority(priority: int, start: bool) -> int:
    """Return the crawlq priority of a Scrapy request (see the module docstring)."""
    if priority < _PRIORITY_MIN:
        priority = _PRIORITY_MIN
    elif priority > _PRIORITY_MAX:
        priority = _PRIORITY_MAX
    return 2 * priority + (0 if start else 1)


class Source:
    """One frontier the scheduler hands requests out of, and its bookkeeping."""

    __slots__ = ("frontier", "held", "held_at", "in_flight", "objects")

    def __init__(self, frontier: Frontier) -> None:
        self.frontier = frontier
        #: Request objects kept in this process, by the token the frontier holds.
        self.objects: dict[int, scrapy.Request] = {}
        #: A request popped to compare priorities with the other source.
        self.held: Request | None = None
        self.held_at = 0.0
        #: Requests of this source handed to the engine and not finished.
        self.in_flight = 0

    def pending(self, revisits: bool = True) -> int:
        """Requests held and not in the engine; revisits only if ``revisits``.

        Queued, scheduled (a ``not_before``, a delayed retry) and leased but
        not handed out (held, parked); a revisit is a page acked with a
        refetch, waiting for it.
        """
        frontier = self.frontier
        if revisits or frontier.closed:
            return max(0, len(frontier) - self.in_flight)
        # What crawlq.Scheduler.join waits for: revisits aside.
        waiting, leased = frontier._counts()
        return max(0, waiting + leased - self.in_flight)
