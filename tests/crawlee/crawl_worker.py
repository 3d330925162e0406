"""One crawlee crawl on a crawlq frontier, for tests/crawlee/test_crawls.py (run as a subprocess).

    python -m tests.crawlee.crawl_worker FRONTIER_URL --seed URL --log FILE
        [--delay S] [--host-concurrency N] [--concurrency N] [--options JSON]
        [--go FILE]

crawlee's ParselCrawler (no browser) follows every link (``strategy="all"``)
from the seeds, with `crawlq.contrib.crawlee.RequestManager` on
``FRONTIER_URL`` (memory://, a SQLite job, redis://...?crawl=NAME) as its
request manager. The log file gets one JSON line per event, written with one
``write`` each (so a ``kill -9`` loses none that happened):

- ``{"event": "ready"}`` once the manager and crawler are built (with
  ``--go FILE``, the crawl then waits until FILE exists, so several workers
  start together);
- ``{"event": "handout", "at": T, "url": U}`` each time the manager hands a
  request to crawlee (``fetch_next_request`` returns it), T being
  `time.monotonic` (one clock for every process on Linux);
- ``{"event": "handled", ...}`` after the page's handler ran;
  ``{"event": "429", ...}`` when crawlee records a 429 for the URL's host;
- ``{"event": "returned", "at": T}`` when ``crawler.run`` returned, and
  ``{"event": "done", "handled": N}`` once the manager is closed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from crawlee import ConcurrencySettings
from crawlee import Request as CrawleeRequest
from crawlee.crawlers import ParselCrawler, ParselCrawlingContext
from crawlee.storage_clients import MemoryStorageClient

from crawlq.contrib.crawlee import RequestManager


class EventLog:
    """JSON lines appended with one unbuffered ``write`` each."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n"
        os.write(self._fd, line.encode())


LOG: EventLog | None = None


def _log(event: str, **fields: Any) -> None:
    if LOG is not None:
        LOG.write(event, **fields)


class LoggedManager(RequestManager):
    """The adapter, logging the moment each request is handed to crawlee."""

    async def fetch_next_request(self) -> CrawleeRequest | None:
        request = await super().fetch_next_request()
        if request is not None:
            _log("handout", at=time.monotonic(), url=request.url)
        return request

    def record_domain_delay(self, url: str, *, retry_after: timedelta | None = None) -> bool:
        _log("429", at=time.monotonic(), url=url)
        return super().record_domain_delay(url, retry_after=retry_after)


async def crawl(args: argparse.Namespace) -> int:
    manager = await LoggedManager.open(
        args.frontier,
        host_delay=args.delay,
        host_concurrency=args.host_concurrency or None,
        **json.loads(args.options),
    )
    handled = 0
    try:
        settings = ConcurrencySettings(
            min_concurrency=args.concurrency,
            desired_concurrency=args.concurrency,
            max_concurrency=args.concurrency,
        )
        crawler = ParselCrawler(
            request_manager=manager,
            storage_client=MemoryStorageClient(),
            concurrency_settings=settings,
            configure_logging=False,
        )

        @crawler.router.default_handler
        async def page(context: ParselCrawlingContext) -> None:
            nonlocal handled
            await context.enqueue_links(strategy="all")
            handled += 1
            _log("handled", at=time.monotonic(), url=context.request.url)

        _log("ready")
        if args.go:
            while not Path(args.go).exists():
                await asyncio.sleep(0.01)
        await crawler.run(args.seed)
        _log("returned", at=time.monotonic())
    finally:
        await manager.close()
    _log("done", handled=handled)
    return handled


def main() -> None:
    global LOG
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("frontier", help="the crawlq store URL")
    parser.add_argument("--seed", action="append", required=True, help="a start URL")
    parser.add_argument("--log", required=True, help="the JSON-lines event log")
    parser.add_argument("--delay", type=float, default=0.0, help="host_delay, seconds")
    parser.add_argument("--host-concurrency", type=int, default=1, help="0: no limit")
    parser.add_argument("--concurrency", type=int, default=4, help="crawlee's tasks")
    parser.add_argument("--options", default="{}", help="more frontier options, as JSON")
    parser.add_argument("--go", default=None, help="wait for this file before crawling")
    args = parser.parse_args()
    LOG = EventLog(args.log)
    asyncio.run(crawl(args))


if __name__ == "__main__":
    main()
