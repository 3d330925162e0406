"""The store calls of a `Scheduler` whose frontier blocks (SQLite, Redis), batched on one thread.

An asyncio scheduler must never wait for a commit or a round trip on the event
loop. For a store that does I/O, the scheduler collects what its coroutines
ask for (adds, acks from ``task_done``, releases, and one pop per waiting
getter) in a `Batch`, and `run_batch` does them all on the frontier's own
thread, holding the frontier's lock, while the loop goes on. What arrives
while a batch is in flight waits for the next one: 32 workers' adds and acks
then share one commit (SQLite) or one round trip per prefetch (Redis) instead
of queueing for one each. Blocking retries (the Redis store's back-off)
happen on that thread, never on the loop.

On a network store (Redis) the thread mostly waits for the server, off the
GIL, so the loop can work meanwhile: a batch starts as soon as the one before
it ends if anything is waiting (before the coroutines that batch woke run),
and as soon as half the workers' adds are in (`StoreThread.kick`). Workers
that move in step (all woken by one batch) then split into two halves whose
batches alternate, each half's parsing and fingerprinting running while the
other half's batch is on the server. A SQLite batch is Python on the thread,
holding the GIL: it waits for the end of the loop's turn, so one commit
serves every coroutine ready in it.

Every add's entries are stored with one store call, the acks riding in it, so
an ack is never durable before links added with it or before it. A failure
of one part of a batch is kept for the callers of that part: adds get the
error, acks and releases are tried again with the next batch, getters get a
pop's error.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from .._errors import CrawlqError
from .._frontier import Frontier
from .._lease import Lease
from .._request import Request
from ..stores.base import Entry, Refetch

__all__ = ["Add", "Batch", "BatchOwner", "Outcome", "StoreThread", "run_batch"]

logger = logging.getLogger("crawlq")


@dataclass(slots=True)
class Add:
    """One ``add``/``add_many`` call's prepared entries and the leases it acks."""

    entries: list[Entry]
    leases: Sequence[Lease]
    #: Resolved with the store's result for ``entries`` (True: added).
    future: asyncio.Future[list[bool]]
    #: Made by a worker that holds a request: it asks for its next one soon.
    worker: bool = False


@dataclass(slots=True)
class Batch:
    """What the scheduler asks of the store in one go."""

    adds: list[Add] = field(default_factory=list)
    acks: list[Lease] = field(default_factory=list)
    releases: list[Lease] = field(default_factory=list)
    #: Releases with an update or a delay: the lease, the entry of the
    #: updated request (None: unchanged) and the delay (0.0: none).
    updated: list[tuple[Lease, Entry | None, float]] = field(default_factory=list)
    #: Acks that schedule their request again: the lease and its refetch.
    refetched: list[tuple[Lease, Refetch]] = field(default_factory=list)
    #: Requests to pop (one per waiting getter).
    pops: int = 0
    #: Requests to pop for getters expected soon (see `BatchedCalls._take_ahead`).
    ahead: int = 0
    #: Read the store's ready time when fewer than ``pops`` requests came.
    ready: bool = False
    #: Read the queued and leased counts after the rest.
    counts: bool = False
    #: The scheduler's count of direct reads when the batch started (to
    #: tell counts that a later direct read made stale).
    counts_read: int = 0

    def __bool__(self) -> bool:
        return bool(
            self.adds
            or self.acks
            or self.releases
            or self.updated
            or self.refetched
            or self.pops
            or self.counts
        )


@dataclass(slots=True)
class Outcome:
    """What a batch did; a part that failed holds its error instead of a result."""

    added: list[list[bool]] | None = None
    add_error: CrawlqError | None = None
    #: Acks or releases not written (an error): tried again with the next batch.
    unwritten_acks: list[Lease] = field(default_factory=list)
    unwritten_releases: list[Lease] = field(default_factory=list)
    unwritten_updated: list[tuple[Lease, Entry | None, float]] = field(default_factory=list)
    unwritten_refetched: list[tuple[Lease, Refetch]] = field(default_factory=list)
    write_error: CrawlqError | None = None
    popped: list[Request] = field(default_factory=list)
    #: When each of ``popped`` was popped (monotonic): a later pop of the
    #: batch may wait out an outage before the batch hands them out.
    popped_at: list[float] = field(default_factory=list)
    pop_error: CrawlqError | None = None
    ready_in: float | None = None
    counts: tuple[int, int] | None = None
    counts_error: CrawlqError | None = None


