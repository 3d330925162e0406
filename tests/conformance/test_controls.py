"""Crawl controls on every store: host blocks, per-host policy, caps, seen TTL, forget.

Run against each store in ``STORES`` like the rest of the conformance suite.
Times are real (Redis keeps its own clock): blocks and TTLs are short, and
every wait is long enough for a busy CI box.
"""

from __future__ import annotations

import time

import pytest

import crawlq
from crawlq import Request

from ..conftest import OpenFrontier
from .test_frontier import drain, urls


def pop_all(frontier: crawlq.Frontier) -> list[str]:
    return urls(drain(frontier))


def wait_for(frontier: crawlq.Frontier, seconds: float) -> list[str]:
    """Pop (and ack) everything that becomes ready within ``seconds``."""
    out: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out += pop_all(frontier)
        time.sleep(0.02)
    return out + pop_all(frontier)


def host_figures(frontier: crawlq.Frontier) -> dict[str, crawlq.HostCount]:
    hosts = frontier.stats(hosts=True).hosts
    assert hosts is not None
    return {h.host: h for h in hosts}


# -- blocks ------------------------------------------------------------------------


def test_a_blocked_host_gives_nothing_until_its_time_then_resumes_in_order(
    open_store: OpenFrontier,
) -> None:
    frontier = open_store()
    frontier.add_many([f"https://a.example/{i}" for i in range(3)] + ["https://b.example/0"])
    frontier.block_host("a.example", 0.6)
    started = time.monotonic()
    assert pop_all(frontier) == ["https://b.example/0"]
    blocked = host_figures(frontier)["a.example"]
    assert blocked.queued == 3
    assert blocked.blocked_for is not None and 0.2 < blocked.blocked_for <= 0.6
    assert 0.0 < (frontier.next_ready_in() or 0.0) <= 0.6
    popped: list[str] = []
    while not popped:
        popped = pop_all(frontier)
        if not popped:
            time.sleep(0.01)
    assert time.monotonic() - started >= 0.55
    assert popped == [f"https://a.example/{i}" for i in range(3)]
    assert host_figures(frontier).get("a.example") is None or (
        host_figures(frontier)["a.example"].blocked_for is None
    )


def test_a_later_block_extends_and_an_earlier_one_never_shortens(
    open_store: OpenFrontier,
) -> None:
    frontier = open_store()
    frontier.add(Request("https://a.example/1"))
    frontier.block_host("a.example", 0.5)
    frontier.block_host("a.example", 0.05)  # ends sooner: changes nothing
    time.sleep(0.15)
    assert frontier.pop() is None
    frontier.block_host("a.example", 1.5)  # ends later: extends
    time.sleep(0.45)
    assert frontier.pop() is None
    left = host_figures(frontier)["a.example"].blocked_for
    assert left is not None and 0.5 < left < 1.5


