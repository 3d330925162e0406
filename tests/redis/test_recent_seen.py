"""A link a worker met a moment ago is refused by the worker, with no server call.

See ``crawlq._recent``: what a shared store answered for (added, or refused
as seen) is kept for up to `RecentlySeen.TTL` seconds; refusals made there are
counted as duplicates, by this worker at once and by every process once its
counts are sent (once a second, and at close).
"""

from __future__ import annotations

import asyncio
import time

import redis

import crawlq
from crawlq import Request
from crawlq._recent import Generations, RecentlySeen
from tests.redis_cluster import RedisCluster

LINKS = [f"https://h{i}.example/page" for i in range(8)]


def _fcalls(server: redis.Redis) -> int:
    stats = server.info("commandstats")
    return int(stats.get("cmdstat_fcall", {}).get("calls", 0))


def test_a_link_met_again_costs_no_server_call_and_counts_as_a_duplicate(
    url: str, redis_url: str
) -> None:
    server = redis.Redis.from_url(redis_url)
    worker = crawlq.open_frontier(url)
    other = crawlq.open_frontier(url)
    assert worker.add_many(LINKS) == [True] * 8
    assert worker.add_many(LINKS[:4]) == [False] * 4  # answered by the server: now known
    server.config_resetstat()
    assert worker.add_many(LINKS) == [False] * 8
    assert worker.add(Request(LINKS[0])) is False
    assert _fcalls(server) == 0
    # This worker counts its own refusals at once.
    assert worker.stats().counters.duplicates == 4 + 8 + 1
    assert worker.stats().counters.accepted == 8
    worker.close()  # sends them: every process sees them
    counters = other.stats().counters
    assert (counters.accepted, counters.duplicates) == (8, 13)
    other.close()
    server.close()


def test_a_batch_mixing_known_and_new_links_keeps_its_order(url: str, redis_url: str) -> None:
    server = redis.Redis.from_url(redis_url)
    frontier = crawlq.open_frontier(url)
    frontier.add_many(LINKS[::2])
    batch = [*LINKS[:3], "https://new.example/", LINKS[4]]
    server.config_resetstat()
    assert frontier.add_many(batch) == [False, True, False, True, False]
    assert _fcalls(server) == 1  # the two new ones, in one call
    popped = [frontier.pop() for _ in range(6)]
    assert [request.url for request in popped if request] == [
        *LINKS[::2],
        LINKS[1],
        "https://new.example/",
    ]
    frontier.close()
    server.close()


def test_dont_filter_requests_are_never_refused_by_the_worker(url: str) -> None:
    frontier = crawlq.open_frontier(url)
    assert frontier.add(Request(LINKS[0])) is True
    assert frontier.add(Request(LINKS[0], dont_filter=True)) is True
    assert frontier.add(Request(LINKS[0])) is False
    assert len(frontier) == 2
    frontier.close()


def test_forget_through_the_frontier_asks_the_server_again(url: str) -> None:
    frontier = crawlq.open_frontier(url)
    assert frontier.add(Request(LINKS[0])) is True
    assert frontier.add(Request(LINKS[0])) is False
    assert frontier.forget([LINKS[0]]) == 1
    assert frontier.add(Request(LINKS[0])) is True
    frontier.close()


def test_a_request_refused_by_the_host_cap_is_asked_again(url: str, redis_url: str) -> None:
    """A refusal may be the cap, not a duplicate: only accepted links are kept."""
    server = redis.Redis.from_url(redis_url)
    frontier = crawlq.open_frontier(url, max_requests_per_host=1)
    assert frontier.add_many(["https://a.example/1", "https://a.example/2"]) == [True, False]
    server.config_resetstat()
    assert frontier.add(Request("https://a.example/2")) is False
    assert frontier.add(Request("https://a.example/1")) is False
    assert _fcalls(server) == 1  # a/2 again; a/1 was accepted, so it is known
    assert frontier.stats().counters.capped == 2
    frontier.close()
    server.close()


def test_a_crawl_whose_fingerprints_expire_keeps_nothing_in_the_worker(url: str) -> None:
    frontier = crawlq.open_frontier(url, seen_ttl=0.3)
    assert frontier.add(Request(LINKS[0])) is True
    assert frontier.add(Request(LINKS[0])) is False
    time.sleep(0.35)
    assert frontier.add(Request(LINKS[0])) is True
    frontier.close()


def test_the_scheduler_refuses_known_links_without_a_call(url: str, redis_url: str) -> None:
    server = redis.Redis.from_url(redis_url)

    async def crawl() -> tuple[list[bool], int]:
        async with crawlq.Scheduler(crawlq.open_frontier(url)) as scheduler:
            await scheduler.add_many([Request(link) for link in LINKS])
            before = _fcalls(server)
            again = await scheduler.add_many([Request(link) for link in LINKS])
            return again, _fcalls(server) - before

    again, calls = asyncio.run(crawl())
    assert again == [False] * 8
    assert calls == 0
    server.close()


def test_a_forget_by_another_process_reaches_a_worker_when_its_fingerprint_expires() -> None:
    """The documented limit, on the set itself: trusted for at most ``ttl`` seconds."""
    recent = RecentlySeen(capped=False, ttl=0.4)
    entry = (b"f" * 16, "a.example", Request(LINKS[0]), None)
    recent.learn([entry], [True])
    assert recent.split([entry]) == ([], [0])
    time.sleep(0.25)
    assert recent.split([entry]) == ([], [0])  # the older generation still holds it
    time.sleep(0.25)
    assert recent.split([entry]) == ([entry], None)  # gone after at most ttl
    assert recent.take_hits() == 2


def test_after_a_while_without_lookups_nothing_older_than_ttl_is_trusted() -> None:
    """Turns happen at lookups: the first after an idle ttl must not move old ones along."""
    seen = Generations(100, ttl=0.4)
    seen.add(b"f" * 16)
    time.sleep(0.5)
    assert b"f" * 16 not in seen


def test_a_late_turn_keeps_the_schedule() -> None:
    seen = Generations(100, ttl=2.0)
    seen.add(b"f" * 16)
    time.sleep(1.4)  # the turn due at 1.0 comes now: it moves to the older generation
    assert b"f" * 16 in seen
    time.sleep(0.8)  # 2.2 s after it entered: the next turn was due at 2.0, not 2.4
    assert b"f" * 16 not in seen


def test_the_set_keeps_at_most_its_size() -> None:
    recent = RecentlySeen(capped=False, size=100)
    entries = [(b"%016d" % n, "a.example", Request(LINKS[0]), None) for n in range(1_000)]
    recent.learn(entries, [True] * 1_000)
    assert len(recent) <= 100
    assert recent.split(entries[-10:])[1] is not None  # the newest are kept


def test_on_a_cluster_a_known_link_costs_no_shard_a_call(redis_cluster: RedisCluster) -> None:
    frontier = crawlq.open_frontier(redis_cluster.url("recent-seen"))
    assert frontier.add_many(LINKS) == [True] * 8

    def fcalls() -> int:
        return sum(
            int(
                redis_cluster.node_info(port, "commandstats")
                .get("cmdstat_fcall", {})
                .get("calls", 0)
            )
            for port in redis_cluster.primary_ports()
        )

    before = fcalls()
    assert frontier.add_many(LINKS) == [False] * 8
    assert fcalls() == before
    assert frontier.stats().counters.duplicates == 8
    frontier.close()
