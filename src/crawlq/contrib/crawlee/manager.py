"""`RequestManager`: crawlq as crawlee's request manager, throttling every host.

One adapter owns one `crawlq.Frontier` and the asyncio `crawlq.Scheduler`
in front of it. crawlee's calls map to the scheduler's: ``add_requests`` to
an add deduplicated by ``unique_key``, ``fetch_next_request`` to ``get``
(waiting at most until the next paced host is due), ``mark_request_as_handled``
to an ack written before it returns, ``reclaim_request`` to a release that
keeps crawlee's changes. Store work (SQLite, Redis) runs on the scheduler's
store thread or on the adapter's own thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from crawlee import Request as CrawleeRequest
from crawlee.request_loaders import RequestManager as CrawleeRequestManager
from crawlee.request_loaders import ThrottlingRequestManager
from crawlee.storage_clients.models import ProcessedRequest

from ..._errors import ConfigError, SchedulerClosed
from ..._frontier import Frontier
from ..._request import Request
from ...scheduler import Scheduler
from .mapping import fingerprint, from_crawlq, to_crawlq
from .stores import open_for_crawlee, refusal, set_delay, wipe
from .throttle import HostBackoffs, seconds
from .view import FrontierView

__all__ = ["RequestManager"]

logger = logging.getLogger("crawlq")

#: How far ahead `is_empty` looks for a paced host: crawlee's pool asks
#: again every half second, so a host due sooner gets a fetch waiting for it.
_HORIZON: Final = 0.5
#: How long past the due time a fetch waits for its request (a batch, a round trip,
#: on a loaded machine); it returns as soon as the request comes.
_GRACE: Final = 1.0
#: Seconds a reading of the counts is kept (memory: a fresh one each time is cheap).
_REFRESH: Final = 0.25
_ADAPTER_OPTIONS: Final = ("allow_purge", "base_delay", "max_delay", "max_domain_stall")


class RequestManager(ThrottlingRequestManager[CrawleeRequestManager]):
    """crawlee's request manager on a crawlq frontier; see ``crawlq.contrib.crawlee``.

    Make one with ``await RequestManager.open(url, **options)``; close it
    with `close` (or ``async with``). It is a ``ThrottlingRequestManager``
    for every host, so crawlee sends it its 429s and robots.txt
    crawl-delays; ``domains`` and sub-managers do not exist here.
    """

    def __init__(
        self,
        url: str,
        frontier: Frontier,
        scheduler: Scheduler,
        executor: ThreadPoolExecutor | None,
        *,
        options: dict[str, Any],
        allow_purge: bool,
        backoffs: HostBackoffs,
    ) -> None:
        # ThrottlingRequestManager.__init__ is not called: it builds the
        # per-domain sub-managers that crawlq replaces.
        self._url = url
        self._frontier = frontier
        self._scheduler = scheduler
        self._executor = executor
        self._options = options
        self._allow_purge = allow_purge
        self._backoffs = backoffs
        self._view = FrontierView(frontier, executor, 0.0 if executor is None else _REFRESH)
        # Fetched and not yet handled or reclaimed: crawlee's object -> crawlq's leased one.
        self._leased: dict[int, tuple[CrawleeRequest, Request]] = {}
        self._waiting = 0  # fetches waiting in the scheduler's get
        self._crawl_delays: dict[str, float] = {}
        self._controls: dict[str, Future[None]] = {}  # host -> its latest control call
        self._closed = False

    @classmethod
    async def open(cls, url: str = "memory://", **options: Any) -> RequestManager:
        """Open the frontier at ``url`` and return a request manager on it.

        ``url`` is any crawlq store URL (``memory://``, a SQLite job path or
        ``sqlite:///...``, ``redis://...?crawl=NAME``,
        ``redis+cluster://...``). ``options`` are `crawlq.open_frontier`'s
        (``host_delay``, ``host_concurrency``, ``lease_timeout``,
        ``ack_delay`` (0 here by default)...) and the adapter's own:
        ``allow_purge`` (False: `purge` and `drop` refuse to wipe a durable or
        shared frontier), ``base_delay`` (2 s: the first 429 backoff without
        ``Retry-After``, doubling per burst), ``max_delay`` (60 s: the longest
        block), ``max_domain_stall`` (900 s: see `get_stall_reason`); the last
        three in seconds or as a ``timedelta``. Raises `crawlq.ConfigError`
        for a bad URL or option, and what the store raises when it cannot
        open.
        """
        allow_purge = options.pop("allow_purge", False)
        if type(allow_purge) is not bool:
            raise ConfigError(f"allow_purge must be True or False, not {allow_purge!r}")
        backoffs = HostBackoffs(
            seconds("base_delay", options.pop("base_delay", 2.0)),
            seconds("max_delay", options.pop("max_delay", 60.0)),
            seconds("max_domain_stall", options.pop("max_domain_stall", 900.0)),
        )
        frontier, scheduler, executor = await cls._start(url, options)
        return cls(
            url,
            frontier,
            scheduler,
            executor,
            options=options,
            allow_purge=allow_purge,
            backoffs=backoffs,
        )

    @staticmethod
    async def _start(
        url: str, options: dict[str, Any]
    ) -> tuple[Frontier, Scheduler, ThreadPoolExecutor | None]:
        executor = ThreadPoolExecutor(1, thread_name_prefix="crawlq-crawlee")
        loop = asyncio.get_running_loop()
        try:
            frontier = await loop.run_in_executor(executor, open_for_crawlee, url, options)
            scheduler = await loop.run_in_executor(executor, Scheduler, frontier)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        if not (frontier.durable or frontier.shared):
            executor.shutdown(wait=False)
            return frontier, scheduler, None  # memory: called on the loop
        return frontier, scheduler, executor

    # -- the frontier ---------------------------------------------------------

    @property
    def frontier(self) -> Frontier:
        """The crawlq frontier (stats, ``block_host``...; call it off the loop if it does I/O)."""
        return self._frontier

    @property
    def scheduler(self) -> Scheduler:
        """The asyncio scheduler in front of the frontier."""
        return self._scheduler

    @property
    def inner(self) -> CrawleeRequestManager:
        """This manager: crawlee asks it whether the queue is a named one (it is not)."""
        return self

    async def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run a blocking frontier call on the adapter's thread (memory: here)."""
        if self._executor is None:
            return function(*args)
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    # -- adding ---------------------------------------------------------------

    async def add_request(
        self, request: str | CrawleeRequest, *, forefront: bool = False
    ) -> ProcessedRequest | None:
        """Add one request unless its ``unique_key`` was seen; see `add_requests`."""
        crawlee_request = self._transform_request(request)
        added = await self._add((crawlee_request,), forefront)
        return ProcessedRequest(
            unique_key=crawlee_request.unique_key,
            was_already_present=not added[0],
            was_already_handled=False,
        )

    async def add_requests(
        self,
        requests: Sequence[str | CrawleeRequest],
        *,
        forefront: bool = False,
        batch_size: int = 1000,
        wait_time_between_batches: timedelta = timedelta(seconds=1),
        wait_for_all_requests_to_be_added: bool = False,
        wait_for_all_requests_to_be_added_timeout: timedelta | None = None,
    ) -> None:
        """Add requests, ``batch_size`` per store write; returns once all are stored.

        A request whose ``unique_key`` the crawl has seen (queued, in flight
        or handled, by any worker) is dropped, as crawlee's own queues do.
        ``forefront`` requests come out before the others. The waiting
        options are accepted for crawlee's signature: every batch is written
        before this returns.
        """
        transformed = self._transform_requests(requests)
        size = max(1, batch_size)
        for start in range(0, len(transformed), size):
            await self._add(transformed[start : start + size], forefront)

    async def _add(self, requests: Sequence[CrawleeRequest], forefront: bool) -> list[bool]:
        if self._closed:
            raise SchedulerClosed("the crawlee request manager is closed")
        stored = [to_crawlq(request, forefront=forefront) for request in requests]
        fingerprints = [fingerprint(request.unique_key) for request in requests]
        added: list[bool] = await self._scheduler.add_many(stored, fingerprints=fingerprints)
        self._view.changed()
        return added

    # -- fetching and finishing -----------------------------------------------

    async def fetch_next_request(self) -> CrawleeRequest | None:
        """Return the next ready request, or None when none is due within half a second.

        None does not mean the crawl is over (`is_finished` says that): the
        requests left may belong to hosts waiting for their delay, a block
        or a free slot. Waits without polling: the scheduler wakes it when
        the next host is due.
        """
        if self._closed:
            return None
        wait = await self._ready_in()
        if wait is None or wait > _HORIZON:
            return None
        self._waiting += 1
        try:
            leased = await asyncio.wait_for(self._scheduler.get(), wait + _GRACE)
        except (TimeoutError, SchedulerClosed):
            self._view.stale()
            return None
        finally:
            self._waiting -= 1
        self._view.changed()
        try:
            request = from_crawlq(leased)
        except Exception:
            self._scheduler.release(leased)
            raise
        self._leased[id(request)] = (request, leased)
        return request

    def _take_lease(self, request: CrawleeRequest) -> Request | None:
        held = self._leased.pop(id(request), None)
        if held is not None:
            return held[1]
        for key, (other, leased) in self._leased.items():  # a copy of the fetched object
            if other.unique_key == request.unique_key and other.url == request.url:
                del self._leased[key]
                return leased
        return None

    async def mark_request_as_handled(self, request: CrawleeRequest) -> ProcessedRequest | None:
        """Mark a fetched request done; the mark is durable when this returns.

        Returns None for a request this manager did not hand out (or already
        finished), as crawlee's own queues do.
        """
        leased = self._take_lease(request)
        if leased is None:
            return None
        self._backoffs.handled(self._frontier.host_of(leased))
        if request.handled_at is None:
            request.handled_at = datetime.now(UTC)
        # The ack rides a write of its own: durable when this returns
        # (task_done would return at once and write it with a later batch).
        await self._scheduler.add_many((), ack=leased)
        self._view.changed()
        return ProcessedRequest(
            unique_key=request.unique_key, was_already_present=True, was_already_handled=True
        )

    async def reclaim_request(
        self, request: CrawleeRequest, *, forefront: bool = False
    ) -> ProcessedRequest | None:
        """Put a fetched request back with crawlee's changes (retry count, session rotations...).

        It keeps its place in the queue (``forefront``: before every request
        that is not). If its host was just blocked for a 429, the block is
        written first, so no worker fetches it again before the block ends.
        """
        leased = self._take_lease(request)
        if leased is None:
            return None
        pending = self._controls.get(self._frontier.host_of(leased))
        if pending is not None:
            with contextlib.suppress(Exception):  # logged where it failed
                await asyncio.wrap_future(pending)
        self._scheduler.release(leased, update=to_crawlq(request, forefront=forefront))
        self._view.changed()
        return ProcessedRequest(
            unique_key=request.unique_key, was_already_present=True, was_already_handled=False
        )

    async def _ready_in(self) -> float | None:
        """Seconds until a request is due (0: now), None if nothing is queued.

        Anything but "due now" is only answered from a reading taken after
        this process's latest change, so a request just added is never
        missed, nor one of a ready host added behind a paced or blocked one.
        """
        wait = (await self._view.read()).ready_in(time.monotonic())
        if wait is None or wait > 0.0:
            wait = (await self._view.read(current=True)).ready_in(time.monotonic())
        return wait

    # -- counts ---------------------------------------------------------------

    async def get_handled_count(self) -> int:
        """Requests handled in this crawl (every worker's; a resumed job's earlier runs too)."""
        return (await self._view.read(current=True)).counters.acked

    async def get_total_count(self) -> int:
        """Requests ever accepted in this crawl (handled, in flight and queued)."""
        return (await self._view.read(current=True)).counters.accepted

    async def is_empty(self) -> bool:
        """True when no request is due now (queued ones of paced or blocked hosts wait).

        crawlee starts a task only when this is False, so a crawl whose hosts
        are all paced idles instead of spinning. A host due within half a
        second reads as not empty to one fetch, which then waits for it.
        """
        if self._closed:
            return True
        wait = await self._ready_in()
        if wait is None:
            return True
        if wait == 0.0:
            return False
        return wait > _HORIZON or self._waiting > 0

    async def is_finished(self) -> bool:
        """True when nothing is queued or leased in the crawl (paced hosts' requests count)."""
        if self._closed:
            return True
        if self._leased:
            return False
        return not (await self._view.read(current=True)).busy

    # -- per-host policy (ThrottlingRequestManager) ----------------------------

    def _control(self, host: str, function: Callable[..., None], *args: Any) -> None:
        """Run a host control off the loop (memory: now); reclaims of the host wait for it."""
        if self._executor is None:
            function(*args)
            return
        future = self._executor.submit(function, *args)
        self._controls[host] = future
        future.add_done_callback(lambda done: self._control_done(host, done))

    def _control_done(self, host: str, done: Future[None]) -> None:
        if self._controls.get(host) is done:
            del self._controls[host]
        if not done.cancelled() and done.exception() is not None:
            logger.error("crawlq could not change host %s: %s", host, done.exception())

    def record_domain_delay(self, url: str, *, retry_after: timedelta | None = None) -> bool:
        """A 429 from ``url``'s host: block the host in the frontier, for every worker.

        The block lasts ``Retry-After`` when positive, else ``base_delay``
        doubling with each burst of 429s, at most ``max_delay``; 429s of the
        same burst extend nothing. Returns True: every host is throttled.
        """
        host = self._frontier.host_of(url)
        seconds = None if retry_after is None else retry_after.total_seconds()
        delay = self._backoffs.record(host, seconds)
        if delay is not None and not self._closed:
            self._control(host, self._frontier.block_host, host, delay)
        return True

    def record_success(self, url: str) -> None:
        """A success from ``url``'s host: its next 429 starts the backoff over."""
        self._backoffs.succeeded(self._frontier.host_of(url))

    def is_throttled(self, url: str) -> bool:
        """True while a 429 block this process set on ``url``'s host lasts."""
        return self._backoffs.blocked_for(self._frontier.host_of(url)) > 0

    def set_crawl_delay(self, url: str, delay_seconds: int) -> None:
        """Give ``url``'s host its robots.txt ``Crawl-delay`` for every worker (the first sticks).

        The host's delay becomes the larger of it and ``host_delay``; a
        concurrency set for the host is kept.
        """
        host = self._frontier.host_of(url)
        if host in self._crawl_delays or self._closed:
            return
        delay = max(float(delay_seconds), self._frontier.policy.host_delay)
        self._crawl_delays[host] = delay
        self._control(host, set_delay, self._frontier, host, delay)

    async def get_stall_reason(self) -> str | None:
        """Why the crawl cannot go on, or None: hosts that answered only 429s for too long.

        Reported only when every request left belongs to such hosts (crawlee
        then ends the run with ``PersistentRateLimitError``).
        """
        stalled = self._backoffs.stalled()
        if not stalled or self._closed:
            return None
        stats = await self._call(lambda: self._frontier.stats(hosts=1000))
        hosts = stats.hosts or ()
        if stats.busy_hosts is not None and stats.busy_hosts > len(hosts):
            return None  # hosts not listed may still have work
        left = [count.host for count in hosts if count.queued and count.host in stalled]
        if not left or any(
            (count.queued or count.leased) and count.host not in stalled for count in hosts
        ):
            return None
        summary = ", ".join(f'"{host}" ({stalled[host]:.0f}s)' for host in left)
        return (
            f"{summary} rate-limited every request for longer than max_domain_stall "
            f"({self._backoffs.max_stall:.0f}s); their requests stay queued in {self._frontier.url}"
        )

    # -- purge, drop, close ---------------------------------------------------

    async def purge(self) -> None:
        """Empty the frontier (crawlee calls this when a crawler runs a second time).

        In memory, a fresh frontier with the same options takes its place. A
        SQLite job or a Redis crawl is wiped only with ``allow_purge=True``;
        otherwise raises `crawlq.ConfigError` saying how to go on with it or
        wipe it. Robots.txt crawl-delays are set again; 429 backoffs are
        forgotten.
        """
        await self._wipe("purge", reopen=True)

    async def drop(self) -> None:
        """Delete the frontier and close the manager (`purge`'s refusal applies)."""
        await self._wipe("drop", reopen=False)

    async def _wipe(self, what: str, *, reopen: bool) -> None:
        if self._closed:
            raise SchedulerClosed("the crawlee request manager is closed")
        if (self._frontier.durable or self._frontier.shared) and not self._allow_purge:
            raise refusal(self._frontier, what)
        # Requests fetched and not finished go with the rest, as in crawlee's
        # own queues: finishing one later returns None.
        self._leased.clear()
        await self._scheduler.close()
        await self._call(self._frontier.close)
        await self._call(wipe, self._url)
        self._backoffs.reset()
        if not reopen:
            await self._shutdown()
            return
        old_executor = self._executor
        self._frontier, self._scheduler, self._executor = await self._start(
            self._url, self._options
        )
        if old_executor is not None:
            old_executor.shutdown(wait=False)
        self._view = FrontierView(
            self._frontier, self._executor, 0.0 if self._executor is None else _REFRESH
        )
        for host, delay in self._crawl_delays.items():
            self._control(host, set_delay, self._frontier, host, delay)

    async def close(self) -> None:
        """Close the scheduler and the frontier; a durable job or crawl stays as it is.

        Requests fetched and not finished are released first. Closing twice
        does nothing.
        """
        if self._closed:
            return
        for _, leased in list(self._leased.values()):
            with contextlib.suppress(Exception):
                self._scheduler.release(leased)
        self._leased.clear()
        await self._scheduler.close()
        await self._call(self._frontier.close)
        await self._shutdown()

    async def _shutdown(self) -> None:
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    async def __aenter__(self) -> RequestManager:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<crawlq.contrib.crawlee.RequestManager {self._frontier.url} {state}>"
