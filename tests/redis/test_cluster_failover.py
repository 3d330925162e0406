"""A Redis Cluster primary killed mid-crawl: with ``replicas=1`` nothing acked is lost.

A real cluster of 3 primaries, each with a replica; one primary is SIGKILLed
while the crawl runs, the cluster promotes its replica, and the crawl's
calls follow the slots to it (MOVED, or a refreshed slot map) and finish.
"""

from __future__ import annotations

import threading
import time

import pytest

import crawlq
from crawlq import Request
from tests.redis_cluster import StartCluster


def test_a_killed_primary_fails_over_and_loses_nothing_acked(
    redis_clusters: StartCluster,
) -> None:
    cluster = redis_clusters(primaries=3, replicas=1)
    primaries_before = set(cluster.primary_ports())
    url = cluster.url("failover", seeds=len(cluster.servers))
    frontier = crawlq.open_frontier(
        url, replicas=1, ack_delay=0, retry_timeout=30, lease_timeout=120
    )
    seeds = [Request(f"https://h{i % 60}.example/seed/{i}") for i in range(1500)]
    frontier.add_many(seeds)
    expected = {r.url for r in seeds}
    acked: list[str] = []
    killed: list[int] = []

    def kill_a_primary() -> None:
        while len(acked) < 500:
            time.sleep(0.001)
        # A primary that is not the first seed (any one works: every primary
        # serves some of the 16 shards).
        port = sorted(primaries_before)[-1]
        server = cluster.server_on(port)
        server.kill()
        killed.append(port)
        # Its replica takes over: writes to its shards wait (replicas=1)
        # until the new primary has a replica, which the killed node
        # becomes when it is back, as an operator would bring it back.
        deadline = time.monotonic() + 30
        while set(cluster.primary_ports()) == primaries_before - {port}:
            assert time.monotonic() < deadline, "no failover"
            time.sleep(0.1)
        server.start()

    killer = threading.Thread(target=kill_a_primary)
    killer.start()
    child = 0
    while True:
        request = frontier.pop()
        if request is None:
            if len(frontier) == 0:
                break
            time.sleep(0.01)
            continue
        if child < 1000 and "/seed/" in request.url:
            children = [
                Request(f"https://h{(child + k) % 60}.example/child/{child + k}") for k in range(2)
            ]
            frontier.add_many(children, ack=request)
            expected.update(r.url for r in children)
            child += 2
        else:
            frontier.ack(request)
        acked.append(request.url)
    killer.join()
    assert killed, "the primary was never killed"
    promoted = set(cluster.primary_ports()) - primaries_before
    assert len(promoted) == 1, "the killed primary's replica took over"
    assert killed[0] not in cluster.primary_ports(), "the killed node came back as a replica"
    # Every request was done; none acked came back.
    assert set(acked) == expected
    assert len(acked) == len(set(acked)), "an acked request came back after the failover"
    stats = frontier.stats()
    assert (stats.queued, stats.leased, stats.seen) == (0, 0, len(expected))
    assert stats.counters.accepted == len(expected) == stats.counters.acked
    frontier.close()


def test_replicas_that_the_cluster_lacks_are_refused_at_open(
    redis_cluster_url: str,
) -> None:
    with pytest.raises(crawlq.StoreError, match=r"replicas=1 makes every write wait"):
        crawlq.open_frontier(f"{redis_cluster_url}?crawl=no-replicas", replicas=1)
    with pytest.raises(crawlq.ConfigError, match="replicas must be"):
        crawlq.open_frontier(f"{redis_cluster_url}?crawl=no-replicas", replicas=-1)
