"""The cluster store told how many pops follow a write (`ClusterStore.expect_pops`).

The asyncio `Scheduler` says it for each batch. Without it, every shard
leased batches of its own that grew to ``prefetch`` while the merge took one
head at a time, and each write of a good enough request to a shard gave its
batch back and leased it again: on A1 (``benchmarks.cluster_a1``) about 33
leases and 32 give-backs per page on 16 shards. These run on the session's
cluster of 3 primaries (``tests.redis_cluster``), 16 shards.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

import crawlq
from crawlq import Request
from crawlq.stores.redis.cluster.store import ClusterStore
from crawlq.stores.redis.store import RedisStore
from tests._in_step import crawl_in_step

_names = itertools.count()


@pytest.fixture
def crawl(redis_cluster_url: str) -> str:
    return f"{redis_cluster_url}?crawl=expect-pops-{next(_names)}"


class Leases:
    """What every shard leased and gave back, counted where replies are taken."""

    def __init__(self) -> None:
        self.leased = 0
        self.given_back = 0


@pytest.fixture
def leases(monkeypatch: pytest.MonkeyPatch) -> Iterator[Leases]:
    counted = Leases()
    take = RedisStore._take

    def counting(store: RedisStore, reply: list[Any], started: float) -> None:
        if reply[1] == 1:  # (2: a top-up, nothing given back)
            counted.given_back += len(store._buffer)
        counted.leased += (len(reply) - 2) // 4
        take(store, reply, started)

    monkeypatch.setattr(RedisStore, "_take", counting)
    yield counted


def _held(store: ClusterStore) -> list[int]:
    return [len(shard._buffer) for shard in store._shards]


def test_a_scheduler_crawl_leases_each_request_about_once(crawl: str, leases: Leases) -> None:
    """32 workers in step on 16 shards: no shard's batch given back and leased again per page."""
    pages = 640

    async def run() -> tuple[int, list[int]]:
        async with crawlq.Scheduler(crawlq.open_frontier(crawl)) as scheduler:
            store = scheduler.frontier._store
            assert isinstance(store, ClusterStore)
            await scheduler.add_many([Request(f"https://s{i}.example/") for i in range(64)])
            done = await crawl_in_step(scheduler, pages, ack_with_links=False)
            return done, _held(store)

    done, held = asyncio.run(run())
    assert done >= pages
    # Each shard holds its share of the pops (one: the merge's head here),
    # or up to four after a better link topped it up (refill.lua), never a
    # batch grown towards prefetch.
    assert max(held) <= 4
    # Before expect_pops: 18 leased and 17 given back per page. A batch went
    # back when a write brought its shard one at least as good (priorities
    # -2 to 2 here: often) or acked a host it holds (the fewest-leases rule):
    # 1.6 requests a page, each leased again. Now a better one tops the
    # batch up instead (refill.lua), unless that would hold more than four:
    # about 0.5 a page. The rest are the pages, the requests the shards hold
    # at the end (16 x 4 at most) and those the Scheduler leased ahead for
    # its 32 getters.
    assert leases.given_back <= done
    assert leases.leased <= done + leases.given_back + 16 * 4 + 32


def test_expected_pops_keep_the_order_across_shards(crawl: str, leases: Leases) -> None:
    """Said pops come in exact priority order across shards; a worse write gives nothing back."""
    frontier = crawlq.open_frontier(crawl)
    store = frontier._store
    assert isinstance(store, ClusterStore)
    frontier.add_many([Request(f"https://h{n}.example/", priority=n % 10) for n in range(40)])
    frontier._expect_pops(5)
    first = [frontier.pop() for _ in range(5)]
    frontier._expect_pops(None)
    assert [r.priority for r in first if r is not None] == [9, 9, 9, 9, 8]
    assert max(_held(store)) <= 2
    # Links worse than every request held: the write gives nothing back.
    frontier._expect_pops(3)
    back = leases.given_back
    links = [frontier._entry(Request(f"https://h{n}.example/x", priority=-1)) for n in range(40)]
    added = frontier._write(links, [r._lease for r in first if r is not None])
    assert added == [True] * 40 and leases.given_back == back
    second = [frontier.pop() for _ in range(3)]
    frontier._expect_pops(None)
    assert [r.priority for r in second if r is not None] == [8, 8, 8]
    # A link better than anything queued: leased in the write's round trip
    # and served next, wherever its shard.
    frontier._expect_pops(1)
    frontier._write([frontier._entry(Request("https://best.example/", priority=50))], [])
    best = frontier.pop()
    frontier._expect_pops(None)
    assert best is not None and best.url == "https://best.example/"
    rest = [r.priority for r in iter(frontier.pop, None)]
    assert rest == sorted(rest, reverse=True) and len(rest) == 40 + 40 + 1 - 9
    frontier.close()


def test_no_pops_said_leases_nothing_ahead(crawl: str, leases: Leases) -> None:
    """``expect_pops(0)`` (a batch without getters): the write leases nothing."""
    frontier = crawlq.open_frontier(crawl)
    store = frontier._store
    assert isinstance(store, ClusterStore)
    frontier._expect_pops(0)
    frontier._write([frontier._entry(Request(f"https://z{n}.example/")) for n in range(20)], [])
    frontier._expect_pops(None)
    assert leases.leased == 0 and sum(_held(store)) == 0
    assert len(frontier) == 20
    frontier.close()


def test_few_shards_each_lease_their_share_of_the_pops(redis_cluster_url: str) -> None:
    """3 shards: a write's call leases a third of the batch's pops, not two; fewer calls a page."""
    pages = 640
    calls = {"replies": 0, "most": 0}
    take = RedisStore._take

    def counting(store: RedisStore, reply: list[Any], started: float) -> None:
        calls["replies"] += 1
        calls["most"] = max(calls["most"], (len(reply) - 2) // 4)
        take(store, reply, started)

    async def run() -> tuple[int, list[int]]:
        frontier = crawlq.open_frontier(
            f"{redis_cluster_url}?crawl=expect-pops-{next(_names)}", shards=3
        )
        async with crawlq.Scheduler(frontier) as scheduler:
            store = scheduler.frontier._store
            assert isinstance(store, ClusterStore)
            await scheduler.add_many([Request(f"https://s{i}.example/") for i in range(64)])
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(RedisStore, "_take", counting)
                done = await crawl_in_step(scheduler, pages, ack_with_links=False)
            return done, _held(store)

    done, held = asyncio.run(run())
    assert done >= pages
    assert max(held) <= 11 and calls["most"] > 2
    assert calls["replies"] <= 0.4 * done
