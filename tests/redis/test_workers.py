"""Many crawler processes on one Redis frontier, one of them killed; a server crash.

These run real processes against a real redis-server: the guarantees are
about what survives a SIGKILL, so nothing is simulated.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import crawlq
from crawlq import Request
from crawlq.stores.redis import store as redis_store
from crawlq.stores.redis.cluster import inspection as cluster_admin
from tests.redis_server import StartServer

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 20_000
HOSTS = 100
LEASE = 2.0


def _worker(url: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.redis._worker", url, str(log), *extra],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _read(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("backend", "ack_delay", "hosts"),
    [("redis", 0.0, HOSTS), ("redis", 0.5, HOSTS), ("redis-cluster", 0.5, 200)],
)
def test_four_workers_one_killed(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, ack_delay: float, hosts: int
) -> None:
    """With ack_delay=0 every request is completed exactly once; with acks that wait
    for the next call, the killed worker's waiting acks are lost too, so what it
    completed since its last call comes back (at-least-once), and nothing else.

    On a Redis Cluster crawl (16 shards over 3 primaries) the same holds, and
    each host's concurrency limit is kept across every worker and shard."""
    if backend == "redis":
        url = f"{request.getfixturevalue('redis_url')}?crawl=four-workers-{ack_delay}"
        purge = redis_store.purge
    else:
        url = f"{request.getfixturevalue('redis_cluster_url')}?crawl=four-workers-cluster"
        purge = cluster_admin.purge
    purge(url)
    urls = [f"https://h{i % hosts}.example/{i}" for i in range(REQUESTS)]
    with crawlq.open_frontier(url, host_concurrency=1, lease_timeout=LEASE) as seed:
        for first in range(0, REQUESTS, 1000):
            seed.add_many([Request(u) for u in urls[first : first + 1000]])
        assert len(seed) == REQUESTS
    logs = [tmp_path / f"worker-{n}.log" for n in range(4)]
    # Worker 0 hangs holding a lease early in its share (its share varies with
    # how fast the others are: it must reach the point before all is done); it
    # is then killed.
    delay = ("--ack-delay", str(ack_delay))
    workers = [_worker(url, logs[0], "--hang-after", str(REQUESTS // 40), *delay)]
    deadline = time.monotonic() + 90
    # On a loaded machine the others could finish everything before worker 0
    # (a slow start) reaches its point: they start once it is working.
    while not (logs[0].exists() and logs[0].read_text().startswith("S ")):
        assert time.monotonic() < deadline, "worker 0 never started"
        assert workers[0].poll() is None, "worker 0 died at start"
        time.sleep(0.01)
    workers += [_worker(url, log, *delay) for log in logs[1:]]
    while not (logs[0].exists() and "HANG" in logs[0].read_text()):
        assert time.monotonic() < deadline, "worker 0 never reached its hang point"
        assert workers[0].poll() is None, "worker 0 died early"
        time.sleep(0.05)
    os.kill(workers[0].pid, signal.SIGKILL)
    killed_at = time.time()
    workers[0].wait()
    for process in workers[1:]:
        assert process.wait(timeout=max(1, deadline - time.monotonic())) == 0

    started: dict[str, list[tuple[float, int, float | None]]] = defaultdict(list)
    ended: dict[str, list[tuple[float, int]]] = defaultdict(list)
    acked: dict[str, list[int]] = defaultdict(list)
    for n, log in enumerate(logs):
        for fields in _read(log):
            if fields[0] == "S" and len(fields) == 4:
                lease_end = None if fields[3] == "None" else float(fields[3]) / 1000
                started[fields[1]].append((float(fields[2]), n, lease_end))
            elif fields[0] == "E" and len(fields) == 3:
                ended[fields[1]].append((float(fields[2]), n))
            elif fields[0] == "A" and len(fields) == 2:
                acked[fields[1]].append(n)

    # Every request was completed; exactly once, but for the killed worker's
    # acks that were still waiting (ack_delay) when it died.
    assert sorted(acked) == sorted(urls)
    twice = {u for u, by in acked.items() if len(by) > 1}
    if ack_delay == 0:
        assert not twice
    else:
        assert all(sorted(acked[u])[0] == 0 and len(acked[u]) == 2 for u in twice)
    # Only the dead worker's un-acked requests (and with ack_delay its waiting
    # acks) were handed out twice, and only once their lease had expired.
    again = {u: s for u, s in started.items() if len(s) > 1}
    dead_unacked = {u for u, s in started.items() if s[0][1] == 0 and 0 not in acked.get(u, [])}
    assert again, "the killed worker held a lease: it must have come back"
    assert set(again) <= dead_unacked | twice
    for url_, deliveries in again.items():
        (earlier, later) = sorted(deliveries)
        assert earlier[1] == 0 and later[1] != 0
        assert earlier[2] is not None and later[0] >= earlier[2], (url_, deliveries)
        assert later[0] >= killed_at - LEASE
    # Per host, no two leases overlapped, across all workers: each interval
    # runs from the pop to just before the ack (or, for the killed worker, to
    # the lease deadline), inside the lease Redis held.
    intervals: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for url_, deliveries in started.items():
        host = urlsplit(url_).hostname or ""
        ends = sorted(ended.get(url_, []))
        for popped, by, lease_end in deliveries:
            finish = next((t for t, w in ends if w == by and t >= popped), lease_end)
            assert finish is not None
            intervals[host].append((popped, finish))
    assert len(intervals) == hosts
    for host, spans in intervals.items():
        spans.sort()
        for (_, end_before), (next_start, _) in itertools.pairwise(spans):
            assert next_start >= end_before, f"{host}: two leases at once"
    with crawlq.open_frontier(url) as check:
        stats = check.stats()
        assert stats.queued == 0 and stats.leased == 0
        # The crawl-wide counters, every worker's: each request accepted and
        # acked once; the killed worker's leases (handed out or prefetched)
        # expired, and nothing else was popped.
        counters = stats.counters
        assert counters.accepted == REQUESTS and counters.acked == REQUESTS
        assert counters.duplicates == 0 and counters.released == 0
        assert counters.expired >= len(again)
        assert counters.popped == REQUESTS + counters.expired
    purge(url)


def test_a_block_set_by_one_worker_is_obeyed_by_all(redis_url: str, tmp_path: Path) -> None:
    """Worker 0 blocks h0.example mid-crawl; the pop times of all four workers show
    no pop of it until the block ends, then the host resumes and the crawl ends.

    Workers lease one request at a time (prefetch=1): a worker's prefetched
    requests were leased before any block, and may come out during it."""
    url = f"{redis_url}?crawl=four-workers-block"
    redis_store.purge(url)
    urls = [f"https://h{i % 20}.example/{i}" for i in range(2_000)]
    with crawlq.open_frontier(url) as seed:
        seed.add_many([Request(u) for u in urls])
    logs = [tmp_path / f"worker-{n}.log" for n in range(4)]
    block = ("--block-after", "60", "h0.example", "1.5")
    workers = [
        _worker(url, log, "--prefetch", "1", *(block if n == 0 else ()))
        for n, log in enumerate(logs)
    ]
    for process in workers:
        assert process.wait(timeout=120) == 0
    pops: list[tuple[float, str, int]] = []
    blocks = []
    for n, log in enumerate(logs):
        for fields in _read(log):
            if fields[0] == "S":
                pops.append((float(fields[2]), urlsplit(fields[1]).hostname or "", n))
            elif fields[0] == "B":
                blocks.append((float(fields[1]), float(fields[2])))
    ((asked, answered),) = blocks
    assert sorted(u for _, u, _ in pops) == sorted(urlsplit(u).hostname for u in urls)
    h0 = sorted((at, n) for at, host, n in pops if host == "h0.example")
    during = [(at, n) for at, n in h0 if answered + 0.05 < at < asked + 1.5 - 0.05]
    assert during == [], "a worker popped the blocked host"
    # The host had requests left: it resumed after the block, by some worker.
    after = [at for at, _ in h0 if at >= asked + 1.5 - 0.05]
    assert after and min(after) < asked + 1.5 + 1.0
    # Others went on meanwhile.
    assert any(answered < at < asked + 1.5 for at, host, _ in pops if host != "h0.example")
    redis_store.purge(url)


def test_server_crash_with_aof_loses_nothing_acked(redis_servers: StartServer) -> None:
    server = redis_servers(appendonly=True)
    url = server.url + "?crawl=aof"
    frontier = crawlq.open_frontier(url, retry_timeout=30, lease_timeout=60)
    seeds = [Request(f"https://h{i % 20}.example/seed/{i}") for i in range(600)]
    frontier.add_many(seeds)
    expected = {r.url for r in seeds}
    acked: list[str] = []
    crashed = threading.Event()

    def crash_midway() -> None:
        while len(acked) < 300:
            time.sleep(0.001)
        server.restart(crash=True)  # SIGKILL, whatever call is in flight
        crashed.set()

    crasher = threading.Thread(target=crash_midway)
    crasher.start()
    child = 0
    while (request := frontier.pop()) is not None:
        if child < 400 and "/seed/" in request.url:
            children = [
                Request(f"https://h{(child + k) % 20}.example/child/{child + k}") for k in range(2)
            ]
            frontier.add_many(children)
            expected.update(r.url for r in children)
            child += 2
        frontier.ack(request)
        acked.append(request.url)
    crasher.join()
    assert crashed.is_set()
    assert len(acked) == len(set(acked)), "an acked request came back after the crash"
    assert set(acked) == expected
    stats = frontier.stats()
    assert (stats.queued, stats.leased, stats.seen) == (0, 0, len(expected))
    assert not any(frontier.add_many([Request(u) for u in sorted(expected)[:50]]))
    frontier.close()
