"""Requests that come back or come due deep in a long lane (key format 8's r:HOST).

A request whose place is deeper in its host's list than the few entries
looked at is filed in zset r:HOST and merged back as the host's queue is
popped. These check that the order is the one every store keeps (the memory
store is the oracle), and that making a due request ready costs the same
number of Redis commands whatever the depth of its lane (INFO commandstats,
not wall time).
"""

from __future__ import annotations

import random
import time

import pytest
import redis

import crawlq
from crawlq import Request
from crawlq.stores.redis import store as redis_store
from tests.redis._wide import strip_wide


def _prefix(url: str) -> str:
    return f"crawlq:{{{url.rpartition('=')[2]}}}:"


def _set_up(url: str, before: int, after: int, wait: float) -> float:
    """A host whose lane holds ``before`` + ``after`` requests and 22 coming due between them.

    20 added with a not_before, a refetch (a new number, taken between the
    two batches) and a delayed release (its own number: the lane's front).
    Returns when they are due.
    """
    frontier = crawlq.open_frontier(url, ack_delay=0, prefetch=1)
    frontier.add_many([f"https://a.example/{i}" for i in range(before)])
    first, second = frontier.pop(), frontier.pop()
    assert first is not None and second is not None
    due = time.time() + wait
    frontier.add_many([Request(f"https://a.example/due{k}", not_before=due) for k in range(20)])
    frontier.ack(first, refetch_after=wait)
    frontier.release(second, delay=wait)
    frontier.add_many([f"https://a.example/{i}" for i in range(before, before + after)])
    frontier.close()  # gives back what it leased ahead: the next pop is a call of its own
    return due + 0.05


def _commands(server: redis.Redis) -> dict[str, int]:
    stats = server.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): value["calls"]
        for name, value in stats.items()
        if name not in ("cmdstat_fcall", "cmdstat_info", "cmdstat_config|resetstat")
    }


def _expected(before: int, after: int) -> list[str]:
    # The delayed release keeps its place (the front); the not_before ones
    # theirs (after the first batch); the refetch its number taken at its ack.
    return [
        "https://a.example/1",
        *(f"https://a.example/{i}" for i in range(2, before)),
        *(f"https://a.example/due{k}" for k in range(20)),
        "https://a.example/0",
        *(f"https://a.example/{i}" for i in range(before, before + after)),
    ]


def test_due_requests_return_into_a_deep_lane_in_constant_commands(
    redis_url: str, url: str
) -> None:
    """50,000 queued in one host: each of 22 due requests costs what it costs in a lane of 2,000."""
    server = redis.Redis.from_url(redis_url)
    measured = {}
    shallow_url = url + "-shallow"
    for name, crawl, size in (("shallow", shallow_url, 1_000), ("deep", url, 25_000)):
        ready_at = _set_up(crawl, size, size, 3.0)
        frontier = crawlq.open_frontier(crawl, ack_delay=0, prefetch=1)
        time.sleep(max(0.0, ready_at - time.time()))
        server.config_resetstat()
        request = frontier.pop()  # one call: the 22 made ready, then one leased
        measured[name] = _commands(server)
        assert request is not None and request.url == "https://a.example/1"
        frontier.release(request)  # back to its place, the front
        returned = server.zcard(_prefix(crawl) + "r:a.example")
        assert returned == 21  # deep in the lane: filed in r:HOST (the release went first)
        assert server.zcard(_prefix(crawl) + "due") == 0
        frontier.close()
    server.close()
    # The same commands, as many, whatever the lane's depth: no walk to the place.
    assert measured["deep"] == measured["shallow"]
    moved = sum(measured["deep"].values())
    assert moved <= 15 + 10 * 22, measured["deep"]

    # The deep lane hands its requests out in order (and r:HOST empties).
    frontier = crawlq.open_frontier(url, ack_delay=0.5)
    assert [r.url for r in iter(frontier.pop, None)] == _expected(25_000, 25_000)
    assert not redis.Redis.from_url(redis_url).exists(_prefix(url) + "r:a.example")
    frontier.close()
    redis_store.purge(shallow_url)


