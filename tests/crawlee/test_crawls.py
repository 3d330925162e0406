"""Real crawlee crawls on crawlq, in subprocesses, against a linked site over four loopback hosts.

Each crawl is ``python -m tests.crawlee.crawl_worker`` (crawlee's
ParselCrawler, no browser) against `LoopbackSite` (300 pages on 127.0.0.2 to
127.0.0.5, served from a thread of this process). What is checked, and where:

- every page fetched, and once: the server's counts;
- the per-host delay: at **hand-out**, the moment the manager gives crawlee a
  request (each worker logs it with `time.monotonic`, one clock for every
  process), across every worker of the crawl. crawlee's very first fetch of a
  run leaves 50-100 ms after its hand-out, so the server would see that gap
  shortened: the delay is the frontier's promise at hand-out;
- never two requests to one host at once (``host_concurrency=1``): at the
  server, from each request's start and end;
- a ``kill -9`` of a crawl on a SQLite job, then the same command: every page
  fetched, at most the crawler's concurrency fetched twice;
- three processes on one Redis crawl (one server, and a cluster): the pages
  shared, none fetched twice; a 429 from one host stops that host, and only
  it, for all three.
"""

from __future__ import annotations

import itertools
import signal
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from ._site import ADDRESSES, LoopbackSite
from ._workers import PAGES_PER_HOST, TIMEOUT, Worker, Workers, assert_every_page_once

pytest.importorskip("crawlee", reason="pip install 'crawlq[crawlee]'")

DELAY = 0.08
#: Slack on the delay between two hand-outs: the time from the frontier's
#: lease to the hand-out being logged, in three crawlee processes and the
#: Redis servers on 2 cores: the reply waits for the GIL (a 5 ms switch
#: interval while the loop parses a page) and then for the loop's turn. CI
#: once measured 6.5 ms. Requests held in a worker before they go out are
#: checked closer, in one process, by tests/redis/test_pace_at_handout.py.
HANDOUT_SLACK = 0.010
#: crawlee's tasks per worker in the kill test: the bound on re-fetches.
KILL_CONCURRENCY = 4


# -- checks -----------------------------------------------------------------------


def handout_gaps(workers: list[Worker]) -> dict[str, list[float]]:
    """Per host, the gaps between consecutive hand-outs by any of the workers."""
    times: dict[str, list[float]] = defaultdict(list)
    for worker in workers:
        for event in worker.events("handout"):
            times[urlsplit(event["url"]).hostname or ""].append(event["at"])
    return {host: [b - a for a, b in itertools.pairwise(sorted(at))] for host, at in times.items()}


def assert_delay_kept_at_handout(workers: list[Worker], delay: float) -> None:
    gaps = handout_gaps(workers)
    assert set(gaps) == set(ADDRESSES)
    for host, host_gaps in gaps.items():
        assert len(host_gaps) >= PAGES_PER_HOST - 1
        shortest = min(host_gaps)
        assert shortest >= delay - HANDOUT_SLACK, (
            f"{host}: two hand-outs {shortest * 1000:.1f} ms apart (delay {delay * 1000:.0f} ms)"
        )


def assert_one_at_a_time_at_the_server(site: LoopbackSite) -> None:
    """With host_concurrency=1: each request of a host starts after the previous one ended."""
    by_host = defaultdict(list)
    for fetch in site.fetched():
        by_host[fetch.host].append(fetch)
    assert set(by_host) == set(ADDRESSES)
    for host, fetches in by_host.items():
        fetches.sort(key=lambda f: f.start)
        overlaps = [
            (a.path, b.path, round(a.end - b.start, 4))
            for a, b in itertools.pairwise(fetches)
            if b.start < a.end
        ]
        assert not overlaps, f"{host}: requests at the server at once: {overlaps[:5]}"


# -- the crawls ---------------------------------------------------------------------


def test_a_memory_crawl_fetches_every_page_once_at_each_hosts_pace(
    loopback: LoopbackSite, workers: Workers
) -> None:
    worker = workers.start(
        "memory://", name="memory", delay=DELAY, host_concurrency=1, concurrency=8
    )
    worker.finished()
    assert_every_page_once(loopback)
    assert worker.events("done")[0]["handled"] == len(loopback.expected())
    assert_delay_kept_at_handout([worker], DELAY)
    assert_one_at_a_time_at_the_server(loopback)


