"""The Scheduler on Redis leases a worker's next request with the worker's write."""

from __future__ import annotations

import asyncio

import pytest

import crawlq
from crawlq import Request
from crawlq.scheduler import store_thread
from crawlq.stores.redis import store as redis_store
from tests._in_step import crawl_in_step


def test_a_workers_get_after_its_write_costs_no_round_trip(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """32 workers' get / add_many / task_done loop: one store call per batch of writes.

    Without leasing ahead, the getters woken by a write need a batch (and a
    round trip) of their own: twice the calls, and a batch with pops after
    nearly every write.
    """
    with_pops = 0
    run_batch = store_thread.run_batch

    def recording(frontier: crawlq.Frontier, batch: store_thread.Batch) -> store_thread.Outcome:
        nonlocal with_pops
        with_pops += batch.pops > 0
        return run_batch(frontier, batch)

    monkeypatch.setattr(store_thread, "run_batch", recording)

    async def crawl() -> tuple[int, int]:
        async with crawlq.Scheduler(crawlq.open_frontier(url)) as scheduler:
            store = scheduler.frontier._store
            assert isinstance(store, redis_store.RedisStore)
            await scheduler.add_many([Request(f"https://s{i}.example/") for i in range(64)])
            before = store._calls
            steps = await crawl_in_step(scheduler, 640, ack_with_links=False)
            return steps, store._calls - before

    steps, calls = asyncio.run(crawl())
    assert steps >= 640
    assert calls <= steps / 12  # one per half of the workers' writes (16), and a few
    assert with_pops <= 4  # the first gets only: later ones take what was leased ahead


def test_one_worker_still_gets_its_best_child_next(url: str) -> None:
    """Leased in the write's round trip, after its links: exact order for one worker."""

    async def crawl() -> list[str]:
        async with crawlq.Scheduler(crawlq.open_frontier(url)) as scheduler:
            await scheduler.add_many([Request(f"https://a.example/{i}") for i in range(3)])
            got = []

            async def worker() -> None:
                for n in range(4):
                    request = await scheduler.get()
                    got.append(request.url)
                    await scheduler.add_many([Request(f"https://b.example/{n}", priority=n + 1)])
                    scheduler.task_done(request)

            await asyncio.create_task(worker())
            return got

    assert asyncio.run(crawl()) == [
        "https://a.example/0",
        "https://b.example/0",
        "https://b.example/1",
        "https://b.example/2",
    ]


def test_requests_leased_ahead_count_as_queued_and_go_back_at_close(url: str) -> None:
    frontier = crawlq.open_frontier(url)

    async def crawl() -> tuple[crawlq.SchedulerStats, int, int]:
        scheduler = crawlq.Scheduler(frontier)
        await scheduler.add_many([Request(f"https://a.example/{i}") for i in range(3)])

        async def worker() -> Request:
            request = await scheduler.get()
            await scheduler.add_many([Request("https://b.example/")])
            return request

        request = await asyncio.create_task(worker())
        assert len(scheduler._ahead) == 1  # the worker's next, leased with its write
        stats = scheduler.stats()
        leased_before_close = frontier.stats().leased
        await scheduler.close()
        scheduler.task_done(request)
        frontier.flush()
        return stats, leased_before_close, frontier.stats().leased

    try:
        stats, leased, leased_after = asyncio.run(crawl())
        assert (stats.queued, stats.in_flight) == (3, 1)  # 2 seeds + 1 link; the worker's
        assert leased == 2  # the worker's request and the one leased ahead
        assert leased_after == 0  # given back at close, acked after it
        assert frontier.stats().queued == 3
    finally:
        frontier.close()


@pytest.mark.parametrize("options", [{"lease_timeout": 0.6}, {"host_delay": 0.2}])
def test_requests_leased_ahead_go_back_after_waiting_too_long(
    url: str, options: dict[str, float]
) -> None:
    """Half the lease timeout, or the host delay if shorter: then released, leased afresh."""
    frontier = crawlq.open_frontier(url, **options)

    async def crawl() -> tuple[str, int]:
        async with crawlq.Scheduler(frontier) as scheduler:
            await scheduler.add_many([Request(f"https://a.example/{i}") for i in range(3)])
            request = await scheduler.get()
            await scheduler.add_many([Request("https://b.example/", priority=1)])
            assert len(scheduler._ahead) == 1
            await asyncio.sleep(0.4)  # past half the lease timeout, or the delay
            scheduler.task_done(request)
            second = await scheduler.get()  # released and leased again, not handed out stale
            leased = frontier.stats().leased
            scheduler.task_done(second)
            return second.url, leased

    try:
        second, leased = asyncio.run(crawl())
        assert second == "https://b.example/"
        assert leased == 1  # the stale lease went back: only the new one is held
    finally:
        frontier.close()


def test_a_release_leases_nothing_ahead_for_an_idle_process(url: str) -> None:
    """A worker that releases a request and then waits for nothing must not keep
    another request leased ahead in its store's buffer, hidden from every other
    process (until half its lease_timeout passes): a release carries no pop."""

    async def crawl() -> crawlq.Request | None:
        async with crawlq.Scheduler(crawlq.open_frontier(url)) as scheduler:
            await scheduler.add_many(["https://a.example/1"])
            request = await scheduler.get()
            await scheduler.add_many(["https://b.example/1", "https://b.example/2"])
            scheduler.release(request)
            await asyncio.sleep(0.3)  # the release's batch runs meanwhile
            store = scheduler.frontier._store
            assert isinstance(store, redis_store.RedisStore)
            assert len(store._buffer) == 0, [r.url for r, _ in store._buffer]
            with crawlq.open_frontier(url) as other:
                return other.pop()

    popped = asyncio.run(crawl())
    assert popped is not None
