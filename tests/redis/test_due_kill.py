"""Scheduled requests survive a killed worker, and come due on a 16-shard cluster crawl.

Real processes on a real redis-server (and the session's cluster): a worker
that adds scheduled requests, releases with delays and refetches is killed
with SIGKILL mid-work; the crawl reopened loses none, hands none out before
its due time, and hands every one out once it is due.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis
from redis.cluster import ClusterNode, RedisCluster

import crawlq
from crawlq import Request
from crawlq.stores.redis.cluster import inspection as cluster_admin
from crawlq.stores.redis.cluster.shards import record_tags, shard_of
from tests.redis_cluster import RedisCluster as Cluster

from ._due_worker import LEASE, not_before, urls

ROOT = Path(__file__).resolve().parents[2]
COUNT = 300
_names = itertools.count()


def _log(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    # A line cut by the kill has no newline: left out.
    return [line.split() for line in path.read_text().split("\n")[:-1] if line.strip()]


def _due_times(lines: list[list[str]], count: int) -> tuple[dict[str, float], dict[str, int]]:
    """Each request's earliest due time by the log, and how many of each call returned.

    A request's due time is its ``not_before`` until the worker popped it,
    then that of the worker's last call on it that returned: the time before
    the call plus the delay (the server's clock is at least that when it
    runs the call). A call cut by the kill may or may not have happened: the
    request was due when popped, so it keeps its earlier due time.
    """
    start = float(next(line[1] for line in lines if line[0] == "START"))
    assert ["ADDED"] in lines, "killed before its adds returned"
    due = {link: not_before(start, i) or 0.0 for i, link in enumerate(urls(count))}
    calls = {"release": 0, "refetch": 0}
    pending: dict[str, tuple[float, str]] = {}
    for line in lines:
        if line[0] == "P":
            pending[line[1]] = (float(line[2]) + float(line[3]), line[4])
        elif line[0] == "D":
            at, kind = pending.pop(line[1])
            due[line[1]] = at
            calls[kind] += 1
    return due, calls


def test_a_killed_worker_loses_no_scheduled_request_and_none_comes_early(
    url: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.redis._due_worker", url, str(log), str(COUNT)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    kill_after = random.Random(7).randint(80, 160)  # calls returned, then SIGKILL
    try:
        deadline = time.monotonic() + 60
        while sum(line[0] == "D" for line in _log(log)) < kill_after:
            assert worker.poll() is None, "the worker died by itself"
            assert time.monotonic() < deadline, "the worker made too few calls"
            time.sleep(0.005)
        worker.send_signal(signal.SIGKILL)
    finally:
        worker.kill()
        worker.wait()
    due, calls = _due_times(_log(log), COUNT)
    frontier = crawlq.open_frontier(url, ack_delay=0, lease_timeout=LEASE)
    stats = frontier.stats()
    assert len(frontier) == COUNT  # none lost: nothing was ever done for good
    client = redis.Redis.from_url(url.partition("?")[0])
    crawl = url.rpartition("=")[2]
    members = client.zrange(f"crawlq:{{{crawl}}}:due", 0, -1)
    client.close()
    assert stats.scheduled == len(members)
    assert stats.revisits == sum(member[15:16] == b"r" for member in members)
    assert stats.leased <= 8 + 1  # the dead worker's prefetched and in-flight ones
    c = stats.counters
    assert c.popped == c.acked + c.released + c.expired + stats.leased
    assert calls["refetch"] <= c.refetched <= calls["refetch"] + 1
    assert calls["release"] <= c.released <= calls["release"] + 1
    assert c.acked == c.refetched and c.accepted == COUNT
    out: dict[str, float] = {}
    deadline = time.monotonic() + 30
    while len(out) < COUNT:
        assert time.monotonic() < deadline, f"{COUNT - len(out)} never came due"
        request = frontier.pop()
        if request is None:
            wait = frontier.next_ready_in()
            assert wait is not None, "requests are held: next_ready_in must say when"
            time.sleep(min(max(wait, 0.005), 0.2))
            continue
        now = time.time()
        assert request.url not in out, f"{request.url} handed out twice"
        assert now >= due[request.url] - 0.001, f"{request.url} {due[request.url] - now:.3f}s early"
        out[request.url] = now
        frontier.ack(request)
    assert len(frontier) == 0
    stats = frontier.stats()
    assert (stats.scheduled, stats.revisits, stats.next_due_in) == (0, 0, None)
    c = stats.counters
    assert c.popped == c.acked + c.released + c.expired
    frontier.close()


def test_scheduled_requests_over_many_hosts_on_a_16_shard_cluster(redis_cluster: Cluster) -> None:
    """Each waits in its host's shard; counts add the shards up; all come due, none early."""
    url = redis_cluster.url(f"due-shards-{next(_names)}")
    frontier = crawlq.open_frontier(url, ack_delay=0)
    start = time.time()
    due: dict[str, float] = {}
    batch = []
    for i in range(480):
        link = f"https://h{i % 120}.example/{i}"
        not_before = start + 0.8 + (i % 6) * 0.1 if i % 3 else None
        due[link] = not_before or 0.0
        batch.append(Request(link, not_before=not_before))
    assert frontier.add_many(batch) == [True] * 480
    ready = list(iter(frontier.pop, None))
    assert len(ready) == 160  # the others wait, whatever their host
    for n, request in enumerate(ready):
        before = time.time()
        if n % 2:
            frontier.release(request, delay=0.5)
        else:
            frontier.ack(request, refetch_after=0.5)
        due[request.url] = before + 0.5
    stats = frontier.stats()
    assert (stats.queued, stats.leased, stats.scheduled, stats.revisits) == (0, 0, 480, 80)
    assert stats.next_due_in is not None and stats.next_due_in <= 0.8
    assert (stats.counters.refetched, stats.counters.released) == (80, 80)
    found = cluster_admin.inspect(url)
    assert (found.queued, found.scheduled, found.revisits) == (0, 480, 80)
    assert found.next_due_in is not None
    # Each shard holds its own hosts' scheduled requests, in one slot.
    client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", redis_cluster.servers[0].port)])
    crawl = url.rpartition("=")[2]
    count, tags = (
        v.decode() for v in client.hmget(f"crawlq:{{{crawl}}}:cluster", "shards", "tags")
    )
    shards = record_tags(count, tags)
    assert len(shards) == 16
    held = 0
    for k, tag in enumerate(shards):
        members = client.zrange(f"crawlq:{{{tag}}}:due", 0, -1)
        held += len(members)
        for member in members:
            host = member.partition(b" ")[2]
            assert shard_of(host, 16) == k
    client.close()
    assert held == 480
    assert frontier.pop() is None  # none early
    out: set[str] = set()
    deadline = time.monotonic() + 30
    while len(out) < 480:
        assert time.monotonic() < deadline, f"{480 - len(out)} never came due"
        request = frontier.pop()
        if request is None:
            wait = frontier.next_ready_in()
            assert wait is not None
            time.sleep(min(max(wait, 0.005), 0.2))
            continue
        assert time.time() >= due[request.url] - 0.001, f"{request.url} early"
        assert request.url not in out
        out.add(request.url)
        frontier.ack(request)
    stats = frontier.stats()
    assert (stats.queued, stats.leased, stats.scheduled, stats.revisits) == (0, 0, 0, 0)
    c = stats.counters
    assert (c.accepted, c.refetched, c.released) == (480, 80, 80)
    assert c.popped == c.acked + c.released + c.expired == 480 + 160
    frontier.close()
    cluster_admin.purge(url)