def test_unblock_ends_a_block_now_and_keeps_the_host_delay(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add_many(["https://a.example/1", "https://b.example/1"])
    frontier.block_host("a.example", 60)
    assert pop_all(frontier) == ["https://b.example/1"]
    frontier.unblock_host("a.example")
    frontier.unblock_host("never-blocked.example")  # nothing to end: no error
    assert pop_all(frontier) == ["https://a.example/1"]
    frontier.close()

    paced = open_store(host_delay=30)
    paced.add_many(["https://c.example/1", "https://c.example/2"])
    assert pop_all(paced) == ["https://c.example/1"]
    paced.block_host("c.example", 0.1)
    paced.unblock_host("c.example")
    # The block ended, the host's delay since its last pop did not.
    assert paced.pop() is None
    assert (paced.next_ready_in() or 0.0) > 20


def test_a_host_blocked_before_it_has_requests_stays_blocked(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.block_host("a.example", 0.5)
    frontier.add_many(["https://a.example/1", "https://b.example/1"])
    assert pop_all(frontier) == ["https://b.example/1"]
    assert wait_for(frontier, 0.7) == ["https://a.example/1"]


def test_leased_requests_of_a_blocked_host_can_still_be_acked(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add_many(["https://a.example/1", "https://a.example/2"])
    first = frontier.pop()
    assert first is not None
    frontier.block_host("a.example", 60)
    frontier.ack(first)
    assert frontier.pop() is None
    assert frontier.stats().leased == 0 and frontier.stats().queued == 1


def test_bad_control_input_is_refused_with_typed_errors(open_store: OpenFrontier) -> None:
    frontier = open_store()
    with pytest.raises(crawlq.InvalidRequest, match="non-empty str"):
        frontier.block_host("", 1)
    with pytest.raises(crawlq.InvalidRequest, match="non-empty str"):
        frontier.set_host_policy(b"a.example", delay=1)  # type: ignore[arg-type]
    with pytest.raises(crawlq.ConfigError, match="seconds"):
        frontier.block_host("a.example", -1)
    with pytest.raises(crawlq.ConfigError, match="seconds"):
        frontier.block_host("a.example", float("inf"))
    with pytest.raises(crawlq.ConfigError, match="concurrency"):
        frontier.set_host_policy("a.example", concurrency=0)
    with pytest.raises(crawlq.ConfigError, match="delay"):
        frontier.set_host_policy("a.example", delay=float("nan"))
    assert frontier.host_policy("a.example") == crawlq.HostPolicy(None, None)
    for bad in ({"max_requests_per_host": 0}, {"seen_ttl": 0}, {"seen_ttl": "1d"}):
        with pytest.raises(crawlq.ConfigError, match=next(iter(bad))):
            open_store(**bad)


# -- per-host policy -------------------------------------------------------------------


def test_a_host_policy_overrides_concurrency_and_can_be_removed(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add_many([f"https://a.example/{i}" for i in range(3)])
    frontier.set_host_policy("a.example", concurrency=1)
    assert frontier.host_policy("a.example") == crawlq.HostPolicy(None, 1)
    first = frontier.pop()
    assert first is not None and first.url == "https://a.example/0"
    assert frontier.pop() is None  # its one slot is taken
    frontier.set_host_policy("a.example")  # back to the frontier's: no limit
    assert frontier.host_policy("a.example") == crawlq.HostPolicy()
    assert urls(drain(frontier)) == ["https://a.example/1", "https://a.example/2"]
    frontier.ack(first)


def test_a_limit_set_between_a_pop_and_its_ack_applies_at_once(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add_many(["https://a.example/0", "https://a.example/1", "https://b.example/0"])
    first = frontier.pop()
    assert first is not None and first.url == "https://a.example/0"
    frontier.set_host_policy("a.example", concurrency=1)
    second = frontier.pop()
    assert second is not None and second.url == "https://b.example/0"
    assert frontier.pop() is None  # a.example is at its new limit
    frontier.ack(first)
    assert pop_all(frontier) == ["https://a.example/1"]
    frontier.ack(second)


def test_a_host_policy_overrides_the_delay_from_the_next_pop(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.set_host_policy("slow.example", delay=30)
    frontier.add_many(["https://slow.example/1", "https://slow.example/2", "https://b.example/1"])
    frontier.add_many(["https://b.example/2"])
    popped = pop_all(frontier)
    assert popped.count("https://slow.example/1") == 1
    assert "https://slow.example/2" not in popped
    assert {"https://b.example/1", "https://b.example/2"} <= set(popped)
    figures = host_figures(frontier)["slow.example"]
    assert figures.delay == 30.0 and figures.queued == 1


def test_a_host_policy_can_speed_up_a_host(open_store: OpenFrontier) -> None:
    frontier = open_store(host_delay=30)
    frontier.set_host_policy("fast.example", delay=0)
    frontier.add_many([f"https://fast.example/{i}" for i in range(3)] + ["https://b.example/1"])
    frontier.add(Request("https://b.example/2"))
    popped = pop_all(frontier)
    assert [u for u in popped if "fast" in u] == [f"https://fast.example/{i}" for i in range(3)]
    assert [u for u in popped if "b.example" in u] == ["https://b.example/1"]


# -- caps --------------------------------------------------------------------------------


def test_max_requests_per_host_refuses_and_counts_the_rest(open_store: OpenFrontier) -> None:
    frontier = open_store(max_requests_per_host=2)
    batch = [f"https://a.example/{i}" for i in range(4)] + ["https://b.example/0"]
    assert frontier.add_many(batch) == [True, True, False, False, True]
    assert frontier.stats().counters.capped == 2
    assert frontier.add(Request("https://a.example/0")) is False  # a duplicate: not capped
    assert frontier.stats().counters.capped == 2
    assert frontier.add(Request("https://a.example/9", dont_filter=True)) is False
    assert frontier.stats().counters.capped == 3
    assert host_figures(frontier)["a.example"].accepted == 2
    drain(frontier)  # acking does not give a host its quota back
    assert frontier.add(Request("https://a.example/5")) is False
    assert frontier.stats().counters.capped == 4
    assert frontier.stats().seen == 3  # capped requests are not recorded as seen


def test_every_host_counts_what_it_had_accepted(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add_many([f"https://a.example/{i}" for i in range(3)] + ["https://b.example/0"])
    frontier.add_many(["https://a.example/0"])  # duplicate: not accepted
    frontier.pop()
    figures = host_figures(frontier)
    assert figures["a.example"].accepted == 3
    assert figures["b.example"].accepted == 1
    assert frontier.stats().counters.capped == 0


# -- forgetting and seen TTL ----------------------------------------------------------


def test_forget_makes_requests_new_again(open_store: OpenFrontier) -> None:
    frontier = open_store()
    frontier.add_many(["https://a.example/1", "https://a.example/2"])
    drain(frontier)
    assert frontier.forget(["https://a.example/1", Request("https://a.example/nope")]) == 1
    assert frontier.forget([]) == 0
    assert frontier.add(Request("https://a.example/1")) is True
    assert frontier.add(Request("https://a.example/2")) is False
    assert frontier.stats().seen == 2
    with pytest.raises(crawlq.InvalidRequest):
        frontier.forget(["not a url"])


def test_seen_ttl_lets_a_url_be_added_again_after_it(open_store: OpenFrontier) -> None:
    frontier = open_store(seen_ttl=0.5)
    assert frontier.add(Request("https://a.example/1")) is True
    assert frontier.add(Request("https://a.example/1")) is False
    drain(frontier)
    assert frontier.seen(Request("https://a.example/1")) is True
    time.sleep(0.6)
    assert frontier.seen(Request("https://a.example/1")) is False
    assert frontier.add(Request("https://a.example/1")) is True
    assert frontier.add(Request("https://a.example/1")) is False


# -- durability ---------------------------------------------------------------------------


def test_controls_survive_reopening(open_store: OpenFrontier, store_url: str) -> None:
    if not crawlq.store_kind(store_url).durable:
        pytest.skip("a memory frontier keeps nothing when closed")
    frontier = open_store(max_requests_per_host=2)
    frontier.add_many([f"https://a.example/{i}" for i in range(3)] + ["https://b.example/1"])
    frontier.block_host("a.example", 60)
    frontier.set_host_policy("b.example", delay=5, concurrency=3)
    frontier.close()
    again = open_store(max_requests_per_host=2)
    assert again.host_policy("b.example") == crawlq.HostPolicy(5.0, 3)
    assert pop_all(again) == ["https://b.example/1"]
    figures = host_figures(again)
    left = figures["a.example"].blocked_for
    assert left is not None and 50 < left <= 60
    assert figures["a.example"].accepted == 2
    assert again.stats().counters.capped == 1  # a.example/2, before the reopen
    assert again.add(Request("https://a.example/9")) is False
    assert again.stats().counters.capped == 2
    again.unblock_host("a.example")
    assert pop_all(again) == ["https://a.example/0", "https://a.example/1"]
