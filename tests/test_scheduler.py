"""The asyncio Scheduler: waiting, direct delivery, cancellation, backpressure."""

from __future__ import annotations

import asyncio
import time

import pytest

import crawlq
from crawlq import Request, Scheduler


def make(**options: object) -> Scheduler:
    maxsize = options.pop("maxsize", 0)
    return Scheduler(crawlq.open_frontier(**options), maxsize=maxsize)  # type: ignore[arg-type]


async def test_add_url_with_fields_and_get() -> None:
    async with make() as scheduler:
        assert await scheduler.add("https://a.example/", priority=3, meta={"k": 1})
        assert not await scheduler.add("https://a.example/")
        request = await scheduler.get()
        assert (request.url, request.priority, request.meta) == ("https://a.example/", 3, {"k": 1})
        assert scheduler.stats().in_flight == 1
        scheduler.task_done(request)
        await asyncio.wait_for(scheduler.join(), 1)


async def test_fields_with_a_request_object_are_refused() -> None:
    async with make() as scheduler:
        with pytest.raises(crawlq.InvalidRequest):
            await scheduler.add(Request("https://a.example/"), priority=1)  # type: ignore[call-arg]


async def test_get_waits_for_an_add() -> None:
    async with make() as scheduler:
        getter = asyncio.create_task(scheduler.get())
        await asyncio.sleep(0.01)
        assert not getter.done()
        assert scheduler.stats().waiting_consumers == 1
        scheduler.add_nowait("https://a.example/")
        request = await asyncio.wait_for(getter, 1)
        assert request.url == "https://a.example/"
        assert scheduler.stats().waiting_consumers == 0


async def test_get_nowait_raises_queue_empty() -> None:
    async with make() as scheduler:
        with pytest.raises(crawlq.QueueEmpty):
            scheduler.get_nowait()
        with pytest.raises(asyncio.QueueEmpty):  # asyncio code keeps working
            scheduler.get_nowait()


async def test_get_waits_for_the_host_delay_without_spinning() -> None:
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


async def test_waiting_getters_are_served_in_order() -> None:
    async with make() as scheduler:
        getters = [asyncio.create_task(scheduler.get()) for _ in range(3)]
        await asyncio.sleep(0)
        for i in range(3):
            scheduler.add_nowait(f"https://h{i}.example/")
        results = [await asyncio.wait_for(g, 1) for g in getters]
        assert [r.url for r in results] == [f"https://h{i}.example/" for i in range(3)]


async def test_task_done_frees_host_concurrency_for_a_waiter() -> None:
    async with make(host_concurrency=1) as scheduler:
        await scheduler.add_many([Request("https://a.example/1"), Request("https://a.example/2")])
        first = await scheduler.get()
        waiter = asyncio.create_task(scheduler.get())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        scheduler.task_done(first)
        second = await asyncio.wait_for(waiter, 1)
        assert second.url == "https://a.example/2"


async def test_expired_lease_wakes_a_waiting_getter() -> None:
    async with make(lease_timeout=0.2) as scheduler:
        await scheduler.add("https://a.example/")
        first = await scheduler.get()
        again = await asyncio.wait_for(scheduler.get(), 2)
        assert again.url == first.url


# -- cancellation ----------------------------------------------------------------


async def test_cancelled_waiting_get_takes_nothing() -> None:
    async with make() as scheduler:
        getter = asyncio.create_task(scheduler.get())
        await asyncio.sleep(0)
        getter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await getter
        assert scheduler.stats().waiting_consumers == 0
        scheduler.add_nowait("https://a.example/")
        assert scheduler.get_nowait().url == "https://a.example/"


async def test_get_cancelled_after_hand_off_puts_the_request_back() -> None:
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


async def test_hand_off_after_cancellation_goes_to_the_next_getter() -> None:
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
async def test_cancelling_at_every_step_loses_nothing(cancel_after: int) -> None:
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


async def test_maxsize_add_nowait_raises_and_add_waits() -> None:
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


async def test_cancelled_add_passes_room_on() -> None:
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


async def test_join_waits_for_in_flight_work() -> None:
    async with make() as scheduler:
        await scheduler.add("https://a.example/")
        request = await scheduler.get()
        joiner = asyncio.create_task(scheduler.join())
        await asyncio.sleep(0.01)
        assert not joiner.done()
        scheduler.task_done(request)
        await asyncio.wait_for(joiner, 1)


async def test_join_returns_at_once_when_idle() -> None:
    async with make() as scheduler:
        await asyncio.wait_for(scheduler.join(), 1)


async def test_close_wakes_every_waiter_with_scheduler_closed() -> None:
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


async def test_task_done_of_foreign_request_is_a_lease_error() -> None:
    async with make() as scheduler:
        with pytest.raises(crawlq.LeaseError):
            scheduler.task_done(Request("https://a.example/"))


async def test_stats_is_a_frozen_snapshot_with_hosts_on_request() -> None:
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


async def test_scheduler_needs_a_frontier() -> None:
    with pytest.raises(crawlq.ConfigError):
        Scheduler("memory://")  # type: ignore[arg-type]
    with pytest.raises(crawlq.ConfigError):
        Scheduler(crawlq.open_frontier(), maxsize=-1)


async def test_many_workers_crawl_everything_once() -> None:
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