@pytest.mark.parametrize("lifo", [False, True], ids=["fifo", "lifo"])
def test_order_with_deep_returns_matches_the_memory_store(url: str, lifo: bool) -> None:
    """Releases, delays, refetches and not_before deep in long lanes: the order of every store."""
    rng = random.Random(8)
    frontiers = [
        crawlq.open_frontier("memory://", lifo=lifo, ack_delay=0, host_delay=0),
        crawlq.open_frontier(url, lifo=lifo, ack_delay=0, host_delay=0),
    ]
    due = time.time() + 1.5
    later: list[str] = []

    def both(step: str, *args: object, **kwargs: object) -> list[object]:
        return [getattr(frontier, step)(*args, **kwargs) for frontier in frontiers]

    both("add_many", [Request(f"https://a.example/x{i}", priority=i % 2) for i in range(400)])
    both("add_many", [f"https://a.example/y{i}" for i in range(150)], lifo=not lifo)
    for round_ in range(3):
        popped = [both("pop") for _ in range(40)]
        for memory_request, redis_request in popped:
            assert memory_request is not None and redis_request is not None
            assert memory_request.url == redis_request.url
        both("add_many", [f"https://a.example/r{round_}-{i}" for i in range(200)])
        for k, pair in enumerate(popped):
            how = rng.choice(["release", "delay", "refetch", "update"])
            for frontier, request in zip(frontiers, pair, strict=True):
                assert request is not None
                if how == "release":
                    frontier.release(request)
                elif how == "delay":
                    frontier.release(request, delay=max(0.01, due - time.time()))
                elif how == "refetch":
                    frontier.ack(request, refetch_after=max(0.01, due - time.time()))
                else:
                    frontier.release(request, update=request.replace(priority=k % 3))
        late = [
            Request(f"https://a.example/n{round_}-{i}", priority=i % 3, not_before=due)
            for i in range(15)
        ]
        later += [r.url for r in late]
        both("add_many", late)
    time.sleep(max(0.0, due - time.time()) + 0.05)
    # Requests it leased ahead before these came due go out first (as for a
    # host whose delay ends): given back, so both hand out the same order.
    frontiers[1].close()
    frontiers[1] = crawlq.open_frontier(url, lifo=lifo, ack_delay=0, host_delay=0)
    orders = []
    for n, frontier in enumerate(frontiers):
        order = []
        while (request := frontier.pop()) is not None:
            if n == 1 and not order:  # the due ones are in place: some deep in their lanes
                client = redis.Redis.from_url(url.partition("?")[0])
                assert client.zcard(_prefix(url) + "r:a.example") > 0
                client.close()
            order.append(request.url)
            frontier.ack(request)
        orders.append(order)
        frontier.close()
    assert orders[1] == orders[0]
    assert len(orders[0]) == 400 + 150 + 3 * (200 + 15)
    assert set(later) <= set(orders[0])


def test_a_crawl_of_key_format_7_is_upgraded_in_place(url: str) -> None:
    """Format 7 holds no r:HOST and no marks: the open only moves the format on."""
    from crawlq.stores.redis.open import FORMAT

    frontier = crawlq.open_frontier(url, ack_delay=0)
    frontier.add_many([f"https://a.example/{i}" for i in range(300)])
    frontier.add(Request("https://a.example/later", not_before=time.time() + 0.3))
    frontier.close()
    client = redis.Redis.from_url(url.partition("?")[0])
    meta = _prefix(url) + "meta"
    client.hset(meta, "format", "7")  # what crawlq with key format 7 left
    strip_wide(client, _prefix(url))
    frontier = crawlq.open_frontier(url, ack_delay=0)
    assert FORMAT == 9 and client.hget(meta, "format") == b"9"
    stats = frontier.stats()
    assert (stats.queued, stats.scheduled) == (300, 1)
    time.sleep(0.35)
    out = [r.url for r in iter(frontier.pop, None)]
    assert out == [f"https://a.example/{i}" for i in range(300)] + ["https://a.example/later"]
    client.close()
    frontier.close()