def run_batch(frontier: Frontier, batch: Batch) -> Outcome:
    """Do ``batch`` against ``frontier`` under its lock; see the module doc.

    Store errors (`CrawlqError`) are caught into the outcome part by part; any
    other exception is a bug and propagates.
    """
    out = Outcome()
    with frontier._lock:
        if batch.releases or batch.updated:
            leases = batch.releases + [lease for lease, _, _ in batch.updated]
            updates: list[Entry | None] | None = None
            delays: list[float] | None = None
            if batch.updated:
                updates = [None] * len(batch.releases)
                updates.extend(entry for _, entry, _ in batch.updated)
                delays = [0.0] * len(batch.releases) + [delay for _, _, delay in batch.updated]
            # A release leases nothing ahead: the batch's pops ride its write
            # below (a store that guesses would lease one into a buffer that
            # no getter of this process may ever take, hidden from others).
            frontier._expect_pops(0)
            try:
                frontier._finish(leases, done=False, updates=updates, delays=delays)
            except CrawlqError as exc:
                out.unwritten_releases, out.write_error = batch.releases, exc
                out.unwritten_updated = batch.updated
        # The pops below (the waiting getters', and those leased ahead for
        # the adding workers) are leased with the write (or the first pop),
        # behind its links; none is leased ahead of a batch without pops.
        frontier._expect_pops(batch.pops + batch.ahead)
        if batch.adds:
            entries = [entry for add in batch.adds for entry in add.entries]
            leases = [lease for add in batch.adds for lease in add.leases]
            leases.extend(batch.acks)
            try:
                results = frontier._write(entries, leases)
            except CrawlqError as exc:
                out.add_error = exc
                out.unwritten_acks = batch.acks
            else:
                out.added = _split(results, [len(add.entries) for add in batch.adds])
        elif batch.acks:
            try:
                frontier._finish(batch.acks, done=True)
            except CrawlqError as exc:
                out.unwritten_acks, out.write_error = batch.acks, exc
        if batch.refetched:
            try:
                frontier._finish(
                    [lease for lease, _ in batch.refetched],
                    done=True,
                    refetch=[again for _, again in batch.refetched],
                )
            except CrawlqError as exc:
                out.unwritten_refetched, out.write_error = batch.refetched, exc
        try:
            popped, popped_at = out.popped, out.popped_at
            for _ in range(batch.pops + batch.ahead):
                request = frontier.pop()
                if request is None:
                    break
                popped.append(request)
                popped_at.append(time.monotonic())
            if batch.ready and len(popped) < batch.pops:
                out.ready_in = frontier.next_ready_in()
        except CrawlqError as exc:
            out.pop_error = exc
        frontier._expect_pops(None)  # served: later calls are not the batch's
        if batch.counts:
            try:
                out.counts = frontier._counts()
            except CrawlqError as exc:
                out.counts_error = exc
    return out


def _split(results: list[bool], sizes: list[int]) -> list[list[bool]]:
    parts = []
    start = 0
    for size in sizes:
        parts.append(results[start : start + size])
        start += size
    return parts


class BatchOwner(Protocol):
    """What a `StoreThread` asks of the scheduler it serves (all on the loop's thread)."""

    def _plan_batch(self, batch: Batch) -> None:
        """Fill in a batch about to start: pops, ready time, counts."""

    def _settle(self, batch: Batch, out: Outcome) -> None:
        """Hand a batch's results to the coroutines that asked for them."""

    def _fail(self, batch: Batch, exc: Exception) -> None:
        """A batch raised something not a store error (a bug): fail its callers."""

    def _wants_batch(self) -> bool:
        """True when another batch should start at once after one ends."""

    def _workers(self) -> int:
        """How many worker tasks take requests from the scheduler."""


