"""A host's delay holds where it matters, at hand-out, for requests a worker leased ahead.

A Redis worker leases ahead: the store prefetches a batch and serves it
locally, and the asyncio `Scheduler` leases a worker's next request with its
write. The server starts a host's delay at the lease; a request that then
waited in the worker before going out would reach its host sooner than the
delay after the next worker's request of that host. These crawls hand out
their requests at the pace of a real crawl (a fetch of 0 to 60 ms between
two pops, a slow parse after a write), log each hand-out with
`time.monotonic` (one clock for the threads of this process), and check the
gaps per host across workers. Before the fix, prefetched requests went out
as little as 36 ms after the last one of their host, with a delay of 100 ms.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable

import pytest

import crawlq

DELAY = 0.1
HOSTS = 4
PAGES = 25
#: The time from a lease's reply to its hand-out being logged, when nothing
#: waits: a few milliseconds at most on this machine, under load too.
SLACK = 0.005


def pages() -> list[str]:
    return [f"https://h{h}.example/p{i}" for h in range(HOSTS) for i in range(PAGES)]


def assert_paced(handouts: Iterable[tuple[float, str]]) -> None:
    at: dict[str, list[float]] = defaultdict(list)
    for when, url in handouts:
        at[url.split("/")[2]].append(when)
    assert len(at) == HOSTS
    assert sum(len(times) for times in at.values()) == HOSTS * PAGES
    for host, times in at.items():
        gaps = [b - a for a, b in itertools.pairwise(sorted(times))]
        shortest = min(gaps)
        assert shortest >= DELAY - SLACK, (
            f"{host}: two hand-outs {shortest * 1000:.1f} ms apart (delay {DELAY * 1000:.0f} ms); "
            f"{sum(g < DELAY - SLACK for g in gaps)} of {len(gaps)} gaps short"
        )


@pytest.fixture(params=["redis_url", "redis_cluster_url"])
def server_url(request: pytest.FixtureRequest) -> str:
    return f"{request.getfixturevalue(request.param)}?crawl=pace-{uuid.uuid4().hex[:8]}"


def test_prefetched_requests_keep_their_hosts_delay_at_hand_out(server_url: str) -> None:
    """Two workers with plain frontiers: pop, fetch for 0-60 ms, ack."""
    with crawlq.open_frontier(server_url, host_delay=DELAY) as seeder:
        seeder.add_many(pages())
    handouts: list[tuple[float, str]] = []

    def worker(seed: int) -> None:
        pause = random.Random(seed)
        with crawlq.open_frontier(server_url, host_delay=DELAY) as frontier:
            idle_since = time.monotonic()
            while time.monotonic() - idle_since < 1.0:
                request = frontier.pop()
                if request is None:
                    time.sleep(0.002)
                    continue
                handouts.append((time.monotonic(), request.url))
                idle_since = time.monotonic()
                time.sleep(pause.uniform(0, 0.06))
                frontier.ack(request)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert_paced(handouts)


def test_requests_leased_with_a_write_keep_their_hosts_delay_at_hand_out(
    server_url: str,
) -> None:
    """Scheduler workers: get, fetch, add the page's links with its ack, parse slowly, get."""
    handouts: list[tuple[float, str]] = []

    async def crawl() -> None:
        frontier = crawlq.open_frontier(server_url, host_delay=DELAY)
        async with crawlq.Scheduler(frontier) as scheduler:
            await scheduler.add_many(pages()[: HOSTS * 2])
            links = iter(pages()[HOSTS * 2 :])

            async def worker(seed: int) -> None:
                pause = random.Random(seed)
                while True:
                    try:
                        request = await asyncio.wait_for(scheduler.get(), 1.0)
                    except TimeoutError:
                        return
                    handouts.append((time.monotonic(), request.url))
                    await asyncio.sleep(pause.uniform(0, 0.03))
                    found = list(itertools.islice(links, 2))
                    await scheduler.add_many(found, ack=request)
                    # The parse goes on after the write: the next get waits.
                    await asyncio.sleep(pause.uniform(0, 0.09))

            await asyncio.gather(*(worker(seed) for seed in range(2)))

    asyncio.run(crawl())
    assert_paced(handouts)
