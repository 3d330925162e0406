"""Due times on Redis: the `due` set, its bounded moves, retries, the format upgrade, inspect.

tests/conformance/test_due.py says what every store does with scheduled
requests; these test what is Redis's own: the key layout (format 7), that
due requests move in bounded batches and that a crawl with nothing
scheduled reads nothing more per call, that a retried call never schedules
twice (on one server and on a cluster shard), and what inspect shows.
"""

from __future__ import annotations

import math
import time

import pytest
import redis

import crawlq
from crawlq import Request
from crawlq.stores.redis import admin
from crawlq.stores.redis import finishing as redis_finishing
from crawlq.stores.redis import store as redis_store
from crawlq.stores.redis.open import FORMAT
from tests.redis._wide import strip_wide

from .test_store import _lose_next_reply


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url.partition("?")[0])


def _prefix(url: str) -> str:
    return f"crawlq:{{{url.rpartition('=')[2]}}}:"


def _drain_when_due(frontier: crawlq.Frontier, count: int, limit: float = 10.0) -> list[str]:
    """Pop and ack ``count`` requests, waiting as next_ready_in says; their URLs in order."""
    out: list[str] = []
    deadline = time.monotonic() + limit
    while len(out) < count:
        assert time.monotonic() < deadline, f"{count - len(out)} never came due"
        request = frontier.pop()
        if request is None:
            wait = frontier.next_ready_in()
            assert wait is not None
            time.sleep(min(max(wait, 0.005), 0.2))
            continue
        out.append(request.url)
        frontier.ack(request)
    return out


def test_a_scheduled_request_waits_in_due_and_not_in_its_host(url: str) -> None:
    frontier = crawlq.open_frontier(url, ack_delay=0)
    due = time.time() + 30
    frontier.add(Request("https://a.example/later", priority=3, not_before=due))
    client = _client(url)
    prefix = _prefix(url)
    ((member, score),) = client.zrange(prefix + "due", 0, -1, withscores=True)
    # id, kind ('w': waiting), score (-priority), host; scored by its due time in ms.
    assert member[15:] == b"w-3 a.example" and score == pytest.approx(due * 1000)
    assert client.hexists(prefix + "p", member[:15])  # its payload, under its id
    # No host record (nothing queued or leased): the wide entries alone.
    assert client.hkeys(prefix + "hosts") == [b""]
    assert client.zrangebyscore(prefix + "ready", "-inf", "(+inf") == []
    client.close()
    frontier.close()


def test_due_requests_move_into_their_hosts_at_most_256_a_call(url: str) -> None:
    frontier = crawlq.open_frontier(url, prefetch=1)
    due = time.time() + 0.3
    frontier.add_many([Request(f"https://h{i}.example/", not_before=due) for i in range(600)])
    client = _client(url)
    key = _prefix(url) + "due"
    time.sleep(0.35)
    assert frontier.pop() is not None  # one call: one batch made ready
    assert client.zcard(key) == 600 - 256
    # The 344 left in `due` are due: counted as queued (moved or not), none scheduled.
    stats = frontier.stats()
    assert (stats.queued, stats.scheduled, stats.next_due_in) == (599, 0, None)
    assert len(_drain_when_due(frontier, 599)) == 599
    assert client.zcard(key) == 0
    client.close()
    frontier.close()


def test_pops_with_nothing_scheduled_read_nothing_more(url: str, redis_url: str) -> None:
    """The due set is looked at through the crawl's bound: at most once a second when empty."""
    frontier = crawlq.open_frontier(url, ack_delay=0, prefetch=1)
    frontier.add_many([Request(f"https://h{i}.example/") for i in range(300)])
    frontier.pop()  # the bounds are known from here
    server = redis.Redis.from_url(redis_url)
    server.config_resetstat()
    started = time.monotonic()
    for _ in range(299):
        request = frontier.pop()
        assert request is not None
        frontier.ack(request)
    elapsed = time.monotonic() - started
    stats = server.info("commandstats")
    server.close()
    looks = sum(
        stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("zrangebyscore", "zrange")
    )
    # Leases, host delays and due times: a range read each per second at most.
    assert looks <= 3 * (math.ceil(elapsed) + 1)
    frontier.close()


