"""Property-based tests: the memory store against a naive reference model.

The model keeps every queued request in a list and picks the next one by
scanning it with the rules written in ``crawlq.stores.base``; hypothesis drives
both with random adds, pops, acks, releases (at once and delayed), refetches
and clock moves, and every pop must agree.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import crawlq
import crawlq.stores.sqlite.tables as sqlite_tables
from crawlq import Request


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class ModelEntry:
    url: str
    host: str
    priority: int
    order: int
    added_lifo: bool = False
    deadline: float = 0.0
    lease_id: int = 0


@dataclass
class Model:
    delay: float
    concurrency: int | None
    lease_timeout: float
    lifo: bool
    queued: list[ModelEntry] = field(default_factory=list)
    leased: dict[int, ModelEntry] = field(default_factory=dict)
    last_pop: dict[str, float] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    accepted: int = 0
    leases_made: int = 0
    #: Held until their due time: (due, entry, a refetch?).
    scheduled: list[tuple[float, ModelEntry, bool]] = field(default_factory=list)
    #: Acceptance numbers, refetches included (a refetch takes a new one).
    sequence: int = 0

    def add(
        self, url: str, host: str, priority: int, dont_filter: bool, lifo: bool | None = None
    ) -> bool:
        if not dont_filter:
            if url in self.seen:
                return False
            self.seen.add(url)
        self.accepted += 1
        self.sequence += 1
        added_lifo = self.lifo if lifo is None else lifo
        self.queued.append(ModelEntry(url, host, priority, self.sequence, added_lifo))
        return True

    def schedule(self, entry: ModelEntry, due: float, refetch: bool) -> None:
        if refetch:  # as if added now, in the store's own order
            self.sequence += 1
            entry = ModelEntry(entry.url, entry.host, entry.priority, self.sequence, self.lifo)
        self.scheduled.append((due, entry, refetch))

    def make_due(self, now: float) -> None:
        for item in [item for item in self.scheduled if item[0] <= now]:
            self.scheduled.remove(item)
            self.queued.append(item[1])

    def waiting(self, now: float) -> int:
        """Scheduled requests not due yet."""
        return sum(1 for due, _, _ in self.scheduled if due > now)

    def leases_of(self, host: str) -> int:
        return sum(1 for e in self.leased.values() if e.host == host)

    def expire(self, now: float) -> None:
        for order, entry in list(self.leased.items()):
            if entry.deadline <= now:
                del self.leased[order]
                self.queued.append(entry)

    def ready(self, entry: ModelEntry, now: float) -> bool:
        last = self.last_pop.get(entry.host)
        if last is not None and now < last + self.delay:
            return False
        return self.concurrency is None or self.leases_of(entry.host) < self.concurrency

    def pop(self, now: float) -> ModelEntry | None:
        self.expire(now)
        self.make_due(now)
        candidates = [e for e in self.queued if self.ready(e, now)]
        if not candidates:
            return None
        best = min(
            candidates,
            # Within a priority and lease count: FIFO-added oldest first,
            # then LIFO-added newest first.
            key=lambda e: (
                -e.priority,
                self.leases_of(e.host),
                e.added_lifo,
                -e.order if e.added_lifo else e.order,
            ),
        )
        self.queued.remove(best)
        best.deadline = now + self.lease_timeout
        self.leases_made += 1
        best.lease_id = self.leases_made
        self.leased[best.order] = best
        self.last_pop[best.host] = now
        return best


HOSTS = ["a.example", "b.example", "c.example", "d.example"]


class FrontierMachine(RuleBasedStateMachine):
    """Drives the memory store; subclasses drive other stores the same way."""

    leases = Bundle("leases")
    url = "memory://"
    #: Whether due times are driven: they follow the fake clock (not on Redis).
    due_times = True

    def open_frontier(self, **options: Any) -> crawlq.Frontier:
        return crawlq.open_frontier(self.url, **options)

    @initialize(
        delay=st.sampled_from([0.0, 0.0, 1.0, 2.5]),
        concurrency=st.sampled_from([None, 1, 2]),
        lifo=st.booleans(),
    )
    def open(self, delay: float, concurrency: int | None, lifo: bool) -> None:
        self.clock = FakeClock()
        self.model = Model(delay, concurrency, lease_timeout=10.0, lifo=lifo)
        self.frontier = self.open_frontier(
            host_delay=delay,
            host_concurrency=concurrency,
            lifo=lifo,
            lease_timeout=10.0,
            clock=self.clock,
        )
        self.by_order: dict[str, int] = {}

    def teardown(self) -> None:
        if hasattr(self, "frontier"):
            self.frontier.close()

    @rule(
        host=st.sampled_from(HOSTS),
        page=st.integers(0, 15),
        priority=st.integers(-2, 2),
        dont_filter=st.booleans(),
        slot=st.sampled_from([False, False, False, True]),
        lifo=st.sampled_from([None, None, False, True]),
    )
    def add(
        self, host: str, page: int, priority: int, dont_filter: bool, slot: bool, lifo: bool | None
    ) -> None:
        url = f"https://{host}/p{page}"
        meta = {"download_slot": "slot"} if slot else None
        effective_host = "slot" if slot else host
        expected = self.model.add(url, effective_host, priority, dont_filter, lifo)
        request = Request(url, priority=priority, meta=meta, dont_filter=dont_filter)
        if lifo is None:
            assert self.frontier.add(request) is expected
        else:
            assert self.frontier.add_many([request], lifo=lifo) == [expected]

    @rule(target=leases)
    def pop(self) -> Request | None:
        expected = self.model.pop(self.clock.now)
        ready_in = self.frontier.next_ready_in()
        got = self.frontier.pop()
        if expected is None:
            assert got is None
            return None
        assert got is not None
        assert ready_in == 0.0
        assert (got.url, got.priority) == (expected.url, expected.priority)
        got.meta["_order"] = expected.order
        got.meta["_lease_id"] = expected.lease_id
        return got

    @rule(request=consumes(leases))
    def ack(self, request: Request | None) -> None:
        if request is None:
            return
        self.frontier.ack(request)
        if self._current(request):
            del self.model.leased[request.meta["_order"]]

    def _current(self, request: Request) -> bool:
        """True if the model still holds the lease this handle was popped under."""
        entry = self.model.leased.get(request.meta["_order"])
        return entry is not None and entry.lease_id == request.meta["_lease_id"]

    @rule(request=consumes(leases))
    def release(self, request: Request | None) -> None:
        if request is None:
            return
        self.frontier.release(request)
        if self._current(request):
            self.model.queued.append(self.model.leased.pop(request.meta["_order"]))

    @precondition(lambda self: self.due_times)
    @rule(request=consumes(leases), delay=st.sampled_from([0.5, 3.0, 12.0]))
    def release_later(self, request: Request | None, delay: float) -> None:
        if request is None:
            return
        self.frontier.release(request, delay=delay)
        if self._current(request):
            entry = self.model.leased.pop(request.meta["_order"])
            self.model.schedule(entry, self.clock.now + delay, refetch=False)

    @precondition(lambda self: self.due_times)
    @rule(request=consumes(leases), delay=st.sampled_from([0.0, 1.0, 3.0, 12.0]))
    def refetch(self, request: Request | None, delay: float) -> None:
        if request is None:
            return
        self.frontier.ack(request, refetch_after=delay)
        if self._current(request):
            entry = self.model.leased.pop(request.meta["_order"])
            self.model.schedule(entry, self.clock.now + delay, refetch=True)

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.5, 11.0]))
    def wait(self, seconds: float) -> None:
        self.clock.now += seconds

    @precondition(lambda self: hasattr(self, "frontier"))
    @rule()
    def wait_until_ready(self) -> None:
        ready_in = self.frontier.next_ready_in()
        if ready_in:
            self.clock.now += ready_in

    @invariant()
    def counts_agree(self) -> None:
        if not hasattr(self, "frontier"):
            return
        stats = self.frontier.stats()
        model = self.model
        held = len(model.queued) + len(model.leased) + len(model.scheduled)
        assert stats.queued + stats.leased + stats.scheduled == held == len(self.frontier)
        assert stats.scheduled == model.waiting(self.clock.now)
        assert stats.revisits == sum(
            1 for due, _, r in model.scheduled if r and due > self.clock.now
        )
        assert stats.seen == len(model.seen)
        assert stats.counters.accepted == model.accepted
        if not model.queued and not model.leased and not model.scheduled:
            assert self.frontier.next_ready_in() is None


FrontierMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_memory_frontier_matches_model = FrontierMachine.TestCase


class SqliteFrontierMachine(FrontierMachine):
    """The same model against a SQLite job that flushes its log every few writes.

    Flushing that often moves requests between the in-memory log view and the
    index while they are queued, leased, released and expired, which is where
    the store could lose or repeat one.
    """

    def open_frontier(self, **options: Any) -> crawlq.Frontier:
        self.directory = tempfile.mkdtemp(prefix="crawlq-model-")
        self.saved_flush_ops = sqlite_tables.FLUSH_OPS
        sqlite_tables.FLUSH_OPS = 3  # type: ignore[misc]
        return crawlq.open_frontier(self.directory, **options)

    def teardown(self) -> None:
        super().teardown()
        if hasattr(self, "directory"):
            sqlite_tables.FLUSH_OPS = self.saved_flush_ops  # type: ignore[misc]
            shutil.rmtree(self.directory, ignore_errors=True)

    @precondition(lambda self: hasattr(self, "frontier"))
    @rule()
    def reopen(self) -> None:
        """Close and reopen the job: leases end, everything else stays."""
        options = {
            "host_delay": self.model.delay,
            "host_concurrency": self.model.concurrency,
            "lifo": self.model.lifo,
            "lease_timeout": self.model.lease_timeout,
            "clock": self.clock,
        }
        self.frontier.close()
        self.frontier = crawlq.open_frontier(self.directory, **options)
        self.model.queued.extend(self.model.leased.values())
        self.model.leased.clear()
        self.model.make_due(self.clock.now)


SqliteFrontierMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_sqlite_frontier_matches_model = SqliteFrontierMachine.TestCase


class RedisFrontierMachine(FrontierMachine):
    """The same model against the Redis store, with its prefetch batches.

    Redis keeps time with its own clock, so this machine has no host delay and
    leases that never expire; what it checks is that prefetched batches keep
    the order exact while adds, acks and releases change what comes first.
    """

    server_url = ""
    crawls = 0
    due_times = False

    @initialize(concurrency=st.sampled_from([None, 1, 2]), lifo=st.booleans())
    def open(self, concurrency: int | None, lifo: bool) -> None:  # type: ignore[override]
        RedisFrontierMachine.crawls += 1
        self.clock = FakeClock()
        self.model = Model(0.0, concurrency, lease_timeout=float("inf"), lifo=lifo)
        url = f"{self.server_url}?crawl=model-{RedisFrontierMachine.crawls}"
        # ack_delay=0: the model is the exact order, fewest-leases tie-break
        # included, which holds when every ack reaches Redis before the next pop.
        self.frontier = crawlq.open_frontier(
            url, host_concurrency=concurrency, lifo=lifo, lease_timeout=86_400.0, ack_delay=0
        )
        self.by_order = {}


def test_redis_frontier_matches_model(redis_url: str) -> None:
    RedisFrontierMachine.server_url = redis_url
    run_state_machine_as_test(
        RedisFrontierMachine,
        settings=settings(
            max_examples=80,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 40), st.integers(-3, 3)), max_size=200),
    st.booleans(),
)
def test_drain_order_is_priority_then_acceptance(
    batch: list[tuple[int, int, int]], lifo: bool
) -> None:
    frontier = crawlq.open_frontier(lifo=lifo)
    accepted = []
    for host, page, priority in batch:
        request = Request(f"https://h{host}.example/{page}", priority=priority)
        if frontier.add(request):
            accepted.append(request)
    out = []
    while (request := frontier.pop()) is not None:
        out.append(request)
        frontier.ack(request)
    rank = {r.url: n for n, r in enumerate(accepted)}
    expected = sorted(accepted, key=lambda r: (-r.priority, -rank[r.url] if lifo else rank[r.url]))
    assert [r.url for r in out] == [r.url for r in expected]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 10_000), max_size=400))
def test_dedup_is_exact(pages: list[int]) -> None:
    frontier = crawlq.open_frontier()
    seen: set[int] = set()
    for page in pages:
        expected = page not in seen
        seen.add(page)
        assert frontier.add(Request(f"https://a.example/{page}?utm=1#x")) is expected
    assert frontier.stats().seen == len(seen)


@settings(max_examples=40, deadline=None)
@given(
    delay=st.sampled_from([0.5, 1.0, 3.0]),
    concurrency=st.sampled_from([None, 1, 3]),
    pages=st.lists(st.tuples(st.integers(0, 5), st.integers(-2, 2)), min_size=1, max_size=80),
)
def test_pacing_is_never_violated(
    delay: float, concurrency: int | None, pages: list[tuple[int, int]]
) -> None:
    """Drain with workers that ack late: per-host gaps and leases stay within limits."""
    clock = FakeClock()
    frontier = crawlq.open_frontier(
        host_delay=delay, host_concurrency=concurrency, clock=clock, lease_timeout=1e9
    )
    frontier.add_many(
        [Request(f"https://h{h}.example/{n}", priority=p) for n, (h, p) in enumerate(pages)]
    )
    last_pop: dict[str, float] = {}
    in_flight: list[tuple[float, Request]] = []
    done = 0
    while done < len(pages):
        request = frontier.pop()
        if request is not None:
            host = request.url.split("/")[2]
            if host in last_pop:
                assert clock.now - last_pop[host] >= delay
            last_pop[host] = clock.now
            in_flight.append((clock.now + 2.0, request))
            leased = sum(1 for _, r in in_flight if r.url.split("/")[2] == host)
            assert concurrency is None or leased <= concurrency
            continue
        # Nothing ready: finish the oldest in-flight request or wait for a host.
        wait = frontier.next_ready_in()
        finish_at = min((t for t, _ in in_flight), default=None)
        assert wait is not None
        if finish_at is not None and finish_at <= clock.now + wait:
            clock.now = max(clock.now, finish_at)
            in_flight.sort(key=lambda pair: pair[0])
            frontier.ack(in_flight.pop(0)[1])
            done += 1
        else:
            assert wait > 0
            clock.now += wait
    assert len(frontier) == 0
