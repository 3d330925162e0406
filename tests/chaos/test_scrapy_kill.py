"""A Scrapy ``JOBDIR`` crawl killed with ``kill -9`` twice: mid-start, then just after resuming.

The spider (`StartsSpider`, below: ``scrapy runspider`` runs this very file)
yields every page of the local site as a start request, 2000 of them, and
follows links too. The first crawl is killed as soon as the job's database
holds its first requests, while the start requests are still being
enqueued; the same command resumes it and is killed again as soon as it
fetches its first page; the same command then runs to the end. Every URL of
the site must have been fetched, and a kill may cost at most
``CONCURRENT_REQUESTS`` re-fetches (the requests Scrapy held in flight,
never acked): at most ``2 * CONCURRENT_REQUESTS`` in all.

It reuses the Scrapy tests' site and crawl runner (``tests/scrapy``).
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("scrapy")

import scrapy

from tests.scrapy._site import ServedSite
from tests.scrapy.conftest import (
    CONCURRENT_REQUESTS,
    SCHEDULER,
    SPIDER,
    Crawl,
    served,
    site,
)
from tests.scrapy.site_spider import SiteSpider
from tests.scrapy.test_crawl import assert_finished

__all__ = ["StartsSpider", "served", "site"]

KILLS = 2
#: Start requests the first crawl yields before it waits (see `StartsSpider`).
PAUSE_AT = 500


class StartsSpider(SiteSpider):
    """`SiteSpider` whose start requests are every URL listed in the file ``starts``.

    After the first ``PAUSE_AT`` of them it waits for the file ``go`` (next
    to ``starts``) before it yields the rest, as a spider reading its start
    URLs from a slow source would: a crawl killed before ``go`` exists is
    killed mid-start, whatever the machine's speed (on a fast one, every
    start request could otherwise be stored before the first look at the
    job saw any).
    """

    name = "starts"

    def __init__(self, starts: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.starts = starts

    async def start(self) -> Any:
        go = Path(self.starts).with_name("go")
        for n, url in enumerate(Path(self.starts).read_text().split()):
            while n == PAUSE_AT and not go.exists():
                await asyncio.sleep(0.01)
            yield scrapy.Request(url, callback=self.parse)


@dataclass
class StartsCrawl(Crawl):
    """The Scrapy tests' `Crawl`, running `StartsSpider` from this file."""

    @property
    def starts(self) -> Path:
        return self.workdir / "starts.txt"

    def command(self) -> list[str]:
        command = super().command()
        command[command.index(str(SPIDER))] = __file__
        return [*command, "-a", f"starts={self.starts}"]


def job_requests(database: Path) -> int:
    """Requests the job's database holds (seen), read from outside; 0 before it exists."""
    if not database.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=0.1) as connection:
            return int(connection.execute("SELECT count(*) FROM seen").fetchone()[0])
    except sqlite3.Error:
        return 0  # not created yet, or busy: look again


def kill_when(
    crawl: Crawl, ready: Callable[[], bool], what: str, timeout: float = 60
) -> subprocess.Popen[str]:
    """Start the crawl and SIGKILL it as soon as ``ready()``; return the dead process."""
    process = crawl.start()
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None:
            _, stderr = process.communicate()
            raise AssertionError(f"the crawl ended before {what}:\n{stderr[-3000:]}")
        if time.monotonic() > deadline:
            process.kill()
            process.communicate()
            raise AssertionError(f"the crawl did not get to {what} in time")
        time.sleep(0.002)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    return process


def test_kill_9_while_start_requests_are_enqueued_and_right_after_resuming(
    site: ServedSite, tmp_path: Path
) -> None:
    jobdir = tmp_path / "job"
    crawl = StartsCrawl(site, tmp_path, {"SCHEDULER": SCHEDULER, "JOBDIR": str(jobdir)})
    pages = sorted(site.site.pages)  # (host, path) of every page
    crawl.starts.write_text("\n".join(site.base_urls[host] + path for host, path in pages))
    database = jobdir / "crawlq.db"

    kill_when(crawl, lambda: job_requests(database) > 0, "its first stored requests")
    stored = job_requests(database)
    first = site.fetches()
    assert stored < len(pages), f"all {stored} start requests were stored before the kill"
    (crawl.starts.parent / "go").touch()  # the resumed crawls yield every start request

    kill_when(crawl, lambda: site.total() > first.total(), "its first fetch after resuming")
    second = site.fetches() - first

    resumed = crawl.run()
    assert_finished(resumed)
    assert resumed.stats["crawlq/resumed"] > 0
    fetches = site.fetches()
    assert set(fetches) == site.expected(), "a URL was never fetched: a request was lost"
    third = fetches - first - second
    # A page fetched again was in flight at a kill: count each kill's.
    again = [
        sum(1 for key in first if (second + third)[key]),
        sum(1 for key in second if third[key]),
    ]
    refetched = sum(count - 1 for count in fetches.values())
    print(
        f"first kill: {stored} of {len(pages)} start requests stored, "
        f"{first.total()} fetched; second kill: {second.total()} fetched; "
        f"re-fetched after each kill: {again} (in all {refetched})"
    )
    assert all(n <= CONCURRENT_REQUESTS for n in again), again
