"""E2E: ``scrapy runspider`` of a spider following every link of crawlq's demo site.

The site (``pages`` pages over ``hosts`` hosts on 127.0.0.x) is served from a
thread of the measuring process; the crawl runs in a child process with
``SCHEDULER`` set to crawlq's (``crawlq.contrib.scrapy.Scheduler``) or to
Scrapy's own, in memory or with ``JOBDIR`` (backend ``sqlite``). Reports
pages/s over Scrapy's ``elapsed_time_seconds`` and the crawler's CPU ms per
page, and checks that every page was fetched exactly once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

SPIDER = """
import datetime, json, scrapy
from pathlib import Path

class SiteSpider(scrapy.Spider):
    name = "bench"

    def __init__(self, bases="", out="", **kwargs):
        super().__init__(**kwargs)
        self.bases, self.out = bases.split(","), out

    async def start(self):
        for base in self.bases:
            yield scrapy.Request(base + "/")

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            if not href.startswith("mailto:"):
                yield response.follow(href)

    def closed(self, reason):
        stats = self.crawler.stats.get_stats()
        now = datetime.datetime.now(datetime.timezone.utc)
        Path(self.out).write_text(json.dumps({
            "reason": reason,
            "elapsed": (now - stats["start_time"]).total_seconds(),
            "pages": stats.get("response_received_count", 0),
        }))
"""
SCHEDULERS = {
    "crawlq": "crawlq.contrib.scrapy.Scheduler",
    "scrapy": "scrapy.core.scheduler.Scheduler",
}


def crawl(spec: dict[str, Any]) -> dict[str, Any]:
    from crawlq.cli.demo.server import SiteServer
    from crawlq.cli.demo.site import generate_site

    site = generate_site(spec["params"]["pages"], spec["params"]["hosts"], seed=7)
    # Drop ?utm_* links: Scrapy keeps those parameters, the server counts by path.
    pages = {
        key: dataclasses.replace(page, links=tuple(x for x in page.links if x.suffix[:1] != "?"))
        for key, page in site.pages.items()
    }
    site = dataclasses.replace(site, pages=pages)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(60)

    server = SiteServer(site)
    run(server.__aenter__())
    try:
        with tempfile.TemporaryDirectory(prefix="crawlq-e2e-") as tmp:
            result = _crawl(spec, server.base_urls, Path(tmp))

        async def fetches() -> dict[Any, int]:
            return dict(server.fetches)

        counted = run(fetches())
        expected = set(site.pages) | set(site.broken)
        once = set(counted) == expected and all(c == 1 for c in counted.values())
        result["ok"] = result.get("ok", False) and once
        return result
    finally:
        run(server.__aexit__(None, None, None))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def _crawl(spec: dict[str, Any], bases: list[str], workdir: Path) -> dict[str, Any]:
    spider, out = workdir / "bench_spider.py", workdir / "out.json"
    spider.write_text(SPIDER)
    settings = {
        "SCHEDULER": SCHEDULERS[spec["impl"]],
        "LOG_LEVEL": "ERROR",
        "TELNETCONSOLE_ENABLED": "False",
        "RETRY_ENABLED": "False",
        "CONCURRENT_REQUESTS": "16",
        "CONCURRENT_ITEMS": "8",
    }
    if spec["backend"] == "sqlite":
        settings["JOBDIR"] = str(workdir / "job")
    command = [sys.executable, "-m", "scrapy", "runspider", str(spider)]
    command += ["-a", "bases=" + ",".join(bases), "-a", f"out={out}"]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, cwd=workdir, env=os.environ, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode or not out.exists():
        return {"error": done.stderr[-500:]}
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    data = json.loads(out.read_text())
    return {
        "pages_per_s": data["pages"] / data["elapsed"],
        "cpu_ms_per_page": 1000 * cpu / data["pages"],
        "ok": data["reason"] == "finished",
    }
