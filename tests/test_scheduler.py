"""The asyncio Scheduler: waiting, direct delivery, cancellation, backpressure."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import crawlq
from crawlq import Request, Scheduler
from crawlq.scheduler import store_thread
from crawlq.stores.redis.store import purge
from tests._in_step import crawl_in_step
from tests.conftest import OpenFrontier

Make = Callable[..., Scheduler]


@pytest.fixture
def make(open_store: OpenFrontier) -> Make:
    """Schedulers over a fresh frontier on each store (SQLite and Redis use the store thread)."""

    def make_(**options: object) -> Scheduler:
        maxsize = options.pop("maxsize", 0)
        return Scheduler(open_store(**options), maxsize=maxsize)  # type: ignore[arg-type]

    return make_


async def test_add_url_with_fields_and_get(make: Make) -> None:
    async with make() as scheduler:
        assert await scheduler.add("https://a.example/", priority=3, meta={"k": 1})
        assert not await scheduler.add("https://a.example/")
        request = await scheduler.get()
        assert (request.url, request.priority, request.meta) == ("https://a.example/", 3, {"k": 1})
        assert scheduler.stats().in_flight == 1
        scheduler.task_done(request)
        await asyncio.wait_for(scheduler.join(), 1)


async def test_fields_with_a_request_object_are_refused(make: Make) -> None:
    async with make() as scheduler:
        with pytest.raises(crawlq.InvalidRequest):
            await scheduler.add(Request("https://a.example/"), priority=1)  # type: ignore[call-arg]


async def test_get_waits_for_an_add(make: Make) -> None:
    async with make() as scheduler:
        getter = asyncio.create_task(scheduler.get())
        await asyncio.sleep(0.01)
        assert not getter.done()
        assert scheduler.stats().waiting_consumers == 1
        scheduler.add_nowait("https://a.example/")
        request = await asyncio.wait_for(getter, 1)
        assert request.url == "https://a.example/"
        assert scheduler.stats().waiting_consumers == 0


async def test_get_nowait_raises_queue_empty(make: Make) -> None:
    async with make() as scheduler:
        with pytest.raises(crawlq.QueueEmpty):
            scheduler.get_nowait()
        with pytest.raises(asyncio.QueueEmpty):  # asyncio code keeps working
            scheduler.get_nowait()


async def test_get_waits_for_the_host_delay_without_spinning(make: Make) -> None:
    delay = 0.3
    async with make(host_delay=delay) as scheduler:
        await scheduler.add_many([Request("https://a.example/1"), Request("https://a.example/2")])
        first = await scheduler.get()
        frontier = scheduler.frontier
        pops = 0
        original_pop = frontier._store_pop

        def counting_pop() -> Request | None:
            nonlocal pops
            pops += 1
            return original_pop()

        frontier._store_pop = counting_pop
        started = time.monotonic()
        second = await asyncio.wait_for(scheduler.get(), 2)
        waited = time.monotonic() - started
        assert (first.url, second.url) == ("https://a.example/1", "https://a.example/2")
        assert waited >= delay * 0.9
        assert pops <= 3, f"get() polled the frontier {pops} times while waiting"


async def test_waiting_getters_are_served_in_order(make: Make) -> None:
    async with make() as scheduler:
        getters = [asyncio.create_task(scheduler.get()) for _ in range(3)]
        await asyncio.sleep(0)
        for i in range(3):
            scheduler.add_nowait(f"https://h{i}.example/")
        results = [await asyncio.wait_for(g, 1) for g in getters]
        assert [r.url for r in results] == [f"https://h{i}.example/" for i in range(3)]


async def test_task_done_frees_host_concurrency_for_a_waiter(make: Make) -> None:
    async with make(host_concurrency=1) as scheduler:
        await scheduler.add_many([Request("https://a.example/1"), Request("https://a.example/2")])
        first = await scheduler.get()
        waiter = asyncio.create_task(scheduler.get())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        scheduler.task_done(first)
        second = await asyncio.wait_for(waiter, 1)
        assert second.url == "https://a.example/2"


async def test_expired_lease_wakes_a_waiting_getter(make: Make) -> None:
    async with make(lease_timeout=0.2) as scheduler:
        await scheduler.add("https://a.example/")
        first = await scheduler.get()
        again = await asyncio.wait_for(scheduler.get(), 2)
        assert again.url == first.url


# -- cancellation ----------------------------------------------------------------


async def test_cancelled_waiting_get_takes_nothing(make: Make) -> None:
    async with make() as scheduler:
        getter = asyncio.create_task(scheduler.get())
        await asyncio.sleep(0)
        getter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await getter
        assert scheduler.stats().waiting_consumers == 0
        scheduler.add_nowait("https://a.example/")
        assert scheduler.get_nowait().url == "https://a.example/"


async def test_get_cancelled_after_hand_off_puts_the_request_back(make: Make) -> None:
    async with make() as scheduler:
        getter = asyncio.create_task(scheduler.get())
        await asyncio.sleep(0)  # parked in get()
        scheduler.add_nowait("https://a.example/")  # handed to the parked getter
        getter.cancel()  # ...which is cancelled before it runs again
        with pytest.raises(asyncio.CancelledError):
            await getter
        stats = scheduler.stats()
        assert (stats.queued, stats.in_flight) == (1, 0)
        assert scheduler.get_nowait().url == "https://a.example/"


async def test_hand_off_after_cancellation_goes_to_the_next_getter(make: Make) -> None:
    async with make() as scheduler:
        first = asyncio.create_task(scheduler.get())
        second = asyncio.create_task(scheduler.get())
        await asyncio.sleep(0)
        scheduler.add_nowait("https://a.example/")
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        request = await asyncio.wait_for(second, 1)
        assert request.url == "https://a.example/"


@pytest.mark.parametrize("cancel_after", range(8))
async def test_cancelling_at_every_step_loses_nothing(make: Make, cancel_after: int) -> None:
    """Cancel a consumer after N loop iterations, whatever it is doing then."""
    total = 20
    async with make(host_delay=0.002, host_concurrency=2) as scheduler:
        received: list[Request] = []

        async def consume() -> None:
            while True:
                request = await scheduler.get()
                try:
                    await asyncio.sleep(0)
                except asyncio.CancelledError:
                    scheduler.release(request)  # a well-behaved worker hands work back
                    raise
                received.append(request)
                scheduler.task_done(request)

        victim = asyncio.create_task(consume())
        survivor = asyncio.create_task(consume())
        for i in range(total):
            await scheduler.add(f"https://h{i % 3}.example/{i}")
        for _ in range(cancel_after):
            await asyncio.sleep(0)
        victim.cancel()
        await asyncio.wait_for(scheduler.join(), 5)
        survivor.cancel()
        assert sorted(r.url for r in received) == sorted(
            f"https://h{i % 3}.example/{i}" for i in range(total)
        )
        assert len(scheduler.frontier) == 0


# -- backpressure ----------------------------------------------------------------


async def test_maxsize_add_nowait_raises_and_add_waits(make: Make) -> None:
    async with make(maxsize=2) as scheduler:
        scheduler.add_nowait("https://a.example/1")
        scheduler.add_nowait("https://b.example/2")
        with pytest.raises(crawlq.QueueFull):
            scheduler.add_nowait("https://c.example/3")
        with pytest.raises(asyncio.QueueFull):
            scheduler.add_nowait("https://c.example/3")
        adder = asyncio.create_task(scheduler.add("https://c.example/3"))
        await asyncio.sleep(0.01)
        assert not adder.done()
        request = await scheduler.get()
        assert await asyncio.wait_for(adder, 1) is True
        assert scheduler.qsize() == 2
        scheduler.task_done(request)


async def test_a_bounded_scheduler_lets_every_first_adder_in_once_it_has_counts(
    make: Make,
) -> None:
    # A new scheduler knows no counts until its first batch reads them, and
    # its adders wait for them. That batch must wake them all: here the
    # first adder adds nothing (no batch follows it), so an adder woken by
    # it alone would leave the others, and the getter, waiting for ever.
    async with make(maxsize=10) as scheduler:
        empty = asyncio.create_task(scheduler.add_many([]))
        adders = [asyncio.create_task(scheduler.add(f"https://h{n}.example/")) for n in range(5)]
        getter = asyncio.create_task(scheduler.get())
        assert await asyncio.wait_for(empty, 5) == []
        assert await asyncio.wait_for(asyncio.gather(*adders), 5) == [True] * 5
        request = await asyncio.wait_for(getter, 5)
        scheduler.task_done(request)


async def test_cancelled_add_passes_room_on(make: Make) -> None:
    async with make(maxsize=1) as scheduler:
        scheduler.add_nowait("https://a.example/1")
        first = asyncio.create_task(scheduler.add("https://b.example/2"))
        second = asyncio.create_task(scheduler.add("https://c.example/3"))
        await asyncio.sleep(0)
        scheduler.get_nowait()  # room for one: wakes the first adder
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await asyncio.wait_for(second, 1) is True


# -- join and close --------------------------------------------------------------


async def test_join_waits_for_in_flight_work(make: Make) -> None:
    async with make() as scheduler:
        await scheduler.add("https://a.example/")
        request = await scheduler.get()
        joiner = asyncio.create_task(scheduler.join())
        await asyncio.sleep(0.01)
        assert not joiner.done()
        scheduler.task_done(request)
        await asyncio.wait_for(joiner, 1)


async def test_join_returns_at_once_when_idle(make: Make) -> None:
    async with make() as scheduler:
        await asyncio.wait_for(scheduler.join(), 1)


async def test_close_wakes_every_waiter_with_scheduler_closed(make: Make) -> None:
    scheduler = make(maxsize=1, host_concurrency=1)
    scheduler.add_nowait("https://a.example/1")
    request = scheduler.get_nowait()
    scheduler.add_nowait("https://a.example/2")  # full, and a.example is busy
    getters = [asyncio.create_task(scheduler.get()) for _ in range(2)]
    adder = asyncio.create_task(scheduler.add("https://c.example/3"))
    joiner = asyncio.create_task(scheduler.join())
    await asyncio.sleep(0.01)
    assert scheduler.stats().waiting_consumers == 2
    await scheduler.close()
    for task in (*getters, adder, joiner):
        with pytest.raises(crawlq.SchedulerClosed):
            await task
    with pytest.raises(crawlq.SchedulerClosed):
        await scheduler.get()
    with pytest.raises(crawlq.SchedulerClosed):
        scheduler.add_nowait("https://d.example/")
    stats = scheduler.stats()
    assert stats.closed and stats.waiting_consumers == 0
    # In-flight work can still finish, and join() then returns; the queued
    # request stays in the frontier, which the scheduler does not close.
    scheduler.task_done(request)
    await asyncio.wait_for(scheduler.join(), 1)
    assert not scheduler.frontier.closed
    assert len(scheduler.frontier) == 1


async def test_task_done_of_foreign_request_is_a_lease_error(make: Make) -> None:
    async with make() as scheduler:
        with pytest.raises(crawlq.LeaseError):
            scheduler.task_done(Request("https://a.example/"))


async def test_stats_is_a_frozen_snapshot_with_hosts_on_request(make: Make) -> None:
    async with make() as scheduler:
        await scheduler.add_many([Request("https://a.example/1"), Request("https://a.example/2")])
        await scheduler.add("https://b.example/1")
        await scheduler.get()
        stats = scheduler.stats()
        assert (
            stats.queued,
            stats.in_flight,
            stats.seen,
            stats.waiting_consumers,
            stats.closed,
        ) == (
            2,
            1,
            3,
            0,
            False,
        )
        assert stats.hosts is None
        with pytest.raises(AttributeError):
            stats.queued = 5  # type: ignore[misc]
        hosts = scheduler.stats(hosts=True).hosts
        assert hosts is not None
        assert [(h.host, h.queued, h.leased) for h in hosts] == [
            ("a.example", 1, 1),
            ("b.example", 1, 0),
        ]


async def test_scheduler_needs_a_frontier(make: Make) -> None:
    with pytest.raises(crawlq.ConfigError):
        Scheduler("memory://")  # type: ignore[arg-type]
    with pytest.raises(crawlq.ConfigError):
        Scheduler(crawlq.open_frontier(), maxsize=-1)


async def test_many_workers_crawl_everything_once(make: Make) -> None:
    async with make(host_concurrency=2, host_delay=0.001) as scheduler:
        fetched: list[str] = []

        async def worker() -> None:
            try:
                while True:
                    request = await scheduler.get()
                    fetched.append(request.url)
                    if request.depth < 2:
                        await scheduler.add_many(
                            Request(f"{request.url}/{k}", depth=request.depth + 1) for k in range(3)
                        )
                    scheduler.task_done(request)
            except crawlq.SchedulerClosed:
                return

        for host in range(5):
            await scheduler.add(f"https://h{host}.example/r")
        workers = [asyncio.create_task(worker()) for _ in range(8)]
        await asyncio.wait_for(scheduler.join(), 10)
        await scheduler.close()
        await asyncio.gather(*workers)
        assert len(fetched) == len(set(fetched)) == 5 * (1 + 3 + 9)


# -- batches with links and acks -------------------------------------------------


async def test_add_many_takes_urls_acks_the_page_and_skips_bad_links(make: Make) -> None:
    async with make(host_concurrency=1) as scheduler:
        assert await scheduler.add_many(["https://a.example/"]) == [True]
        page = await scheduler.get()
        # The host is busy (concurrency 1) until the page is acked with its links.
        waiter = asyncio.create_task(scheduler.get())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        added = await scheduler.add_many(
            ["https://a.example/next", "mailto:x@a.example", "https://a.example/"],
            ack=page,
            invalid="skip",
        )
        assert added == [True, None, False]
        child = await asyncio.wait_for(waiter, 1)  # the ack freed the host
        assert child.url == "https://a.example/next"
        stats = scheduler.stats()
        assert (stats.queued, stats.in_flight, stats.skipped) == (0, 1, 1)
        with pytest.raises(crawlq.InvalidRequest, match="javascript"):
            await scheduler.add_many(["javascript:void(0)"], ack=child)
        assert scheduler.stats().in_flight == 1  # nothing acked when the batch fails
        await scheduler.add_many([], ack=child)
        await asyncio.wait_for(scheduler.join(), 1)


async def test_add_many_after_close_acks_nothing(make: Make) -> None:
    scheduler = make()
    await scheduler.add("https://a.example/")
    page = await scheduler.get()
    await scheduler.close()
    with pytest.raises(crawlq.SchedulerClosed):
        await scheduler.add_many(["https://a.example/x"], ack=page)
    assert scheduler.stats().in_flight == 1
    scheduler.task_done(page)
    await asyncio.wait_for(scheduler.join(), 1)


# -- workers that die ---------------------------------------------------------------


async def test_a_worker_that_raises_is_logged_released_and_fails_join(
    make: Make,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with make() as scheduler:
        await scheduler.add_many(["https://a.example/ok", "https://a.example/bug"])

        async def worker() -> None:
            while True:
                request = await scheduler.get()
                if request.url.endswith("bug"):
                    raise RuntimeError("parser bug")
                scheduler.task_done(request)

        joiner = asyncio.create_task(scheduler.join())
        task = asyncio.create_task(worker(), name="worker-7")
        with pytest.raises(crawlq.WorkerFailed, match="bug") as failed:
            await asyncio.wait_for(joiner, 2)
        assert isinstance(failed.value.__cause__, RuntimeError)
        assert "worker-7" in str(failed.value)
        assert "https://a.example/bug" in str(failed.value)
        assert task.done()
        # The request the dead worker held was put back, not lost.
        stats = scheduler.stats()
        assert (stats.queued, stats.in_flight) == (1, 0)
        errors = [r for r in caplog.records if r.levelname == "ERROR" and r.name == "crawlq"]
        assert len(errors) == 1
        assert "https://a.example/bug" in errors[0].getMessage()
        assert errors[0].exc_info is not None
        # Raised once: a new worker can finish the crawl and join returns.
        request = await scheduler.get()
        assert request.url == "https://a.example/bug"
        scheduler.task_done(request)
        await asyncio.wait_for(scheduler.join(), 1)


async def test_a_failure_before_join_is_raised_by_the_next_join(make: Make) -> None:
    async with make() as scheduler:
        await scheduler.add("https://a.example/")

        async def worker() -> None:
            await scheduler.get()
            raise ValueError("boom")

        task = asyncio.create_task(worker())
        await asyncio.wait([task])
        await asyncio.sleep(0)  # the task's done callbacks run
        with pytest.raises(crawlq.WorkerFailed, match="boom"):
            await asyncio.wait_for(scheduler.join(), 1)
        assert scheduler.stats().queued == 1


async def test_a_worker_cancelled_holding_a_request_releases_it(
    make: Make,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="crawlq")
    async with make() as scheduler:
        await scheduler.add("https://a.example/")
        started = asyncio.Event()

        async def worker() -> None:
            await scheduler.get()
            started.set()
            await asyncio.sleep(60)  # a slow fetch

        task = asyncio.create_task(worker())
        await asyncio.wait_for(started.wait(), 1)
        task.cancel()
        await asyncio.wait([task])
        await asyncio.sleep(0)
        stats = scheduler.stats()
        assert (stats.queued, stats.in_flight) == (1, 0)
        assert any("cancelled holding" in r.getMessage() for r in caplog.records)
        # A cancellation is not a failure: join just waits for the work.
        request = await scheduler.get()
        scheduler.task_done(request)
        await asyncio.wait_for(scheduler.join(), 1)


async def test_a_task_that_returns_a_request_passes_it_on(make: Make) -> None:
    async with make() as scheduler:
        await scheduler.add("https://a.example/")
        # On Python 3.11, wait_for runs get() in a task of its own, which ends.
        request = await asyncio.wait_for(scheduler.get(), 1)
        await asyncio.sleep(0)
        assert scheduler.stats().in_flight == 1  # still leased: nothing released it
        scheduler.task_done(request)
        await asyncio.wait_for(scheduler.join(), 1)


async def test_join_says_so_when_every_worker_is_gone(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    async with make() as scheduler:
        await scheduler.add_many(["https://a.example/1", "https://a.example/2"])

        async def worker() -> None:
            request = await scheduler.get()
            await asyncio.sleep(60)
            scheduler.task_done(request)

        task = asyncio.create_task(worker())
        await asyncio.sleep(0.01)
        joiner = asyncio.create_task(scheduler.join())
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.wait([task])
        await asyncio.sleep(0.01)
        assert not joiner.done()
        # Said a moment later, in case the crawl is being stopped on purpose.
        await asyncio.sleep(1.5)
        assert not joiner.done()
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any("join() waits for new workers" in m for m in warnings), warnings
        # The cancelled worker's request went back: both queued, none in flight.
        assert any("2 requests are queued, 0 in flight" in m for m in warnings), warnings
        joiner.cancel()


async def test_stopping_workers_then_closing_is_quiet(
    make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    async with make() as scheduler:
        await scheduler.add_many(["https://a.example/1", "https://a.example/2"])

        async def worker() -> None:
            while True:
                request = await scheduler.get()
                await asyncio.sleep(60)
                scheduler.task_done(request)

        task = asyncio.create_task(worker())
        await asyncio.sleep(0.01)
        joiner = asyncio.create_task(scheduler.join())
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.wait([task])
        await scheduler.close()  # the crawl is stopped on purpose
        with pytest.raises(crawlq.SchedulerClosed):
            await joiner
        await asyncio.sleep(1.5)
        assert [r for r in caplog.records if r.levelname == "WARNING"] == []


async def test_workers_adding_their_links_never_deadlock_on_maxsize(make: Make) -> None:
    """Every worker holds a page and adds its links to a full queue: none may wait,
    or nobody is left to make room. Producers holding nothing still wait."""
    async with make(maxsize=2) as scheduler:
        await scheduler.add_many([f"https://h{i}.example/" for i in range(2)])
        done: list[str] = []

        async def worker() -> None:
            while True:
                request = await scheduler.get()
                if request.depth < 2:
                    links = [
                        crawlq.Request(f"{request.url}{i}/", depth=request.depth + 1)
                        for i in range(3)
                    ]
                    await scheduler.add_many(links, ack=request)
                else:
                    scheduler.task_done(request)
                done.append(request.url)

        workers = [asyncio.create_task(worker()) for _ in range(2)]
        producer = asyncio.create_task(scheduler.add("https://seed.example/"))
        await asyncio.wait_for(scheduler.join(), 5)
        assert len(done) == 3 * (1 + 3 + 9)  # every page of the two seeds and the producer's
        assert producer.done() and producer.result() is True
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


async def test_a_producer_holding_nothing_still_waits_for_room(make: Make) -> None:
    async with make(maxsize=1) as scheduler:
        scheduler.add_nowait("https://a.example/1")
        adder = asyncio.create_task(scheduler.add_many(["https://b.example/2"]))
        await asyncio.sleep(0.01)
        assert not adder.done()
        request = await scheduler.get()
        assert await asyncio.wait_for(adder, 1) == [True]
        scheduler.task_done(request)


def _lockstep_batches(frontier: crawlq.Frontier, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Adds per store batch while 32 workers loop get / sleep(0) / add_many / task_done."""
    sizes: list[int] = []
    run_batch = store_thread.run_batch

    def recording(frontier: crawlq.Frontier, batch: store_thread.Batch) -> store_thread.Outcome:
        sizes.append(len(batch.adds))
        return run_batch(frontier, batch)

    monkeypatch.setattr(store_thread, "run_batch", recording)

    async def crawl() -> int:
        async with crawlq.Scheduler(frontier) as scheduler:
            await scheduler.add_many([Request(f"https://s{i}.example/") for i in range(64)])
            return await crawl_in_step(scheduler, 640, ack_with_links=False)

    assert asyncio.run(crawl()) >= 640
    return [size for size in sizes if size]


def test_batches_of_half_the_workers_alternate_on_redis(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers in step split into two halves whose batches alternate (Redis only).

    Each half's work then runs while the other half's batch is on the
    server; a SQLite batch (Python on the store thread) waits for the loop's
    turn instead, so one commit serves all 32.
    """
    frontier = crawlq.open_frontier(f"{redis_url}?crawl=halves")
    try:
        sizes = _lockstep_batches(frontier, monkeypatch)
    finally:
        purge(f"{redis_url}?crawl=halves")
    assert max(sizes[5:]) <= 16  # after the first rounds: halves
    assert sum(sizes[5:]) / len(sizes[5:]) >= 8  # not one by one


def test_batches_a_whole_turn_on_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = _lockstep_batches(crawlq.open_frontier(f"sqlite:///{tmp_path}/job"), monkeypatch)
    assert sizes[5:] and min(sizes[5:-5]) == 32
