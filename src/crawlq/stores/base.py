"""The protocol every store implements, and the semantics they all share.

A store keeps the frontier's state: queued requests, leases, seen
fingerprints and per-host pacing. `Frontier` validates, fingerprints and
encodes requests, then hands them to its store in batches; everything a store
must guarantee is written here once, and the conformance suite in
``tests/conformance/`` checks it against every store.

Lifecycle
    ``queued -> leased(deadline) -> done``. `Store.pop` leases the request it
    returns and sets ``request._lease`` to a `crawlq._lease.Lease` carrying
    the store's ``origin`` and its own handle; `Frontier` refuses requests
    without such a lease, and hands the handles of the rest to `Store.ack`
    (finishes them) or `Store.release` (puts them back in their places). A
    lease whose deadline (``lease_timeout`` after the pop) has passed comes
    back by itself. Acking or releasing a handle whose lease expired, was
    already acked, or was handed out before the store was reopened, does
    nothing: delivery is at-least-once.

Release with an update
    `Store.release` may take, per lease, an `Entry` built from the caller's
    updated request (``Frontier.release(request, update=)``): the request
    goes back with its stored fields (payload, or the object itself in
    memory) replaced by the entry's, in its original sequence number under
    the entry's priority. `Frontier` has checked that url, method, body and
    host (slot) are unchanged, so the host in the entry is the lease's; the
    entry's fingerprint is unused (the seen set is not touched). Counted as a
    release; the queued count does not change. The update is applied only if
    the lease is current, as the release itself is; a durable store writes it
    before `release` returns, in its one ordered stream of writes (Redis: in
    the function call that releases).

Due times
    A request may be *scheduled*: held, but not handed out before its due
    time. That is the entry request's ``not_before`` (POSIX seconds) at
    `Store.add`, ``now + delay`` for a `Store.release` with ``delays``, and
    ``now + delay`` for a `Store.ack` with ``refetch``. A scheduled request
    is counted in `StoreCounts.scheduled` (not in ``queued``); its host's
    pacing, concurrency and queued count ignore it. Once due it is queued in
    its place, as a released request is (an add's or release's in its own
    sequence number; a refetch's in a new one taken when it was acked, as if
    added then), and competes by priority and pacing like any other. A store
    makes due requests ready as its calls run (at most a bounded batch per
    call, O(log n) each in scheduled requests), never by a scan. Due times
    are wall-clock times: the memory store converts ``not_before`` into its
    clock when the request is added (``now + not_before - time.time()``);
    SQLite uses ``time.time()``; Redis the server's ``TIME``, as its leases.
    `Store.next_ready_in` counts the first due time.

Refetch
    `Store.ack` with ``refetch`` (one per lease, None for a plain ack): an
    entry ``(delay, update)`` acks the lease (counted in ``acked`` and in
    `Counters.refetched`) and schedules the same request again after
    ``delay`` seconds, with ``update`` (an `Entry` or None) replacing what
    is stored of it as a release's update does. Its fingerprint stays seen.
    While it waits it is a *revisit*: counted in `StoreCounts.scheduled`
    and in `StoreCounts.revisits`, which a one-shot crawl does not wait for
    (`Scheduler.join`). Only a current lease refetches; an ended one does
    nothing. `Store.add` takes ``refetch`` the same way, for its
    ``finished`` leases.

Order
    Among ready requests the highest priority comes first. Within a priority,
    the host with the fewest leased requests wins; then first accepted, first
    out (last accepted, first out with ``lifo``). A batch added with the
    other order (``add(..., lifo=)``) keeps that order among its kind, and
    at equal priority every request added FIFO comes before every request
    added LIFO (``crawlq._policy.order_key``). A released or expired request keeps its
    original place. A host is not ready while ``host_delay`` has not
    elapsed since its last pop, or while it has ``host_concurrency`` leases.

Deduplication
    Fingerprints reach a store as 16 bytes (`Frontier` cuts longer ones).
    `Store.add` checks and records the fingerprint and enqueues in one atomic
    step; ``dont_filter`` requests skip the check and are not recorded (as in
    Scrapy). A duplicate is never enqueued; a new fingerprint is never reported
    as a duplicate.

Counts
    ``queued``, ``leased`` and ``seen`` come from the store itself, so every
    process sharing a store sees the same numbers. So do the crawl's
    `Counters` (accepted, duplicates, popped...): each store keeps the few
    numbers they derive from (``acked`` is what was popped and is neither
    leased nor back in the queue), so they cost the hot path next to nothing.

Durability
    For durable stores: once `Store.add` or `Store.release` returns, killing
    the process cannot undo it, and writes become durable in the order they
    were made. An ack rides the store's next write, or is written at the
    latest ``ack_delay`` seconds after the oldest waiting ack (on the next
    call), by `Store.flush` or by `Store.close`; with ``ack_delay=0`` it is
    durable when `Store.ack` returns. A kill before then hands the request
    out again, which at-least-once delivery allows; since acks go into the
    one ordered stream of writes, a parent's ack is never durable before the
    children added while it was leased.

Errors
    Stores raise only `crawlq.StoreError` (and its children) for their own
    failures, never the backend's exception types.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from .._exchange import JobReport
from .._request import Request

__all__ = [
    "Counters",
    "Entry",
    "HostCount",
    "HostList",
    "Refetch",
    "Store",
    "StoreAdmin",
    "StoreCounts",
    "host_details",
    "merge_hosts",
    "sum_counts",
]

#: What an ack does instead of finishing a request for good: schedule it
#: again after ``delay`` seconds, with its stored fields replaced by the
#: entry's (None: unchanged). See "Refetch" above.
Refetch = tuple[float, "Entry | None"]

#: A validated request ready to store: ``(fingerprint, host, request,
#: payload)``. ``payload`` is the encoded request for stores that keep bytes
#: (``needs_payload``), None otherwise. A plain tuple: it is built per add.
Entry = tuple[bytes, str, Request, bytes | None]


@dataclass(frozen=True, slots=True)
class Counters:
    """What happened to a crawl's requests since it was created, every worker's.

    Kept by the store: shared by every process of a Redis crawl, saved in a
    SQLite job (accepted and acked exactly; the others with its writes, at
    least once a second, so a killed process loses at most its last second),
    one process's in memory. ``popped == acked + released + expired + leased``.
    """

    #: Adds that enqueued a request.
    accepted: int = 0
    #: Adds refused because their fingerprint was seen.
    duplicates: int = 0
    #: Adds refused because their host reached ``max_requests_per_host``.
    capped: int = 0
    #: Requests handed out (Redis: taken from the server by a worker, its
    #: prefetch included; what it gives back unused is taken off again).
    popped: int = 0
    #: Requests finished by an ack.
    acked: int = 0
    #: Requests put back by `Frontier.release`.
    released: int = 0
    #: Leases that ran out (or whose holder was killed): re-deliveries.
    expired: int = 0
    #: Acks that scheduled the request again (``ack(refetch_after=)``, revisits).
    refetched: int = 0

    def __add__(self, other: Counters) -> Counters:
        """Both crawls' (or both shards') counts added up."""
        return Counters(
            self.accepted + other.accepted,
            self.duplicates + other.duplicates,
            self.capped + other.capped,
            self.popped + other.popped,
            self.acked + other.acked,
            self.released + other.released,
            self.expired + other.expired,
            self.refetched + other.refetched,
        )


class StoreCounts(NamedTuple):
    """Counts kept by a store."""

    queued: int
    leased: int
    seen: int
    counters: Counters = Counters()
    #: Requests held but not due yet (revisits included).
    scheduled: int = 0
    #: The part of ``scheduled`` that refetches pages already done.
    revisits: int = 0
    #: Seconds until the first scheduled request is due (0.0: one is due
    #: now); None when nothing is scheduled.
    next_due_in: float | None = None


def sum_counts(parts: Sequence[StoreCounts]) -> StoreCounts:
    """The counts of a store made of ``parts`` (cluster shards): sums, and the first due time."""
    counters = Counters()
    for part in parts:
        counters += part.counters
    dues = [part.next_due_in for part in parts if part.next_due_in is not None]
    return StoreCounts(
        sum(part.queued for part in parts),
        sum(part.leased for part in parts),
        sum(part.seen for part in parts),
        counters,
        sum(part.scheduled for part in parts),
        sum(part.revisits for part in parts),
        min(dues) if dues else None,
    )


@dataclass(frozen=True, slots=True)
class HostCount:
    """One host (download slot): its requests, and the controls set on it."""

    host: str
    #: Requests waiting to be handed out.
    queued: int
    #: Requests handed out and not yet acked or released.
    leased: int
    #: Seconds until its block ends (`Frontier.block_host`); None: not blocked.
    blocked_for: float | None = None
    #: Its own delay between pops (`Frontier.set_host_policy`); None: the frontier's.
    delay: float | None = None
    #: Its own concurrency limit; None: the frontier's.
    concurrency: int | None = None
    #: Requests of this host ever accepted (what ``max_requests_per_host`` caps).
    accepted: int = 0
    #: Seconds until its delay since its last pop has passed (0.0: passed).
    ready_in: float = 0.0
    #: True when it holds as many leases as its concurrency limit allows.
    full: bool = False

    @property
    def state(self) -> str:
        """What holds it back: "blocked", "full", "paced"; else "ready", or "idle" if empty."""
        if self.blocked_for:
            return "blocked"
        if self.full:
            return "full"
        if self.ready_in > 0:
            return "paced"
        return "ready" if self.queued else "idle"


class HostList(list[HostCount]):
    """Hosts as `Store.host_counts` lists them, with totals over every host."""

    def __init__(self, hosts: list[HostCount], busy: int, blocked: int) -> None:
        super().__init__(hosts)
        #: Hosts holding requests (queued or leased), listed or not.
        self.busy = busy
        #: Hosts blocked now, listed or not.
        self.blocked = blocked


class StoreAdmin(Protocol):
    """How a job or crawl is read or changed from outside the crawl: one module per store.

    The CLI (``inspect``, ``hosts``, ``top``, ``metrics``), `crawlq.metrics`
    and watching reach a store only through its admin module (named by
    `crawlq.StoreKind`), never through its private modules. Reading never
    locks a job or stops a crawl. A store may offer more (``export``,
    ``check``, ``purge``, ``job_settings``): callers look those up by name.
    Each function raises `ConfigError` for a bad URL, `StoreError` when there
    is no job or crawl there, `StoreUnavailable` when its server is down.
    """

    def inspect(self, url: str, *, top: int = 10) -> JobReport:
        """Counts, busiest ``top`` hosts, priorities and settings, for ``crawlq inspect``."""
        ...

    def snapshot(self, url: str, *, top: int = 20) -> tuple[StoreCounts, HostList]:
        """The crawl's `StoreCounts` (scheduled ones too) and its busiest ``top`` hosts."""
        ...

    def hosts(self, url: str, *, top: int = 20) -> HostList:
        """The busiest ``top`` hosts with their counts, blocks and own policies."""
        ...

    def change_host(self, url: str, what: str, host: str, seconds: float | None = None) -> str:
        """Apply ``block`` / ``unblock`` / ``delay`` to ``host``; return what happened."""
        ...

    def crawl_label(self, url: str) -> str:
        """The crawl's name, as a metrics label."""
        ...

    def crawl_settings(self, url: str) -> dict[str, Any] | None:
        """``lifo`` and ``fingerprint`` (a `Fingerprinter.describe`) of the crawl; None: none."""
        ...


