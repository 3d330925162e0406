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

Every add's entries are stored with one store call, the acks riding in it, so
an ack is never durable before links added with it or before it. A failure
of one part of a batch is kept for the callers of that part: adds get the
error, acks and releases are tried again with the next batch, getters get a
pop's error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from ._errors import CrawlqError
from ._frontier import Frontier
from ._lease import Lease
from ._request import Request
from .stores.base import Entry

__all__ = ["Add", "Batch", "Outcome", "run_batch"]


@dataclass(slots=True)
class Add:
    """One ``add``/``add_many`` call's prepared entries and the leases it acks."""

    entries: list[Entry]
    leases: Sequence[Lease]
    #: Resolved with the store's result for ``entries`` (True: added).
    future: asyncio.Future[list[bool]]


@dataclass(slots=True)
class Batch:
    """What the scheduler asks of the store in one go."""

    adds: list[Add] = field(default_factory=list)
    acks: list[Lease] = field(default_factory=list)
    releases: list[Lease] = field(default_factory=list)
    #: Requests to pop (one per waiting getter).
    pops: int = 0
    #: Read the store's ready time when fewer than ``pops`` requests came.
    ready: bool = False
    #: Read the queued and leased counts after the rest.
    counts: bool = False
    #: The scheduler's count of direct reads when the batch started (to
    #: tell counts that a later direct read made stale).
    counts_read: int = 0

    def __bool__(self) -> bool:
        return bool(self.adds or self.acks or self.releases or self.pops or self.counts)


@dataclass(slots=True)
class Outcome:
    """What a batch did; a part that failed holds its error instead of a result."""

    added: list[list[bool]] | None = None
    add_error: CrawlqError | None = None
    #: Acks or releases not written (an error): tried again with the next batch.
    unwritten_acks: list[Lease] = field(default_factory=list)
    unwritten_releases: list[Lease] = field(default_factory=list)
    write_error: CrawlqError | None = None
    popped: list[Request] = field(default_factory=list)
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
        if batch.releases:
            try:
                frontier._finish(batch.releases, done=False)
            except CrawlqError as exc:
                out.unwritten_releases, out.write_error = batch.releases, exc
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
        try:
            popped = out.popped
            for _ in range(batch.pops):
                request = frontier.pop()
                if request is None:
                    break
                popped.append(request)
            if batch.ready and len(popped) < batch.pops:
                out.ready_in = frontier.next_ready_in()
        except CrawlqError as exc:
            out.pop_error = exc
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
