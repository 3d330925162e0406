"""A full or evicting Redis: draining keeps working, losing data is refused."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import crawlq
from crawlq import Request
from crawlq.stores.redis import calls as redis_calls
from tests.redis_server import StartServer

PAD = "x" * 1000


def _admin(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url)


def _fill(frontier: crawlq.Frontier) -> int:
    """Add padded requests until the server refuses; return how many it took."""
    added = 0
    for batch in range(10_000):
        requests = [
            Request(f"https://h{i % 7}.example/{batch}/{i}", meta={"pad": PAD}) for i in range(50)
        ]
        try:
            frontier.add_many(requests)
        except crawlq.StoreFull as exc:
            assert "adding" in str(exc) and "stored nothing" in str(exc)
            assert "Popping, acking and releasing still work" in str(exc)
            return added
        added += len(requests)
    raise AssertionError("the server never filled up")


def test_a_full_server_refuses_adds_and_still_drains(redis_servers: StartServer) -> None:
    server = redis_servers(extra=("--maxmemory-policy", "noeviction"))
    admin = _admin(server.url)
    url = server.url + "?crawl=full"
    frontier = crawlq.open_frontier(url, prefetch=4)
    frontier.add(Request("https://warm.example/"))
    used = admin.info("memory")["used_memory"]
    admin.config_set("maxmemory", used + 2_000_000)
    try:
        added = _fill(frontier) + 1
        assert added > 100
        # Everything but adding goes on: pop, release, ack, state, another worker.
        first = frontier.pop()
        second = frontier.pop()
        assert first is not None and second is not None
        frontier.release(second)
        frontier.ack(first)
        frontier.save_state({"pages": 1})
        assert frontier.load_state() == {"pages": 1}
        other = crawlq.open_frontier(url)
        assert other.stats().queued + frontier.stats().queued >= added - 1
        popped = other.pop()
        assert popped is not None
        other.ack(popped)
        other.close()
        with pytest.raises(crawlq.StoreFull, match="refused adding"):
            frontier.add(Request("https://new.example/"))
        # Draining frees memory: adding works again.
        done = 2
        while (request := frontier.pop()) is not None:
            frontier.ack(request)
            done += 1
        assert done == added
        assert frontier.add(Request("https://new.example/"))
    finally:
        admin.close()
        frontier.close()


def test_opening_a_full_server_works(redis_servers: StartServer) -> None:
    server = redis_servers(extra=("--maxmemory-policy", "noeviction"))
    admin = _admin(server.url)
    frontier = crawlq.open_frontier(server.url + "?crawl=one")
    frontier.add(Request("https://warm.example/"))
    admin.config_set("maxmemory", admin.info("memory")["used_memory"] + 1_000_000)
    try:
        _fill(frontier)
        # A second frontier, on the same crawl and on a new one: open, pop.
        again = crawlq.open_frontier(server.url + "?crawl=one")
        assert again.pop() is not None
        again.close()
        fresh = crawlq.open_frontier(server.url + "?crawl=two")
        assert fresh.pop() is None
        fresh.close()
    finally:
        admin.close()
        frontier.close()


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random"])
def test_an_evicting_server_is_refused_at_open(
    redis_servers: StartServer, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = redis_servers(extra=("--maxmemory", "100mb", "--maxmemory-policy", policy))
    url = server.url + "?crawl=evict"
    with pytest.raises(crawlq.IncompatibleStore, match=f"{policy}.*maxmemory-policy noeviction"):
        crawlq.open_frontier(url)
    with pytest.raises(crawlq.StoreError, match="allow_eviction=True"):
        crawlq.open_frontier(url)
    with caplog.at_level(logging.WARNING, logger="crawlq.redis"):
        frontier = crawlq.open_frontier(url, allow_eviction=True)
    assert "losing requests" in caplog.text
    assert frontier.add(Request("https://a.example/"))
    frontier.close()
    with pytest.raises(crawlq.ConfigError, match="allow_eviction"):
        crawlq.open_frontier(url, allow_eviction="yes")


def test_a_policy_that_evicts_only_keys_with_a_ttl_is_accepted(
    redis_servers: StartServer,
) -> None:
    server = redis_servers(extra=("--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"))
    frontier = crawlq.open_frontier(server.url + "?crawl=volatile")
    assert frontier.add(Request("https://a.example/"))
    frontier.close()


def test_evictions_mid_crawl_are_refused(
    redis_servers: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_calls, "EVICTION_CHECK", 0.0)  # look at every call
    server = redis_servers(extra=("--maxmemory-policy", "noeviction"))
    admin = _admin(server.url)
    frontier = crawlq.open_frontier(server.url + "?crawl=later")
    frontier.add_many([Request(f"https://h{i}.example/") for i in range(10)])
    # Someone reconfigures the server, and it fills up.
    admin.config_set("maxmemory-policy", "allkeys-lru")
    admin.config_set("maxmemory", admin.info("memory")["used_memory"] + 500_000)
    for i in range(2000):
        admin.set(f"other:{i}", PAD)
        if admin.info("stats")["evicted_keys"]:
            break
    assert admin.info("stats")["evicted_keys"] > 0
    try:
        with pytest.raises(crawlq.IncompatibleStore, match="evicted keys mid-crawl"):
            frontier.pop()
        with pytest.raises(crawlq.IncompatibleStore, match="noeviction"):
            frontier.add(Request("https://new.example/"))
        # Fixed: the crawl goes on.
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", 0)
        assert frontier.add(Request("https://new.example/"))
    finally:
        admin.close()
        frontier.close()
