"""The asyncio facade over a `Frontier`: waiting, direct delivery, backpressure.

The frontier never waits; this layer does. Three kinds of coroutine may wait
here, each on a future of its own kept in a FIFO deque:

- getters wait for a request. Whenever the frontier may have changed (an add,
  an ack, a release, or the time at which a paced host becomes ready), the
  scheduler pops requests and hands them straight to the oldest getters
  (direct delivery). A getter cancelled after its hand-off puts the request
  back with ``release``, so cancellation can never lose a request;
- adders wait for room when ``maxsize`` requests are queued;
- joiners wait for the frontier to hold nothing queued or leased.

No coroutine polls a local store: a single timer is armed for the moment the
frontier says its next request becomes ready. On a shared store (Redis) other
workers add and ack unseen, so the timer also fires every half second while
coroutines wait.

A store that does I/O (SQLite, Redis) is never called on the event loop by
the coroutine methods (``get``, ``add``, ``add_many``, ``join``) nor by
``task_done`` and ``release``: their calls go, batched, to the frontier's own
thread (see `store_thread`), so a commit, a round trip or a Redis
retry never stalls the loop, and calls that arrive while one batch is in
flight share the next commit or round trip. ``task_done`` and ``release``
return at once; their write follows with the next batch (an error is retried
there; if it never succeeds the lease expires and the request comes back,
as at-least-once allows). The plain methods that answer at once
(``add_nowait``, ``get_nowait``, ``stats``, ``qsize``) call the store on
the calling thread, after the batch in flight. The memory store is called
directly: it never blocks.

A worker that dies is never silent: when a task ends with an exception while
holding requests from ``get`` (see `Holdings`), they are released, an error
naming them is logged on the ``crawlq`` logger, and ``join`` raises
`WorkerFailed`. A task cancelled holding requests has them released too.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

from .._due import check_delay
from .._errors import (
    ConfigError,
    InvalidRequest,
    QueueEmpty,
    QueueFull,
    SchedulerClosed,
    WorkerFailed,
)
from .._frontier import Frontier, Invalid
from .._request import Request
from ..stores.base import HostCount
from .batches import BatchedCalls
from .finishing import Finishes
from .holdings import Holdings, WorkerWatch
from .idle import join_idle
from .store_thread import StoreThread
from .waiting import Waiting

__all__ = ["Scheduler", "SchedulerStats"]


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """A snapshot of a scheduler and its frontier."""

    #: Requests waiting in the frontier.
    queued: int
    #: Requests handed out and not yet marked done (leased in the frontier).
    in_flight: int
    #: Distinct fingerprints the frontier has recorded.
    seen: int
    #: Coroutines waiting in `Scheduler.get`.
    waiting_consumers: int
    #: True once `Scheduler.close` was called.
    closed: bool
    #: Per-host counts, busiest first, when asked for with ``hosts=True``.
    hosts: tuple[HostCount, ...] | None = None
    #: Invalid requests ``add_many(..., invalid="skip")`` skipped (see `FrontierStats`).
    skipped: int = 0
    #: Requests held but not due yet (see `FrontierStats.scheduled`).
    scheduled: int = 0
    #: Seconds until the first scheduled request is due; None: none is.
    next_due_in: float | None = None


class Scheduler(Finishes, Waiting, BatchedCalls, WorkerWatch):
    """Hands requests from a frontier to asyncio workers, waiting when none is ready.

    ``maxsize`` bounds the number of queued requests (0: no bound): ``add``
    waits for room and ``add_nowait`` raises `QueueFull`; nothing is dropped.
    The scheduler does not own the frontier: closing it leaves the frontier
    open, so durable state can be closed (and resumed) by its owner.

    Raises `ConfigError` for a bad ``maxsize`` or something that is not a
    `Frontier`.
    """

    def __init__(self, frontier: Frontier, *, maxsize: int = 0) -> None:
        if not isinstance(frontier, Frontier):
            raise ConfigError(
                f"Scheduler needs a crawlq Frontier (from crawlq.open_frontier()), not {frontier!r}"
            )
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
            raise ConfigError(f"maxsize must be an int >= 0 (0: unbounded), not {maxsize!r}")
        self._frontier = frontier
        self._maxsize = maxsize
        self._getters: deque[asyncio.Future[Request | None]] = deque()
        self._adders: deque[asyncio.Future[None]] = deque()
        self._joiners: deque[asyncio.Future[None]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._closed = False
        self._holdings = Holdings(frontier, self._release_held, self._on_worker_end)
        self._failure: WorkerFailed | None = None
        # A store that does I/O is called on a thread of its own, in batches.
        self._thread: StoreThread | None = None
        self._look = False  # the frontier may have changed: pop for waiting getters
        self._want_counts = False
        self._queued = self._leased = 0  # counts read by the latest batch
        self._counts_known = False  # until a batch (or a *_nowait call) reads them
        self._counts_read = 0  # times the counts were read on the loop's thread
        # Requests leased ahead, with when (see _take_ahead); True once the
        # store met a fault that may have lost their leases (its thread sets it).
        self._ahead: deque[tuple[Request, float]] = deque()
        self._ahead_faulted = False
        frontier._on_store_fault(self._store_faulted)
        if frontier.durable or frontier.shared:
            # Counts are read by the store thread's first batch, not here: the
            # constructor runs on the event loop, which a store call would
            # block (up to retry_timeout in an outage) and which it would
            # fail with StoreUnavailable.
            self._thread = StoreThread(frontier, self)

    @property
    def frontier(self) -> Frontier:
        """The frontier this scheduler hands out from."""
        return self._frontier

    @property
    def maxsize(self) -> int:
        """Most queued requests before ``add`` waits (0: unbounded)."""
        return self._maxsize

    # -- adding ---------------------------------------------------------------

    @staticmethod
    def _request(request: Request | str, fields: dict[str, Any]) -> Request:
        if isinstance(request, str):
            return Request(request, **fields)
        if fields:
            raise InvalidRequest(
                "keyword fields go with a URL, not with a Request; use request.replace()"
            )
        return request

    def _full(self) -> bool:
        if self._maxsize <= 0:
            return False
        if self._thread is not None:
            if not self._counts_known:  # ask the next batch; wait for its counts
                self._want_counts = True
                self._thread.kick()
                return True
            return self._queued >= self._maxsize  # as the latest batch read it
        return self._frontier.stats().queued >= self._maxsize

    def add_nowait(self, request: Request | str, **fields: Any) -> bool:
        """Add a request (or a URL with `Request` keyword fields) without waiting.

        Returns False for a duplicate. Raises `QueueFull` if ``maxsize``
        requests are queued, `SchedulerClosed` after ``close()``, and what
        `Frontier.add` raises. With a store that does I/O, the write happens
        here, on the calling thread (``await add()`` does it on the store's).
        """
        self._check_open()
        request = self._request(request, fields)
        self._sync_point()
        with self._frontier._lock:
            if self._maxsize > 0 and self._frontier._counts()[0] >= self._maxsize:
                raise QueueFull(
                    f"{self._maxsize} requests are queued (maxsize); await add() to wait for room"
                )
            added = self._frontier.add(request)
            self._read_counts()
        if added:
            self._changed()
        return added

    async def add(self, request: Request | str, **fields: Any) -> bool:
        """Add a request, waiting for room while ``maxsize`` requests are queued.

        Returns False for a duplicate. Raises `SchedulerClosed` if the
        scheduler is or gets closed, and what `Frontier.add` raises.
        """
        request = self._request(request, fields)
        if self._thread is not None:
            return (await self.add_many((request,)))[0]
        await self._wait_for_room()
        added = self._frontier.add(request)
        if added:
            self._changed()
        return added

    @overload
    async def add_many(
        self,
        requests: Iterable[Request | str],
        *,
        fingerprints: Sequence[bytes] | None = None,
        ack: Request | Iterable[Request] | None = None,
        invalid: Literal["raise"] = "raise",
        refetch_after: float | None = None,
        changed: bool | None = None,
    ) -> list[bool]: ...

    @overload
    async def add_many(
        self,
        requests: Iterable[Request | str],
        *,
        fingerprints: Sequence[bytes] | None = None,
        ack: Request | Iterable[Request] | None = None,
        invalid: Invalid,
        refetch_after: float | None = None,
        changed: bool | None = None,
    ) -> list[bool | None]: ...

    async def add_many(
        self,
        requests: Iterable[Request | str],
        *,
        fingerprints: Sequence[bytes] | None = None,
        ack: Request | Iterable[Request] | None = None,
        invalid: Invalid = "raise",
        refetch_after: float | None = None,
        changed: bool | None = None,
    ) -> list[bool] | list[bool | None]:
        """Add a batch (`Request`s or URL strings) in one frontier operation.

        False marks each duplicate. ``invalid="skip"`` skips requests that
        cannot be stored (None in the result) instead of raising
        `InvalidRequest` for the whole batch; ``ack`` marks the request (or
        requests) the batch came from done in the same durable step, as
        `Frontier.add_many` does: ``await scheduler.add_many(links,
        ack=request)`` replaces ``task_done(request)``. With ``maxsize``,
        waits until the queue is below it, then adds the whole batch (which
        may take it past ``maxsize`` by the batch size); a task that holds
        requests from `get` (a worker adding a page's links) never waits.
        With a store that does I/O, returns once the batch is durable (it may
        share its commit or round trip with other coroutines' calls). Raises
        `SchedulerClosed` if the scheduler is or gets closed (nothing is
        added or acked then), and what `Frontier.add_many` raises.
        ``fingerprints``, one per request, dedups by them instead of the
        frontier's fingerprinter, as `Frontier.add_many` does.
        ``refetch_after`` and ``changed`` make the ack a refetch, as
        `task_done` does; the page is finished after its links are stored.
        """
        batch = list(requests)
        acked: tuple[Request, ...] = ()
        if ack is not None:
            acked = (ack,) if isinstance(ack, Request) else tuple(ack)
        if refetch_after is not None or changed is not None:
            if not acked:
                self._frontier._check_refetch_kinds(refetch_after=refetch_after, changed=changed)
            # Checked before anything is stored; the refetches follow the links.
            self._frontier._refetches(acked, refetch_after, changed)
            added: list[bool] | list[bool | None]
            added = await self.add_many(batch, fingerprints=fingerprints, invalid=invalid)
            for request in acked:
                self.task_done(request, refetch_after=refetch_after, changed=changed)
            return added
        await self._wait_for_room()
        if self._thread is not None:
            added = await self._add_on_thread(self._thread, batch, acked, invalid, fingerprints)
        else:
            added = self._frontier.add_many(
                batch, fingerprints=fingerprints, ack=acked or None, invalid=invalid
            )
        for request in acked:
            self._holdings.forget(request)
        if self._thread is None and (acked or any(added)):
            self._changed()
        return added

    # -- getting --------------------------------------------------------------

    def get_nowait(self) -> Request:
        """Return the next ready request, leased. Raises `QueueEmpty` if none is ready.

        With a store that does I/O, the pop happens here, on the calling thread.
        """
        self._check_open()
        request = self._take_ahead()
        if request is None:
            self._sync_point()
            with self._frontier._lock:
                request = self._frontier.pop()
                self._read_counts()
        if request is None:
            raise QueueEmpty("no request is ready now")
        self._wake_adders()
        self._holdings.hold(request)
        return request

    async def get(self) -> Request:
        """Wait for the next ready request and return it, leased.

        Mark it done with `task_done` (or put it back with `release`). Waits
        for a paced host's delay without polling. Raises `SchedulerClosed` if
        the scheduler is or gets closed, and the store's error when a pop
        fails. If the waiting coroutine is cancelled after a request was
        handed to it, the request is released back.
        """
        loop = asyncio.get_running_loop()
        while True:
            self._check_open()
            if not self._getters and self._ahead:
                request = self._take_ahead()
                if request is not None:
                    self._wake_adders()
                    self._holdings.hold(request)
                    return request
            if not self._getters and self._thread is None:
                request = self._frontier.pop()
                if request is not None:
                    self._wake_adders()
                    self._holdings.hold(request)
                    return request
            future: asyncio.Future[Request | None] = loop.create_future()
            self._getters.append(future)
            if self._thread is not None:
                self._changed()
            else:
                self._arm_timer(self._frontier.next_ready_in())
            try:
                delivered = await future
            except BaseException:
                self._abandon(future)
                raise
            if delivered is not None:
                self._holdings.hold(delivered)
                return delivered
            # Woken without a request (the timer): try the frontier again.

    async def join(self, *, idle_for: float | None = None) -> None:
        """Wait until nothing is queued, scheduled or in flight, revisits aside.

        ``idle_for`` (seconds) is for a pool of workers fed from outside
        (``crawlq add``): return only once the crawl has had nothing to do
        for that long straight, work added meanwhile (by any process)
        starting the count again; 0 waits for ever (until ``close()``).
        Raises `InvalidRequest` for a negative or non-finite ``idle_for``.

        A request waiting for its ``not_before`` or a delayed release is work
        of this crawl: ``join`` waits for it. A revisit (a page acked with
        ``refetch_after`` or ``changed``) is the next round's work: ``join``
        does not wait for it (run workers on after ``join`` for a
        continuous crawl).

        After ``close()``, waits only until in-flight requests are done (the
        queued rest stays in the frontier). A ``join`` already waiting when
        ``close()`` is called raises `SchedulerClosed`. Raises `WorkerFailed`
        when a task that took requests from this scheduler ended with an
        exception (each failure is raised once: into the joins waiting then,
        or else the next ``join``); its requests were released, not lost.
        """
        if idle_for is not None:
            seconds = check_delay("idle_for", idle_for)
            await join_idle(
                self.join,
                self._frontier,
                seconds,
                lambda: self._closed,
                off_loop=self._thread is not None,
            )
            return
        while True:
            failure = self._failure
            if failure is not None:
                self._failure = None
                raise failure
            if self._thread is None and not self._busy():
                return
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._joiners.append(future)
            if self._thread is not None:
                self._want_counts = True
                self._thread.kick()
            try:
                await future
            finally:
                if not future.done():
                    future.cancel()
            if self._thread is not None:
                return

    def _known_counts(self) -> tuple[int, int]:
        """Queued and leased: as the latest batch read them, with a store thread."""
        if self._thread is not None:
            return self._queued, self._leased
        return self._frontier._counts()

    def _busy(self) -> bool:
        queued, leased = self._known_counts()
        return leased > 0 if self._closed else queued + leased > 0

    def _check_idle(self) -> None:
        if self._joiners and not self._busy():
            while self._joiners:
                future = self._joiners.popleft()
                if not future.done():
                    future.set_result(None)

    # -- closing and reading --------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SchedulerClosed("the scheduler is closed")

    async def close(self) -> None:
        """Close the scheduler; every coroutine waiting in it gets `SchedulerClosed`.

        New ``add`` and ``get`` calls raise `SchedulerClosed`; `task_done` and
        `join` still work so in-flight requests can finish. The frontier stays
        open. With a store that does I/O, waits for the batch in flight and
        writes the acks and releases still waiting (adds not yet sent get
        `SchedulerClosed`), then stops the store thread. Closing twice does
        nothing.
        """
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        closed = SchedulerClosed("the scheduler was closed")
        for waiters in (self._getters, self._adders, self._joiners):
            while waiters:
                future = waiters.popleft()
                if not future.done():
                    future.set_exception(closed)
        if self._thread is not None:
            self._release_ahead()
            for add in self._thread.pending.adds:
                if not add.future.done():
                    add.future.set_exception(closed)
            self._thread.pending.adds.clear()
            await self._thread.close()

    @property
    def closed(self) -> bool:
        """True once `close` was called."""
        return self._closed

    def qsize(self) -> int:
        """Queued requests (not counting those in flight)."""
        return self.stats().queued

    def stats(self, *, hosts: bool | int = False) -> SchedulerStats:
        """Return a snapshot; ``hosts=True`` (or a limit) adds per-host counts.

        Reads the store on the calling thread (after the batch in flight).
        """
        self._sync_point()
        frontier = self._frontier.stats(hosts=hosts)
        waiting = sum(1 for future in self._getters if not future.done())
        ahead = len(self._ahead)  # leased, not handed out yet
        return SchedulerStats(
            queued=frontier.queued + ahead,
            in_flight=frontier.leased - ahead,
            seen=frontier.seen,
            waiting_consumers=waiting,
            closed=self._closed,
            hosts=frontier.hosts,
            skipped=frontier.skipped,
            scheduled=frontier.scheduled,
            next_due_in=frontier.next_due_in,
        )

    async def __aenter__(self) -> Scheduler:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
