"""Real Scrapy crawls with crawlq as SCHEDULER on one real redis-server.

On a shared store the scheduler holds the links a process has not met and
writes them with the acks of finished pages in one call (see
``crawlq.contrib.scrapy.frontiers``). These crawls check what that must not
change: every page fetched once, duplicates counted (also those the store
finds only at the write, added by another process), a kill -9 re-fetching at
most CONCURRENT_REQUESTS pages and losing none, and two processes sharing
one crawl.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import crawlq
from crawlq.stores.redis import admin as redis_admin
from crawlq.stores.redis import inspection as redis_inspection
from tests.redis_server import StartServer

from ._site import ServedSite
from .conftest import SCHEDULER, Crawl
from .test_crawl import (
    assert_crawled_once,
    assert_every_page_fetched,
    assert_exactly_once,
    assert_finished,
)


@pytest.fixture
def crawl_url(redis_url: str) -> Iterator[str]:
    """A crawl of its own on the session's redis-server, purged after the test."""
    url = f"{redis_url}?crawl=scrapy-redis-crawl-{os.getpid()}-{time.monotonic_ns()}"
    yield url
    redis_admin.purge(url)


def fcalls(redis_url: str) -> int:
    """Function calls the server has run (every crawlq store call is one)."""
    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))
    finally:
        client.close()


def test_a_crawl_on_redis_fetches_every_page_once_in_fewer_calls_than_pages(
    site: ServedSite, make_crawl: Any, crawl_url: str, redis_url: str
) -> None:
    before = fcalls(redis_url)
    result = make_crawl({"SCHEDULER": SCHEDULER, "CRAWLQ_URL": crawl_url}).run()
    calls = fcalls(redis_url) - before
    assert_crawled_once(result, site, "disk")
    pages = len(site.expected())
    found = redis_inspection.inspect(crawl_url)
    assert (found.queued, found.leased, found.seen) == (0, 0, pages)
    # The new links of the pages finished since the last write, their acks and
    # the next requests leased share one call. Without batching each new link
    # was an add of its own: more calls than pages from the adds alone (this
    # crawl took about 0.4 per page with it, on 2 cores).
    assert calls < pages, f"{calls} store calls for {pages} pages"


def feed(crawl_url: str, urls: list[str]) -> None:
    """Add ``urls`` to the crawl as another process would (no Scrapy payload)."""
    frontier = crawlq.open_frontier(
        crawl_url, lifo=True, fingerprinter=crawlq.Fingerprinter(mode="scrapy")
    )
    try:
        assert frontier.add_many(urls) == [True] * len(urls)
    finally:
        frontier.close()


def test_links_another_process_stored_are_counted_as_duplicates_at_the_write(
    site: ServedSite, make_crawl: Any, crawl_url: str
) -> None:
    # Pages fed before the crawl starts: this process accepts their links as
    # new (it never met them), and the write finds them stored already.
    fed = [
        site.base_urls[host] + path
        for host, path in sorted(site.site.pages)
        if path != "/"  # not a start request
    ][:200]
    feed(crawl_url, fed)
    result = make_crawl({"SCHEDULER": SCHEDULER, "CRAWLQ_URL": crawl_url}).run()
    assert_finished(result)
    assert_exactly_once(site)  # the fed pages too, once: popped, not enqueued again
    pages = len(site.expected())
    stats = result.stats
    assert stats["scheduler/dequeued"] == pages
    # Every page is linked from another: each fed one was offered, accepted and
    # held, then found a duplicate at the write and taken back out.
    assert stats["scheduler/enqueued"] == stats["scheduler/enqueued/disk"] == pages - len(fed)
    assert result.data is not None and result.data["dropped"] == stats["dupefilter/filtered"]
    assert redis_inspection.inspect(crawl_url).seen == pages