class Store(Protocol):
    """What a frontier needs from a backend; see the module docstring for semantics."""

    #: True if the store keeps encoded requests (`Entry.payload` must be set).
    needs_payload: bool
    #: True if other processes may change the store (adds, acks) behind this
    #: one's back, so a waiting scheduler must look again now and then.
    shared: bool
    #: True if accepted requests outlive the process (SQLite, Redis).
    durable: bool
    #: Names this store in its leases (`crawlq._lease.Lease.origin`): a lease
    #: is accepted by a frontier whose store has the same origin.
    origin: str

    def add(
        self,
        entries: Sequence[Entry],
        finished: Sequence[object] = (),
        *,
        lifo: bool | None = None,
        refetch: Sequence[Refetch | None] | None = None,
    ) -> list[bool]:
        """Dedup and enqueue a batch atomically; False marks a duplicate.

        ``finished`` holds lease handles to ack in the same durable step,
        after the batch: a request and the children it produced; ``refetch``
        (one per handle) makes those acks refetches, as `ack` does. ``lifo``
        overrides the policy's order for this batch (None: the policy's). An
        entry whose request has a ``not_before`` in the future is scheduled.
        """
        ...

    def pop(self) -> Request | None:
        """Lease and return the next ready request, or None if none is ready now."""
        ...

    def ack(
        self, leases: Sequence[object], refetch: Sequence[Refetch | None] | None = None
    ) -> None:
        """Finish the leased requests behind these handles (ended ones: nothing).

        ``refetch``, one per lease (None: done for good), schedules a request
        again (see "Refetch" above).
        """
        ...

    def release(
        self,
        leases: Sequence[object],
        updates: Sequence[Entry | None] | None = None,
        delays: Sequence[float] | None = None,
    ) -> None:
        """Put the leased requests behind these handles back in their places.

        ``updates``, one per lease (None: unchanged), replaces what is stored
        of each request (see "Release with an update" above). ``delays``, one
        per lease (seconds, 0.0: none), schedules each for that long.
        """
        ...

    def seen(self, fingerprints: Sequence[bytes]) -> list[bool]:
        """Return, for each fingerprint, whether `add` would refuse it as a duplicate.

        Read-only. With a Bloom filter a True may be a false positive, as in `add`.
        """
        ...

    def counts(self) -> StoreCounts:
        """Return queued, leased and seen counts."""
        ...

    def host_counts(self, limit: int) -> HostList:
        """Return up to ``limit`` hosts: the most queued first, then blocked or with a policy."""
        ...

    def block_host(self, host: str, seconds: float | None) -> None:
        """Hand out nothing of ``host`` for ``seconds`` from now; None ends its block.

        A block ending later than the current one extends it; one ending
        sooner changes nothing. Shared and durable as the store's pacing is.
        """
        ...

    def set_host_policy(self, host: str, delay: float | None, concurrency: int | None) -> None:
        """Give ``host`` its own delay and concurrency limit; None: the frontier's."""
        ...

    def host_policy(self, host: str) -> tuple[float | None, int | None]:
        """Return ``host``'s own (delay, concurrency); None where it has none."""
        ...

    def forget(self, fingerprints: Sequence[bytes]) -> int:
        """Drop these fingerprints from the seen set; return how many were there."""
        ...

    def next_ready_in(self) -> float | None:
        """Seconds until `pop` may return something; 0.0 if it may now.

        None means nothing is queued or leased, so only an ``add`` can make a
        request ready.
        """
        ...

    def extra_stats(self) -> dict[str, float]:
        """Store-specific figures for `FrontierStats.extra` (e.g. a filter's fill)."""
        ...

    def load_state(self) -> dict[str, Any]:
        """Return the crawler's key/value state saved with `save_state`."""
        ...

    def save_state(self, state: Mapping[str, Any]) -> None:
        """Replace the crawler's key/value state (msgpack-able values)."""
        ...

    def flush(self) -> None:
        """Make every ack made so far durable now (acks waiting for ``ack_delay``)."""
        ...

    def close(self) -> None:
        """Write waiting acks, release the store's resources; stored state stays."""
        ...


