"""Scrapy workers fed from outside, as scrapy-redis's ``RedisSpider`` workers are.

URLs added to a Scrapy crawl by another process (``Frontier.add_many``,
``crawlq import`` of ``{"url": ...}`` lines, ``crawlq add``) carry no Scrapy
payload: the scheduler turns each into a Scrapy request (or asks the spider's
``make_request_from_crawlq``). Workers with ``CRAWLQ_IDLE_CLOSE`` wait for
such URLs and close once idle that long. Every crawl is a real ``scrapy
runspider`` subprocess against the local site, which counts fetches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import crawlq
from tests._child import child_environment

from ._site import ServedSite
from .conftest import BASE_SETTINGS, SCHEDULER

SPIDER = Path(__file__).with_name("fed_spider.py")


def start_worker(
    workdir: Path, name: str, settings: dict[str, str], mode: str = "plain"
) -> tuple[subprocess.Popen[str], Path]:
    out = workdir / f"{name}.json"
    command = [sys.executable, "-m", "scrapy", "runspider", str(SPIDER)]
    command += ["-a", f"out={out}", "-a", f"mode={mode}"]
    for key, value in {**BASE_SETTINGS, "SCHEDULER": SCHEDULER, **settings}.items():
        command += ["-s", f"{key}={value}"]
    process = subprocess.Popen(
        command,
        cwd=workdir,
        env=child_environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process, out


def finish(process: subprocess.Popen[str], out: Path, timeout: float = 120) -> dict[str, Any]:
    try:
        _, stderr = process.communicate(timeout=timeout)
    except BaseException:
        process.kill()
        process.communicate()
        raise
    assert out.exists(), f"the worker wrote no results:\n{stderr[-3000:]}"
    data: dict[str, Any] = json.loads(out.read_text())
    data["stderr"] = stderr
    data["returncode"] = process.returncode
    return data


def run_python(code: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run code (or ``-m crawlq ...``) in another process, as a user's shell would."""
    command = [sys.executable, *(("-c", code) if code else ()), *args]
    return subprocess.run(
        command,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=child_environment(),
    )


def site_urls(site: ServedSite, count: int) -> list[str]:
    pages = sorted(site.site.pages)[:count]
    return [site.base_urls[host] + path for host, path in pages]


def fetched(site: ServedSite, urls: list[str]) -> Counter[str]:
    """Server-side fetch counts of ``urls`` (and of anything else fetched)."""
    by_url = Counter({site.base_urls[host] + path: n for (host, path), n in site.fetches().items()})
    for url in urls:
        by_url.setdefault(url, 0)
    return by_url


def feed(how: str, store: str, urls: list[str], tmp_path: Path) -> None:
    """Feed ``urls`` to the Scrapy crawl at ``store`` from another process, as documented."""
    if how == "open_frontier":
        # docs/scrapy.md, "Moving from scrapy-redis": the RedisSpider row.
        code = (
            "import sys, crawlq\n"
            "frontier = crawlq.open_frontier(sys.argv[1], lifo=True, "
            "fingerprinter=crawlq.Fingerprinter(mode='scrapy'))\n"
            "frontier.add_many(sys.argv[2:])\n"
            "frontier.close()\n"
        )
        done = run_python(code, store, *urls)
    else:
        lines = tmp_path / "urls.jsonl"
        lines.write_text("".join(json.dumps({"url": url}) + "\n" for url in urls))
        done = run_python(
            "", "-m", "crawlq", "import", "--lifo", "--scrapy-fingerprints", store, str(lines)
        )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("how", ["open_frontier", "import"])
@pytest.mark.parametrize("backend", ["redis", "sqlite"])
def test_urls_fed_from_outside_are_fetched_once(
    site: ServedSite, tmp_path: Path, redis_url: str, backend: str, how: str
) -> None:
    """Before: every fed URL was popped and dropped ('cannot be rebuilt ('scrapy')')."""
    urls = site_urls(site, 60)
    if backend == "redis":
        store = f"{redis_url}?crawl=fed-{how}-{os.getpid()}-{time.monotonic_ns()}"
        settings = {"CRAWLQ_URL": store}
    else:
        store = str(tmp_path / "job")
        settings = {"JOBDIR": store}
    feed(how, store, urls + urls[:5], tmp_path)  # duplicates are refused at the feed
    data = finish(*start_worker(tmp_path, "worker", settings))
    assert data["returncode"] == 0, data["stderr"][-3000:]
    assert data["reason"] == "finished"
    stats = data["stats"]
    assert "crawlq/unrebuildable" not in stats, data["stderr"][-3000:]
    assert "cannot rebuild" not in data["stderr"]
    assert fetched(site, urls) == Counter(dict.fromkeys(urls, 1))
    assert stats["scheduler/dequeued"] == len(urls)


