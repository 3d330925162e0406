"""The in-memory store: the reference implementation of the store semantics.

Each host is a `Slot` holding a heap of its queued items ``(-priority, order,
request, host, origin)``, where ``order`` is `crawlq._policy.order_key` of the
acceptance number; the shared `Board` picks the slot whose head goes next, so
``pop`` is O(log n) in queued requests and hosts. An item is a `Lease`: the one
a popped request carries; every (re)queueing makes a new item, so a stale lease
never matches a later one. Lease deadlines arrive in pop order (one
``lease_timeout`` for all): `LeaseDeadlines` holds them. Scheduled requests
(not due yet) wait in one heap by due time, outside their hosts; `pop` moves
the due ones into their hosts, O(log n) each.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from heapq import heappop, heappush
from typing import Any, Final

from .._errors import ConfigError
from .._fingerprint import Fingerprinter
from .._lease import Lease, LeaseDeadlines, new_lease
from .._policy import Board, Policy, Slot, order_key
from .._request import Request
from .._seen import ExpiringFingerprints, FingerprintSet
from .base import Counters, Entry, HostList, Refetch, StoreCounts, host_details

__all__ = ["OPTIONS", "MemoryStore", "open_store"]

#: The memory store has no options of its own.
OPTIONS: Final[tuple[str, ...]] = ()


def open_store(
    url: str, policy: Policy, fingerprinter: Fingerprinter, options: dict[str, Any]
) -> tuple[MemoryStore, str]:
    """Open a memory store for ``memory://`` (which takes no path)."""
    if url.rstrip("/") not in ("memory:", "memory:/"):
        raise ConfigError(f"frontier URL {url!r}: a memory frontier takes no path; use 'memory://'")
    return MemoryStore(policy), "memory://"


class _Host(Slot):
    __slots__ = ("queue",)

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.queue: list[_Item] = []


# A queued request's heap entry, which is also its lease once popped:
# (-priority, order, request, host, origin).
_Item = Lease

# A scheduled request: (due, order, -priority, request, host name, revisit).
# The host goes by name: its slot may be gone (forgotten while empty) by the
# time the request is due.
_Scheduled = tuple[float, int, int, Request, str, bool]

#: Most scheduled requests one call makes ready (the rest: the next calls).
_DUE_BATCH: Final = 1024