def host_details(
    hosts: Mapping[str, tuple[int, int]],
    blocked: Mapping[str, float],
    overrides: Mapping[str, tuple[float | None, int | None]],
    accepted: Callable[[str], int],
    limit: int,
    now: float,
    timing: Callable[[str], tuple[float, bool]] | None = None,
) -> HostList:
    """Per-host figures for `Store.host_counts`, from a store's maps.

    ``hosts`` gives (queued, leased) of the hosts holding requests, busiest
    first in the result; hosts that hold none but are blocked or have a
    policy of their own follow, by name; ``limit`` bounds the whole list.
    ``blocked`` gives when each block ends, in the clock of ``now``;
    ``timing`` a host's (`HostCount.ready_in`, `HostCount.full`), when known.
    """
    busy = sorted(hosts, key=lambda name: (-hosts[name][0], -hosts[name][1], name))
    idle = sorted((blocked.keys() | overrides.keys()) - hosts.keys())
    details = []
    for name in [*busy, *idle][:limit]:
        queued, leased = hosts.get(name, (0, 0))
        until = blocked.get(name)
        delay, concurrency = overrides.get(name, (None, None))
        ready_in, full = (0.0, False) if timing is None else timing(name)
        details.append(
            HostCount(
                name,
                queued,
                leased,
                None if until is None else max(0.0, until - now),
                delay,
                concurrency,
                accepted(name),
                ready_in,
                full,
            )
        )
    return HostList(details, len(hosts), len(blocked))


def merge_hosts(lists: Sequence[HostList], limit: int) -> HostList:
    """The hosts of several `HostList` (a cluster crawl's shards) as one, ordered as one.

    Hosts holding requests come first, busiest first; then the others by name.
    """
    hosts = [host for listed in lists for host in listed]
    hosts.sort(key=lambda h: (not (h.queued or h.leased), -h.queued, -h.leased, h.host))
    return HostList(
        hosts[:limit], sum(listed.busy for listed in lists), sum(listed.blocked for listed in lists)
    )
