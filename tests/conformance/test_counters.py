"""Crawl-wide counters on every store: each event counted once, every worker's, kept.

Run against each store in ``STORES`` like the rest of the conformance suite.
"""

from __future__ import annotations

import time

import crawlq
from crawlq import Counters, Request

from ..conftest import OpenFrontier


def counters(frontier: crawlq.Frontier) -> Counters:
    return frontier.stats().counters


def test_a_new_frontier_counts_nothing(open_store: OpenFrontier) -> None:
    assert counters(open_store()) == Counters()


def test_each_event_is_counted_once(open_store: OpenFrontier) -> None:
    frontier = open_store(lease_timeout=0.3)
    added = frontier.add_many(
        [f"https://a.example/{i}" for i in range(6)]
        + ["https://a.example/0", "https://a.example/1"]  # duplicates
        + [Request("https://a.example/0", dont_filter=True)]  # accepted again
    )
    assert added.count(True) == 7
    assert frontier.add(Request("https://a.example/2")) is False
    assert counters(frontier) == Counters(accepted=7, duplicates=3)

    popped = [frontier.pop() for _ in range(7)]
    assert all(popped) and frontier.pop() is None
    late = popped.pop(2)
    for request in popped:
        frontier.ack(request)
    frontier.ack(popped[0])  # a second ack of the same lease changes nothing
    frontier.flush()
    assert counters(frontier) == Counters(accepted=7, duplicates=3, popped=7, acked=6)

    time.sleep(0.5)  # late's lease runs out: it comes back at the next pop
    again = frontier.pop()
    assert again is not None and again.url == late.url
    frontier.ack(late)  # its lease ended: nothing
    frontier.ack(again)
    assert frontier.add(Request("https://a.example/9"))
    last = frontier.pop()
    assert last is not None
    frontier.release(last)
    last = frontier.pop()
    assert last is not None
    frontier.ack(last)
    frontier.flush()
    assert counters(frontier) == Counters(
        accepted=8, duplicates=3, popped=10, acked=8, released=1, expired=1
    )
    assert frontier.pop() is None
    assert len(frontier) == 0


def test_popped_is_acked_released_expired_and_leased(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add_many([f"https://h{i % 7}.example/{i}" for i in range(50)])
    held = []
    for step in range(40):
        request = frontier.pop()
        assert request is not None
        if step % 5 == 0:
            frontier.release(request)
        elif step % 3 == 0:
            held.append(request)
        else:
            frontier.ack(request)
    frontier.flush()
    stats = frontier.stats()
    c = stats.counters
    assert c.popped == 40
    assert c.released == 8
    assert stats.leased == len(held)
    assert c.popped == c.acked + c.released + c.expired + stats.leased
    assert c.accepted == stats.queued + stats.leased + c.acked


def test_capped_adds_are_counted_apart_from_duplicates(open_store: OpenFrontier) -> None:
    frontier = open_store(max_requests_per_host=2)
    frontier.add_many([f"https://a.example/{i}" for i in range(4)])
    frontier.add(Request("https://a.example/0"))  # seen before: a duplicate, not capped
    assert counters(frontier) == Counters(accepted=2, duplicates=1, capped=2)


def test_counters_are_shared_and_survive_reopening(
    open_store: OpenFrontier, store_url: str
) -> None:
    kind = crawlq.store_kind(store_url)
    frontier = open_store()
    frontier.add_many([f"https://a.example/{i}" for i in range(5)] + ["https://a.example/0"])
    if kind.shared:
        # Another worker on the same crawl: its adds count for everyone.
        other = open_store()
        other.add_many(["https://b.example/0", "https://a.example/1"])
        assert counters(frontier) == Counters(accepted=6, duplicates=2)
        other.close()
    frontier.ack(frontier.pop())
    released = frontier.pop()
    assert released is not None
    frontier.release(released)
    held = frontier.pop()  # still leased when the frontier closes
    assert held is not None
    if not kind.durable:
        return
    frontier.close()
    again = open_store()
    c = counters(again)
    stats = again.stats()
    accepted = 6 if kind.shared else 5
    assert (c.accepted, c.duplicates, c.popped, c.acked, c.released) == (
        accepted,
        2 if kind.shared else 1,
        3,
        1,
        1,
    )
    if kind.shared:
        # A worker's lease outlives it until lease_timeout, as it may still ack.
        assert (c.expired, stats.leased) == (0, 1)
    else:
        # A job's leases end with its process: they came back, re-deliveries.
        assert (c.expired, stats.leased) == (1, 0)
    assert stats.queued + stats.leased == accepted - 1
