"""Due times through the asyncio `Scheduler`, on every store.

Workers wait in ``get()`` for the first due request (woken at its time, not
by polling), retry with ``release(delay=)``, refetch with
``task_done(refetch_after=)``; ``join`` waits for scheduled work but not for
revisits, and ``join(idle_for=)`` keeps a pool fed from outside open until
the crawl has been idle that long.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import crawlq
from crawlq import Request, Scheduler

from ..conftest import OpenFrontier

WAIT = 0.4


def test_get_waits_for_the_first_due_request(open_store: OpenFrontier) -> None:
    frontier = open_store()

    async def main() -> float:
        async with Scheduler(frontier) as scheduler:
            due = time.time() + WAIT
            await scheduler.add(Request("https://a.example/1", not_before=due))
            assert scheduler.stats().scheduled == 1
            request = await asyncio.wait_for(scheduler.get(), 5)
            late = time.time() - due
            assert request.url == "https://a.example/1"
            scheduler.task_done(request)
            await asyncio.wait_for(scheduler.join(), 5)
            return late

    late = asyncio.run(main())
    assert -0.01 <= late < 0.6  # never early; woken near its time


def test_a_retry_with_backoff_does_not_hold_a_worker(open_store: OpenFrontier) -> None:
    frontier = open_store(ack_delay=0)
    fetched: list[tuple[str, float]] = []

    async def worker(scheduler: Scheduler) -> None:
        while True:
            request = await scheduler.get()
            fetched.append((request.url, time.monotonic()))
            tries = int(request.meta.get("tries", 0))
            if request.url.endswith("/flaky") and tries < 2:
                update = request.replace(meta={"tries": tries + 1})
                scheduler.release(request, update=update, delay=WAIT * (tries + 1))
            else:
                scheduler.task_done(request)

    async def main() -> None:
        async with Scheduler(frontier) as scheduler:
            await scheduler.add_many(
                ["https://a.example/flaky"] + [f"https://b{i}.example/" for i in range(5)]
            )
            task = asyncio.create_task(worker(scheduler))
            await asyncio.wait_for(scheduler.join(), 10)  # waits for the retries
            task.cancel()

    asyncio.run(main())
    flaky = [at for url, at in fetched if url.endswith("/flaky")]
    others = [at for url, at in fetched if not url.endswith("/flaky")]
    assert len(flaky) == 3 and len(others) == 5
    assert max(others) < flaky[1]  # the one worker went on while the retry waited
    assert flaky[1] - flaky[0] >= WAIT - 0.02
    assert flaky[2] - flaky[1] >= 2 * WAIT - 0.02
    assert len(frontier) == 0


def test_join_does_not_wait_for_revisits(open_store: OpenFrontier) -> None:
    frontier = open_store(ack_delay=0)

    async def main() -> None:
        async with Scheduler(frontier) as scheduler:
            await scheduler.add(Request("https://a.example/page"))
            page = await scheduler.get()
            await scheduler.add_many(["https://b.example/link"], ack=page, refetch_after=3600)
            link = await scheduler.get()
            scheduler.task_done(link, refetch_after=3600)
            started = time.monotonic()
            await asyncio.wait_for(scheduler.join(), 5)
            assert time.monotonic() - started < 2
            stats = scheduler.stats()
            assert (stats.queued, stats.in_flight, stats.scheduled) == (0, 0, 2)

    asyncio.run(main())
    stats = frontier.stats()
    assert (stats.revisits, stats.counters.refetched, len(frontier)) == (2, 2, 2)


def test_task_done_refetches_and_the_page_comes_back(open_store: OpenFrontier) -> None:
    frontier = open_store(ack_delay=0)

    async def main() -> list[str]:
        got = []
        async with Scheduler(frontier) as scheduler:
            await scheduler.add(Request("https://a.example/page"))
            first = await scheduler.get()
            got.append(first.url)
            scheduler.task_done(first, refetch_after=WAIT)
            again = await asyncio.wait_for(scheduler.get(), 5)
            got.append(again.url)
            scheduler.task_done(again)
            await asyncio.wait_for(scheduler.join(), 5)
        return got

    assert asyncio.run(main()) == ["https://a.example/page"] * 2
    assert frontier.stats().counters.refetched == 1 and len(frontier) == 0


def test_bad_delays_raise_at_the_call_and_release_nothing(open_store: OpenFrontier) -> None:
    frontier = open_store()

    async def main() -> None:
        async with Scheduler(frontier) as scheduler:
            await scheduler.add(Request("https://a.example/1"))
            request = await scheduler.get()
            with pytest.raises(crawlq.InvalidRequest, match="delay"):
                scheduler.release(request, delay=-1)
            with pytest.raises(crawlq.InvalidRequest, match="refetch_after"):
                scheduler.task_done(request, refetch_after=float("nan"))
            with pytest.raises(crawlq.ConfigError, match="revisit"):
                scheduler.task_done(request, changed=True)
            with pytest.raises(crawlq.InvalidRequest, match="idle_for"):
                await scheduler.join(idle_for=-1)
            assert scheduler.stats().in_flight == 1
            scheduler.task_done(request)
            await asyncio.wait_for(scheduler.join(), 5)

    asyncio.run(main())
    assert len(frontier) == 0


def test_join_idle_for_waits_for_work_fed_from_outside(
    open_store: OpenFrontier, store_url: str
) -> None:
    frontier = open_store(ack_delay=0)
    # Another frontier object on the same crawl feeds it, as another process
    # would (Redis); a memory frontier shares nothing and a SQLite job admits
    # one opener, so there the scheduler itself is fed.
    memory = not store_url.startswith("redis")
    feeder = frontier if memory else open_store(ack_delay=0)
    fetched: list[str] = []

    async def worker(scheduler: Scheduler) -> None:
        while True:
            request = await scheduler.get()
            fetched.append(request.url)
            scheduler.task_done(request)

    async def feed(scheduler: Scheduler) -> None:
        for batch in range(3):
            await asyncio.sleep(0.3)
            urls = [f"https://f{batch}.example/{i}" for i in range(5)]
            if memory:
                await scheduler.add_many(urls)
            else:
                await asyncio.to_thread(feeder.add_many, urls)

    async def main() -> float:
        async with Scheduler(frontier) as scheduler:
            workers = [asyncio.create_task(worker(scheduler)) for _ in range(2)]
            feeding = asyncio.create_task(feed(scheduler))
            started = time.monotonic()
            await asyncio.wait_for(scheduler.join(idle_for=1.0), 15)
            took = time.monotonic() - started
            await feeding
            for task in workers:
                task.cancel()
        return took

    took = asyncio.run(main())
    assert sorted(fetched) == sorted(
        f"https://f{b}.example/{i}" for b in range(3) for i in range(5)
    )
    # The last batch came at ~0.9 s; join returned about a second after it.
    assert 1.6 <= took < 4.0
