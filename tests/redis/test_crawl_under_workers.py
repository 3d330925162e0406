"""A crawl that vanishes or changes format under its workers stops them, loudly.

A redis-server restarted without persistence, a FLUSHALL or a purge while
workers run leaves them on a crawl that lost everything it held. crawlq
must say so (CorruptStore from every call) instead of going on as an empty
crawl whose workers pop nothing, count nothing queued and end as if done.
A crawl a newer crawlq upgraded in place while older workers ran must stop
them (IncompatibleStore) before they misread its new layout.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from importlib import resources
from typing import Any

import pytest
import redis

import crawlq
from crawlq import Request
from crawlq.stores.redis import open as redis_open
from crawlq.stores.redis import store as redis_store
from crawlq.stores.redis.cluster import inspection as cluster_admin
from tests.redis_server import StartServer

#: A crawl's functions look for its keys at least this often (BOUND_MS).
LOOK_AGAIN = 1.1


def calls(frontier: crawlq.Frontier, held: crawlq.Request) -> dict[str, Callable[[], Any]]:
    """Each kind of call a worker makes, by name."""
    return {
        "pop": frontier.pop,
        "add links": lambda: frontier.add_many([Request("https://new.example/a")]),
        "add with an ack": lambda: frontier.add_many([Request("https://new.example/b")], ack=held),
        "ack": lambda: (frontier.ack(held), frontier.flush()),
        "len": lambda: len(frontier),
        "stats": frontier.stats,
        "block": lambda: frontier.block_host("a.example", 5.0),
    }


def working(url: str) -> tuple[crawlq.Frontier, crawlq.Request]:
    """A worker's frontier on a crawl of six hosts, holding one request."""
    frontier = crawlq.open_frontier(url, host_delay=0.0, ack_delay=0)
    frontier.add_many([f"https://{h}.example/" for h in "abcdef"])
    held = frontier.pop()
    assert held is not None
    return frontier, held


def assert_gone(name: str, call: Callable[[], Any]) -> None:
    with pytest.raises(crawlq.CorruptStore) as raised:
        call()
    message = str(raised.value)
    assert "is gone from Redis" in message and "appendonly yes" in message, (name, message)


@pytest.mark.parametrize("how", ["flushall", "purge"])
def test_a_crawl_whose_keys_vanish_raises_corrupt_store_from_every_call(
    redis_servers: StartServer, how: str
) -> None:
    server = redis_servers()
    url = f"{server.url}?crawl=vanishing"
    frontier, held = working(url)
    try:
        if how == "flushall":
            client = redis.Redis(port=server.port)
            client.flushall()
            client.close()
        else:
            assert redis_store.purge(url) > 0
        # What reads counts, and an add of links alone, look at once.
        assert_gone("len", lambda: len(frontier))
        assert_gone("add links", lambda: frontier.add_many([Request("https://new.example/")]))
        time.sleep(LOOK_AGAIN)  # every other call looks within a second
        for name, call in calls(frontier, held).items():
            assert_gone(name, call)
    finally:
        frontier.close()
    # Opened anew, it starts afresh.
    with crawlq.open_frontier(url, host_delay=0.0) as fresh:
        assert len(fresh) == 0
        assert fresh.add(Request("https://a.example/"))
        assert fresh.pop() is not None


def test_what_a_call_left_of_a_vanished_crawl_is_refused_at_open_until_purged(
    redis_servers: StartServer,
) -> None:
    server = redis_servers()
    url = f"{server.url}?crawl=remnant"
    # What a call made in the second before the workers noticed leaves: a
    # request and its counters, no format.
    client = redis.Redis(port=server.port)
    client.hset("crawlq:{remnant}:meta", mapping={"seq": 1, "accepted": 1})
    client.close()
    with pytest.raises(crawlq.IncompatibleStore, match=r"no key format.*purge it"):
        crawlq.open_frontier(url)
    assert redis_store.purge(url) >= 1
    with crawlq.open_frontier(url) as fresh:
        assert fresh.add(Request("https://a.example/"))


def test_a_cluster_crawl_purged_under_its_workers_raises_corrupt_store(
    redis_cluster_url: str,
) -> None:
    url = f"{redis_cluster_url}?crawl=purged-under-workers"
    frontier, held = working(url)
    try:
        assert cluster_admin.purge(url) > 0
        time.sleep(LOOK_AGAIN)
        for name, call in calls(frontier, held).items():
            assert_gone(name, call)
    finally:
        frontier.close()
    cluster_admin.purge(url)  # (what closing gave back, if it could)


def test_a_server_restarted_without_persistence_fails_the_first_call_after(
    redis_servers: StartServer,
) -> None:
    server = redis_servers()  # no appendonly, no snapshots
    url = f"{server.url}?crawl=amnesia"
    frontier, held = working(url)
    with frontier:
        server.restart(crash=True)
        for name, call in calls(frontier, held).items():
            assert_gone(name, call)


async def test_the_asyncio_scheduler_raises_it_to_its_workers(
    redis_servers: StartServer,
) -> None:
    server = redis_servers()
    url = f"{server.url}?crawl=amnesia-aio"
    with crawlq.open_frontier(url, host_delay=0.0) as frontier:
        async with crawlq.Scheduler(frontier) as scheduler:
            await scheduler.add_many([f"https://{h}.example/" for h in "abcdef"])
            page = await scheduler.get()
            server.restart(crash=True)
            with pytest.raises(crawlq.CorruptStore):
                await asyncio.wait_for(
                    scheduler.add_many([Request("https://a.example/next")], ack=page), 15
                )
            with pytest.raises(crawlq.CorruptStore):
                await asyncio.wait_for(scheduler.get(), 15)
            with pytest.raises(crawlq.CorruptStore):
                await asyncio.wait_for(scheduler.join(), 15)


def test_a_crawl_upgraded_by_a_newer_crawlq_stops_the_older_workers(
    redis_servers: StartServer,
) -> None:
    server = redis_servers()
    url = f"{server.url}?crawl=upgraded"
    frontier, held = working(url)
    try:
        newer = str(redis_open.FORMAT + 1)
        client = redis.Redis(port=server.port)
        client.hset("crawlq:{upgraded}:meta", "format", newer)  # what its opener writes first
        client.close()
        time.sleep(LOOK_AGAIN)
        for name, call in calls(frontier, held).items():
            with pytest.raises(crawlq.IncompatibleStore) as raised:
                call()
            message = str(raised.value)
            assert f"is now in key format {newer}" in message, (name, message)
            assert "same crawlq version on every worker" in message, (name, message)
    finally:
        frontier.close()
    with pytest.raises(crawlq.IncompatibleStore, match="newer than this crawlq"):
        crawlq.open_frontier(url)


def test_the_functions_and_the_opener_agree_on_the_key_format() -> None:
    shared = resources.files("crawlq.stores.redis").joinpath("lua/shared.lua").read_text()
    assert f"local FORMAT = '{redis_open.FORMAT}'" in shared
