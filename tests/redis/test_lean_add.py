"""The lean add (``add_links``, lua/links.lua): a call that carries only links.

On a real redis-server: which calls take it (the server's slow log, set to
log every command, names the function of each FCALL), that a retried lean
add whose reply was lost reports its first outcome and adds nothing twice,
and that links keep every semantic of add through it: dedup in every mode,
caps, due times, priorities, FIFO/LIFO, host concurrency, and the prefetched
batch given back when a link comes before it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

import crawlq
from crawlq import Request
from tests.redis._lost_reply import lose_next_reply

from .test_store import _lose_next_reply


@contextmanager
def _functions(redis_url: str) -> Iterator[list[str]]:
    """The suffixes ("links", "add", "pop"...) of crawlq's functions called inside."""
    client = redis.Redis.from_url(redis_url.partition("?")[0])
    before = client.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    length = client.config_get("slowlog-max-len")["slowlog-max-len"]
    called: list[str] = []
    client.config_set("slowlog-max-len", 10_000)
    client.config_set("slowlog-log-slower-than", 0)
    client.slowlog_reset()
    try:
        yield called
        entries = client.slowlog_get(10_000)
    finally:
        client.config_set("slowlog-log-slower-than", before)
        client.config_set("slowlog-max-len", length)
        client.close()
    for entry in reversed(entries):  # oldest first
        command = entry["command"]
        if isinstance(command, bytes):
            command = command.decode("latin-1")
        words = command.split(" ")
        if words[0].upper() == "FCALL" and words[1].startswith("crawlq_"):
            called.append(words[1].split("_", 2)[2])


def test_a_call_of_links_alone_is_lean(url: str, redis_url: str) -> None:
    """add_many without ack is add_links; with an ack, or leasing after it, it is add."""
    with crawlq.open_frontier(url, ack_delay=0) as frontier:
        frontier.add(Request("https://warm.example/"))
        with _functions(redis_url) as called:
            assert frontier.add_many(["https://a.example/1", "https://a.example/1"]) == [
                True,
                False,
            ]
        assert called == ["links"]
        page = frontier.pop()
        assert page is not None
        with _functions(redis_url) as called:
            frontier.add_many(["https://a.example/2"], ack=page)
        assert called[0] == "add"
        held = len(frontier._store._buffer)
        with _functions(redis_url) as called:
            frontier._expect_pops(held + 1)  # one more leased after its links: add
            frontier.add_many(["https://a.example/3"])
        assert called == ["add"]
        with _functions(redis_url) as called:
            frontier._expect_pops(held + 1)  # (as many as it holds: nothing to lease)
            frontier.add_many(["https://a.example/4"])
        assert called == ["links"]


def test_a_lean_add_costs_few_commands(url: str, redis_url: str) -> None:
    """One new link: the meta fields in one HMGET, no TIME, no give-back reads."""
    with crawlq.open_frontier(url) as frontier:
        frontier.add_many([f"https://h{i}.example/{j}" for i in range(10) for j in range(2)])
        # (no per-host accepted counts sent meanwhile: they are commands of their own)
        frontier._store._host_accepted_at = time.monotonic() + 3600  # type: ignore[attr-defined]
        client = redis.Redis.from_url(redis_url.partition("?")[0])
        client.config_resetstat()
        assert frontier.add_many(["https://h1.example/new"]) == [True]
        stats = {
            name.removeprefix("cmdstat_"): value["calls"]
            for name, value in client.info("commandstats").items()
        }
        client.close()
    stats.pop("config|resetstat", None)
    stats.pop("info", None)  # (the store's look at evicted_keys, every few seconds)
    # HMGET meta; HINCRBY seq, ns, accepted; HSETNX bucket; HGET host; RPUSH; HSET record.
    assert stats == {
        "fcall": 1,
        "hmget": 1,
        "hincrby": 3,
        "hsetnx": 1,
        "hget": 1,
        "rpush": 1,
        "hset": 1,
    }


