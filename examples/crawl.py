"""Crawl a site with crawlq and aiohttp: the README's asyncio example, whole.

    python examples/crawl.py https://example.com/ [--job DIR] [--workers N] [--delay S]

It follows the links of the seeds' hosts only. A page that fails (an HTTP
error, a refused or cut connection, a timeout) is logged and counted done, not
retried; a link that leads to no page (``mailto:``, ``javascript:``, ``#top``,
a malformed href) is skipped by ``Request.from_link``; a worker cancelled in
the middle of a page (Ctrl-C) puts the page back. With ``--job DIR`` the crawl
is a durable SQLite job: after Ctrl-C (or a ``kill -9``) the same command
resumes it. A store that is away for a while (a Redis outage, a full disk)
only pauses the workers: ``patiently`` makes the failed call again, backing
off, for as long as it takes. Needs aiohttp (``pip install 'crawlq[demo]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
from collections.abc import Awaitable, Callable, Iterable
from typing import ParamSpec, TypeVar
from urllib.parse import urlsplit

import aiohttp

import crawlq

log = logging.getLogger("crawl")
P = ParamSpec("P")
T = TypeVar("T")
HREF = re.compile(r"""<a\s[^>]*?href\s*=\s*["']([^"']*)["']""", re.IGNORECASE)


async def fetch_links(session: aiohttp.ClientSession, url: str) -> tuple[str, list[str]]:
    """Fetch a page; return its final URL and the hrefs of its links. Raises for a failure."""
    async with session.get(url) as response:
        response.raise_for_status()
        if response.content_type != "text/html":
            return str(response.url), []
        return str(response.url), HREF.findall(await response.text())


async def patiently(call: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """``await call(*args, **kwargs)``, again and again while the store is down."""
    pause = 0.1
    while True:
        try:
            return await call(*args, **kwargs)
        except (crawlq.StoreUnavailable, crawlq.StoreFull) as exc:  # it may pass
            log.warning("%s; trying again in %.1f s", exc, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 10.0)


async def worker(
    scheduler: crawlq.Scheduler, session: aiohttp.ClientSession, hosts: set[str]
) -> None:
    while True:
        request = await patiently(scheduler.get)  # waits for the next ready host
        try:
            base, hrefs = await fetch_links(session, request.url)
        except (aiohttp.ClientError, TimeoutError) as exc:  # the page failed
            log.warning("%s failed: %s", request.url, exc or type(exc).__name__)
            scheduler.task_done(request)  # done: not retried
            continue
        except BaseException:  # cancelled mid-page: put it back, untouched
            scheduler.release(request)
            raise
        depth = request.depth + 1
        links = [
            link
            for href in hrefs
            if (link := crawlq.Request.from_link(href, base=base, depth=depth))
            and urlsplit(link.url).netloc in hosts
        ]
        # Its links, then its ack (the same call again after an outage).
        await patiently(scheduler.add_many, links, ack=request)


async def crawl(
    seeds: Iterable[str], *, job: str = "memory://", workers: int = 8, delay: float = 0.5
) -> crawlq.FrontierStats:
    seeds = list(seeds)
    hosts = {urlsplit(url).netloc for url in seeds}
    with crawlq.open_frontier(job, host_delay=delay, host_concurrency=2) as frontier:
        async with (
            crawlq.Scheduler(frontier) as scheduler,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
        ):
            await scheduler.add_many(seeds, invalid="skip")  # URLs; a bad one is skipped
            tasks = [asyncio.create_task(worker(scheduler, session, hosts)) for _ in range(workers)]
            try:
                # Nothing queued or in flight; WorkerFailed if a worker died.
                await patiently(scheduler.join)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        return frontier.stats()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("seeds", nargs="+", help="URLs to start from")
    parser.add_argument("--job", default="memory://", help="a job directory, to resume")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--delay", type=float, default=0.5, help="seconds between two requests")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        stats = asyncio.run(crawl(args.seeds, job=args.job, workers=args.workers, delay=args.delay))
    except KeyboardInterrupt:
        print(f"interrupted; run the same command to resume {args.job}", file=sys.stderr)
        return 130
    print(f"crawled {stats.seen} URLs ({stats.skipped} invalid skipped); {stats.queued} left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