class StoreThread:
    """Runs a scheduler's batches of store calls on one thread, one batch at a time.

    ``pending`` collects what waits for the next batch. `kick` starts a batch
    at the loop's next turn (coroutines that run in this turn join it);
    while one is in flight, the next waits for it to end. After `close` (no
    thread left), batches run on the calling thread.
    """

    def __init__(self, frontier: Frontier, owner: BatchOwner) -> None:
        self._frontier = frontier
        self._owner = owner
        # Batches start early (see the module doc) on a network store.
        self._early = frontier.shared
        self.pending = Batch()
        self._executor: ThreadPoolExecutor | None = ThreadPoolExecutor(
            1, thread_name_prefix="crawlq-store"
        )
        self._flight: concurrent.futures.Future[Outcome] | None = None
        self._kicked = False
        self._quiet: asyncio.Event | None = None  # set while no batch is in flight

    @property
    def in_flight(self) -> bool:
        """True while a batch runs on the thread."""
        return self._flight is not None

    def kick(self) -> None:
        """Have the next batch start soon (at once, on this thread, after `close`).

        Soon is the loop's next turn, so that coroutines running in this one
        join the batch; on a network store, at once when half the workers'
        adds are waiting (see the module doc).
        """
        if self._flight is not None:
            return
        if self._executor is None:
            self._run_here()
            return
        if self._early:
            workers = self._owner._workers()
            if workers >= 4 and 2 * len(self.pending.adds) >= workers:
                self._start()
                return
        if self._kicked:
            return
        self._kicked = True
        asyncio.get_running_loop().call_soon(self._start)

    def _take(self) -> Batch:
        batch, self.pending = self.pending, Batch()
        self._owner._plan_batch(batch)
        return batch

    def _start(self) -> None:
        self._kicked = False
        if self._flight is not None or self._executor is None:
            return
        batch = self._take()
        if not batch:
            return
        if self._quiet is not None:
            self._quiet.clear()
        self._flight = self._executor.submit(run_batch, self._frontier, batch)
        asyncio.wrap_future(self._flight).add_done_callback(functools.partial(self._done, batch))

    def _done(self, batch: Batch, done: asyncio.Future[Outcome]) -> None:
        self._flight = None
        if self._quiet is not None:
            self._quiet.set()
        try:
            outcome = done.result()
        except Exception as exc:  # a bug, not a store error: say so everywhere
            logger.error("crawlq's store thread failed: %r", exc, exc_info=exc)
            self._owner._fail(batch, exc)
            return
        self._owner._settle(batch, outcome)
        if self._early and self.pending:
            # Before the coroutines woken above run: their work overlaps it.
            self._start()
            return
        if self._owner._wants_batch():
            self.kick()

    def _run_here(self) -> None:
        batch = self._take()
        if batch:
            self._owner._settle(batch, run_batch(self._frontier, batch))

    def sync_point(self) -> None:
        """Before a call that answers at once: let the batch in flight end, write acks now.

        The thread may not have started that batch yet: waiting for it here
        (not only for the frontier's lock) keeps calls in order.
        """
        if self._flight is not None:
            concurrent.futures.wait((self._flight,))
        pending = self.pending
        if pending.acks or pending.releases or pending.updated or pending.refetched:
            now = Batch(
                acks=pending.acks,
                releases=pending.releases,
                updated=pending.updated,
                refetched=pending.refetched,
            )
            pending.acks, pending.releases, pending.updated = [], [], []
            pending.refetched = []
            self._owner._settle(now, run_batch(self._frontier, now))

    async def close(self) -> None:
        """Wait for the batch in flight, stop the thread, then run what is left here."""
        if self._executor is None:
            return
        self._quiet = asyncio.Event()
        while self._flight is not None:
            self._quiet.clear()
            await self._quiet.wait()
        executor, self._executor = self._executor, None
        executor.shutdown(wait=False)
        self._run_here()