def test_kill_9_on_redis_then_the_same_command_resumes(
    site: ServedSite, make_crawl: Any, crawl_url: str
) -> None:
    # The killed worker's leases come back after CRAWLQ_LEASE_TIMEOUT.
    crawl = make_crawl(
        {"SCHEDULER": SCHEDULER, "CRAWLQ_URL": crawl_url, "CRAWLQ_LEASE_TIMEOUT": "3"}
    )
    killed = crawl.interrupt_halfway(signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    assert sum(site.fetches().values()) < len(site.expected())

    resumed = crawl.run()
    assert_finished(resumed)
    assert resumed.stats["crawlq/resumed"] > 0
    assert_every_page_fetched(site, "kill -9")
    found = redis_inspection.inspect(crawl_url)
    assert (found.queued, found.leased, found.seen) == (0, 0, len(site.expected()))


def test_an_outage_past_retry_timeout_closes_the_spider_and_the_same_command_resumes(
    site: ServedSite, make_crawl: Any, redis_servers: StartServer
) -> None:
    # The server paused (SIGSTOP) for three times retry_timeout mid-crawl:
    # the scheduler gives up, keeps what it holds un-acked and closes the
    # spider (crawlq_store_error); run again, the crawl finishes.
    server = redis_servers()
    assert server.pid is not None
    crawl = make_crawl(
        {
            "SCHEDULER": SCHEDULER,
            "CRAWLQ_URL": f"{server.url}?crawl=outage&socket_timeout=0.3",
            "CRAWLQ_OPTIONS": '{"retry_timeout": 1}',
            "CRAWLQ_LEASE_TIMEOUT": "3",
        }
    )
    process = crawl.start_until(0.25)
    os.kill(server.pid, signal.SIGSTOP)
    try:
        time.sleep(3)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    stopped = crawl.finish(process)
    assert stopped.data is not None and stopped.data["reason"] == "crawlq_store_error", (
        stopped.stderr[-3000:]
    )
    assert "crawlq store failed" in stopped.stderr
    assert sum(site.fetches().values()) < len(site.expected())

    resumed = crawl.run()
    assert_finished(resumed)
    assert_every_page_fetched(site, "the outage")


def test_a_server_back_on_an_older_snapshot_mid_crawl_loses_no_page(
    site: ServedSite, make_crawl: Any, redis_servers: StartServer
) -> None:
    # Redis may lose writes it acknowledged (appendfsync everysec, a failover
    # to a replica behind, a restore): the crawl is then as it was earlier,
    # and the pages whose acks were lost come back and yield their links
    # again. The scheduler must store them, not refuse them from its memory
    # of the lost state (its recently-seen set: emptied on the fault).
    server = redis_servers()
    crawl = make_crawl(
        {
            "SCHEDULER": SCHEDULER,
            "CRAWLQ_URL": f"{server.url}?crawl=snapshot&socket_timeout=1",
            "CRAWLQ_LEASE_TIMEOUT": "3",
        }
    )
    process = crawl.start_until(0.25)
    redis.Redis.from_url(server.url).save()
    deadline = time.monotonic() + 60
    while site.total() < len(site.expected()) // 2:
        assert process.poll() is None, "the crawl ended early"
        assert time.monotonic() < deadline, "the crawl did not get halfway"
        time.sleep(0.005)
    server.restart(crash=True)  # back to the snapshot taken a quarter in
    result = crawl.finish(process)
    assert_finished(result)
    assert set(site.fetches()) == site.expected(), "a page was never fetched: a request was lost"


def test_two_processes_share_one_crawl_and_fetch_every_page_once(
    site: ServedSite, crawl_url: str, tmp_path: Path
) -> None:
    crawls = []
    for name in ("a", "b"):
        workdir = tmp_path / name
        workdir.mkdir()
        crawls.append(Crawl(site, workdir, {"SCHEDULER": SCHEDULER, "CRAWLQ_URL": crawl_url}))
    processes = [crawl.start() for crawl in crawls]
    results = [crawl.finish(process) for crawl, process in zip(crawls, processes, strict=True)]
    for result in results:
        assert_finished(result)
        assert (
            result.data is not None
            and result.data["dropped"] == (result.stats["dupefilter/filtered"])
        )
    assert_exactly_once(site)
    pages = len(site.expected())
    total: Counter[str] = Counter()
    for result in results:
        stats = result.stats
        total["dequeued"] += stats["scheduler/dequeued"]
        total["enqueued"] += stats["scheduler/enqueued"]
        total["acked"] += stats["crawlq/acked"]
    # Each page was accepted by one process: the other's copy, held as new to
    # it, was counted a duplicate when written.
    assert total == Counter({"dequeued": pages, "enqueued": pages, "acked": pages}), total
    assert all(result.stats["scheduler/dequeued"] > 0 for result in results)
