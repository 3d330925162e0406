"""`RetryAfterMiddleware` in real Scrapy crawls against local servers that say "slow down".

Two servers on two loopback addresses (two download slots): one answers its
first request of ``/2`` with 429 and ``Retry-After: 2``, or serves a
robots.txt with a ``Crawl-delay``; the other serves every page at once. The
servers record when each request arrived, and the tests read the pacing from
those times.
"""

from __future__ import annotations

import email.utils
import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crawlq.contrib.scrapy import retry_after_seconds
from tests._child import child_environment

from ._flaky import FlakySite

ROOT = Path(__file__).resolve().parents[2]
SPIDER = Path(__file__).with_name("retry_spider.py")


@pytest.fixture
def servers() -> Iterator[list[FlakySite]]:
    made: list[FlakySite] = []
    yield made
    for server in made:
        server.close()


def crawl(tmp_path: Path, bases: list[str], pages: int, **settings: str) -> dict[str, Any]:
    out = tmp_path / "result.json"
    command = [
        sys.executable, "-m", "scrapy", "runspider", str(SPIDER),
        "-a", "bases=" + ",".join(bases), "-a", f"pages={pages}", "-a", f"out={out}",
        "-s", "SCHEDULER=crawlq.contrib.scrapy.Scheduler",
        "-s", "DOWNLOADER_MIDDLEWARES={\"crawlq.contrib.scrapy.RetryAfterMiddleware\": 950}",
        "-s", "LOG_LEVEL=INFO", "-s", "TELNETCONSOLE_ENABLED=False",
        "-s", "RETRY_TIMES=3",
    ]  # fmt: skip
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    environment = child_environment()
    done = subprocess.run(
        command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120
    )
    assert out.exists(), done.stderr[-3000:]
    data: dict[str, Any] = json.loads(out.read_text())
    data["log"] = done.stderr
    return data


def test_retry_after_values_are_read_as_seconds_or_http_dates() -> None:
    now = time.time()
    assert retry_after_seconds(b"120") == 120.0
    assert retry_after_seconds(" 0 ") == 0.0
    later = email.utils.formatdate(now + 90, usegmt=True)
    assert retry_after_seconds(later, now=now) == pytest.approx(90, abs=1)
    past = email.utils.formatdate(now - 90, usegmt=True)
    assert retry_after_seconds(past, now=now) == 0.0
    for nonsense in (None, b"", "soon", "-5", "1.5e3x"):
        assert retry_after_seconds(nonsense) is None


def test_a_429_blocks_its_slot_until_retry_after_and_the_crawl_finishes(
    servers: list[FlakySite], tmp_path: Path
) -> None:
    throttled = FlakySite("127.0.0.1", throttle="/2")
    other = FlakySite("127.0.0.2")
    servers += [throttled, other]
    result = crawl(
        tmp_path,
        [throttled.base, other.base],
        6,
        CONCURRENT_REQUESTS="1",
        DOWNLOAD_DELAY="0.2",
    )
    assert result["reason"] == "finished", result["log"][-3000:]
    assert result["stats"].get("crawlq/retry_after/blocked") == "1"
    hits = throttled.pages()
    refused = next(at for at, path in hits if path == "/2")
    after = [(at, path) for at, path in hits if at > refused]
    # Nothing of the throttled host for the 2 s it asked for, every page in the end.
    assert after and min(at for at, _ in after) - refused >= 1.9
    assert sorted(path for _, path in hits) == sorted(["/2"] + [f"/{n}" for n in range(6)])
    # The other host went on meanwhile.
    assert any(refused < at < refused + 1.9 for at, _ in other.pages())


def test_robots_crawl_delay_becomes_the_hosts_own_delay(
    servers: list[FlakySite], tmp_path: Path
) -> None:
    slow = FlakySite("127.0.0.1", robots="User-agent: *\nCrawl-delay: 0.5\n")
    fast = FlakySite("127.0.0.2")
    servers += [slow, fast]
    # One request in the engine at a time: the host's first request was
    # handed out before its robots.txt was read, every later one after.
    result = crawl(
        tmp_path, [slow.base, fast.base], 6, ROBOTSTXT_OBEY="True", CRAWLQ_MAX_IN_FLIGHT="1"
    )
    assert result["reason"] == "finished", result["log"][-3000:]
    assert result["stats"].get("crawlq/robots/crawl_delay") == "1"
    times = sorted(at for at, _ in slow.pages())
    assert len(times) == 6
    assert min(b - a for a, b in itertools.pairwise(times[1:])) >= 0.45
    quick = sorted(at for at, _ in fast.pages())
    assert len(quick) == 6 and quick[-1] - quick[0] < 1.0  # no delay of its own


def test_without_crawlqs_scheduler_it_warns_and_blocks_nothing(
    servers: list[FlakySite], tmp_path: Path
) -> None:
    throttled = FlakySite("127.0.0.1", throttle="/1")
    servers.append(throttled)
    result = crawl(tmp_path, [throttled.base], 3, SCHEDULER="scrapy.core.scheduler.Scheduler")
    assert result["reason"] == "finished"
    assert "RetryAfterMiddleware needs SCHEDULER" in result["log"]
    assert "crawlq/retry_after/blocked" not in result["stats"]
