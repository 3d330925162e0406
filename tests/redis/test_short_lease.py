"""A call that leases fewer than the pops said to follow answers them: no call more.

The Scrapy scheduler and the asyncio `Scheduler` say how many pops follow a
write (`expect_pops`), pop, and on None ask `next_ready_in`. When the write
could lease fewer than that (nothing else was ready), its reply says so and
when a pop may lease again; the next pop and the next wait are answered from
it, once each and only for a moment (``SHORT_FOR``), instead of two more
round trips that would find the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

import crawlq
from crawlq import Request
from crawlq.stores.redis import calls as redis_calls
from crawlq.stores.redis import store as redis_store


def _store(frontier: crawlq.Frontier) -> redis_store.RedisStore:
    store = frontier._store
    assert isinstance(store, redis_store.RedisStore)
    return store


def test_pops_said_to_follow_a_short_lease_are_answered_by_it(url: str) -> None:
    frontier = crawlq.open_frontier(url, host_delay=5.0)
    store = _store(frontier)
    frontier.add_many([Request(f"https://a.example/{i}") for i in range(3)])
    frontier._expect_pops(2)
    first = frontier.pop()  # leases a/0; a.example then waits out its delay
    assert first is not None and first.url == "https://a.example/0"
    before = store._calls
    reads = _count_reads(store)
    assert frontier.pop() is None  # the call said nothing else was ready
    wait = frontier.next_ready_in()  # and when: a.example's delay (and hold)
    assert store._calls == before and reads() == 0
    assert wait is not None and 4.5 < wait <= 5.0 + frontier.policy.hold
    # Once each: the next ones ask the server, which says the same.
    assert frontier.pop() is None
    assert store._calls == before + 1
    again = frontier.next_ready_in()
    assert reads() == 1 and again is not None and again <= wait
    frontier.close()


def test_a_pop_whose_own_call_found_nothing_leaves_no_answer_for_the_next(url: str) -> None:
    """Its call answered it: the next pop asks (a timer's pop once got a stale None here)."""
    frontier = crawlq.open_frontier(url)
    other = crawlq.open_frontier(url)
    frontier._expect_pops(2)
    assert frontier.pop() is None  # its own call leased none of the two
    other.add(Request("https://b.example/"))
    later = frontier.pop()
    assert later is not None and later.url == "https://b.example/"
    other.close()
    frontier.close()


def test_a_request_ready_within_moments_is_asked_for(url: str) -> None:
    frontier = crawlq.open_frontier(url, host_delay=redis_calls.SHORT_SOON / 2)
    store = _store(frontier)
    frontier.add_many([Request(f"https://a.example/{i}") for i in range(2)])
    frontier._expect_pops(2)
    first = frontier.pop()  # a.example/1 is ready a moment after it
    assert first is not None
    before = store._calls
    frontier.pop()  # whatever it finds, it asked
    assert store._calls == before + 1
    frontier.close()


def test_a_short_write_with_nothing_left_says_only_an_add_helps(url: str) -> None:
    frontier = crawlq.open_frontier(url, ack_delay=0)
    store = _store(frontier)
    _ack_leasing_none(frontier, 4)  # its call would lease four: there is none
    before, reads = store._calls, _count_reads(store)
    assert frontier.pop() is None
    assert frontier.next_ready_in() is None  # nothing queued, leased or scheduled
    assert store._calls == before and reads() == 0
    frontier.close()


@pytest.mark.parametrize("after", ["the answered pop", "the answer's moment"])
def test_another_workers_add_is_seen_once_the_answer_is_spent(url: str, after: str) -> None:
    frontier = crawlq.open_frontier(url, ack_delay=0)
    other = crawlq.open_frontier(url)
    _ack_leasing_none(frontier, 2)
    other.add(Request("https://b.example/"))
    if after == "the answered pop":
        assert frontier.pop() is None  # answered by the ack's call, before the add
    else:
        time.sleep(redis_calls.SHORT_FOR * 1.5)
        assert frontier.next_ready_in() == 0.0  # asked again: b.example is ready
    later = frontier.pop()
    assert later is not None and later.url == "https://b.example/"
    frontier.ack(later)
    other.close()
    frontier.close()


def test_pops_not_said_to_follow_always_ask(url: str) -> None:
    frontier = crawlq.open_frontier(url)
    store = _store(frontier)
    other = crawlq.open_frontier(url)
    _ack_leasing_none(frontier, None)  # a caller that keeps popping: leases one ahead
    other.add(Request("https://b.example/"))
    before = store._calls
    later = frontier.pop()
    assert later is not None and later.url == "https://b.example/"
    assert store._calls == before + 1
    other.close()
    frontier.close()


def test_a_wait_asked_with_acks_waiting_counts_what_sending_them_leased(url: str) -> None:
    """next_ready_in sends the acks waiting here; a request their call leased is ready now."""
    frontier = crawlq.open_frontier(url, ack_delay=3600)
    other = crawlq.open_frontier(url)
    frontier.add(Request("https://a.example/"))
    request = frontier.pop()
    assert request is not None
    frontier.ack(request)  # waits here
    other.add(Request("https://b.example/"))
    frontier._expect_pops(1)
    assert frontier.next_ready_in() == 0.0  # the acks' call leased b.example/
    later = frontier.pop()
    assert later is not None and later.url == "https://b.example/"
    other.close()
    frontier.close()


def test_waiting_acks_are_sent_before_an_answer_is_trusted(url: str) -> None:
    """An ack held here may free its host: the pop after it asks the server."""
    frontier = crawlq.open_frontier(url, host_concurrency=1, ack_delay=3600)
    frontier.add_many([Request(f"https://a.example/{i}") for i in range(2)])
    frontier._expect_pops(2)
    first = frontier.pop()  # a.example is at its limit after it
    assert first is not None
    frontier.ack(first)  # waits here
    second = frontier.pop()
    assert second is not None and second.url == "https://a.example/1"
    frontier.close()


def _ack_leasing_none(frontier: crawlq.Frontier, pops: int | None) -> None:
    """Queue a request, pop it and ack it, ``pops`` said to follow: the ack's call leases none."""
    frontier.add(Request("https://a.example/"))
    request = frontier.pop()
    assert request is not None
    if pops is not None:
        frontier._expect_pops(pops)
    frontier.ack(request)


def _count_reads(store: redis_store.RedisStore) -> Callable[[], int]:
    """Count the store's read calls from now on (``next_ready_in``'s look at the server)."""
    count = 0
    read = store._read

    def counting(*args: bytes) -> object:
        nonlocal count
        count += 1
        return read(*args)

    store._read = counting  # type: ignore[method-assign]
    return lambda: count
