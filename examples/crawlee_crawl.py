"""Crawl a site with crawlee's ParselCrawler on a crawlq frontier: docs/crawlee.md's example.

    python examples/crawlee_crawl.py https://example.com/ [--job DIR] [--delay S]

crawlee fetches and parses; crawlq keeps the queue, deduplicates by
crawlee's ``unique_key`` and paces every host (``--delay`` seconds between
two requests of one host, one at a time). Links of the seeds' hosts are
followed. With ``--job DIR`` the queue is a durable SQLite job: after
Ctrl-C or a ``kill -9`` the same command resumes it (a redis:// URL in
``--job`` shares the crawl, and its pacing, between processes). Needs
``pip install 'crawlq[crawlee]'``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from crawlee import ConcurrencySettings
from crawlee.crawlers import ParselCrawler, ParselCrawlingContext
from crawlee.storage_clients import MemoryStorageClient

from crawlq.contrib.crawlee import RequestManager


async def crawl(
    seeds: list[str], *, job: str = "memory://", delay: float = 1.0, max_pages: int | None = None
) -> list[str]:
    """Crawl from ``seeds``; return the URLs fetched, in order."""
    fetched: list[str] = []
    manager = await RequestManager.open(job, host_delay=delay, host_concurrency=1)
    try:
        crawler = ParselCrawler(
            request_manager=manager,
            # crawlee's statistics and sessions stay in memory here; crawlq
            # keeps the queue (a durable one with --job).
            storage_client=MemoryStorageClient(),
            concurrency_settings=ConcurrencySettings(max_concurrency=8, desired_concurrency=4),
            max_requests_per_crawl=max_pages,
            configure_logging=False,
        )

        @crawler.router.default_handler
        async def page(context: ParselCrawlingContext) -> None:
            fetched.append(context.request.url)
            context.log.info("fetched %s", context.request.url)
            await context.enqueue_links(strategy="same-hostname")

        await crawler.run(seeds)
    finally:
        await manager.close()
    return fetched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seeds", nargs="+", help="start URLs")
    parser.add_argument("--job", default="memory://", help="a job directory or a crawlq URL")
    parser.add_argument("--delay", type=float, default=1.0, help="seconds between two fetches")
    parser.add_argument("--max-pages", type=int, default=None, help="stop after this many")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    pages = asyncio.run(crawl(args.seeds, job=args.job, delay=args.delay, max_pages=args.max_pages))
    print(f"{len(pages)} pages fetched")


if __name__ == "__main__":
    main()
