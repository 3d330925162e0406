"""Scrapy's stock scheduler with crawlq's disk queues, in real crawls."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from ._site import ServedSite
from .conftest import CONCURRENT_REQUESTS
from .test_crawl import assert_exactly_once, assert_finished

QUEUES = {
    "SCHEDULER_DISK_QUEUE": "crawlq.contrib.scrapy.LifoDiskQueue",
    "SCHEDULER_START_DISK_QUEUE": "crawlq.contrib.scrapy.FifoDiskQueue",
}


def _pickle_files(jobdir: Path) -> list[Path]:
    # queuelib's disk queues write q00000 chunks, info.json, or a bare file per queue.
    return [
        path
        for path in (jobdir / "requests.queue").rglob("*")
        if path.is_file() and not path.name.startswith("crawlq.db") and path.name != "active.json"
    ]


def test_stock_scheduler_resumes_after_ctrl_c_with_crawlq_queues(
    site: ServedSite, make_crawl: Any, tmp_path: Path
) -> None:
    jobdir = tmp_path / "job"
    crawl = make_crawl({"JOBDIR": str(jobdir), **QUEUES})
    stopped = crawl.interrupt_halfway(signal.SIGINT)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert list((jobdir / "requests.queue").rglob("crawlq.db"))
    assert not _pickle_files(jobdir)

    resumed = crawl.run()
    assert_finished(resumed)
    assert resumed.stats["scheduler/dequeued/disk"] > 0
    assert_exactly_once(site)


def test_stock_scheduler_resumes_after_kill_9_with_crawlq_queues(
    site: ServedSite, make_crawl: Any, tmp_path: Path
) -> None:
    # Scrapy's own queues lose the whole queue here: active.json is only
    # written at a clean close. crawlq's queues keep it current, so the stock
    # scheduler finds every queued request again; only requests popped and in
    # the engine at the kill are lost (the stock scheduler never says when a
    # request is done), and its dupefilter file loses its last buffered writes
    # (some pages fetched twice).
    crawl = make_crawl({"JOBDIR": str(tmp_path / "job"), **QUEUES})
    killed = crawl.interrupt_halfway(signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    fetched_before = len(site.fetches())

    resumed = crawl.run()
    assert_finished(resumed)
    assert resumed.stats["scheduler/dequeued/disk"] > 0
    missing = site.expected() - set(site.fetches())
    assert len(missing) <= CONCURRENT_REQUESTS, f"{len(missing)} pages lost"
    assert len(site.fetches()) > fetched_before + 100