def test_kill_9_on_a_sqlite_job_then_the_same_command_fetches_the_rest(
    loopback: LoopbackSite, workers: Workers, tmp_path: Path
) -> None:
    job = str(tmp_path / "job")
    options = {"delay": 0.0, "host_concurrency": 2, "concurrency": KILL_CONCURRENCY}
    first = workers.start(job, name="killed", **options)
    half = len(loopback.expected()) // 2
    deadline = time.monotonic() + TIMEOUT
    while loopback.total() < half:
        assert first.process.poll() is None, f"the crawl ended before halfway:\n{first.error()}"
        assert time.monotonic() < deadline, "the crawl did not get halfway in time"
        time.sleep(0.002)
    first.process.send_signal(signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    before = loopback.counts()
    assert half <= sum(before.values()) < len(loopback.expected())

    again = workers.start(job, name="resumed", **options)
    again.finished()
    counts = loopback.counts()
    assert set(counts) == loopback.expected(), "a page was never fetched: a request was lost"
    refetched = sum(n - 1 for n in counts.values())
    assert refetched <= KILL_CONCURRENCY, f"{refetched} pages fetched again after kill -9"
    # The second process fetched the rest, not the whole site again.
    assert len(again.events("handled")) <= len(loopback.expected()) - half + KILL_CONCURRENCY


@pytest.mark.parametrize("server", ["redis_url", "redis_cluster_url"])
def test_three_processes_on_one_redis_crawl_share_the_pages_and_the_pace(
    loopback: LoopbackSite, workers: Workers, server: str, request: pytest.FixtureRequest
) -> None:
    # On one server, and on a 3-primary cluster (16 shards): the pace of a
    # host is kept by the shard that holds it, for every process.
    url = str(request.getfixturevalue(server))
    frontier = f"{url}?crawl=crawlee-three-{uuid.uuid4().hex[:8]}"
    three = workers.start_together(frontier, 3, delay=DELAY, host_concurrency=1, concurrency=4)
    for worker in three:
        worker.finished()
    assert_every_page_once(loopback)
    handled = [len(worker.events("handled")) for worker in three]
    assert sum(handled) == len(loopback.expected())
    assert all(handled), f"a worker fetched nothing: {handled}"
    assert_delay_kept_at_handout(three, DELAY)
    assert_one_at_a_time_at_the_server(loopback)


def test_a_429_pauses_its_host_for_all_three_processes_of_a_redis_crawl(
    loopback: LoopbackSite, workers: Workers, redis_url: str
) -> None:
    retry_after = 2.0
    limited = ADDRESSES[1]
    loopback.limit(1, at=12, retry_after=retry_after)
    frontier = f"{redis_url}?crawl=crawlee-429-{uuid.uuid4().hex[:8]}"
    three = workers.start_together(frontier, 3, delay=DELAY, host_concurrency=1, concurrency=4)
    for worker in three:
        worker.finished()

    # Every page once with a 200; the request that got the 429 came back later.
    assert_every_page_once(loopback)
    fetches = loopback.fetched()
    refused = [f for f in fetches if f.status == 429]
    assert len(refused) == 1 and refused[0].host == limited
    recorded = [e for worker in three for e in worker.events("429")]
    assert len(recorded) == 1, recorded
    blocked_at = recorded[0]["at"]
    assert refused[0].end <= blocked_at

    # No process sent the host anything until Retry-After had passed...
    after = [f.start for f in fetches if f.host == limited and f.start > refused[0].start]
    assert after, "the host was never fetched again"
    pause = min(after) - refused[0].end
    assert pause >= retry_after - 0.02, f"{limited} fetched again after {pause:.3f} s"
    handed = [
        e["at"]
        for worker in three
        for e in worker.events("handout")
        if urlsplit(e["url"]).hostname == limited and blocked_at < e["at"] < blocked_at + 1.9
    ]
    assert not handed, f"{limited} handed out while blocked: {handed}"
    # ... while the crawl of the other hosts went on; all three took part in the crawl
    # (one may idle a second or two while the others hold the due requests).
    busy = Counter(
        worker.process.pid
        for worker in three
        for e in worker.events("handout")
        if urlsplit(e["url"]).hostname != limited and blocked_at < e["at"] < blocked_at + 1.9
    )
    assert sum(busy.values()) >= 10, busy
    assert all(worker.events("handled") for worker in three)
    assert_one_at_a_time_at_the_server(loopback)
