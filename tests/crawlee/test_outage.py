"""A crawlee crawl on Redis through an outage: ridden through, or ended and resumed.

The crawl is the real one of `tests.crawlee.test_crawls` (crawlee's
ParselCrawler in a subprocess, the four-host loopback site), on a
redis-server of its own, paused with SIGSTOP a quarter of the way in:

- shorter than ``retry_timeout``: the calls that time out are retried on
  crawlq's threads, crawlee sees nothing, every page is fetched once;
- longer: crawlee's run ends with `crawlq.StoreUnavailable` (crawlee stops a
  crawl whose request manager fails), without hanging; the same command,
  run again once the server is back, fetches the rest: every page fetched,
  at most crawlee's concurrency twice (the requests the ended run held come
  back after ``lease_timeout``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import pytest

from tests.redis_server import RedisServer, StartServer

from ._site import LoopbackSite
from ._workers import TIMEOUT, Worker, Workers, assert_every_page_once

pytest.importorskip("crawlee", reason="pip install 'crawlq[crawlee]'")

CONCURRENCY = 4


def _start(workers: Workers, server: RedisServer, name: str, **frontier: Any) -> Worker:
    return workers.start(
        f"{server.url}?crawl=crawlee-outage&socket_timeout=0.3",
        name=name,
        delay=0.0,
        host_concurrency=2,
        concurrency=CONCURRENCY,
        options=json.dumps(frontier),
    )


def _pause_a_quarter_in(site: LoopbackSite, worker: Worker, server: RedisServer) -> int:
    """SIGSTOP the server once a quarter of the site is fetched; return its pid."""
    pid = server.pid
    assert pid is not None
    deadline = time.monotonic() + TIMEOUT
    while site.total() < len(site.expected()) // 4:
        assert worker.process.poll() is None, f"the crawl ended early:\n{worker.error()}"
        assert time.monotonic() < deadline, "the crawl did not get a quarter in, in time"
        time.sleep(0.002)
    os.kill(pid, signal.SIGSTOP)
    return pid


def test_a_pause_shorter_than_retry_timeout_is_not_seen_by_crawlee(
    loopback: LoopbackSite, workers: Workers, redis_servers: StartServer
) -> None:
    server = redis_servers()
    worker = _start(workers, server, "paused", retry_timeout=10)
    pid = _pause_a_quarter_in(loopback, worker, server)
    try:
        time.sleep(2.0)  # several socket timeouts, each call retried
        assert worker.process.poll() is None, worker.error()
    finally:
        os.kill(pid, signal.SIGCONT)
    worker.finished()
    assert_every_page_once(loopback)


def test_an_outage_past_retry_timeout_ends_the_run_and_the_same_command_resumes(
    loopback: LoopbackSite, workers: Workers, redis_servers: StartServer
) -> None:
    server = redis_servers()
    options = {"retry_timeout": 1, "lease_timeout": 3}
    first = _start(workers, server, "ended", **options)
    pid = _pause_a_quarter_in(loopback, first, server)
    try:
        code = first.wait(timeout=30)  # ends by itself while the server is still paused
    finally:
        os.kill(pid, signal.SIGCONT)
    assert code != 0
    assert "crawlq._errors.StoreUnavailable" in first.error(), first.error()
    assert loopback.total() < len(loopback.expected())

    again = _start(workers, server, "resumed", **options)
    again.finished()
    counts = loopback.counts()
    assert set(counts) == loopback.expected(), "a page was never fetched: a request was lost"
    refetched = sum(n - 1 for n in counts.values())
    assert refetched <= CONCURRENCY, f"{refetched} pages fetched twice"
