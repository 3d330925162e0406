"""Queued requests in lists per host and lane (key format 6), and the upgrade from format 5."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence

import pytest
import redis

import crawlq
from crawlq import Request
from crawlq.stores.redis import store as redis_store
from crawlq.stores.redis.open import FORMAT
from tests.conformance.test_frontier import drain, urls
from tests.redis._wide import strip_wide


def _client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


def _drain(frontier: crawlq.Frontier) -> list[str]:
    return urls(drain(frontier))


def _lane(score: float, request_id: bytes) -> bytes:
    return b"%d%s" % (score, b"L" if request_id[:1] >= b"5" else b"")


def _to_format_5(client: redis.Redis, prefix: str, fingerprints: Sequence[bytes] = ()) -> int:
    """Rewrite a format-6 crawl's queue as crawlq with key format 5 kept it.

    Format 5: a host's head request is named by its record and the rest sit
    in zset q:HOST (score -priority, member id); every payload is in hash
    `p` by id; the dedup buckets' fields are 12 bytes, not 11 (meta has no
    sw): given the crawl's ``fingerprints``, they are rewritten so. Returns
    how many queued requests were moved.
    """
    if fingerprints:
        by_field = {fingerprint[:11]: fingerprint[:12] for fingerprint in fingerprints}
        for key in client.keys(prefix + "s:*"):
            fields = client.hkeys(key)
            client.delete(key)
            client.hset(key, mapping={by_field[f]: b"" for f in fields})
        client.hdel(prefix + "meta", "sw")
    moved = 0
    for name, record in client.hgetall(prefix + "hosts").items():
        if len(record) <= 21 or not name:  # (not name: the wide entry)
            continue
        head_id = record[21:36]
        if len(record) > 36:  # a host's only request, in "p" already
            client.hset(prefix + "hosts", name, record[:36])
            moved += 1
            continue
        score = struct.unpack(">BIdd", record[:21])[3]
        lanes = client.zrange(prefix + "i:" + name.decode(), 0, -1)
        lanes.insert(0, _lane(score, head_id))  # the head's lane is not in the index
        for lane in lanes:
            key = prefix.encode() + b"l:" + lane + b":" + name
            lane_score = int(lane.rstrip(b"L"))
            for entry in client.lrange(key, 0, -1):
                request_id, payload = entry[:15], entry[15:]
                client.hset(prefix + "p", request_id, payload)
                if request_id != head_id:
                    client.zadd(prefix.encode() + b"q:" + name, {request_id: lane_score})
                moved += 1
            client.delete(key)
        client.delete(prefix + "i:" + name.decode())
    client.hset(prefix + "meta", "format", "5")
    strip_wide(client, prefix)
    return moved


_MIXED = [
    *(Request(f"https://a.example/p{i}", priority=2) for i in range(3)),
    *(Request(f"https://a.example/n{i}", priority=-1) for i in range(4)),
    Request("https://b.example/only", meta={"k": [1, 2]}),
    *(Request(f"https://c.example/{i}", priority=i % 3) for i in range(40)),
]


def _mixed_crawl(frontier: crawlq.Frontier) -> Iterator[Request]:
    """Adds of several priorities, lanes and hosts; yields requests it keeps leased."""
    frontier.add_many([Request(f"https://a.example/f{i}") for i in range(150)])
    frontier.add_many([Request(f"https://a.example/l{i}") for i in range(5)], lifo=True)
    frontier.add_many(_MIXED[:7])
    frontier.add(_MIXED[7])
    frontier.add_many(_MIXED[8:])
    kept = frontier.pop()
    assert kept is not None
    yield kept


def test_a_crawl_of_key_format_5_is_upgraded_in_place(redis_url: str) -> None:
    """Its queued requests move to lists in their order; a leased one stays leased."""
    url = redis_url + "?crawl=format5"
    twin_url = redis_url + "?crawl=format5twin"
    frontier = crawlq.open_frontier(url, prefetch=1, ack_delay=0)
    twin = crawlq.open_frontier(twin_url, prefetch=1, ack_delay=0)
    (kept,) = list(_mixed_crawl(frontier))
    (twin_kept,) = list(_mixed_crawl(twin))
    assert kept.url == twin_kept.url
    frontier.close()
    client = _client(redis_url)
    prefix = "crawlq:{format5}:"
    added = [f"https://a.example/{k}{i}" for k, n in (("f", 150), ("l", 5)) for i in range(n)]
    fingerprint = frontier.fingerprinter.fingerprint
    seen = [fingerprint(Request(u)) for u in added] + [fingerprint(r) for r in _MIXED]
    assert _to_format_5(client, prefix, seen) == 202
    assert client.exists(prefix + "q:a.example") == 1
    reopened = crawlq.open_frontier(url, prefetch=1, ack_delay=0)
    assert client.hget(prefix + "meta", "format") == b"%d" % FORMAT
    assert client.hget(prefix + "meta", "upgrade") is None
    assert client.keys(prefix + "q:*") == []
    assert client.hlen(prefix + "p") == 1  # the leased one
    assert len(reopened) == 203 and len(twin) == 203  # 202 queued, 1 leased
    hosts = {h.host: h.queued for h in reopened.stats(hosts=10).hosts or ()}
    assert hosts == {h.host: h.queued for h in twin.stats(hosts=10).hosts or ()}
    assert hosts == {"a.example": 161, "b.example": 1, "c.example": 40}
    priorities = redis_store.inspect(url).priorities
    assert priorities == redis_store.inspect(twin_url).priorities
    assert priorities == [(2, 3 + 13 - 1), (1, 13), (0, 150 + 5 + 1 + 14), (-1, 4)]  # 1 leased
    # Its dedup keeps 12-byte fields (no sw in meta), new ones too.
    assert reopened.add_many(["https://a.example/f7", "https://a.example/new"]) == [False, True]
    fields = [f for k in client.keys(prefix + "s:*") for f in client.hkeys(k)]
    assert len(fields) == 204 and {len(f) for f in fields} == {12}
    twin.add(Request("https://a.example/new"))
    # The lease taken before the upgrade is still the crawl's: its ack counts.
    reopened.ack(kept)
    twin.ack(twin_kept)
    # Requests coming back go to their places in the upgraded lists too.
    for side in (reopened, twin):
        taken = [side.pop() for _ in range(3)]
        side.release_many([r for r in reversed(taken) if r is not None])
    order = _drain(reopened)
    assert order == _drain(twin)
    assert len(order) == 203 and len(set(order)) == 203
    assert client.keys(prefix + "l:*") == [] and client.hlen(prefix + "p") == 0
    client.close()
    reopened.close()
    twin.close()
    redis_store.purge(url)
    redis_store.purge(twin_url)


def test_an_interrupted_upgrade_is_finished_by_the_next_open(redis_url: str) -> None:
    url = redis_url + "?crawl=halfway"
    with crawlq.open_frontier(url) as frontier:
        # More hosts than a hash keeps packed (512): the scan takes a few calls.
        frontier.add_many([Request(f"https://h{i % 600}.example/{i}") for i in range(1800)])
    client = _client(redis_url)
    prefix = "crawlq:{halfway}:"
    _to_format_5(client, prefix)
    # What an opener that was killed after one call of upgrade_queues left.
    client.hset(prefix + "meta", mapping={"format": "6", "upgrade": "0"})
    from crawlq.stores.redis.library import library

    function = library().function["upgrade"]
    client.fcall(function.decode(), 1, prefix, 50)
    assert 0 < len(client.keys(prefix + "q:*")) < 600
    with crawlq.open_frontier(url) as frontier:
        assert client.keys(prefix + "q:*") == []
        drained = _drain(frontier)
    assert sorted(drained) == sorted(f"https://h{i % 600}.example/{i}" for i in range(1800))
    client.close()
    redis_store.purge(url)


@pytest.mark.parametrize("lifo", [False, True])
def test_a_request_coming_back_goes_to_its_place_among_many(redis_url: str, lifo: bool) -> None:
    """A released request is put back by id, past hundreds added since (the same as memory://)."""

    def run(open_: Callable[[], crawlq.Frontier]) -> list[str]:
        with open_() as frontier:
            frontier.add_many([Request(f"https://h.example/a{i}") for i in range(200)])
            taken = [frontier.pop() for _ in range(3)]
            frontier.add_many([Request(f"https://h.example/b{i}") for i in range(300)])
            for request in reversed(taken):
                assert request is not None
                frontier.release(request)
            return _drain(frontier)

    name = f"back{int(lifo)}"
    expected = run(lambda: crawlq.open_frontier("memory://", lifo=lifo))
    got = run(lambda: crawlq.open_frontier(f"{redis_url}?crawl={name}", lifo=lifo, prefetch=1))
    assert got == expected and len(got) == 500
    redis_store.purge(f"{redis_url}?crawl={name}")


def test_a_queued_request_costs_its_url_and_at_most_80_bytes(redis_url: str) -> None:
    """MEMORY USAGE of the queue's keys, 10 hosts of 1,000 requests with 100-character URLs."""
    url = redis_url + "?crawl=qbytes"
    client = _client(redis_url)
    prefix = "crawlq:{qbytes}:"
    with crawlq.open_frontier(url) as frontier:
        for h in range(10):
            base = f"https://h{h}.example/"
            frontier.add_many(
                [Request(base + f"{i:06d}".rjust(100 - len(base), "x")) for i in range(1000)]
            )
        keys = [prefix + "hosts", prefix + "ready", prefix + "p"]
        keys += [k.decode() for k in client.keys(prefix + "l:*")]
        used = sum(client.memory_usage(k, samples=0) or 0 for k in keys)
        per_request = used / 10_000
        assert 100 < per_request <= 180, per_request
    client.close()
    redis_store.purge(url)