def test_the_spiders_hook_makes_the_requests_and_may_decline(
    site: ServedSite, tmp_path: Path
) -> None:
    urls = site_urls(site, 20)
    job = tmp_path / "job"
    feed("open_frontier", str(job), [*urls, urls[0] + "skip"], tmp_path)
    data = finish(*start_worker(tmp_path, "worker", {"JOBDIR": str(job)}, mode="hook"))
    assert data["reason"] == "finished", data["stderr"][-3000:]
    assert fetched(site, urls) == Counter(dict.fromkeys(urls, 1))  # not the declined one
    assert data["stats"]["crawlq/declined"] == 1
    assert data["parsed"] == []
    assert data["parsed_fed"], "parse_fed got no response"


def test_a_request_that_cannot_be_rebuilt_is_parked_not_acked(
    site: ServedSite, tmp_path: Path
) -> None:
    urls = site_urls(site, 3)
    job = tmp_path / "job"
    with crawlq.open_frontier(
        str(job), lifo=True, fingerprinter=crawlq.Fingerprinter(mode="scrapy")
    ) as frontier:
        frontier.add_many(
            [
                crawlq.Request(urls[0], callback="no_such_method"),
                crawlq.Request(urls[1], meta={"scrapy": b"not a payload"}),
                crawlq.Request(urls[2]),
            ]
        )
    data = finish(*start_worker(tmp_path, "worker", {"JOBDIR": str(job)}))
    assert data["reason"] == "finished"
    assert data["stats"]["crawlq/unrebuildable"] == 2
    assert "cannot rebuild stored request " + urls[0] in data["stderr"]
    assert "no_such_method" in data["stderr"]
    assert fetched(site, urls)[urls[2]] == 1
    assert fetched(site, urls)[urls[0]] == fetched(site, urls)[urls[1]] == 0
    # Still in the job, where crawlq inspect and export show them.
    exported = run_python("", "-m", "crawlq", "export", str(job))
    assert exported.returncode == 0, exported.stderr
    assert sorted(json.loads(line)["url"] for line in exported.stdout.splitlines()) == sorted(
        urls[:2]
    )
    inspected = run_python("", "-m", "crawlq", "inspect", str(job))
    assert inspected.returncode == 0, inspected.stderr


def test_two_idle_workers_fetch_urls_fed_from_the_shell_once_then_close(
    site: ServedSite, tmp_path: Path, redis_url: str
) -> None:
    """The issue's test: two RedisSpider-like workers fed by ``crawlq add`` on Redis."""
    idle_close = 3.0
    crawl = f"{redis_url}?crawl=fed-workers-{os.getpid()}-{time.monotonic_ns()}"
    settings = {"CRAWLQ_URL": crawl, "CRAWLQ_IDLE_CLOSE": str(idle_close), "LOG_LEVEL": "INFO"}
    workers = [start_worker(tmp_path, f"worker-{n}", settings) for n in range(2)]
    try:
        deadline = time.monotonic() + 60
        while not all(out.with_name(out.name + ".ready").exists() for _, out in workers):
            assert all(process.poll() is None for process, _ in workers), "a worker exited"
            assert time.monotonic() < deadline, "the workers did not open"
            time.sleep(0.05)
        time.sleep(idle_close / 2)  # idle, not closed: nothing was fed yet
        assert all(process.poll() is None for process, _ in workers)
        urls = site_urls(site, 100)
        stdin = "\n".join(urls[:50]) + "\n\n" + "\n".join(urls[50:]) + "\n"
        added = run_python("", "-m", "crawlq", "add", crawl, "-", stdin=stdin)
        assert added.returncode == 0, added.stderr
        assert "added 100 new URLs (0 already seen)" in added.stdout
        deadline = time.monotonic() + 60
        while site.total() < len(urls):
            assert time.monotonic() < deadline, f"only {site.total()} fetched"
            time.sleep(0.01)
        last_fetch = time.monotonic()
        ended = []
        for process, out in workers:
            data = finish(process, out, timeout=idle_close + 30)
            ended.append(time.monotonic() - last_fetch)
            assert data["returncode"] == 0, data["stderr"][-3000:]
            assert data["reason"] == "finished"
            assert "nothing to do for 3 seconds (CRAWLQ_IDLE_CLOSE)" in data["stderr"]
    finally:
        for process, _ in workers:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert fetched(site, urls) == Counter(dict.fromkeys(urls, 1))
    # Each worker closes once idle for CRAWLQ_IDLE_CLOSE since its own last request
    # (one that ran out of work early closes early): all within the idle time and some
    # slack after the last fetch, the last busy one not before the idle time.
    assert all(after <= idle_close + 8 for after in ended), ended
    assert max(ended) >= idle_close - 0.5, ended
    again = run_python("", "-m", "crawlq", "add", crawl, urls[0])
    assert again.returncode == 0, again.stderr
    assert "added 0 new URLs (1 already seen)" in again.stdout
    purged = run_python("", "-m", "crawlq", "purge", crawl, "--yes")
    assert purged.returncode == 0, purged.stderr
