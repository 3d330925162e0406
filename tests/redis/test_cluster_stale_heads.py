"""A cluster pop never hands out a head whose lease may have ended while it waited.

Found by the chaos run's Scheduler workers on a cluster (10 minutes, seed
13): a pop compares the shards' heads, peeked earlier and kept for a
quarter of a second; when its peek of another shard waited out an outage
(a primary failing over), it handed out a head peeked before the outage,
whose lease had expired meanwhile: the same URL was then leased, fetched
and acked by another worker first, and fetched again by this one.

Here, on a real cluster of 3 primaries: a worker's pop peeks every shard
(leasing each one's head) and hands out shard B's, which it acks; its next
pop must ask shard B again (it has nothing in hand there), whose node is
paused (SIGSTOP) for longer than the lease; the request that pop returns
must hold a live lease, as the server sees it.
"""

from __future__ import annotations

import threading
import time

import redis

import crawlq
from crawlq import Request
from crawlq.stores.redis.cluster.shards import shard_of, shard_tags
from tests.redis_cluster import StartCluster

LEASE = 2.0  # seconds: the paused node stays away longer than this
SHARDS = 3


def test_a_head_peeked_before_another_shards_outage_is_leased_afresh(
    redis_clusters: StartCluster,
) -> None:
    cluster = redis_clusters()
    crawl = "stale-heads"
    tags = shard_tags(crawl, SHARDS)
    owner = [cluster.slot_owner(cluster.key_slot(f"crawlq:{{{tag}}}:meta")) for tag in tags]
    a, b = next((i, j) for i in range(SHARDS) for j in range(SHARDS) if owner[i] != owner[j])
    hosts = [f"h{n}.test" for n in range(1000)]
    host_a = next(h for h in hosts if shard_of(h.encode(), SHARDS) == a)
    host_b = next(h for h in hosts if shard_of(h.encode(), SHARDS) == b)
    frontier = crawlq.open_frontier(
        cluster.url(crawl),
        shards=SHARDS,
        lease_timeout=LEASE,
        host_delay=0.0,
        host_concurrency=None,
        ack_delay=0,
    )
    try:
        frontier.add_many(
            [
                Request(f"https://{host_b}/first", priority=5),  # shard b's only request
                Request(f"https://{host_a}/1", priority=1),
                Request(f"https://{host_a}/2", priority=1),
            ]
        )
        first = frontier.pop()  # every shard peeked: shard a's head leased now
        assert first is not None and first.url == f"https://{host_b}/first"
        frontier.ack(first)  # (so shard b has nothing to hand out again)
        cluster.pause(owner[b])
        resume = threading.Timer(LEASE + 0.5, cluster.resume, (owner[b],))
        resume.start()
        try:
            started = time.monotonic()
            second = frontier.pop()  # asks shard b again: waits out the pause
            waited = time.monotonic() - started
        finally:
            resume.join()
            cluster.resume(owner[b])
        assert waited > LEASE, f"the pop did not wait for the paused shard ({waited:.2f} s)"
        assert second is not None and second.url.startswith(f"https://{host_a}/")
        # The lease it holds is the live one, as the server sees it.
        lease_id, token = second._lease[0], second._lease[1]  # type: ignore[attr-defined]
        prefix = f"crawlq:{{{tags[a]}}}:"
        node = redis.Redis(port=owner[a])
        try:
            record = node.hget(prefix + "lease", lease_id)
            deadline = node.zscore(prefix + "leases", lease_id)
            seconds, micros = node.time()
        finally:
            node.close()
        now_ms = seconds * 1000 + micros / 1000
        assert record is not None and record.split(b" ", 1)[0] == token, (record, token)
        assert deadline is not None and deadline > now_ms, (
            f"handed out a lease that ended {(now_ms - (deadline or 0)) / 1000:.2f} s ago"
        )
        frontier.ack(second)
    finally:
        frontier.close()
