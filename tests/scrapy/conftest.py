"""Fixtures for the Scrapy tests: the served site, and real crawls in subprocesses.

Every crawl is ``python -m scrapy runspider site_spider.py`` in a subprocess
(with Scrapy's default asyncio reactor), against a `ServedSite` running in
this process, which counts fetches per URL on the server side.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("scrapy")

from tests._child import child_environment

from ._site import ServedSite, test_site

SPIDER = Path(__file__).with_name("site_spider.py")
ROOT = Path(__file__).resolve().parents[2]
#: Scrapy's CONCURRENT_REQUESTS in every crawl: the bound on re-fetches after a kill.
CONCURRENT_REQUESTS = 16
SCHEDULER = "crawlq.contrib.scrapy.Scheduler"

BASE_SETTINGS = {
    "LOG_LEVEL": "WARNING",
    "TELNETCONSOLE_ENABLED": "False",
    "RETRY_ENABLED": "False",  # the site answers 500 on purpose: fetch each URL once
    "CONCURRENT_REQUESTS": str(CONCURRENT_REQUESTS),
    # Scrapy 2.19 starts one task per CONCURRENT_ITEMS for every response;
    # fewer keeps these crawls quick on 2 cores and changes nothing scheduled.
    "CONCURRENT_ITEMS": "8",
}


@pytest.fixture(scope="session")
def served() -> Iterator[ServedSite]:
    site = ServedSite(test_site(2000, 20))
    yield site
    site.close()


@pytest.fixture
def site(served: ServedSite) -> ServedSite:
    """The served site, with fetch counts reset for this test."""
    served.reset()
    return served


@dataclass
class Result:
    returncode: int
    stderr: str
    #: What the spider wrote at close (stats, reason, request_dropped count); None if it did not.
    data: dict[str, Any] | None

    @property
    def stats(self) -> dict[str, Any]:
        assert self.data is not None, f"the crawl wrote no results:\n{self.stderr[-3000:]}"
        stats: dict[str, Any] = self.data["stats"]
        return stats


@dataclass
class Crawl:
    """One crawl command; `run` and `start` run exactly the same command each time."""

    site: ServedSite
    workdir: Path
    settings: dict[str, str] = field(default_factory=dict)
    mode: str = "plain"

    @property
    def out(self) -> Path:
        return self.workdir / "result.json"

    def command(self) -> list[str]:
        settings = {**BASE_SETTINGS, **self.settings}
        command = [
            sys.executable,
            "-m",
            "scrapy",
            "runspider",
            str(SPIDER),
            "-a",
            "bases=" + ",".join(self.site.base_urls),
            "-a",
            f"out={self.out}",
            "-a",
            f"mode={self.mode}",
        ]
        for name, value in settings.items():
            command += ["-s", f"{name}={value}"]
        return command

    def start(self) -> subprocess.Popen[str]:
        self.out.unlink(missing_ok=True)
        return subprocess.Popen(
            self.command(),
            cwd=self.workdir,
            env=child_environment(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(self, process: subprocess.Popen[str], timeout: float = 120) -> Result:
        try:
            _, stderr = process.communicate(timeout=timeout)
        except BaseException:
            process.kill()  # never leave a crawl running behind a failed test
            process.communicate()
            raise
        data = json.loads(self.out.read_text()) if self.out.exists() else None
        return Result(process.returncode, stderr, data)

    def run(self, timeout: float = 120) -> Result:
        return self.finish(self.start(), timeout)

    def start_until(self, share: float, timeout: float = 120) -> subprocess.Popen[str]:
        """Start the crawl and return once ``share`` of the site is fetched (it runs on)."""
        process = self.start()
        deadline = time.monotonic() + timeout
        while self.site.total() < len(self.site.expected()) * share:
            assert process.poll() is None, "the crawl ended early"
            assert time.monotonic() < deadline, "the crawl did not get going"
            time.sleep(0.005)
        return process

    def interrupt_halfway(self, sig: signal.Signals, timeout: float = 120) -> Result:
        """Start the crawl, send ``sig`` once half the site is fetched, wait for the end."""
        process = self.start()
        half = len(self.site.expected()) // 2
        deadline = time.monotonic() + timeout
        while self.site.total() < half:
            if process.poll() is not None:
                _, stderr = process.communicate()
                raise AssertionError(f"the crawl ended before halfway:\n{stderr[-3000:]}")
            if time.monotonic() > deadline:
                process.kill()
                process.communicate()
                raise AssertionError("the crawl did not get halfway in time")
            time.sleep(0.005)
        process.send_signal(sig)
        return self.finish(process, timeout)


@pytest.fixture
def make_crawl(site: ServedSite, tmp_path: Path) -> Any:
    def make(settings: dict[str, str] | None = None, mode: str = "plain") -> Crawl:
        return Crawl(site, tmp_path, dict(settings or {}), mode)

    return make
