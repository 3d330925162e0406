"""The behaviour every store must show, run against each store in ``STORES``.

Times are real (no fake clock) so that stores keeping their own time, such as
Redis, run the same tests; delays are short but wide enough for a busy CI.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import math
import time

import pytest

import crawlq
from crawlq import Request

from ..conftest import OpenFrontier


def drain(frontier: crawlq.Frontier, *, ack: bool = True) -> list[Request]:
    out = []
    while (request := frontier.pop()) is not None:
        out.append(request)
        if ack:
            frontier.ack(request)
    return out


def urls(requests: list[Request]) -> list[str]:
    return [r.url for r in requests]


# -- deduplication ---------------------------------------------------------------


def test_duplicate_is_refused_and_not_queued(open_store: OpenFrontier) -> None:
    frontier = open_store()
    assert frontier.add(Request("https://a.example/x")) is True
    assert frontier.add(Request("https://a.example/x")) is False
    assert len(frontier) == 1
    assert frontier.stats().seen == 1


def test_canonically_equal_urls_are_duplicates(open_store: OpenFrontier) -> None:
    frontier = open_store()
    assert frontier.add(Request("https://A.example:443/p?b=2&a=1#top"))
    assert not frontier.add(Request("https://a.example/p?a=1&b=2"))


def test_url_is_never_rewritten(open_store: OpenFrontier) -> None:
    frontier = open_store()
    wire = "HTTPS://A.example:443/P%7e?b=2&a=1#frag"
    frontier.add(Request(wire))
    assert frontier.pop().url == wire  # type: ignore[union-attr]


def test_dont_filter_bypasses_dedup_and_keeps_copies_apart(open_store: OpenFrontier) -> None:
    frontier = open_store()
    assert frontier.add(Request("https://a.example/x"))
    again = Request("https://a.example/x", dont_filter=True)
    assert frontier.add(again)
    assert frontier.add(again)  # the same object twice: two requests
    assert len(frontier) == 3
    popped = drain(frontier)
    assert urls(popped) == ["https://a.example/x"] * 3


def test_dont_filter_is_not_recorded_as_seen(open_store: OpenFrontier) -> None:
    frontier = open_store()
    assert frontier.add(Request("https://a.example/x", dont_filter=True))
    assert frontier.add(Request("https://a.example/x"))


def test_method_and_body_are_part_of_the_fingerprint(open_store: OpenFrontier) -> None:
    frontier = open_store()
    assert frontier.add(Request("https://a.example/f"))
    assert frontier.add(Request("https://a.example/f", method="POST"))
    assert frontier.add(Request("https://a.example/f", method="POST", body=b"q=1"))
    assert not frontier.add(Request("https://a.example/f", method="post", body="q=1"))


def test_seen_survives_ack(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add(Request("https://a.example/x"))
    drain(frontier)
    assert len(frontier) == 0
    assert frontier.add(Request("https://a.example/x")) is False


def test_seen_answers_what_add_would_do_and_records_nothing(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add(Request("https://a.example/x"))
    frontier.add(Request("https://a.example/kept", dont_filter=True))
    assert frontier.seen(Request("https://A.example:443/x#top")) is True
    assert frontier.seen(Request("https://a.example/y")) is False
    assert frontier.seen(Request("https://a.example/kept")) is False  # dont_filter: not recorded
    assert frontier.seen(Request("https://a.example/y")) is False  # asking recorded nothing
    own = b"my-own-fingerprint-1"
    assert frontier.add_many([Request("https://a.example/z")], fingerprints=[own]) == [True]
    fingerprint = frontier.fingerprinter.fingerprint
    asked = [own, fingerprint(Request("https://a.example/x")), b"other-fingerprint-2", own]
    assert frontier.seen_many(asked) == [True, True, False, True]
    assert frontier.seen_many([]) == []
    drain(frontier)  # done requests stay seen
    assert frontier.seen(Request("https://a.example/x")) is True
    with pytest.raises(crawlq.InvalidRequest, match="16 bytes"):
        frontier.seen_many([b"short"])
    assert frontier.add(Request("https://a.example/y")) is True
    assert frontier.seen(Request("https://a.example/y")) is True


def test_add_many_reports_each_duplicate(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add(Request("https://a.example/0"))
    batch = [Request(f"https://a.example/{i % 3}") for i in range(6)]
    assert frontier.add_many(batch) == [False, True, True, False, False, False]
    assert frontier.add_many([]) == []
    assert len(frontier) == 3


def test_bad_request_in_batch_stores_nothing(open_store: OpenFrontier) -> None:
    frontier = open_store()
    good = Request("https://a.example/good")
    bad = Request("https://a.example/bad", meta={"when": object()})
    with pytest.raises(crawlq.SerializationError, match="when"):
        frontier.add_many([good, bad])
    assert len(frontier) == 0
    assert frontier.stats().seen == 0
    assert frontier.add(good) is True


def test_unencodable_meta_names_the_key(open_store: OpenFrontier) -> None:
    frontier = open_store()
    with pytest.raises(crawlq.SerializationError, match="'handle'"):
        frontier.add(Request("https://a.example/", meta={"ok": 1, "handle": open}))
    assert len(frontier) == 0


def test_add_rejects_non_requests(open_store: OpenFrontier) -> None:
    frontier = open_store()
    with pytest.raises(crawlq.InvalidRequest, match=r"crawlq\.Request"):
        frontier.add("https://a.example/")  # type: ignore[arg-type]


# -- order -----------------------------------------------------------------------


# The exact order, fewest-leases tie-break included, holds when every ack
# reaches the store before the next pop: ack_delay=0. With acks that wait for
# the next write (the default), a store that leases in batches (Redis) ranks
# hosts by lease counts that still include waiting acks: see
# test_order_with_acks_waiting_is_priority_then_fifo_per_host.


def test_higher_priority_first_then_fifo_across_hosts(open_store: OpenFrontier) -> None:
    frontier = open_store(ack_delay=0)
    frontier.add_many(
        [
            Request("https://a.example/1", priority=0),
            Request("https://b.example/2", priority=5),
            Request("https://c.example/3", priority=0),
            Request("https://a.example/4", priority=5),
            Request("https://b.example/5", priority=-3),
            Request("https://c.example/6", priority=0),
        ]
    )
    assert urls(drain(frontier)) == [
        "https://b.example/2",
        "https://a.example/4",
        "https://a.example/1",
        "https://c.example/3",
        "https://c.example/6",
        "https://b.example/5",
    ]


def test_lifo_within_a_priority(open_store: OpenFrontier) -> None:
    frontier = open_store(lifo=True)
    for i in range(4):
        frontier.add(Request(f"https://h{i % 2}.example/{i}", priority=1 if i == 1 else 0))
    assert urls(drain(frontier)) == [
        "https://h1.example/1",
        "https://h1.example/3",
        "https://h0.example/2",
        "https://h0.example/0",
    ]


@pytest.mark.parametrize("store_lifo", [False, True])
def test_a_batch_can_take_the_other_order(open_store: OpenFrontier, store_lifo: bool) -> None:
    frontier = open_store(lifo=store_lifo)

    def batch(name: str, lifo: bool | None) -> None:
        frontier.add_many([Request(f"https://h.example/{name}{i}") for i in range(2)], lifo=lifo)

    batch("f", False)  # f0 f1
    batch("d", None)  # the store's own order
    batch("l", True)  # l0 l1
    batch("g", False)  # g0 g1
    batch("m", True)  # m0 m1
    frontier.add(Request("https://h.example/top", priority=1))
    fifo = ["f0", "f1", *([] if store_lifo else ["d0", "d1"]), "g0", "g1"]
    lifo = ["m1", "m0", "l1", "l0", *(["d1", "d0"] if store_lifo else [])]
    # A released request keeps its place.
    first = frontier.pop()
    assert first is not None and first.url == "https://h.example/top"
    second = frontier.pop()
    assert second is not None
    frontier.release(second)
    frontier.ack(first)
    expected = ["https://h.example/" + name for name in fifo + lifo]
    assert urls(drain(frontier)) == expected


def test_other_order_applies_with_ack_and_rejects_non_bool(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add(Request("https://p.example/parent"))
    parent = frontier.pop()
    assert parent is not None
    added = frontier.add_many(
        [Request("https://h.example/1"), Request("https://h.example/2")], ack=parent, lifo=True
    )
    assert added == [True, True]
    with pytest.raises(crawlq.InvalidRequest, match="lifo"):
        frontier.add_many([Request("https://h.example/3")], lifo=1)  # type: ignore[arg-type]
    assert urls(drain(frontier)) == ["https://h.example/2", "https://h.example/1"]
    assert frontier.stats().leased == 0


def test_ties_go_to_the_host_with_fewest_leases(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add_many(
        [
            Request("https://busy.example/1"),
            Request("https://busy.example/2"),
            Request("https://idle.example/3"),
        ]
    )
    first = frontier.pop()
    assert first is not None and first.url == "https://busy.example/1"
    # busy.example has one lease now, idle.example none: idle wins the tie
    # although busy.example/2 was accepted first.
    second = frontier.pop()
    assert second is not None and second.url == "https://idle.example/3"
    # Priority still beats the lease count.
    frontier.add(Request("https://busy.example/9", priority=1))
    third = frontier.pop()
    assert third is not None and third.url == "https://busy.example/9"


def test_released_request_goes_back_to_its_place(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add_many([Request(f"https://a.example/{i}") for i in range(3)])
    first = frontier.pop()
    assert first is not None
    frontier.release(first)
    assert urls(drain(frontier)) == [f"https://a.example/{i}" for i in range(3)]


def test_non_int_priority_is_refused() -> None:
    for bad in (1.5, "3", None, True, 2**40):
        with pytest.raises(crawlq.InvalidRequest, match="priority"):
            Request("https://a.example/", priority=bad)  # type: ignore[arg-type]


# -- pacing ----------------------------------------------------------------------


def test_host_delay_holds_a_host_but_not_others(open_store: OpenFrontier) -> None:
    delay = 0.3
    frontier = open_store(host_delay=delay)
    frontier.add_many(
        [
            Request("https://a.example/1", priority=1),
            Request("https://a.example/2", priority=1),
            Request("https://b.example/3"),
        ]
    )
    start = time.monotonic()
    first = frontier.pop()
    assert first is not None and first.url == "https://a.example/1"
    # a.example is pacing, so the lower-priority b.example comes next.
    second = frontier.pop()
    assert second is not None and second.url == "https://b.example/3"
    if time.monotonic() - start < delay * 0.8:
        assert frontier.pop() is None
        wait = frontier.next_ready_in()
        # (A store that leases ahead keeps a host its delay plus a hold:
        # Policy.hold, 6 ms here.)
        hold = frontier.policy.hold if frontier.shared else 0.0
        assert wait is not None and 0 < wait <= delay + hold
    while (third := frontier.pop()) is None:
        time.sleep(0.01)
    assert third.url == "https://a.example/2"
    assert time.monotonic() - start >= delay * 0.99


def test_host_concurrency_limits_leases_per_host(open_store: OpenFrontier) -> None:
    frontier = open_store(host_concurrency=2)
    frontier.add_many([Request(f"https://a.example/{i}") for i in range(4)])
    frontier.add(Request("https://b.example/x"))
    got = [frontier.pop(), frontier.pop(), frontier.pop()]
    assert [r.url for r in got if r] == [
        "https://a.example/0",
        "https://b.example/x",  # fewest leases wins the tie
        "https://a.example/1",
    ]
    assert frontier.pop() is None  # a.example holds 2 leases
    frontier.ack(got[0])  # type: ignore[arg-type]
    nxt = frontier.pop()
    assert nxt is not None and nxt.url == "https://a.example/2"
    assert frontier.pop() is None


def test_download_slot_overrides_the_host(open_store: OpenFrontier) -> None:
    frontier = open_store(host_concurrency=1)
    frontier.add_many(
        [
            Request("https://a.example/1", meta={"download_slot": "shared"}),
            Request("https://b.example/2", meta={"download_slot": "shared"}),
            Request("https://c.example/3"),
        ]
    )
    first, second = frontier.pop(), frontier.pop()
    assert [first.url, second.url] == ["https://a.example/1", "https://c.example/3"]  # type: ignore[union-attr]
    assert frontier.pop() is None
    hosts = {h.host: (h.queued, h.leased) for h in frontier.stats(hosts=True).hosts or ()}
    assert hosts == {"shared": (1, 1), "c.example": (0, 1)}


def test_next_ready_in_is_none_when_empty(open_store: OpenFrontier) -> None:
    frontier = open_store()
    assert frontier.next_ready_in() is None
    frontier.add(Request("https://a.example/"))
    assert frontier.next_ready_in() == 0.0


# -- leases ----------------------------------------------------------------------


def test_expired_lease_comes_back_in_its_place(open_store: OpenFrontier) -> None:
    frontier = open_store(lease_timeout=0.3)
    frontier.add_many([Request(f"https://a.example/{i}") for i in range(3)])
    first = frontier.pop()
    assert first is not None and first.url == "https://a.example/0"
    assert frontier.stats().leased == 1
    time.sleep(0.35)
    again = frontier.pop()
    assert again is not None and again.url == "https://a.example/0"
    # The expired lease is gone: acking it late changes nothing.
    frontier.ack(first)
    assert len(frontier) == 3
    frontier.ack(again)
    assert urls(drain(frontier)) == ["https://a.example/1", "https://a.example/2"]


def test_ack_twice_is_harmless(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add(Request("https://a.example/"))
    request = frontier.pop()
    assert request is not None
    frontier.ack(request)
    frontier.ack(request)  # at-least-once delivery makes double completion normal
    frontier.release(request)  # a finished request cannot be put back
    assert len(frontier) == 0
    assert frontier.pop() is None


def test_ack_of_a_request_never_handed_out(open_store: OpenFrontier) -> None:
    frontier = open_store()
    with pytest.raises(crawlq.LeaseError, match="pop"):
        frontier.ack(Request("https://a.example/"))
    with pytest.raises(crawlq.LeaseError):
        frontier.release(Request("https://a.example/"))
    queued = Request("https://a.example/queued")
    frontier.add(queued)
    with pytest.raises(crawlq.LeaseError, match="pop"):
        frontier.ack(queued)
    assert len(frontier) == 1


def test_counts_follow_the_lifecycle(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add_many([Request(f"https://a.example/{i}") for i in range(3)])
    stats = frontier.stats()
    assert (stats.queued, stats.leased, stats.seen) == (3, 0, 3)
    one, two = frontier.pop(), frontier.pop()
    assert (frontier.stats().queued, frontier.stats().leased, len(frontier)) == (1, 2, 3)
    frontier.ack(one)  # type: ignore[arg-type]
    frontier.release(two)  # type: ignore[arg-type]
    stats = frontier.stats()
    assert (stats.queued, stats.leased, stats.seen, len(frontier)) == (2, 0, 3, 2)


def test_ack_many_and_release_many(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add_many([Request(f"https://h{i}.example/") for i in range(4)])
    popped = [frontier.pop() for _ in range(4)]
    frontier.ack_many(popped[:2])  # type: ignore[arg-type]
    frontier.release_many(popped[2:])  # type: ignore[arg-type]
    assert urls(drain(frontier)) == ["https://h2.example/", "https://h3.example/"]


# -- round trip and lifecycle ----------------------------------------------------


def test_every_field_round_trips(open_store: OpenFrontier) -> None:
    frontier = open_store()
    original = Request(
        "https://a.example/form?x=1",
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded", "X-Trace": "é"},
        body=b"\x00\xffq=1",
        priority=-7,
        meta={"depth_hint": 3, "tags": ["a", "b"], "nested": {"k": 1.5}, "raw": b"\x01"},
        callback="parse_item",
        errback="on_error",
        dont_filter=True,
        depth=4,
    )
    frontier.add(original)
    popped = frontier.pop()
    assert popped == original
    assert popped is not None
    assert (popped.method, popped.body, popped.callback, popped.depth) == (
        "POST",
        b"\x00\xffq=1",
        "parse_item",
        4,
    )


def test_closed_frontier_refuses_work(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add(Request("https://a.example/"))
    frontier.close()
    frontier.close()
    assert frontier.closed
    for call in (
        lambda: frontier.add(Request("https://b.example/")),
        frontier.pop,
        frontier.stats,
    ):
        with pytest.raises(crawlq.FrontierClosed):
            call()


def test_stats_never_show_a_password(open_store: OpenFrontier) -> None:
    frontier = open_store()
    assert "@" not in frontier.stats().store
    assert frontier.url == frontier.stats().store


def test_many_hosts_drain_completely_in_priority_order(open_store: OpenFrontier) -> None:
    frontier = open_store(ack_delay=0)
    batch = [
        Request(f"https://h{i % 37}.example/{i}", priority=(i * 7919) % 11 - 5) for i in range(600)
    ]
    assert all(frontier.add_many(batch))
    popped = drain(frontier)
    assert sorted(urls(popped)) == sorted(urls(batch))
    priorities = [r.priority for r in popped]
    assert priorities == sorted(priorities, reverse=True)
    accepted = {r.url: n for n, r in enumerate(batch)}
    for priority in set(priorities):
        same = [accepted[r.url] for r in popped if r.priority == priority]
        assert same == sorted(same), "FIFO within a priority"


def test_order_with_acks_waiting_is_priority_then_fifo_per_host(
    open_store: OpenFrontier,
) -> None:
    """With the default ack_delay: strict priority, and FIFO within a priority per
    host; only the order between hosts of one priority may differ from the exact one."""
    frontier = open_store()
    batch = [
        Request(f"https://h{i % 37}.example/{i}", priority=(i * 7919) % 11 - 5) for i in range(600)
    ]
    assert all(frontier.add_many(batch))
    popped = drain(frontier)
    assert sorted(urls(popped)) == sorted(urls(batch))
    priorities = [r.priority for r in popped]
    assert priorities == sorted(priorities, reverse=True)
    accepted = {r.url: n for n, r in enumerate(batch)}
    for priority in set(priorities):
        for host in {r.url.split("/")[2] for r in popped}:
            same = [
                accepted[r.url]
                for r in popped
                if r.priority == priority and r.url.split("/")[2] == host
            ]
            assert same == sorted(same), "FIFO within a priority and host"


def test_crawler_state_round_trips(open_store: OpenFrontier) -> None:
    frontier = open_store()
    assert frontier.load_state() == {}
    frontier.save_state({"items": 3, "cursor": {"page": [1, 2]}, "token": b"\x00"})
    assert frontier.load_state() == {"items": 3, "cursor": {"page": [1, 2]}, "token": b"\x00"}
    frontier.save_state({"items": 4})
    assert frontier.load_state() == {"items": 4}
    with pytest.raises(crawlq.SerializationError, match="bad"):
        frontier.save_state({"bad": object()})
    assert frontier.load_state() == {"items": 4}


@pytest.mark.one_shard
def test_given_fingerprints_replace_the_fingerprinter(open_store: OpenFrontier) -> None:
    frontier = open_store()
    same = b"s" * 20
    batch = [Request("https://a.example/1"), Request("https://b.example/2")]
    assert frontier.add_many(batch, fingerprints=[same, same]) == [True, False]
    assert frontier.add_many([Request("https://a.example/1")], fingerprints=[b"x" * 16]) == [True]
    with pytest.raises(crawlq.InvalidRequest, match="fingerprints"):
        frontier.add_many(batch, fingerprints=[same])
    with pytest.raises(crawlq.InvalidRequest, match="16 bytes"):
        frontier.add_many(batch[:1], fingerprints=[b"short"])
    hosts = {h.host for h in frontier.stats(hosts=True).hosts or ()}
    assert hosts == {"a.example"}


def test_a_url_with_fingerprint_and_slot_is_stored_unparsed(open_store: OpenFrontier) -> None:
    frontier = open_store()
    odd = "http://a.example:99999999/x"  # a port crawlq cannot canonicalise
    with pytest.raises(crawlq.InvalidRequest):
        frontier.add(Request(odd))
    with pytest.raises(crawlq.InvalidRequest):
        frontier.add_many([Request(odd)], fingerprints=[b"f" * 16])  # its host is needed
    kept = Request(odd, meta={"download_slot": "a.example"})
    assert frontier.add_many([kept], fingerprints=[b"f" * 16]) == [True]
    popped = frontier.pop()
    assert popped is not None and popped.url == odd
    assert frontier.stats(hosts=True).hosts[0].host == "a.example"  # type: ignore[index]


def test_add_many_acks_several_parents(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add_many([Request("https://a.example/"), Request("https://b.example/")])
    parents = [frontier.pop(), frontier.pop()]
    assert None not in parents
    children = [Request("https://c.example/1"), Request("https://c.example/2")]
    assert frontier.add_many(children, ack=parents) == [True, True]  # type: ignore[arg-type]
    stats = frontier.stats()
    assert (stats.queued, stats.leased) == (2, 0)
    assert frontier.add_many([], ack=[]) == []
    assert urls(drain(frontier)) == ["https://c.example/1", "https://c.example/2"]


def test_add_many_acks_the_parent_in_the_same_step(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add(Request("https://a.example/"))
    parent = frontier.pop()
    assert parent is not None
    children = [Request("https://a.example/1"), Request("https://a.example/")]
    assert frontier.add_many(children, ack=parent) == [True, False]
    stats = frontier.stats()
    assert (stats.queued, stats.leased, len(frontier)) == (1, 0, 1)
    child = frontier.pop()
    assert child is not None and child.url == "https://a.example/1"
    assert frontier.add_many([], ack=child) == []
    assert len(frontier) == 0
    with pytest.raises(crawlq.LeaseError):
        frontier.add_many([Request("https://b.example/")], ack=Request("https://c.example/"))
    assert frontier.add(Request("https://b.example/"))  # the refused batch stored nothing


# -- invalid links in a batch -------------------------------------------------------


def test_add_many_takes_url_strings_beside_requests(open_store: OpenFrontier) -> None:
    frontier = open_store()
    added = frontier.add_many(
        ["https://a.example/1", Request("https://a.example/2"), "https://a.example/1"]
    )
    assert added == [True, True, False]
    popped = drain(frontier)
    assert urls(popped) == ["https://a.example/1", "https://a.example/2"]
    assert popped[0] == Request("https://a.example/1")  # default fields


def test_add_many_raises_for_a_bad_url_by_default_and_stores_nothing(
    open_store: OpenFrontier,
) -> None:
    frontier = open_store()
    with pytest.raises(crawlq.InvalidRequest, match="mailto"):
        frontier.add_many(["https://a.example/1", "mailto:someone@a.example"])
    assert len(frontier) == 0
    assert frontier.stats().seen == 0
    assert frontier.stats().skipped == 0


def test_add_many_skips_invalid_requests_when_asked(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add(Request("https://a.example/seen"))
    batch: list[Request | str] = [
        "javascript:void(0)",
        "https://a.example/new",
        "https://a.example/seen",
        Request("https://a.example/meta", meta={"handle": object()}),
        "/relative/path",
        Request("https://a.example/slot", meta={"download_slot": ""}),
        "https://a.example/new",
        "tel:+100",
    ]
    added = frontier.add_many(batch, invalid="skip")
    # None: skipped (never stored); False: a duplicate; True: added.
    assert added == [None, True, False, None, None, None, False, None]
    assert frontier.stats().skipped == 5
    assert frontier.stats().seen == 2
    assert urls(drain(frontier)) == ["https://a.example/seen", "https://a.example/new"]
    # The count grows with each skip; a batch of only invalid ones stores nothing.
    assert frontier.add_many(["mailto:x@a.example", ""], invalid="skip") == [None, None]
    assert frontier.stats().skipped == 7
    assert len(frontier) == 0


def test_skipping_still_acks_and_keeps_given_fingerprints_aligned(
    open_store: OpenFrontier,
) -> None:
    frontier = open_store()
    frontier.add(Request("https://a.example/page"))
    page = frontier.pop()
    assert page is not None
    fingerprints = [bytes([i]) * 16 for i in range(3)]
    added = frontier.add_many(
        ["https://a.example/x", "data:text/plain,hi", "https://a.example/y"],
        fingerprints=fingerprints,
        ack=page,
        invalid="skip",
    )
    assert added == [True, None, True]
    stats = frontier.stats()
    assert (stats.queued, stats.leased, stats.skipped) == (2, 0, 1)
    assert frontier.seen_many(fingerprints) == [True, False, True]


def test_skipping_never_hides_a_wrong_type_or_option(open_store: OpenFrontier) -> None:
    frontier = open_store()
    with pytest.raises(crawlq.InvalidRequest, match=r"crawlq\.Request or a URL string"):
        frontier.add_many([Request("https://a.example/"), 42], invalid="skip")  # type: ignore[list-item]
    with pytest.raises(crawlq.InvalidRequest, match="'raise' or 'skip'"):
        frontier.add_many(["https://a.example/"], invalid="drop")  # type: ignore[call-overload]
    assert len(frontier) == 0


def test_links_from_a_page_go_in_with_one_line_each(open_store: OpenFrontier) -> None:
    frontier = open_store()
    base = "https://a.example/dir/page.html"
    hrefs = ["next.html", "#top", "mailto:x@a.example", "/", "//b.example/p", "http://[::1"]
    links = [r for h in hrefs if (r := Request.from_link(h, base=base, depth=1)) is not None]
    assert frontier.add_many(links) == [True, True, True]
    assert urls(drain(frontier)) == [
        "https://a.example/dir/next.html",
        "https://a.example/",
        "https://b.example/p",
    ]


# -- hardening: injection, length, meta round trip ----------------------------


@pytest.mark.parametrize("bad", ["\r\n", "\n", "\r", "\x00"])
def test_line_breaks_and_nul_in_urls_and_headers_are_refused(
    open_store: OpenFrontier, bad: str
) -> None:
    frontier = open_store()
    with pytest.raises(crawlq.InvalidRequest, match=r"line break or NUL.*percent-encode"):
        Request(f"https://a.example/x{bad}Host: evil.example")
    with pytest.raises(crawlq.InvalidRequest, match="line break or NUL"):
        Request("https://a.example/", headers={"X-Token": f"1{bad}X-Admin: yes"})
    with pytest.raises(crawlq.InvalidRequest, match="line break or NUL"):
        Request("https://a.example/", headers={f"X{bad}Y": "1"})
    with pytest.raises(crawlq.InvalidRequest, match="line break or NUL"):
        Request("https://a.example/").replace(headers={"Cookie": f"a=1{bad}"})
    # Percent-encoded, they are plain characters of the URL.
    assert frontier.add(Request("https://a.example/x%0D%0AHost:%20evil.example"))
    assert len(frontier) == 1


def test_urls_longer_than_the_cap_are_refused(open_store: OpenFrontier) -> None:
    frontier = open_store()
    assert crawlq.MAX_URL_LENGTH == 32 * 1024
    base = "https://a.example/"
    longest = base + "x" * (crawlq.MAX_URL_LENGTH - len(base))
    assert frontier.add(Request(longest))
    huge = Request(base + "y" * 10_000_000)
    with pytest.raises(crawlq.InvalidRequest, match="max_url_length of 32768"):
        frontier.add_many([Request("https://b.example/"), huge])
    assert len(frontier) == 1  # the batch stored nothing
    popped = frontier.pop()
    assert popped is not None and popped.url == longest


def test_the_url_cap_is_an_option(open_store: OpenFrontier, store_url: str) -> None:
    frontier = open_store(max_url_length=40)
    assert frontier.add(Request("https://a.example/" + "x" * 22))  # 40 characters
    with pytest.raises(crawlq.InvalidRequest, match="max_url_length of 40"):
        frontier.add(Request("https://a.example/" + "x" * 23))
    frontier.close()
    roomy = open_store(max_url_length=200_000)
    assert roomy.add(Request("https://b.example/" + "x" * 100_000))
    for bad in (0, 1.5, True, "40"):
        with pytest.raises(crawlq.ConfigError, match="max_url_length must be an int"):
            crawlq.open_frontier(store_url, max_url_length=bad)


def _holds_itself() -> list[object]:
    endless: list[object] = [1]
    endless.append(endless)
    return endless


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({1, 2}, r"holds a set, which a durable store would hand back as a list"),
        (frozenset({1}), r"holds a frozenset.*as a list"),
        ((1, 2), r"holds a tuple.*as a list"),
        ([1, (2, 3)], r"holds a tuple"),
        ({"when": datetime.datetime(2026, 1, 2, 3, 4)}, r"holds a datetime.datetime.*isoformat"),
        (datetime.date(2026, 1, 2), r"holds a datetime.date.*isoformat"),
        (decimal.Decimal("1.10"), r"holds a decimal.Decimal.*str\(value\)"),
        (bytearray(b"x"), r"holds a bytearray.*as bytes"),
        ({(1, 2): "pair"}, r"holds a tuple"),
        (_holds_itself(), r"more than 32 deep \(does it contain itself\?\)"),
    ],
)
def test_meta_that_would_change_type_is_refused_by_every_store(
    open_store: OpenFrontier, value: object, message: str
) -> None:
    frontier = open_store()
    request = Request("https://a.example/", meta={"ok": 1, "odd": value})
    with pytest.raises(crawlq.SerializationError, match=r"meta\['odd'\] .*" + message):
        frontier.add(request)
    with pytest.raises(crawlq.SerializationError, match=r"meta\['odd'\]"):
        frontier.add_many([Request("https://b.example/"), request])
    assert len(frontier) == 0


def test_meta_comes_back_the_same_from_every_store(open_store: OpenFrontier) -> None:
    frontier = open_store()
    meta = {
        "text": "ünï\n",
        "raw": b"\x00\xff",
        "int": -(2**63),
        "big": 2**64 - 1,
        "float": 1.5,
        "inf": math.inf,
        "flag": False,
        "none": None,
        "list": [1, "2", [3.0, None], {"k": b""}],
        "nested": {"a": {1: "int key", 2.5: "float key", b"b": "bytes key", None: 0}},
        "deep": functools.reduce(lambda inner, _: [inner], range(31), []),
    }
    sent = Request("https://a.example/", meta=meta)
    frontier.add(sent)
    back = frontier.pop()
    assert back is not None
    assert back.meta == meta
    assert {k: type(v) for k, v in back.meta.items()} == {k: type(v) for k, v in meta.items()}
    assert type(back.meta["list"][2]) is list and type(back.meta["list"][3]) is dict


# -- what a store is ---------------------------------------------------------------


def test_frontier_says_what_its_url_promised(open_store: OpenFrontier, store_url: str) -> None:
    frontier = open_store()
    kind = crawlq.store_kind(store_url)
    assert (frontier.durable, frontier.shared) == (kind.durable, kind.shared)
    assert kind.name in frontier.url or kind.name == "sqlite"


def test_a_changed_setting_is_named_on_the_error(open_store: OpenFrontier) -> None:
    frontier = open_store()
    if not frontier.durable:
        pytest.skip("a memory frontier starts empty: nothing to resume")
    frontier.add(Request("https://a.example/"))
    frontier.close()
    with pytest.raises(crawlq.IncompatibleStore, match="lifo") as caught:
        open_store(lifo=True)
    assert caught.value.setting == "lifo"


# -- golden pop orders -------------------------------------------------------------
#
# Each vector is a script and the exact pop order the store semantics give it
# (stores/base.py; the Board in _policy.py; the Lua in stores/lua/ for Redis).
# Worked out by hand from the rules, not recorded from a store: every store,
# Redis included, must reproduce them exactly.
#
# Steps: ("add", [(url path, priority), ...], lifo or None), ("pop",) pops
# and holds, ("pop+ack",) pops and acks at once, ("ack", path), ("release",
# path), ("none",) expects nothing ready. Hosts are the first path letter.

_ADDS = ("add", [("a/1", 0), ("b/1", 0), ("a/2", 5), ("c/1", 0), ("b/2", 5), ("a/3", 0)], None)

GOLDEN: dict[str, tuple[dict[str, object], list[tuple[object, ...]], list[str]]] = {
    # Held leases: priority first, then the host with fewest leases, then age.
    "fewest leases break ties": (
        {},
        [_ADDS, *[("pop",)] * 6, ("none",)],
        ["a/2", "b/2", "c/1", "a/1", "b/1", "a/3"],
    ),
    # Acked at once, no host holds a lease: priority, then first in first out.
    "fifo within a priority": (
        {},
        [_ADDS, *[("pop+ack",)] * 6, ("none",)],
        ["a/2", "b/2", "a/1", "b/1", "c/1", "a/3"],
    ),
    "lifo within a priority": (
        {"lifo": True},
        [_ADDS, *[("pop+ack",)] * 6, ("none",)],
        ["b/2", "a/2", "a/3", "c/1", "b/1", "a/1"],
    ),
    # FIFO-added oldest first, then LIFO-added newest first, at one priority.
    "batches of both orders": (
        {},
        [
            ("add", [("x/1", 0), ("x/2", 0)], False),
            ("add", [("x/3", 0), ("x/4", 0)], True),
            ("add", [("x/5", 0)], None),
            ("add", [("x/6", 1)], True),
            *[("pop+ack",)] * 6,
        ],
        ["x/6", "x/1", "x/2", "x/5", "x/4", "x/3"],
    ),
    # A host at its concurrency limit is skipped until a lease ends; a
    # released request goes back to its own place.
    "concurrency and release": (
        {"host_concurrency": 1},
        [
            ("add", [("a/1", 0), ("a/2", 0), ("b/1", 0), ("b/2", 9)], None),
            ("pop",),
            ("pop",),
            ("none",),
            ("release", "b/2"),
            ("pop",),
            ("none",),
            ("ack", "a/1"),
            ("pop",),
            ("ack", "b/2"),
            ("pop",),
            ("none",),
        ],
        ["b/2", "a/1", "b/2", "a/2", "b/1"],
    ),
}


@pytest.mark.parametrize("name", list(GOLDEN))
def test_golden_pop_order(open_store: OpenFrontier, name: str) -> None:
    options, steps, expected = GOLDEN[name]
    frontier = open_store(ack_delay=0, **options)
    held: dict[str, Request] = {}
    popped: list[str] = []
    for step in steps:
        kind = step[0]
        if kind == "add":
            _, batch, lifo = step
            requests = [
                Request(f"https://{path[0]}.example/{path}", priority=priority)
                for path, priority in batch  # type: ignore[attr-defined]
            ]
            assert all(frontier.add_many(requests, lifo=lifo))  # type: ignore[arg-type]
        elif kind in ("pop", "pop+ack"):
            request = frontier.pop()
            assert request is not None, f"nothing ready after {popped}"
            path = request.url.split("/", 3)[3]
            popped.append(path)
            if kind == "pop+ack":
                frontier.ack(request)
            else:
                held[path] = request
        elif kind == "none":
            assert frontier.pop() is None, f"something ready after {popped}"
        elif kind == "ack":
            frontier.ack(held.pop(str(step[1])))
        else:
            frontier.release(held.pop(str(step[1])))
    assert popped == expected


# -- acks that wait for the next write --------------------------------------------


def test_flush_and_close_write_the_acks_that_wait(open_store: OpenFrontier) -> None:
    frontier = open_store(ack_delay=3600)
    frontier.add_many([Request(f"https://a.example/{i}") for i in range(3)])
    first, second = frontier.pop(), frontier.pop()
    assert first is not None and second is not None
    frontier.ack(first)
    # A waiting ack counts at once for this process.
    assert (frontier.stats().queued, frontier.stats().leased) == (1, 1)
    frontier.flush()
    frontier.ack(second)
    frontier.close()
    with pytest.raises(crawlq.FrontierClosed):
        frontier.flush()
    if frontier.durable:
        again = open_store(ack_delay=3600)
        assert urls(drain(again)) == ["https://a.example/2"]


@pytest.mark.parametrize("value", [-1, "0.5", float("inf")])
def test_ack_delay_must_be_a_number_of_seconds(open_store: OpenFrontier, value: object) -> None:
    with pytest.raises(crawlq.ConfigError, match="ack_delay"):
        open_store(ack_delay=value)