def test_a_retried_lean_add_reports_its_first_outcome(
    url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its reply lost after it ran: the retry returns the first flags and adds nothing."""
    frontier = crawlq.open_frontier(url)
    frontier.add_many(["https://warm.example/", "https://seen.example/"])
    lost = _lose_next_reply(frontier, monkeypatch, redis.ConnectionError("reset (test)"))
    batch = ["https://a.example/1", "https://seen.example/", "https://a.example/1"]
    with _functions(redis_url) as called:
        assert frontier.add_many(batch) == [True, False, False]
    assert lost  # the first reply was dropped
    assert called == ["links", "links"]  # the first run, then its retry
    stats = frontier.stats()
    assert (stats.queued, stats.counters.accepted, stats.counters.duplicates) == (3, 3, 2)
    # A lost reply of a call that added nothing (a link another worker
    # added, so this one asks the server): run again, the same outcome.
    other = crawlq.open_frontier(url)
    assert other.add_many(["https://b.example/1"]) == [True]
    other.close()
    lost.clear()
    assert frontier.add_many(["https://b.example/1"]) == [False]
    assert lost
    monkeypatch.undo()
    stats = frontier.stats()
    assert (stats.queued, stats.counters.accepted) == (4, 4)
    # (its duplicate counts twice: the counters of a rerun all-duplicate add)
    assert stats.counters.duplicates == 4
    assert sorted(r.url for r in iter(frontier.pop, None)) == [
        "https://a.example/1",
        "https://b.example/1",
        "https://seen.example/",
        "https://warm.example/",
    ]
    frontier.close()


def test_a_lean_add_lost_before_it_ran_runs_on_retry(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its request lost on the way (nothing ran): the retry adds the links, once."""
    from crawlq.stores.redis import conn as _redis_conn

    frontier = crawlq.open_frontier(url)
    frontier.add(Request("https://warm.example/"))
    real_round_trip = _redis_conn.round_trip
    failed: list[bool] = []

    def fail_first(conn: object, packed: bytes) -> object:
        if not failed:
            failed.append(True)
            raise redis.ConnectionError("reset before sending (test)")
        return real_round_trip(conn, packed)

    monkeypatch.setattr(_redis_conn, "round_trip", fail_first)
    assert frontier.add_many(["https://a.example/1", "https://a.example/2"]) == [True, True]
    assert failed
    monkeypatch.undo()
    assert frontier.add_many(["https://a.example/1"]) == [False]
    stats = frontier.stats()
    assert (stats.queued, stats.counters.accepted, stats.counters.duplicates) == (3, 3, 1)
    frontier.close()


def test_a_retried_lean_add_on_a_cluster_shard_reports_its_first_outcome(
    redis_cluster_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Numbered calls, sent together to their shards: each retried with its own flags."""
    from crawlq.stores.redis.cluster import inspection as cluster_admin

    url = f"{redis_cluster_url}?crawl=lean-retry-{time.monotonic_ns()}"
    frontier = crawlq.open_frontier(url)
    links = [f"https://spread{i}.example/" for i in range(30)]
    frontier.add_many(links[:10])
    dropped = lose_next_reply(monkeypatch)
    assert frontier.add_many(links) == [False] * 10 + [True] * 20
    assert dropped
    monkeypatch.undo()
    stats = frontier.stats()
    assert (stats.queued, stats.counters.accepted) == (30, 30)
    # (10, or one more when the reply lost was of a shard's call that had
    # duplicates alone: rerun, it counts them again)
    assert stats.counters.duplicates >= 10
    # Numbered after the whole batch, in order: FIFO across shards for this worker.
    assert [r.url for r in iter(frontier.pop, None)] == links
    frontier.close()
    cluster_admin.purge(url)


def test_dedup_modes_through_the_lean_add(redis_url: str, url: str) -> None:
    """Exact (with its bucket splits), Bloom and seen_ttl dedup, all in lean calls."""
    base = url.partition("?")[0]
    many = [f"https://h{i % 31}.example/{i}" for i in range(600)]
    with (
        _functions(redis_url) as called,
        crawlq.open_frontier(f"{base}?crawl=lean-exact-{time.monotonic_ns()}") as exact,
    ):
        assert sum(exact.add_many(many)) == 600  # splits: 600 > 48 per bucket
        assert exact.add_many([*many[::7], "https://new.example/"]) == [False] * 86 + [True]
        assert exact.stats().seen == 601
    assert "links" in called and "add" not in called
    with crawlq.open_frontier(
        f"{base}?crawl=lean-bloom-{time.monotonic_ns()}", bloom_capacity=10_000
    ) as bloom:
        assert bloom.add_many(many[:50] + many[:5]) == [True] * 50 + [False] * 5
        assert bloom.stats().seen == 50
    with crawlq.open_frontier(
        f"{base}?crawl=lean-ttl-{time.monotonic_ns()}", seen_ttl=0.3
    ) as timed:
        assert timed.add_many(["https://t.example/1", "https://t.example/1"]) == [True, False]
        assert timed.add_many(["https://t.example/1"]) == [False]
        time.sleep(0.35)
        assert timed.add_many(["https://t.example/1"]) == [True]
    # dont_filter is never a duplicate.
    with crawlq.open_frontier(f"{base}?crawl=lean-df-{time.monotonic_ns()}") as frontier:
        again = Request("https://d.example/", dont_filter=True)
        assert frontier.add_many([again, again]) == [True, True]


def test_order_and_pacing_through_the_lean_add(redis_url: str, url: str) -> None:
    """Priorities, FIFO and LIFO, the cap and host concurrency from the header."""
    base = url.partition("?")[0]
    with _functions(redis_url) as called:
        with crawlq.open_frontier(f"{base}?crawl=lean-fifo-{time.monotonic_ns()}") as fifo:
            fifo.add_many([Request(f"https://a.example/{i}", priority=i % 2) for i in range(6)])
            fifo.add_many([Request("https://b.example/x", priority=1)])
            order = [r.url for r in iter(fifo.pop, None)]
        with crawlq.open_frontier(
            f"{base}?crawl=lean-lifo-{time.monotonic_ns()}", lifo=True
        ) as lifo:
            lifo.add_many([f"https://a.example/{i}" for i in range(3)])
            lifo.add_many(["https://a.example/3"])
            lifo_order = [r.url for r in iter(lifo.pop, None)]
    assert called.count("links") == 4 and "add" not in called
    # Priority 1 first (b.example, with no lease, wins a tie with a.example
    # once a.example has one), then FIFO within a host.
    assert [u for u in order if "a.example" in u] == [
        f"https://a.example/{i}" for i in (1, 3, 5, 0, 2, 4)
    ]
    assert order.index("https://b.example/x") == 1
    assert lifo_order == [f"https://a.example/{i}" for i in (3, 2, 1, 0)]
    with crawlq.open_frontier(
        f"{base}?crawl=lean-cap-{time.monotonic_ns()}",
        max_requests_per_host=2,
        host_concurrency=1,
    ) as capped:
        links = [f"https://c.example/{i}" for i in range(3)] + ["https://c.example/0"]
        assert capped.add_many(links) == [True, True, False, False]
        counters = capped.stats().counters
        assert (counters.accepted, counters.capped, counters.duplicates) == (2, 1, 1)
        first = capped.pop()
        assert first is not None and capped.pop() is None  # c.example at its limit
        capped.ack(first)
        capped.flush()
        assert capped.pop() is not None


def test_due_times_through_the_lean_add(redis_url: str, url: str) -> None:
    """A link with a due time to come is scheduled; a past one is queued at once."""
    with crawlq.open_frontier(url) as frontier, _functions(redis_url) as called:
        now = time.time()
        added = frontier.add_many(
            [
                Request("https://a.example/later", not_before=now + 0.4),
                Request("https://a.example/past", not_before=now - 10),
            ]
        )
        assert added == [True, True]
        stats = frontier.stats()
        assert (stats.queued, stats.scheduled) == (1, 1)
        assert [r.url for r in iter(frontier.pop, None)] == ["https://a.example/past"]
        time.sleep(0.45)
        later = frontier.pop()
        assert later is not None and later.url == "https://a.example/later"
    assert called[0] == "links"


def test_a_lean_add_gives_the_prefetched_batch_back_for_a_better_link(
    url: str, redis_url: str
) -> None:
    """Holding a batch, a link below it stays lean and keeps it; one above takes its place."""
    with crawlq.open_frontier(url, prefetch=8) as frontier:
        frontier.add_many([Request(f"https://h{i}.example/", priority=5) for i in range(8)])
        store = frontier._store
        frontier._expect_pops(8)  # the pop leases all 8
        first = frontier.pop()
        assert first is not None and store._buffer  # the rest are held
        held = len(store._buffer)
        with _functions(redis_url) as called:
            frontier.add_many([Request("https://low.example/", priority=1)])
        assert called == ["links"]
        assert len(store._buffer) == held  # kept
        with _functions(redis_url) as called:
            frontier.add_many([Request("https://seen.example/", priority=9)] * 2)
        assert called == ["links"]  # given back and leased afresh in the same call
        popped = frontier.pop()
        assert popped is not None and popped.url == "https://seen.example/"
        rest = [r.url for r in iter(frontier.pop, None)]
        assert rest[-1] == "https://low.example/" and len(rest) == 8
        stats = frontier.stats()
        assert (stats.queued, stats.leased) == (0, 10)


def test_a_retried_lean_add_that_gave_the_batch_back_replays_its_leases(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its reply lost: the retry returns the first run's leases, none leased twice."""
    with crawlq.open_frontier(url, prefetch=8) as frontier:
        frontier.add_many([Request(f"https://h{i}.example/", priority=5) for i in range(4)])
        frontier._expect_pops(4)
        first = frontier.pop()
        assert first is not None and len(frontier._store._buffer) == 3
        lost = _lose_next_reply(frontier, monkeypatch, redis.ConnectionError("reset (test)"))
        assert frontier.add_many([Request("https://top.example/", priority=9)]) == [True]
        assert lost
        monkeypatch.undo()
        got = [r.url for r in iter(frontier.pop, None)]
        assert got == ["https://top.example/"] + [f"https://h{i}.example/" for i in (1, 2, 3)]
        stats = frontier.stats()
        assert (stats.queued, stats.leased, stats.counters.accepted) == (0, 5, 5)
