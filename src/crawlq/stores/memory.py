"""The in-memory store: the reference implementation of the store semantics.

Structure, chosen so that ``pop`` is O(log n) in queued requests and hosts:

- each host keeps a heap of its queued items ``(-priority, order, request,
  host)``, where ``order`` is the acceptance number (negated for LIFO); the
  item is also the lease handle a popped request carries;
- hosts that are ready sit in one heap keyed by their head item:
  ``(-priority, leased, order)``, i.e. priority, then fewest leases, then FIFO;
- hosts waiting for ``host_delay`` sit in a second heap keyed by ready time;
- hosts at ``host_concurrency`` sit in neither until a lease ends;
- leases are a dict by order plus a deque by deadline (one ``lease_timeout``
  for all, so deadlines arrive in pop order).

Heap entries are never removed in place: an entry is live while it still
describes its host (same state, lease count and head), stale entries are
dropped when they reach the top, and the ready heap is compacted when stale
entries outnumber hosts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from heapq import heapify, heappop, heappush
from typing import Any, Final

from .._errors import LeaseError
from .._policy import Policy
from .._request import Request
from .._seen import FingerprintSet
from .base import Entry, HostCount, StoreCounts

__all__ = ["MemoryStore"]

# Where a host is: in no heap (empty, or at its concurrency limit), in the
# ready heap, or in the delayed heap.
_IDLE: Final = 0
_READY: Final = 1
_DELAYED: Final = 2


class _Host:
    __slots__ = ("leased", "name", "queue", "ready_at", "state")

    def __init__(self, name: str) -> None:
        self.name = name
        # Heap of items (-priority, order, request, host).
        self.queue: list[tuple[int, int, Request, _Host]] = []
        self.leased = 0
        self.ready_at = 0.0
        self.state = _IDLE


_Item = tuple[int, int, Request, _Host]


class MemoryStore:
    """Requests, leases, fingerprints and pacing held in this process's memory.

    Nothing survives the process. The request objects given to ``add`` are the
    ones ``pop`` returns (no copy, no encoding), which is what makes it fast.
    """

    needs_payload = False

    def __init__(self, policy: Policy) -> None:
        self._clock = policy.clock
        self._delay = policy.host_delay
        self._concurrency = policy.host_concurrency or (1 << 62)
        self._lease_timeout = policy.lease_timeout
        self._lifo = policy.lifo
        self._hosts: dict[str, _Host] = {}
        # Ready hosts as (-head priority, leased, head order, host). An entry
        # is live while it still describes its host; see _live().
        self._ready: list[tuple[int, int, int, _Host]] = []
        # Paced hosts as (ready_at, name, host); live while ready_at matches.
        self._delayed: list[tuple[float, str, _Host]] = []
        # order -> the item leased under it. Every (re)queueing makes a new
        # item, so an item names one lease and a stale handle never matches.
        # The deque holds deadline, item, deadline, item... in pop order
        # (no pair tuples: fewer objects for the garbage collector to track).
        self._leases: dict[int, _Item] = {}
        self._deadlines: deque[Any] = deque()
        self._seen = FingerprintSet()
        self._accepted = 0
        self._queued = 0

    # -- adding ---------------------------------------------------------------

    def add(self, entries: Sequence[Entry]) -> list[bool]:
        added: list[bool] = []
        seen_add = self._seen.add
        hosts = self._hosts
        lifo = self._lifo
        for fingerprint, host_name, request, _ in entries:
            if not request.dont_filter and not seen_add(fingerprint):
                added.append(False)
                continue
            if request._lease is not None:
                # The same object is already queued or leased here (a
                # dont_filter re-add): store a copy so each has its own lease.
                request = request.replace()
            self._accepted += 1
            host = hosts.get(host_name)
            if host is None:
                host = hosts[host_name] = _Host(host_name)
            item = (-request.priority, -self._accepted if lifo else self._accepted, request, host)
            request._lease = _QUEUED
            queue = host.queue
            heappush(queue, item)
            self._queued += 1
            if host.state == _IDLE or (host.state == _READY and queue[0] is item):
                self._place(host, self._clock())
            added.append(True)
        return added

    # -- popping --------------------------------------------------------------

    def pop(self) -> Request | None:
        now = self._clock()
        deadlines = self._deadlines
        if deadlines and deadlines[0] <= now:
            self._expire(now)
        delayed = self._delayed
        if delayed and delayed[0][0] <= now:
            self._wake_delayed(now)
        ready = self._ready
        while ready:
            entry = heappop(ready)
            host = entry[3]
            queue = host.queue
            if (
                host.state != _READY
                or host.leased != entry[1]
                or not queue
                or queue[0][1] != entry[2]
            ):
                continue  # stale: the host changed since this entry was pushed
            item = heappop(queue)
            host.leased += 1
            self._queued -= 1
            deadline = now + self._lease_timeout
            self._leases[item[1]] = item
            deadlines.append(deadline)
            deadlines.append(item)
            if self._delay:
                host.ready_at = now + self._delay
            self._place(host, now)
            request = item[2]
            request._lease = item
            return request
        return None

    def _place(self, host: _Host, now: float) -> None:
        """Put a host in the heap its state calls for, after any change to it."""
        queue = host.queue
        if not queue or host.leased >= self._concurrency:
            host.state = _IDLE
            if not queue and not host.leased:
                if host.ready_at <= now:
                    del self._hosts[host.name]
                else:
                    # Keep its pacing state until the delay has passed.
                    host.state = _DELAYED
                    heappush(self._delayed, (host.ready_at, host.name, host))
        elif host.ready_at > now:
            host.state = _DELAYED
            heappush(self._delayed, (host.ready_at, host.name, host))
        else:
            host.state = _READY
            head = queue[0]
            heappush(self._ready, (head[0], host.leased, head[1], host))
        if len(self._ready) > 2 * len(self._hosts) + 64:
            self._compact()

    def _compact(self) -> None:
        """Drop stale ready entries so the heap stays O(hosts)."""
        live = {}
        for entry in self._ready:
            host = entry[3]
            if _live(entry):
                live[host.name] = entry
        self._ready = list(live.values())
        heapify(self._ready)

    def _wake_delayed(self, now: float) -> None:
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            ready_at, _, host = heappop(delayed)
            if host.state == _DELAYED and host.ready_at == ready_at:
                self._place(host, now)

    def _expire(self, now: float) -> None:
        deadlines = self._deadlines
        leases = self._leases
        while deadlines and deadlines[0] <= now:
            deadlines.popleft()
            item = deadlines.popleft()
            if leases.get(item[1]) is item:
                self._end_lease(item, requeue=True, now=now, expired=True)

    # -- finishing ------------------------------------------------------------

    def ack(self, leases: Sequence[object]) -> None:
        _check_handed_out(leases)
        now = self._clock()
        for lease in leases:
            self._end_lease(lease, requeue=False, now=now)
        self._trim_deadlines()

    def release(self, leases: Sequence[object]) -> None:
        _check_handed_out(leases)
        now = self._clock()
        for lease in leases:
            self._end_lease(lease, requeue=True, now=now)
        self._trim_deadlines()

    def _end_lease(self, lease: Any, *, requeue: bool, now: float, expired: bool = False) -> None:
        if type(lease) is not tuple or len(lease) != 4:
            return
        item = self._leases.get(lease[1])
        if item is None or item is not lease:
            return  # already acked, released or expired (at-least-once), or not ours
        del self._leases[item[1]]
        host = item[3]
        host.leased -= 1
        if requeue:
            request = item[2]
            if expired:
                # Its holder may still ack or release the old object: give
                # the queue a copy so that late call cannot touch the new lease.
                request = request.replace()
            request._lease = _QUEUED
            heappush(host.queue, (item[0], item[1], request, host))
            self._queued += 1
        if host.state != _DELAYED:
            # Its key (fewest leases) or its eligibility (concurrency) changed.
            self._place(host, now)

    def _trim_deadlines(self) -> None:
        # Deadlines of finished leases are dropped lazily from the front; if
        # one slow lease holds the front, compact so memory stays bounded.
        deadlines = self._deadlines
        leases = self._leases
        while deadlines and leases.get(deadlines[1][1]) is not deadlines[1]:
            deadlines.popleft()
            deadlines.popleft()
        if len(deadlines) > 4 * len(leases) + 2048:
            pairs = iter(deadlines)
            kept: deque[Any] = deque()
            for deadline, item in zip(pairs, pairs, strict=True):
                if leases.get(item[1]) is item:
                    kept.append(deadline)
                    kept.append(item)
            self._deadlines = kept

    # -- reading --------------------------------------------------------------

    def counts(self) -> StoreCounts:
        return StoreCounts(self._queued, len(self._leases), len(self._seen))

    def host_counts(self, limit: int) -> list[HostCount]:
        hosts = sorted(
            (h for h in self._hosts.values() if h.queue or h.leased),
            key=lambda h: (-len(h.queue), -h.leased, h.name),
        )
        return [HostCount(h.name, len(h.queue), h.leased) for h in hosts[:limit]]

    def next_ready_in(self) -> float | None:
        if not self._queued and not self._leases:
            return None
        ready = self._ready
        while ready and not _live(ready[0]):
            heappop(ready)
        if ready:
            return 0.0
        now = self._clock()
        soonest: float | None = None
        delayed = self._delayed
        while delayed and (
            delayed[0][2].state != _DELAYED or delayed[0][2].ready_at != delayed[0][0]
        ):
            heappop(delayed)
        if delayed:
            soonest = delayed[0][0]
        self._trim_deadlines()
        if self._deadlines:
            deadline = self._deadlines[0]
            soonest = deadline if soonest is None else min(soonest, deadline)
        if soonest is None:
            return None
        return max(0.0, soonest - now)

    def close(self) -> None:
        self._hosts.clear()
        self._ready.clear()
        self._delayed.clear()


def _live(entry: tuple[int, int, int, _Host]) -> bool:
    host = entry[3]
    queue = host.queue
    return (
        host.state == _READY and host.leased == entry[1] and bool(queue) and queue[0][1] == entry[2]
    )


class _Queued:
    """Marks a request object that is queued in a memory store."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<queued>"


_QUEUED: Final = _Queued()


def _check_handed_out(leases: Sequence[object]) -> None:
    if any(lease is _QUEUED for lease in leases):
        raise LeaseError(
            "that request is queued, not handed out (it was never popped, or was "
            "released); only requests returned by pop() can be acked or released"
        )