class MemoryStore:
    """Requests, leases, fingerprints and pacing held in this process's memory.

    Nothing survives the process. The request objects given to ``add`` are the
    ones ``pop`` returns (no copy, no encoding), which is what makes it fast.
    """

    needs_payload = False
    durable = False
    shared = False

    def __init__(self, policy: Policy) -> None:
        self.origin = self._origin = f"memory://#{id(self):x}"  # each store is its own
        self._clock = policy.clock
        self._lifo = policy.lifo
        self._hosts: dict[str, _Host] = {}
        self._board = Board(policy, self._forget, self._hosts)
        # order -> the item leased under it.
        self._leases: dict[int, _Item] = {}
        self._deadlines = LeaseDeadlines(policy.lease_timeout, self._leases, 1)
        self._deadline_items = self._deadlines.items
        self._lease_timeout = policy.lease_timeout
        self._seen: FingerprintSet | ExpiringFingerprints = (
            FingerprintSet()
            if policy.seen_ttl is None
            else ExpiringFingerprints(policy.seen_ttl, policy.clock)
        )
        self._accepted = 0
        # Requests each host ever had accepted, and adds refused by the cap.
        self._host_accepted: dict[str, int] = {}
        self._cap = policy.max_requests_per_host
        self._capped = 0
        self._queued = 0
        # With _accepted, _queued and the leases these give every Counters
        # figure (`counts`), so pop and ack count nothing.
        self._duplicates = 0
        self._released = 0
        self._expired = 0
        self._state: dict[str, Any] = {}
        # Acceptance numbers; refetches take theirs from it too.
        self._sequence = 0
        self._scheduled: list[_Scheduled] = []
        self._revisits = 0
        self._refetched = 0
        # What an acked request carries: a lease of this store matching none.
        self._spent = new_lease(Lease, (0, None, None, None, self._origin))

    def _forget(self, slot: Slot) -> None:
        del self._hosts[slot.name]

    # -- adding ---------------------------------------------------------------

    def add(
        self,
        entries: Sequence[Entry],
        finished: Sequence[object] = (),
        *,
        lifo: bool | None = None,
        refetch: Sequence[Refetch | None] | None = None,
    ) -> list[bool]:
        added: list[bool] = []
        seen_add = self._seen.add
        hosts = self._hosts
        store_lifo = self._lifo
        origin = self._origin
        host_accepted = self._host_accepted
        cap = self._cap
        if lifo is None:
            lifo = store_lifo
        for fingerprint, host_name, request, _ in entries:
            if cap is not None and host_accepted.get(host_name, 0) >= cap:
                if request.dont_filter or fingerprint not in self._seen:
                    self._capped += 1  # a duplicate is a duplicate, not capped
                else:
                    self._duplicates += 1
                added.append(False)
                continue
            if not request.dont_filter and not seen_add(fingerprint):
                self._duplicates += 1
                added.append(False)
                continue
            host_accepted[host_name] = host_accepted.get(host_name, 0) + 1
            if request._lease is not None:
                # The same object is already queued or leased here (a
                # dont_filter re-add): store a copy so each has its own lease.
                request = request.replace()
            self._accepted += 1
            self._sequence += 1
            if request.not_before is not None:
                wait = request.not_before - time.time()
                if wait > 0:
                    request._lease = _QUEUED
                    order = order_key(self._sequence, lifo, store_lifo)
                    due = self._clock() + wait
                    heappush(
                        self._scheduled, (due, order, -request.priority, request, host_name, False)
                    )
                    added.append(True)
                    continue
            host = hosts.get(host_name)
            if host is None:
                host = hosts[host_name] = _Host(host_name)
                self._board.adopt(host)
            order = order_key(self._sequence, lifo, store_lifo)
            item = new_lease(Lease, (-request.priority, order, request, host, origin))
            request._lease = _QUEUED
            queue = host.queue
            heappush(queue, item)
            self._queued += 1
            if queue[0] is item:
                host.head = item
                self._board.place(host, self._clock())
            added.append(True)
        if finished:
            self.ack(finished, refetch)
        return added

    # -- popping --------------------------------------------------------------

    def pop(self) -> Request | None:
        # Read, then called: Python 3.11 cannot specialise ``self._clock()``
        # (a method-style call of a callable kept on the instance).
        clock = self._clock
        now = clock()
        deadlines = self._deadline_items
        if deadlines and deadlines[0] <= now:
            for item in self._deadlines.expired(now):
                self._end_lease(item, requeue=True, now=now, expired=True)
        scheduled = self._scheduled
        if scheduled and scheduled[0][0] <= now:
            self._make_due(now)
        board = self._board
        slot = board.take(now)
        if slot is None:
            return None
        # Every slot on this board is a _Host (typing.cast would cost a call).
        host: _Host = slot  # type: ignore[assignment]
        queue = host.queue
        item = heappop(queue)
        host.head = queue[0] if queue else None
        board.popped(host, now)
        self._queued -= 1
        self._leases[item[1]] = item
        deadlines.append(now + self._lease_timeout)  # LeaseDeadlines.add, inlined
        deadlines.append(item)
        request: Request = item[2]
        request._lease = item
        return request

    # -- finishing ------------------------------------------------------------

    def ack(
        self, leases: Sequence[object], refetch: Sequence[Refetch | None] | None = None
    ) -> None:
        if refetch is not None:
            self._refetch(leases, refetch)
            return
        # _end_lease without requeue, and LeaseDeadlines.trim, inlined: the
        # ack is half of every request's cost.
        clock = self._clock  # see pop
        now = clock()
        held = self._leases
        spent = self._spent
        board = self._board  # board.place(), not a bound method made per ack
        for lease in leases:
            current = held.pop(lease[1], None)  # type: ignore[index]
            if current is not lease:
                if current is not None:
                    held[current[1]] = current  # a later lease of the same request: keep it
                continue  # already acked, released or expired (at-least-once), or not ours
            # The request held its lease and the lease the request: a cycle
            # only a full collection frees (150-250 ms pauses in a long crawl).
            # A spent lease keeps "acked twice" harmless and frees it at once.
            lease[2]._lease = spent  # type: ignore[index]
            host = lease[3]  # type: ignore[index]
            host.leased -= 1
            # Its key (fewest leases) or its eligibility (concurrency) changed.
            board.place(host, now)
        items = self._deadline_items
        if not held:
            items.clear()  # no lease left (a loop that acks each pop): no deadline counts
            return
        while items and held.get(items[1][1]) is not items[1]:
            items.popleft()  # ended leases at the front: their deadlines go
            items.popleft()
        if len(items) > 4 * len(held) + 2048:
            self._deadlines.trim()  # a slow lease holds the front: compact

    def release(
        self,
        leases: Sequence[object],
        updates: Sequence[Entry | None] | None = None,
        delays: Sequence[float] | None = None,
    ) -> None:
        now = self._clock()
        if updates is None and delays is None:
            for lease in leases:
                self._end_lease(lease, requeue=True, now=now)
        else:
            for index, lease in enumerate(leases):
                update = None if updates is None else updates[index]
                if update is not None:
                    lease = self._updated(lease, update[2])
                delay = 0.0 if delays is None else delays[index]
                self._end_lease(lease, requeue=True, now=now, delay=delay)
        self._deadlines.trim()

    def _refetch(self, leases: Sequence[object], refetch: Sequence[Refetch | None]) -> None:
        """Ack each lease; schedule the refetched ones again, in a new sequence number."""
        now = self._clock()
        plain = []
        for lease, again in zip(leases, refetch, strict=True):
            if again is None:
                plain.append(lease)
                continue
            delay, update = again
            if update is not None:
                lease = self._updated(lease, update[2])
            item = self._leases.get(lease[1])  # type: ignore[index]
            if item is None or item is not lease:
                continue  # ended: nothing to refetch (at-least-once)
            self._end_lease(item, requeue=False, now=now)
            item[2]._lease = self._spent
            self._refetched += 1
            self._sequence += 1
            # A copy: the worker still holds the object it acked.
            request = item[2].replace()
            request._lease = _QUEUED
            order = order_key(self._sequence, self._lifo, self._lifo)
            self._schedule(
                (now + delay, order, -request.priority, request, item[3].name, True), now
            )
        if plain:
            self.ack(plain)
        else:
            self._deadlines.trim()

    def _schedule(self, scheduled: _Scheduled, now: float) -> None:
        """Hold a request until its due time (queue it now if that has come)."""
        heappush(self._scheduled, scheduled)
        if scheduled[5]:
            self._revisits += 1
        if scheduled[0] <= now:
            self._make_due(now)

    def _make_due(self, now: float) -> None:
        """Queue the scheduled requests that are due, in their hosts (a bounded batch)."""
        scheduled = self._scheduled
        hosts = self._hosts
        origin = self._origin
        for _ in range(_DUE_BATCH):
            if not scheduled or scheduled[0][0] > now:
                return
            _, order, priority, request, host_name, revisit = heappop(scheduled)
            if revisit:
                self._revisits -= 1
            host = hosts.get(host_name)
            if host is None:
                host = hosts[host_name] = _Host(host_name)
                self._board.adopt(host)
            item = new_lease(Lease, (priority, order, request, host, origin))
            queue = host.queue
            heappush(queue, item)
            self._queued += 1
            if queue[0] is item:
                host.head = item
                self._board.place(host, now)

    def _updated(self, lease: Any, request: Request) -> Any:
        """Put ``request`` in the place of the one leased under ``lease``; return the new lease.

        The current item (the lease) is replaced by one holding ``request``
        under its priority and the original order, for `_end_lease` to queue.
        A request object that carries a lease of its own (queued here, or
        popped) is copied: each queued object has its own lease. An ended
        lease is returned as it is: its release does nothing, update included.
        """
        item = self._leases.get(lease[1])
        if item is None or item is not lease:
            return lease
        if request is not item[2] and request._lease is not None:
            request = request.replace()
        updated = new_lease(Lease, (-request.priority, item[1], request, item[3], item[4]))
        self._leases[item[1]] = updated
        return updated

    def _end_lease(
        self, lease: Any, *, requeue: bool, now: float, expired: bool = False, delay: float = 0.0
    ) -> None:
        item = self._leases.get(lease[1])
        if item is None or item is not lease:
            return  # already acked, released or expired (at-least-once), or not ours
        del self._leases[item[1]]
        host = item[3]
        host.leased -= 1
        if requeue:
            request = item[2]
            if not expired:
                self._released += 1
            else:
                self._expired += 1
                # Its holder may still ack or release the old object: give
                # the queue a copy so that late call cannot touch the new lease.
                request = request.replace()
            request._lease = _QUEUED
            if delay > 0:
                due = (now + delay, item[1], item[0], request, host.name, False)
                heappush(self._scheduled, due)
            else:
                heappush(host.queue, new_lease(Lease, (item[0], item[1], request, host, item[4])))
                host.head = host.queue[0]
                self._queued += 1
        # Its key (fewest leases) or its eligibility (concurrency) changed.
        self._board.place(host, now)

    # -- reading --------------------------------------------------------------

    def seen(self, fingerprints: Sequence[bytes]) -> list[bool]:
        seen = self._seen
        return [fingerprint in seen for fingerprint in fingerprints]

    def counts(self) -> StoreCounts:
        now = self._clock()
        if self._scheduled and self._scheduled[0][0] <= now:
            self._make_due(now)
        queued, leased = self._queued, len(self._leases)
        scheduled = len(self._scheduled)
        held = queued + scheduled
        entered = self._accepted + self._refetched
        counters = Counters(
            accepted=self._accepted,
            duplicates=self._duplicates,
            capped=self._capped,
            popped=entered + self._released + self._expired - held,
            acked=entered - held - leased,
            released=self._released,
            expired=self._expired,
            refetched=self._refetched,
        )
        return StoreCounts(
            queued,
            leased,
            len(self._seen),
            counters,
            scheduled,
            self._revisits,
            max(0.0, self._scheduled[0][0] - now) if scheduled else None,
        )

    def host_counts(self, limit: int) -> HostList:
        board = self._board
        now = self._clock()
        blocked = board.blocked(now)
        hosts = {
            h.name: (len(h.queue), h.leased) for h in self._hosts.values() if h.queue or h.leased
        }
        accepted = self._host_accepted
        return host_details(
            hosts,
            blocked,
            board.overrides,
            lambda name: accepted.get(name, 0),
            limit,
            now,
            lambda name: board.timing(name, now),
        )

    # -- host controls ----------------------------------------------------------

    def block_host(self, host: str, seconds: float | None) -> None:
        now = self._clock()
        if seconds is None:
            self._board.unblock(host, now)
        else:
            self._board.block(host, now + seconds, now)

    def set_host_policy(self, host: str, delay: float | None, concurrency: int | None) -> None:
        self._board.set_policy(host, delay, concurrency, self._clock())

    def host_policy(self, host: str) -> tuple[float | None, int | None]:
        return self._board.overrides.get(host, (None, None))

    def forget(self, fingerprints: Sequence[bytes]) -> int:
        discard = self._seen.discard
        return sum(1 for fingerprint in fingerprints if discard(fingerprint))

    def next_ready_in(self) -> float | None:
        scheduled = self._scheduled
        if not self._queued and not self._leases and not scheduled:
            return None
        now = self._clock()
        if scheduled and scheduled[0][0] <= now:
            self._make_due(now)
        soonest = self._board.next_ready_in(now)
        if scheduled:
            due = max(0.0, scheduled[0][0] - now)
            soonest = due if soonest is None else min(soonest, due)
        expiry = self._deadlines.next_in(now)
        if expiry is not None:
            soonest = expiry if soonest is None else min(soonest, expiry)
        return soonest

    def extra_stats(self) -> dict[str, float]:
        return {}

    def load_state(self) -> dict[str, Any]:
        return dict(self._state)

    def save_state(self, state: Mapping[str, Any]) -> None:
        self._state = dict(state)

    def flush(self) -> None:
        pass  # acks apply at once: nothing waits

    def close(self) -> None:
        self._hosts.clear()
        self._board.clear()
        self._scheduled.clear()


class _Queued:
    """Marks a request object that is queued in a memory store.

    A second ``add`` of the same object (``dont_filter``) then stores a copy,
    so each has its own lease; acking it raises (it is not a `Lease`).
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "<queued>"


_QUEUED: Final = _Queued()
