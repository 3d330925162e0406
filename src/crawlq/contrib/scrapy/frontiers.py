"""`Frontiers`: the crawlq side of the Scrapy scheduler.

It turns Scrapy requests into crawlq requests and back, keeps the requests
that cannot be stored in this process, merges the store with the in-memory
frontier a shared store needs, and keeps track of what the engine holds.

Where a request lives
    Every request goes to one crawlq frontier, the *store* (``CRAWLQ_URL``).
    With a durable store it is stored as a Scrapy payload (see
    ``codec``). A request that cannot be stored that way (a lambda
    callback, an object in ``meta``) stays in this process, in a dict, and
    the store holds a token for it in its place: it is deduplicated, ordered
    and paced like the others (Scrapy issue 3666, memory requests jumping
    ahead of disk ones, does not happen), and is lost if the crawl stops (the
    stale token is then dropped and counted on resume). With ``memory://``
    every request is kept that way: nothing is serialized at all. A store
    shared by several processes (Redis) cannot hold tokens, since another
    crawler could pop them: there, such requests go to an in-memory frontier
    of their own, and `Frontiers.pop` merges both by priority.

Order
    Scrapy's priority ``p`` (higher first) and its start-request rule (start
    requests after the others of equal priority, in the order they were
    yielded) become one crawlq priority: ``2 * p + 1`` for other requests,
    ``2 * p`` for start requests, with ``p`` clamped to ``[-2**30, 2**30 - 1]``
    so the result fits crawlq's 32-bit range (the payload keeps the exact
    value). Within a crawlq priority, the frontier's order applies (FIFO or
    LIFO, ``CRAWLQ_LIFO``), except that start requests are added in the order
    of their start queue class (``SCHEDULER_START_DISK_QUEUE`` or
    ``SCHEDULER_START_MEMORY_QUEUE``, ``add_many(..., lifo=)``): by default
    FIFO, so they come out in the order they were yielded, as from Scrapy's
    start queues; newest first with a Lifo class.

Acknowledgements
    A request handed to the engine is leased. It is acknowledged once the
    engine removes it from its slot (see ``engine``): after the
    download, after the downloader middlewares' outcome (a redirect or retry
    request already scheduled), and after the callback or errback, with every
    request it yielded already enqueued. With a refetch
    (``CRAWLQ_REFETCH_AFTER``, ``meta["crawlq_refetch_after"]``) that ack
    schedules the same request again (see ``due``).

Writes
    With a durable store, an enqueued request is held in memory; the
    requests held and the acks of finished requests are then written in one
    store call (a SQLite transaction, a Redis round trip), requests first,
    before the next request is handed out (and at close, and once 1,024 are
    held). A page's links and its ack thus share one write, and so do the
    pages that finished since the last one. Requests enqueued while nothing
    is in flight (no request could yield them again) are written at once,
    except start requests, which the spider yields again on resume. On
    Redis the write also leases the requests handed out next, in the same
    round trip. The order that makes a kill lose nothing: a request's ack is
    never durable before the requests it yielded. After a kill, un-acked
    requests come back on resume (on Redis once their lease times out) and
    yield their children again (the ones already stored are filtered as
    duplicates); start requests are yielded again by the spider. At most
    ``CRAWLQ_MAX_IN_FLIGHT`` requests are handed out and not acknowledged
    (finished or not), which bounds the re-fetches after a kill.

Duplicates
    A SQLite job is checked for an enqueued request's fingerprint at once
    (a read of its own file), so `Scheduler.enqueue_request` answers
    "duplicate" exactly. A shared store is not asked per request (a round
    trip each, the cost batching removes): a request that is new to this
    process is accepted and held, and if the write finds that another
    worker (or an earlier run) stored it already, the scheduler counts it as
    a duplicate then (see `Scheduler.enqueue_request`). Fingerprints this
    process has met are refused at once either way (``bookkeeping``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._errors import StoreError
from ..._fingerprint import Fingerprinter
from ..._frontier import Frontier
from ..._open import open_frontier
from ..._request import Request
from .adding import PAYLOAD, RUN, TOKEN, FrontierAdds, Pending, Unacked
from .codec import RequestCodec
from .due import refetch_after
from .fed import fed_request
from .settings import SchedulerConfig
from .source import Source as _Source
from .source import crawlq_priority

if TYPE_CHECKING:
    import scrapy

__all__ = ["Frontiers", "crawlq_priority"]


class Frontiers(FrontierAdds):
    """The store, the in-memory frontier beside it when needed, and what the engine holds.

    ``count`` is called with the name of each crawlq stat to increment;
    ``on_dropped(url, kind, reason)`` with each stored request not handed
    out: ``kind`` "unrebuildable" (``reason`` the exception; the request is
    parked, see `_park`), "lost" (kept in memory by an earlier run: acked)
    or "declined" (the spider's ``make_request_from_crawlq`` returned None:
    acked); and with each finished request whose refetch value is bad:
    "invalid" (acked for good, see `finished`). Every method may
    raise the store's `StoreError`; after one, the caller sets `failed`.
    ``on_failed(error)`` reports a store failure met while writing held
    requests on the side (in `add`, which still succeeds: the requests
    moved to the in-memory frontier); the caller sets `failed` then too.
    ``on_duplicate(request, stored)`` reports a request `add` accepted and
    held that the shared store found a duplicate when `flush` wrote it
    (``stored``: it was held as a payload, not as an object).
    """

    def __init__(
        self,
        store: Frontier,
        config: SchedulerConfig,
        codec: RequestCodec,
        count: Callable[[str], None],
        on_dropped: Callable[[str, str, Exception | None], None],
        on_failed: Callable[[StoreError], None],
        on_duplicate: Callable[[Any, bool], None],
    ) -> None:
        self.main = _Source(store)
        self.local: _Source | None = None
        self.config = config
        self._codec = codec
        self._count = count
        self._on_dropped = on_dropped
        self._on_failed = on_failed
        self._on_duplicate = on_duplicate
        #: Set once the store failed: no more acks (what is in flight comes
        #: back on resume), new requests go to the in-memory frontier.
        self.failed = False
        # id(request) -> [(request, source, crawlq request)], per handed-out request.
        self._in_flight: dict[int, list[tuple[Any, _Source, Request]]] = {}
        #: Stored requests that cannot be rebuilt, kept leased (see `_park`).
        self.parked: list[tuple[_Source, Request]] = []
        #: Requests handed out and not acknowledged (finished or not).
        self.handed_out = 0
        # Finished requests of the durable store whose ack is not written
        # yet, each with its refetch (seconds; None: done for good).
        self._unacked: list[Unacked] = []
        # New requests for a durable store wait here and are written by
        # `flush` with the pending acks, after them in the same store call
        # (children before parents). A store of this process alone (SQLite)
        # is checked for duplicates first; a shared one (Redis) is not (a
        # round trip per request): its duplicates show at the flush.
        self._batching = config.durable
        self._pending: list[Pending] = []
        self._pending_keys: set[bytes] = set()
        # Start requests are added in their start queue's order where it
        # differs from the crawl's (``add_many(..., lifo=)``).
        self._starts_apart = config.start_requests_apart and config.start_lifo != config.lifo
        self._tokens = 0
        # Tokens of an earlier run name request objects that are gone.
        self._run = int.from_bytes(os.urandom(6), "big")
        self._hold_limit = config.lease_timeout / 2
        # A read-only "seen before?" on a local store (a shared store would
        # pay a round trip per request for it).
        self.seen_many: Callable[[tuple[bytes]], list[bool]] | None = (
            None if config.shared or not config.durable else store.seen_many
        )

    def __len__(self) -> int:
        """Requests held and not handed to the engine: queued, or scheduled for later."""
        return self.pending(revisits=True)

    def pending(self, *, revisits: bool) -> int:
        """Requests not handed to the engine: queued, or scheduled (revisits if ``revisits``).

        A request scheduled by its ``not_before`` or a delay (a retry's
        backoff) is counted; a revisit (a page acked with a refetch, waiting
        for it) only with ``revisits``: the join rule of `Scheduler`.
        """
        # The store counts parked requests as leased, hence pending: not here.
        queued = self.main.pending(revisits) + len(self._pending) - len(self.parked)
        if self.local is None:
            return max(0, queued)
        return max(0, queued + self.local.pending(revisits))

    def seen(self, fingerprint: bytes) -> bool:
        """Whether a request with ``fingerprint`` was added (held, stored or in memory)."""
        if fingerprint in self._pending_keys:
            return True
        for source in (self.main, self.local):
            frontier = None if source is None else source.frontier
            if frontier is None or frontier.closed:
                continue
            if frontier.seen_many((fingerprint,))[0]:
                return True
        return False

    def local_source(self) -> _Source:
        """The in-memory frontier beside the store, opened on first use."""
        local = self.local
        if local is None:
            config = self.config
            frontier = open_frontier(
                "memory://",
                host_delay=config.host_delay,
                host_concurrency=config.host_concurrency,
                lifo=config.lifo,
                lease_timeout=config.lease_timeout,
                fingerprinter=Fingerprinter(mode="scrapy"),
            )
            local = self.local = _Source(frontier)
        return local

    # -- handing out ------------------------------------------------------------------

    def pop(self) -> tuple[scrapy.Request, bool] | None:
        """Hand out the next ready request and whether it came from the store's payloads.

        None when nothing is ready now. A stored request without a Scrapy
        payload (fed from outside) becomes one (see ``fed``). One that
        cannot be rebuilt is parked (`_park`); one whose object is gone with
        an earlier run, or that the spider's hook declines, is acked; each is
        reported to ``on_dropped`` and skipped.
        """
        while True:
            picked = self._pick()
            if picked is None:
                return None
            source, creq = picked
            meta = creq.meta
            token = meta.get(TOKEN)
            if token is None:
                payload = meta.get(PAYLOAD)
                try:
                    if payload is None:  # fed from outside: see ``fed``
                        made = fed_request(self._codec.spider, creq)
                        if made is None:
                            self._drop(source, creq, "declined", None)
                            continue
                        request = made
                    else:
                        request = self._codec.decode(payload, creq.url)
                except Exception as exc:
                    self._park(source, creq, exc)
                    continue
            else:
                found = source.objects.get(token) if meta.get(RUN) == self._run else None
                if found is None:
                    self._drop(source, creq, "lost", None)
                    continue
                request = found
            key = id(request)
            entries = self._in_flight.get(key)
            if entries is None:
                self._in_flight[key] = [(request, source, creq)]
            else:
                entries.append((request, source, creq))
            source.in_flight += 1
            self.handed_out += 1
            return request, token is None

    def _drop(self, source: _Source, creq: Request, kind: str, reason: Exception | None) -> None:
        self._on_dropped(creq.url, kind, reason)
        source.frontier.ack(creq)

    def _park(self, source: _Source, creq: Request, reason: Exception) -> None:
        """Keep a stored request that cannot be rebuilt leased, unacked, out of the engine.

        It stays in the store, leased by this worker (``crawlq inspect``
        counts it), and comes back after ``CRAWLQ_LEASE_TIMEOUT``, or at once
        when this worker closes: at most once per lease timeout and per
        worker start, never in a loop.
        """
        self.parked.append((source, creq))
        self._on_dropped(creq.url, "unrebuildable", reason)

    def _pick(self) -> tuple[_Source, Request] | None:
        main = self.main
        local = self.local
        if local is None:
            creq = main.frontier.pop()
            return None if creq is None else (main, creq)
        # Two frontiers: pop one request from each (if none is held yet) and
        # hand out the better; the other stays held, leased, for the next call.
        now = time.monotonic()
        for source in (main, local):
            held = source.held
            if held is not None and now - source.held_at > self._hold_limit:
                source.held = None  # before its lease runs out: put it back
                source.frontier.release(held)
            if source.held is None:
                source.held = source.frontier.pop()
                source.held_at = now
        best: _Source | None = None
        for source in (local, main):  # memory first at equal priority, as in Scrapy
            held = source.held
            if held is not None and (
                best is None or best.held is None or held.priority > best.held.priority
            ):
                best = source
        if best is None or best.held is None:
            return None
        creq = best.held
        best.held = None
        return best, creq

    def next_ready_in(self) -> float | None:
        """Seconds until a request may be ready (None: only after an add)."""
        delays = [
            delay
            for source in (self.main, self.local)
            if source is not None and (delay := source.frontier.next_ready_in()) is not None
        ]
        return min(delays) if delays else None

    # -- finishing --------------------------------------------------------------------

    def finished(self, request: Any) -> None:
        """Ack a request the engine is done with; unknown requests are ignored.

        With a refetch (``CRAWLQ_REFETCH_AFTER``, ``meta["crawlq_refetch_after"]``;
        see ``due.refetch_after``) the ack schedules it again: it stays
        seen and comes back after that long. A bad refetch value (set by a
        callback) is reported to ``on_dropped`` as "invalid" and the request
        is acked for good.
        """
        entries = self._in_flight.get(id(request))
        if entries is None:
            return
        index = next((i for i, entry in enumerate(entries) if entry[0] is request), -1)
        if index < 0:
            return
        _, source, creq = entries.pop(index)
        if not entries:
            del self._in_flight[id(request)]
        again, error = refetch_after(request, self.config.refetch_after)
        if error is not None:
            self._on_dropped(request.url, "invalid", ValueError(error))
        token = creq.meta.get(TOKEN)
        if token is not None and again is None:
            source.objects.pop(token, None)  # a refetch hands the same object out again
        if self.failed and source is self.main:
            # No ack after a store failure: it stays leased (in flight) in
            # the store and comes back on resume.
            self.handed_out -= 1
            return
        if source is self.main and self.config.durable:
            # Written by the next `flush`, with the requests held, before
            # the next request is handed out: one write saved per page, at
            # least. Until then it still counts as in flight (`handed_out`),
            # so a kill re-fetches at most CRAWLQ_MAX_IN_FLIGHT.
            self._unacked.append((creq, again))
            return
        source.in_flight -= 1
        self.handed_out -= 1
        if again is None:
            source.frontier.ack(creq)
        else:
            source.frontier.ack(creq, refetch_after=again)
            self._count("crawlq/refetch_scheduled")
        self._count("crawlq/acked")

    def settle(self) -> None:
        """`flush`, marking the store `failed` instead of raising if it fails."""
        try:
            self.flush()
        except StoreError:
            self.failed = True

    def close(self) -> int:
        """Put back what was handed out and not finished, close both frontiers.

        Returns how many requests the engine did not finish. Never raises for
        the store: a durable store gives unfinished requests back on resume.
        """
        self.settle()
        released = 0
        for source in (self.main, self.local):
            if source is None:
                continue
            leases = [
                creq
                for entries in self._in_flight.values()
                for _, owner, creq in entries
                if owner is source
            ]
            released += len(leases)
            leases += [creq for owner, creq in self.parked if owner is source]
            if source.held is not None:
                leases.append(source.held)
                source.held = None
            if leases and not self.failed and not source.frontier.closed:
                # The engine did not finish them (it was stopped hard): a
                # shared store can hand them to another crawler at once.
                with contextlib.suppress(StoreError):
                    source.frontier.release_many(leases)
        self._in_flight.clear()
        self.parked.clear()
        self.handed_out = 0
        self.main.frontier.close()
        if self.local is not None:
            self.local.frontier.close()
        return released
