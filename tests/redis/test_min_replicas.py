"""A primary that wants more replicas than it has (``min-replicas-to-write``).

Such a primary answers every change with NOREPLICAS while a replica is
gone (restarting, lagging, cut off). crawlq retries for ``retry_timeout``,
then raises `StoreUnavailable` (which the docs' worker pattern rides out),
not a plain `StoreError`; once the replica is back, the same calls go
through and nothing accepted is lost. Real servers: a primary and its
replica on loopback.
"""

from __future__ import annotations

import time

import pytest
import redis

import crawlq
from crawlq import Request
from tests.redis_server import StartServer

RETRY = 0.5


def wait_for_replicas(port: int, count: int, seconds: float = 15.0) -> None:
    client = redis.Redis(port=port)
    try:
        deadline = time.monotonic() + seconds
        while client.info("replication").get("min_slaves_good_slaves", 0) != count:
            assert time.monotonic() < deadline, f"not {count} good replicas in time"
            time.sleep(0.05)
    finally:
        client.close()


def test_a_missing_replica_is_retried_then_unavailable_and_nothing_is_lost(
    redis_servers: StartServer,
) -> None:
    primary = redis_servers(extra=("--min-replicas-to-write", "1"))
    replica = redis_servers(extra=("--replicaof", "127.0.0.1", str(primary.port)))
    wait_for_replicas(primary.port, 1)
    url = f"{primary.url}?crawl=replicated"
    accepted = [f"https://h{n % 4}.test/{n}" for n in range(20)]
    with crawlq.open_frontier(url, retry_timeout=RETRY, host_delay=0.0, ack_delay=0) as frontier:
        assert frontier.add_many(accepted) == [True] * 20
        held = frontier.pop()
        assert held is not None
        replica.stop()
        wait_for_replicas(primary.port, 0)
        link = Request("https://h9.test/link")
        for call in (
            frontier.pop,
            lambda: frontier.add_many([link], ack=held),
            lambda: frontier.add_many([Request("https://h8.test/")]),
        ):
            started = time.monotonic()
            with pytest.raises(crawlq.StoreUnavailable) as raised:
                call()
            assert time.monotonic() - started >= RETRY / 2, "raised without retrying"
            assert type(raised.value) is crawlq.StoreUnavailable
            assert "min-replicas-to-write" in str(raised.value), raised.value
        replica.start()
        wait_for_replicas(primary.port, 1)
        # The same call again goes through: its link stored, its page acked.
        assert frontier.add_many([link], ack=held) == [True]
        drained = []
        while (request := frontier.pop()) is not None:
            drained.append(request.url)
            frontier.ack(request)
        stats = frontier.stats()
    assert sorted([held.url, *drained]) == sorted([*accepted, link.url])
    assert (stats.queued, stats.leased, stats.counters.acked) == (0, 0, 21)
