"""The part of `Scheduler` that works with a `StoreThread`: batches and their results.

Only used for a store that does I/O (SQLite, Redis); see `crawlq._store_thread`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._batch import with_skipped
from .._frontier import Frontier, Invalid
from .._request import Request
from .holdings import Holdings, logger
from .store_thread import Add, Batch, Outcome, StoreThread

__all__ = ["BatchedCalls"]


class BatchedCalls:
    """Plans a `StoreThread`'s batches and hands their results to waiting coroutines."""

    _frontier: Frontier
    _maxsize: int
    _thread: StoreThread | None
    _getters: deque[asyncio.Future[Request | None]]
    _joiners: deque[asyncio.Future[None]]
    _adders: deque[asyncio.Future[None]]
    _look: bool
    _want_counts: bool
    _queued: int
    _leased: int
    _counts_known: bool
    _counts_read: int
    _holdings: Holdings
    _ahead: deque[tuple[Request, float]]
    _ahead_faulted: bool

    if TYPE_CHECKING:

        def _changed(self) -> None: ...
        def _wake_adders(self) -> None: ...
        def _check_idle(self) -> None: ...
        def _arm_timer(self, delay: float | None) -> None: ...
        def _finish(self, request: Request, *, done: bool) -> None: ...

    async def _add_on_thread(
        self,
        thread: StoreThread,
        batch: list[Request | str],
        acked: tuple[Request, ...],
        invalid: Invalid,
        fingerprints: Sequence[bytes] | None = None,
    ) -> list[bool] | list[bool | None]:
        frontier = self._frontier
        frontier._check_open()
        entries, skipped = frontier._prepare(batch, fingerprints, invalid)
        leases = frontier._leases(acked) if acked else ()
        if not entries and not leases:
            added: list[bool] = []
        else:
            future: asyncio.Future[list[bool]] = asyncio.get_running_loop().create_future()
            # (Only a shared store leases ahead for adding workers: see _plan_batch.)
            worker = frontier.shared and self._holdings.current_task_holds()
            add = Add(entries, leases, future, worker)
            thread.pending.adds.append(add)
            self._changed()
            try:
                added = await future
            except asyncio.CancelledError:
                # Not sent yet: withdrawn. In flight: it happens anyway (the
                # task's held requests are released after it: a no-op then).
                with contextlib.suppress(ValueError):
                    thread.pending.adds.remove(add)
                raise
        if not skipped:
            return added
        frontier._count_skipped(skipped)
        return with_skipped(added, skipped)

    def _plan_batch(self, batch: Batch) -> None:
        """Fill in a batch about to start (see `StoreThread`)."""
        live = sum(1 for future in self._getters if not future.done())
        if live and (self._look or batch):
            batch.pops = live
            batch.ready = True
        self._look = False
        if self._frontier.shared:
            # Each worker that adds asks for its next request soon after:
            # lease it in the write's round trip (see _take_ahead), for at
            # most one request per worker in all.
            adding = sum(1 for add in batch.adds if add.worker)
            room = self._holdings.tasks - live - len(self._ahead)
            batch.ahead = max(0, min(adding, room))
        batch.counts = self._maxsize > 0 or self._want_counts or bool(self._joiners)
        batch.counts_read = self._counts_read
        self._want_counts = False

    def _workers(self) -> int:
        return self._holdings.tasks

    def _wants_batch(self) -> bool:
        assert self._thread is not None
        return (
            bool(self._thread.pending) or self._want_counts or (self._look and bool(self._getters))
        )

    def _sync_point(self) -> None:
        if self._thread is not None:
            self._thread.sync_point()

    def _read_counts(self) -> None:
        """Refresh the counts ``maxsize`` is checked against (under the frontier's lock)."""
        if self._thread is not None and self._maxsize > 0:
            self._queued, self._leased = self._frontier._counts()
            self._counts_read += 1  # a batch in flight now brings older counts
            self._first_counts()

    def _first_counts(self) -> None:
        """The counts are known from now on: every adder waiting for them looks again.

        (Not one, as room freed by a pop wakes: each re-checks ``maxsize``
        and waits again if the queue is full.)
        """
        if self._counts_known:
            return
        self._counts_known = True
        while self._adders:
            future = self._adders.popleft()
            if not future.done():
                future.set_result(None)

    def _fail(self, batch: Batch, exc: Exception) -> None:
        waiting: list[asyncio.Future[Any]] = [add.future for add in batch.adds]
        waiting += self._getters
        self._getters.clear()
        self._fail_waiting(waiting, exc)

    def _fail_waiting(self, waiting: list[asyncio.Future[Any]], exc: Exception) -> None:
        """Raise ``exc`` into ``waiting``, and into adders still waiting for the first counts.

        Those would wait for a batch that may never come (nothing else asks
        for one): they get the store's error instead.
        """
        if not self._counts_known:
            waiting += self._adders
            self._adders.clear()
        for future in waiting:
            if not future.done():
                future.set_exception(exc)

    def _settle(self, batch: Batch, out: Outcome) -> None:
        """Hand a batch's results to the coroutines that asked for them."""
        for index, add in enumerate(batch.adds):
            if add.future.done():
                continue
            if out.added is not None:
                add.future.set_result(out.added[index])
            elif out.add_error is not None:
                add.future.set_exception(out.add_error)
        self._retry_writes(out)
        getters = self._getters
        # Popped before this, a request's lease may have ended (see below).
        oldest = time.monotonic() - self._frontier.policy.lease_timeout / 2
        # (This batch's own leases came after any fault its call met.)
        stale = self._release_faulted_ahead()
        for request, leased_at in zip(out.popped, out.popped_at, strict=True):
            if leased_at < oldest:
                # A later pop of the batch waited out an outage (a failover):
                # this lease may have ended meanwhile. Back, not out.
                self._finish(request, done=False)
                stale = True
                continue
            while getters and getters[0].done():
                getters.popleft()
            if getters:
                getters.popleft().set_result(request)
            else:  # leased ahead, or its getter was cancelled meanwhile
                self._ahead.append((request, leased_at))
        if stale:
            self._changed()  # the releases go out, and the getters ask again
        if out.pop_error is not None:
            while getters:
                getter = getters.popleft()
                if not getter.done():
                    getter.set_exception(out.pop_error)
        if out.counts is not None and batch.counts_read == self._counts_read:
            self._queued, self._leased = out.counts
            self._first_counts()
        if out.popped or out.counts is not None:
            self._wake_adders()
        if out.counts_error is not None:
            joiners: list[asyncio.Future[Any]] = list(self._joiners)
            self._joiners.clear()
            self._fail_waiting(joiners, out.counts_error)
        elif out.counts is not None and not (self._thread and self._thread.pending):
            self._check_idle()  # nothing left to write: the counts are the truth
        if batch.ready and getters:
            self._arm_timer(out.ready_in)

    def _take_ahead(self) -> Request | None:
        """A request leased ahead for the getters to come, or None.

        They wait here on the loop, so a worker's get after its write costs
        no batch. They are real leases, their hosts' delays counting from the
        lease: once they have waited half their ``lease_timeout``, or with a
        host delay half `Policy.hold` (the store may have kept them the other
        half), they go back (released) rather than out: the server keeps
        their hosts for the delay plus the hold, so a host's next request
        goes out no sooner than the delay after this one, in any worker.
        """
        ahead = self._ahead
        if not ahead:
            return None
        if self._release_faulted_ahead():
            self._changed()
            return None
        policy = self._frontier.policy
        limit = policy.lease_timeout / 2
        if policy.host_delay > 0:
            limit = min(limit, policy.hold / 2)
        now = time.monotonic()
        taken = None
        released = False
        while ahead and taken is None:
            request, leased_at = ahead.popleft()
            if now - leased_at <= limit:
                taken = request
            else:
                self._finish(request, done=False)
                released = True
        if released:
            self._changed()  # the releases go out with a batch now
        return taken

    def _release_faulted_ahead(self) -> bool:
        """After a store fault, put the requests leased ahead back; whether there were any.

        Their leases may be gone with the server's last writes, their
        requests queued for other workers: back, not out.
        """
        if not self._ahead_faulted:
            return False
        self._ahead_faulted = False
        released = bool(self._ahead)
        self._release_ahead()
        return released

    def _store_faulted(self) -> None:
        """The store met a fault that may have lost writes (called on its thread)."""
        self._ahead_faulted = True

    def _release_ahead(self) -> None:
        """Put the requests leased ahead back in their places (with the next batch)."""
        while self._ahead:
            self._finish(self._ahead.popleft()[0], done=False)

    def _retry_writes(self, out: Outcome) -> None:
        releases = len(out.unwritten_releases) + len(out.unwritten_updated)
        acks = len(out.unwritten_acks) + len(out.unwritten_refetched)
        if not (acks or releases):
            return
        if self._frontier.closed:
            logger.info(
                "%d acks and %d releases not written: the frontier was closed; "
                "their requests come back when their leases expire",
                acks,
                releases,
            )
            return
        logger.warning(
            "writing %d acks and %d releases failed (%s); tried again with the next batch",
            acks,
            releases,
            out.write_error,
        )
        assert self._thread is not None
        self._thread.pending.acks[:0] = out.unwritten_acks
        self._thread.pending.releases[:0] = out.unwritten_releases
        self._thread.pending.updated[:0] = out.unwritten_updated
        self._thread.pending.refetched[:0] = out.unwritten_refetched
