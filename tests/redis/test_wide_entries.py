"""Key format 9's wide entries: `ready`, `leases`, `hosts` and `lease` are never packed.

A Redis listpack (a small hash or sorted set, under 128 or 512 entries of at
most 64 bytes) is searched from its start by every ZADD, ZREM, HGET and HSET:
on A1 with 60 hosts (as a cluster shard holds) that was 15% of the server's
instructions. One entry longer than Redis packs keeps each key a skiplist or
hashtable; these tests check that it does, that no reader ever sees it as a
host, a lease or a request, and that older crawls get it at open.
"""

from __future__ import annotations

import time

import pytest
import redis

import crawlq
from crawlq import Request
from crawlq.stores.redis import admin
from crawlq.stores.redis.export import export
from crawlq.stores.redis.open import FORMAT
from tests.redis._wide import WIDE, strip_wide

_UNPACKED = {
    "ready": b"skiplist",
    "leases": b"skiplist",
    "hosts": b"hashtable",
    "lease": b"hashtable",
}


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url.partition("?")[0])


def _prefix(url: str) -> str:
    return f"crawlq:{{{url.rpartition('=')[2]}}}:"


def _encodings(client: redis.Redis, prefix: str) -> dict[str, bytes | None]:
    return {key: client.object("encoding", prefix + key) for key in _UNPACKED}


def test_a_small_crawl_keeps_its_hosts_and_leases_unpacked(url: str) -> None:
    """Three hosts, one lease: the four keys are a skiplist or hashtable from the first open."""
    client = _client(url)
    with crawlq.open_frontier(url, ack_delay=0, prefetch=1) as frontier:
        frontier.add_many([f"https://h{i}.example/" for i in range(3)])
        leased = frontier.pop()
        assert leased is not None
        assert _encodings(client, _prefix(url)) == _UNPACKED
        stats = frontier.stats(hosts=True)
        assert (stats.queued, stats.leased) == (2, 1)
        assert sorted(h.host for h in stats.hosts) == ["h0.example", "h1.example", "h2.example"]
        frontier.ack(leased)
    client.close()


def test_the_wide_entries_are_never_handed_out_counted_or_listed(url: str) -> None:
    """Pops, counts, waits, hosts, inspect and export see the crawl's requests and nothing else."""
    urls = [f"https://h{i % 5}.example/{i}" for i in range(40)]
    with crawlq.open_frontier(url, ack_delay=0, host_concurrency=2) as frontier:
        frontier.add_many(urls)
        assert sorted(r.url for r in export(url)) == sorted(urls)
        report = admin.inspect(url)
        leased = "leased (all workers, prefetched included)"
        assert report.counts["queued"] == 40 and report.counts[leased] == 0
        assert sorted(h.name for h in report.hosts) == [f"h{i}.example" for i in range(5)]
        popped = []
        while (request := frontier.pop()) is not None:
            popped.append(request)
        # Every host at its limit of two: ten leased, the rest queued behind them.
        assert len(popped) == 10 and len({r.url for r in popped}) == 10
        assert frontier.stats().leased == 10 and len(frontier) == 40
        assert admin.inspect(url).counts[leased] == 10
        # Nothing ready and no delay: a pop may return only after an ack.
        assert frontier.next_ready_in() is None or frontier.next_ready_in() > 1
        seen = {r.url for r in popped}
        while popped:
            frontier.ack(popped.pop())
            while (request := frontier.pop()) is not None:
                assert request.url not in seen
                seen.add(request.url)
                popped.append(request)
        assert seen == set(urls)
        stats = frontier.stats(hosts=True)
        assert (stats.queued, stats.leased, len(frontier)) == (0, 0, 0)
        assert list(stats.hosts) == []
        assert frontier.next_ready_in() is None
        assert list(export(url)) == []
    client = _client(url)
    # Still there, still alone with nothing queued.
    prefix = _prefix(url)
    assert client.zrange(prefix + "ready", 0, -1) == [WIDE]
    assert client.zrange(prefix + "leases", 0, -1) == [WIDE]
    assert client.hkeys(prefix + "hosts") == [b""]
    client.close()


def test_an_expired_lease_comes_back_past_the_wide_entry(url: str) -> None:
    """The expiry scan and the earliest-deadline read skip the +inf member of `leases`."""
    with crawlq.open_frontier(url, ack_delay=0, lease_timeout=0.2) as frontier:
        frontier.add(Request("https://a.example/x"))
        first = frontier.pop()
        assert first is not None and frontier.pop() is None
        wait = frontier.next_ready_in()
        assert wait is not None and 0 < wait <= 0.2
        time.sleep(0.25)
        again = frontier.pop()
        assert again is not None and again.url == first.url
        frontier.ack(again)
        assert frontier.stats().counters.expired == 1


@pytest.mark.parametrize("older", ["8", "7"])
def test_a_crawl_of_an_older_key_format_gets_them_at_open(url: str, older: str) -> None:
    """Formats 7 and 8 had no wide entries: the open adds them and moves the format on."""
    with crawlq.open_frontier(url, ack_delay=0) as frontier:
        frontier.add_many([f"https://h{i}.example/" for i in range(3)])
        held = frontier.pop()
        assert held is not None
    client = _client(url)
    prefix = _prefix(url)
    strip_wide(client, prefix)
    client.hset(prefix + "meta", "format", older)
    assert client.exists(prefix + "ready") == 1  # two hosts ready: packed again now
    with crawlq.open_frontier(url, ack_delay=0) as frontier:
        assert client.hget(prefix + "meta", "format") == b"%d" % FORMAT
        assert client.zscore(prefix + "ready", WIDE) == float("inf")
        assert client.hget(prefix + "lease", b"@") == WIDE
        stats = frontier.stats()
        assert (stats.queued, stats.leased) == (2, 1)
        rest = [frontier.pop(), frontier.pop(), frontier.pop()]
        assert sorted(r.url for r in rest if r is not None) == [
            "https://h1.example/",
            "https://h2.example/",
        ]
    client.close()


def test_a_purged_crawl_gets_them_again_at_its_next_open(url: str) -> None:
    with crawlq.open_frontier(url) as frontier:
        frontier.add(Request("https://a.example/"))
    crawlq.stores.redis.store.purge(url)
    client = _client(url)
    assert client.exists(_prefix(url) + "ready") == 0
    with crawlq.open_frontier(url, prefetch=1) as frontier:
        frontier.add(Request("https://a.example/again"))
        assert frontier.pop() is not None
        assert _encodings(client, _prefix(url)) == _UNPACKED
    client.close()
