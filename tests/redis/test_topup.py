"""A prefetched batch topped up by a better request rather than given back (refill.lua).

With ``ack_delay`` > 0 a call that makes a request of higher priority than
the last one a worker's batch holds ready leases the higher ones on top of
the batch, and the worker merges them in by priority, then id: priority
order and first-in-first-out within a host must hold as they do when the
batch goes back; only the fewest-in-flight order between hosts of one
priority may differ.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import redis

import crawlq
from crawlq import Request
from crawlq.stores.redis.store import RedisStore
from tests.redis.test_store import _lose_next_reply


class Replies:
    """What each call's reply did with the batch: 1 given back, 2 topped up."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.given_back = 0
        self.topped_up = 0
        take = RedisStore._take

        def counting(store: RedisStore, reply: list[Any], started: float) -> None:
            if reply[1] == 1:
                self.given_back += 1
            elif reply[1] == 2:
                self.topped_up += 1
            take(store, reply, started)

        monkeypatch.setattr(RedisStore, "_take", counting)


def _store(frontier: crawlq.Frontier) -> RedisStore:
    store = frontier._store
    assert isinstance(store, RedisStore)
    return store


def test_a_better_link_is_leased_on_top_of_the_batch(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    replies = Replies(monkeypatch)
    with crawlq.open_frontier(url, ack_delay=0.05) as frontier:
        store = _store(frontier)
        frontier.add_many([Request(f"https://h{p}.example/", priority=p) for p in (5, 4, 3, 2)])
        frontier._expect_pops(2)
        assert frontier.pop().priority == 5  # type: ignore[union-attr]
        assert [r.priority for r, _ in store._buffer] == [4]
        # Equal to the last held: it comes after it by id, nothing to lease.
        frontier._write([frontier._entry(Request("https://e.example/", priority=4))], [])
        assert [r.priority for r, _ in store._buffer] == [4] and replies.topped_up == 1
        # Better: leased on top, merged in first.
        frontier._write([frontier._entry(Request("https://b.example/", priority=9))], [])
        assert [r.priority for r, _ in store._buffer] == [9, 4]
        assert (replies.topped_up, replies.given_back) == (2, 0)
        popped = [r.url for r in iter(frontier.pop, None)]
        assert popped == [
            "https://b.example/",
            "https://h4.example/",
            "https://e.example/",
            "https://h3.example/",
            "https://h2.example/",
        ]


def test_with_ack_delay_0_the_batch_goes_back_as_before(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    replies = Replies(monkeypatch)
    with crawlq.open_frontier(url, ack_delay=0) as frontier:
        frontier.add_many([Request(f"https://h{p}.example/", priority=p) for p in (5, 4, 3)])
        frontier._expect_pops(2)
        frontier.pop()
        frontier._write([frontier._entry(Request("https://b.example/", priority=9))], [])
        assert (replies.topped_up, replies.given_back) == (0, 1)


def test_more_than_the_room_gives_the_batch_back(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Twice the pops said (2 here), at least 4: five better hosts at once go the old way."""
    replies = Replies(monkeypatch)
    with crawlq.open_frontier(url, ack_delay=0.05) as frontier:
        store = _store(frontier)
        frontier.add_many([Request(f"https://h{p}.example/", priority=p) for p in (5, 4, 3)])
        frontier._expect_pops(2)
        frontier.pop()
        frontier._expect_pops(2)
        better = [Request(f"https://b{i}.example/", priority=9) for i in range(5)]
        frontier._write([frontier._entry(r) for r in better], [])
        assert (replies.topped_up, replies.given_back) == (0, 1)
        assert [r.priority for r, _ in store._buffer] == [9, 9]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_worker_pops_in_priority_order_and_each_host_first_in_first_out(
    url: str, seed: int
) -> None:
    """Writes of random priorities between pops: every pop is the best ready request."""
    rng = random.Random(seed)
    queued: dict[str, int] = {}  # url -> priority, of what is queued and not yet popped
    order: dict[str, list[str]] = {}  # host -> its urls in the order accepted
    popped_of: dict[str, list[str]] = {}
    n = 0
    with crawlq.open_frontier(url, ack_delay=0.05, host_concurrency=None) as frontier:
        for _ in range(120):
            links = []
            for _ in range(rng.randint(0, 4)):
                host = f"h{rng.randrange(6)}.example"
                priority = rng.randint(-3, 3)
                link = f"https://{host}/{n}?p={priority}"
                n += 1
                links.append(Request(link, priority=priority))
                queued[link] = priority
                order.setdefault(host, []).append(link)
            frontier._expect_pops(rng.randint(1, 4))
            frontier._write([frontier._entry(r) for r in links], [])
            request = frontier.pop()
            if request is None:
                continue
            assert request.priority == max(queued.values())
            del queued[request.url]
            host = request.url.split("/")[2]
            popped_of.setdefault(host, []).append(request.url)
            frontier.ack(request)
        for request in iter(frontier.pop, None):
            assert request.priority == max(queued.values())
            del queued[request.url]
            popped_of.setdefault(request.url.split("/")[2], []).append(request.url)
            frontier.ack(request)
    assert queued == {}
    for host, urls in order.items():
        # Within a host, requests of one priority go out first in, first out.
        for priority in range(-3, 4):
            mine = [u for u in urls if u.endswith(f"?p={priority}")]
            assert [u for u in popped_of.get(host, []) if u in mine] == mine


def test_a_topped_up_call_retried_after_a_lost_reply_holds_each_request_once(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    replies = Replies(monkeypatch)
    with crawlq.open_frontier(url, ack_delay=0.05) as frontier:
        store = _store(frontier)
        frontier.add_many([Request(f"https://h{p}.example/", priority=p) for p in (5, 4, 3)])
        frontier._expect_pops(2)
        frontier.pop()
        lost = _lose_next_reply(frontier, monkeypatch, redis.ConnectionError("reset (test)"))
        frontier._write([frontier._entry(Request("https://b.example/", priority=9))], [])
        assert lost and replies.topped_up == 1  # the retry's replayed outcome
        held = [r.url for r, _ in store._buffer]
        assert held == ["https://b.example/", "https://h4.example/"]
        rest = [r.url for r in iter(frontier.pop, None)]
        assert rest == [*held, "https://h3.example/"]
        assert frontier.stats().leased == 4  # those and the first pop: none leased twice


def test_a_request_that_comes_back_goes_before_its_hosts_held_one(url: str) -> None:
    """A released request keeps its place: before the request of its host the batch holds."""
    with crawlq.open_frontier(url, ack_delay=0.05, host_concurrency=None) as frontier:
        store = _store(frontier)
        frontier.add_many([Request(f"https://a.example/{i}", priority=1) for i in range(2)])
        frontier.add(Request("https://b.example/", priority=0))
        frontier._expect_pops(3)
        first = frontier.pop()
        assert first is not None and first.url == "https://a.example/0"
        assert store._buffer[0][0].url == "https://a.example/1"
        frontier.release(first)
        assert [r.url for r in iter(frontier.pop, None)] == [
            "https://a.example/0",
            "https://a.example/1",
            "https://b.example/",
        ]


def test_lifo_a_newer_request_goes_before_its_hosts_held_one(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Of the held request's own priority, the newer one needs the batch back (not merged)."""
    replies = Replies(monkeypatch)
    with crawlq.open_frontier(url, ack_delay=0.05, lifo=True) as frontier:
        store = _store(frontier)
        frontier.add_many([Request(f"https://a.example/{i}") for i in range(2)])
        frontier.add(Request("https://b.example/", priority=1))
        frontier._expect_pops(2)
        first = frontier.pop()
        assert first is not None and first.url == "https://b.example/"
        assert [r.url for r, _ in store._buffer] == ["https://a.example/1"]
        frontier._write([frontier._entry(Request("https://a.example/new"))], [])
        assert replies.given_back == 1
        assert [r.url for r in iter(frontier.pop, None)] == [
            "https://a.example/new",
            "https://a.example/1",
            "https://a.example/0",
        ]


def test_a_better_request_of_a_host_at_its_limit_goes_before_its_held_one(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host a may have one lease, the batch holds it: its better link needs the batch back."""
    replies = Replies(monkeypatch)
    with crawlq.open_frontier(url, ack_delay=0.05, host_concurrency=1) as frontier:
        frontier.add(Request("https://a.example/old", priority=1))
        frontier.add(Request("https://b.example/", priority=2))
        frontier._expect_pops(2)
        first = frontier.pop()
        assert first is not None and first.url == "https://b.example/"
        frontier._write([frontier._entry(Request("https://a.example/new", priority=5))], [])
        assert replies.given_back == 1 and replies.topped_up == 0
        second = frontier.pop()
        assert second is not None and second.url == "https://a.example/new"
        frontier.ack(second)
        third = frontier.pop()
        assert third is not None and third.url == "https://a.example/old"
