"""Exact dedup in buckets (key format 5): linear hashing, splits, an older crawl's set.

On a real redis-server: the buckets must split as the crawl grows, stay
small enough for Redis's listpack encoding, keep dedup exact through every
split, and cost at most 24 bytes per fingerprint.
"""

from __future__ import annotations

import itertools

import pytest
import redis

import crawlq
from crawlq import Request
from crawlq.stores.redis import store as redis_store
from crawlq.stores.redis.open import FORMAT
from tests.redis._wide import strip_wide

_names = itertools.count()


@pytest.fixture
def url(redis_url: str) -> str:
    return f"{redis_url}?crawl=buckets-{next(_names)}"


def _client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url.partition("?")[0])


def _buckets(client: redis.Redis, crawl: str) -> list[bytes]:
    return list(client.scan_iter(match=f"crawlq:{{{crawl}}}:s:*", count=1000))


def test_dedup_stays_exact_through_every_split(url: str, redis_url: str) -> None:
    crawl = url.rsplit("=", 1)[1]
    urls = [f"https://h{i % 97}.example/page/{i}" for i in range(20_000)]
    with crawlq.open_frontier(url) as frontier:
        added = []
        for start in range(0, len(urls), 500):
            added += frontier.add_many(urls[start : start + 500])
        assert added == [True] * len(urls)
        # Every one is a duplicate now, whichever bucket it moved to.
        again = []
        for start in range(0, len(urls), 500):
            again += frontier.add_many(urls[start : start + 500])
        assert again == [False] * len(urls)
        assert frontier.stats().seen == len(urls)
        assert (
            frontier.seen_many([frontier.fingerprinter.fingerprint(Request(u)) for u in urls[:50]])
            == [True] * 50
        )
        assert not frontier.seen(Request("https://h1.example/never"))
    client = _client(redis_url)
    meta = client.hgetall(f"crawlq:{{{crawl}}}:meta")
    level, split, count = int(meta[b"sl"]), int(meta[b"sp"]), int(meta[b"ns"])
    buckets = _buckets(client, crawl)
    # 20,000 / 48 per bucket: 2^level + split buckets, about 417.
    assert len(buckets) == 2**level + split == pytest.approx(20_000 / 48, abs=2)
    assert count == 20_000 == sum(client.hlen(b) for b in buckets)
    encodings = {client.object("encoding", b) for b in buckets}
    sizes = [client.hlen(b) for b in buckets]
    client.close()
    assert max(sizes) <= 128 and encodings == {b"listpack"}


def test_forget_finds_a_fingerprint_in_its_bucket_after_splits(url: str) -> None:
    urls = [f"https://a.example/{i}" for i in range(3_000)]
    with crawlq.open_frontier(url) as frontier:
        frontier.add_many(urls)
        assert frontier.forget(urls[::100]) == 30
        assert frontier.forget(urls[::100]) == 0
        assert frontier.stats().seen == 3_000 - 30
        assert frontier.add_many(urls[::100]) == [True] * 30
        assert frontier.add_many(urls[1::100]) == [False] * 30


def test_a_seen_fingerprint_costs_at_most_24_bytes(url: str, redis_url: str) -> None:
    """MEMORY USAGE of every bucket, over the fingerprints they hold (issue 15's target)."""
    crawl = url.rsplit("=", 1)[1]
    count = 50_000
    with crawlq.open_frontier(url) as frontier:
        for start in range(0, count, 1000):
            frontier.add_many(
                [f"https://h{i % 1000}.example/{'p' * 60}/{i}" for i in range(start, start + 1000)]
            )
    client = _client(redis_url)
    buckets = _buckets(client, crawl)
    used = sum(client.memory_usage(b, samples=0) or 0 for b in buckets)
    client.close()
    assert used / count <= 24, f"{used / count:.1f} bytes per seen fingerprint"


def test_a_crawl_of_format_4_keeps_its_seen_set(url: str, redis_url: str) -> None:
    """An older crawl's `seen` set is upgraded in place: kept, and still the dedup."""
    crawl = url.rsplit("=", 1)[1]
    fingerprinter = crawlq.Fingerprinter()
    old = [f"https://a.example/{i}" for i in range(5)]
    with crawlq.open_frontier(url) as frontier:
        frontier.add_many(old)
    client = _client(redis_url)
    prefix = f"crawlq:{{{crawl}}}:"
    # What crawlq with key format 4 left: a set of 16-byte fingerprints.
    for key in _buckets(client, crawl):
        client.delete(key)
    client.sadd(prefix + "seen", *(fingerprinter.fingerprint(Request(u)) for u in old))
    client.hdel(prefix + "meta", "sl", "sp", "ns")
    client.hset(prefix + "meta", "format", "4")
    strip_wide(client, prefix)
    with crawlq.open_frontier(url) as frontier:
        assert client.hget(prefix + "meta", "format") == b"%d" % FORMAT
        assert frontier.add_many([old[0], "https://a.example/new"]) == [False, True]
        assert frontier.stats().seen == 6
        assert frontier.seen(Request(old[3]))
        assert frontier.forget([old[3]]) == 1
        assert frontier.add(Request(old[3]))
    assert client.scard(prefix + "seen") == 6
    assert _buckets(client, crawl) == []
    client.close()
    assert redis_store.inspect(url).seen == 6