def test_a_crawl_of_key_format_6_is_upgraded_in_place(url: str) -> None:
    frontier = crawlq.open_frontier(url)
    frontier.add_many([f"https://a.example/{i}" for i in range(5)])
    leased = frontier.pop()
    assert leased is not None
    frontier.close()
    client = _client(url)
    meta = _prefix(url) + "meta"
    client.hset(meta, "format", "6")  # what crawlq with key format 6 left
    strip_wide(client, _prefix(url))
    frontier = crawlq.open_frontier(url, ack_delay=0)
    assert client.hget(meta, "format") == b"%d" % FORMAT
    stats = frontier.stats()
    assert (stats.queued, stats.leased, stats.scheduled, stats.revisits) == (4, 1, 0, 0)
    assert stats.counters == crawlq.Counters(accepted=5, popped=1)
    frontier.add(Request("https://a.example/later", not_before=time.time() + 0.3))
    page = frontier.pop()
    assert page is not None
    frontier.ack(page, refetch_after=0.3)
    stats = frontier.stats()
    assert (stats.queued, stats.scheduled, stats.revisits) == (3, 2, 1)
    assert len(_drain_when_due(frontier, 5)) == 5
    client.close()
    frontier.close()


def test_retried_calls_never_schedule_twice(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An add, a delayed release and a refetch whose replies are lost: each once."""
    frontier = crawlq.open_frontier(url, ack_delay=0)
    frontier.add(Request("https://warm.example/"))
    lost = _lose_next_reply(frontier, monkeypatch, redis.ConnectionError("reset (test)"))
    due = time.time() + 30
    assert frontier.add_many([Request("https://a.example/1", not_before=due)]) == [True]
    assert lost
    for request, call in (
        (frontier.pop(), lambda r: frontier.release(r, delay=30)),
        (frontier.pop(), lambda r: frontier.ack(r, refetch_after=30)),
    ):
        if request is None:
            frontier.add(Request("https://b.example/"))
            request = frontier.pop()
        assert request is not None
        lost.clear()
        call(request)
        assert lost
    monkeypatch.undo()
    stats = frontier.stats()
    assert (stats.queued, stats.leased, stats.scheduled, stats.revisits) == (0, 0, 3, 1)
    c = stats.counters
    assert (c.accepted, c.duplicates, c.released, c.refetched, c.acked) == (3, 0, 1, 1, 1)
    assert c.popped == c.acked + c.released + c.expired
    frontier.close()


def test_a_retried_refetch_on_a_cluster_shard_is_numbered_once(
    redis_cluster_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scheduled once, in its place: a shard's refetch replies its number mark, kept for a retry."""
    url = f"{redis_cluster_url}?crawl=due-retry-{time.monotonic_ns()}"
    frontier = crawlq.open_frontier(url, ack_delay=0)
    frontier.add_many(["https://a.example/1", "https://a.example/2"])
    page = frontier.pop()
    assert page is not None
    lost = _lose_next_reply(frontier, monkeypatch, redis.ConnectionError("reset (test)"))
    frontier.ack(page, refetch_after=0.3)
    assert lost
    monkeypatch.undo()
    stats = frontier.stats()
    assert (stats.queued, stats.scheduled, stats.counters.refetched) == (1, 1, 1)
    frontier.add(Request("https://a.example/3"))
    time.sleep(0.35)
    # The refetch took its number when acked: after a/2, before a/3.
    order = _drain_when_due(frontier, 3)
    assert order == ["https://a.example/2", "https://a.example/1", "https://a.example/3"]
    frontier.close()
    from crawlq.stores.redis.cluster import inspection as cluster_admin

    cluster_admin.purge(url)


def test_an_add_finishing_many_refetches_sends_them_in_later_calls(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the leases one call takes, the refetches follow the batch in calls of their own."""
    monkeypatch.setattr(redis_finishing, "FINISH_CHUNK", 1)
    frontier = crawlq.open_frontier(url, ack_delay=0)
    frontier.add_many([f"https://h{i}.example/" for i in range(3)])
    pages = list(iter(frontier.pop, None))
    children = [f"https://h{i}.example/child" for i in range(3)]
    assert frontier.add_many(children, ack=pages, refetch_after=0.2) == [True] * 3
    stats = frontier.stats()
    assert (stats.queued, stats.leased, stats.scheduled, stats.revisits) == (3, 0, 3, 3)
    assert stats.counters.refetched == 3
    assert len(_drain_when_due(frontier, 6)) == 6
    frontier.close()


def test_a_refetch_without_a_delay_is_queued_at_once_last(url: str) -> None:
    frontier = crawlq.open_frontier(url, ack_delay=0)
    frontier.add_many(["https://a.example/1", "https://a.example/2"])
    page = frontier.pop()
    assert page is not None
    frontier._store.ack([page._lease], [(0.0, None)])
    stats = frontier.stats()
    assert (stats.queued, stats.scheduled, stats.counters.refetched) == (2, 0, 1)
    assert _drain_when_due(frontier, 2) == ["https://a.example/2", "https://a.example/1"]
    frontier.close()


def test_a_lifo_crawl_refetches_as_the_newest(url: str) -> None:
    frontier = crawlq.open_frontier(url, lifo=True, ack_delay=0)
    frontier.add_many(["https://a.example/1", "https://a.example/2"])
    page = frontier.pop()
    assert page is not None and page.url == "https://a.example/2"
    frontier.add(Request("https://a.example/3"))
    frontier.ack(page, refetch_after=0.3)
    frontier.close()  # gives back what its ack leased ahead (a/3, then the newest)
    frontier = crawlq.open_frontier(url, lifo=True, ack_delay=0)
    time.sleep(0.35)
    order = _drain_when_due(frontier, 3)
    assert order == ["https://a.example/2", "https://a.example/3", "https://a.example/1"]
    frontier.close()


def test_inspect_shows_scheduled_revisits_and_the_next_due_time(url: str) -> None:
    frontier = crawlq.open_frontier(url, ack_delay=0)
    frontier.add_many(["https://a.example/now", "https://b.example/now"])
    frontier.add(Request("https://c.example/later", not_before=time.time() + 60))
    page = frontier.pop()
    assert page is not None
    frontier.ack(page, refetch_after=30)
    frontier.close()  # gives back what its ack leased ahead
    found = redis_store.inspect(url)
    assert (found.queued, found.leased, found.scheduled, found.revisits) == (1, 0, 2, 1)
    assert found.next_due_in is not None and 25 < found.next_due_in <= 30
    assert found.counters.refetched == 1
    report = admin.inspect(url)
    assert (report.counts["queued"], report.counts["scheduled"], report.counts["revisits"]) == (
        1,
        2,
        1,
    )
    assert any("the first is due in" in note for note in report.notes)
    counts, _ = admin.snapshot(url)
    assert (counts.queued, counts.leased, counts.counters.refetched) == (1, 0, 1)
    assert (counts.scheduled, counts.revisits) == (2, 1)  # what remote top and metrics show
    assert counts.next_due_in is not None and 25 < counts.next_due_in <= 30


def _due_counts_case(url: str, inspect_url: object, snapshot: object) -> None:
    """Due, not moved yet: queued in every reading; next_due_in the first still to come."""
    frontier = crawlq.open_frontier(url, ack_delay=0, prefetch=1)
    frontier.add_many(["https://a.example/page", "https://b.example/now"])
    page = frontier.pop()
    assert page is not None
    frontier.ack(page, refetch_after=0.3)  # a revisit, due soon
    start = time.time()
    frontier.add_many(
        [
            Request("https://c.example/soon", not_before=start + 0.3),
            Request("https://d.example/later", not_before=start + 60),
            Request("https://e.example/later", not_before=start + 90),
        ]
    )
    frontier.close()  # gives back what it leased ahead; nothing pops from here on
    time.sleep(max(0.0, start + 0.35 - time.time()))
    reader = crawlq.open_frontier(url, ack_delay=0)
    readings = [reader.stats(), snapshot(url)[0], inspect_url(url)]  # type: ignore[operator]
    for reading in readings:
        assert (reading.queued, reading.leased) == (3, 0)  # b/now, and the 2 due ones
        assert (reading.scheduled, reading.revisits) == (2, 0)
        assert reading.next_due_in is not None and 55 < reading.next_due_in <= 60
    assert len(reader) == 5
    # Moved by a pop: the same counts.
    assert reader.pop() is not None
    stats = reader.stats()
    assert (stats.queued, stats.leased, stats.scheduled, stats.revisits) == (2, 1, 2, 0)
    reader.close()


def test_a_due_request_counts_as_queued_before_a_pop_moves_it(url: str) -> None:
    _due_counts_case(url, redis_store.inspect, admin.snapshot)


def test_a_due_request_counts_as_queued_on_a_cluster(redis_cluster_url: str) -> None:
    from crawlq.stores.redis.cluster import admin as cluster_admin
    from crawlq.stores.redis.cluster import inspection as cluster_inspection

    url = f"{redis_cluster_url}?crawl=due-counts-{time.monotonic_ns()}"
    try:
        _due_counts_case(url, cluster_inspection.inspect, cluster_admin.snapshot)
    finally:
        cluster_inspection.purge(url)


def test_revisits_come_off_once_due(url: str) -> None:
    """Revisits count only those still to come; the due ones are queued, not revisits."""
    frontier = crawlq.open_frontier(url, ack_delay=0)
    frontier.add_many([f"https://h{i}.example/" for i in range(4)])
    pages = list(iter(frontier.pop, None))
    frontier.ack_many(pages[:3], refetch_after=0.2)
    frontier.ack(pages[3], refetch_after=60)
    frontier.close()
    time.sleep(0.3)
    counts, _ = admin.snapshot(url)
    assert (counts.queued, counts.scheduled, counts.revisits) == (3, 1, 1)
    assert counts.next_due_in is not None and counts.next_due_in > 55
