"""`run_demo`: generate a site, serve it on loopback, crawl it, check the crawl.

The crawl uses a memory frontier whose fingerprinter ignores ``utm_*``
parameters (fragments are always ignored), so tracking links dedup with the
plain ones. Once the crawl is over the server's own log is compared with the
site: every page must have been fetched exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from .._fingerprint import Fingerprinter
from .._open import open_frontier
from ..scheduler import Scheduler
from .crawler import Crawler
from .server import SiteServer
from .site import Site, generate_site

__all__ = ["DemoConfig", "DemoProgress", "DemoResult", "run_demo"]

MAX_HOSTS = 250


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """The demo's settings, checked when built (ValueError names the bad one)."""

    #: Pages of the generated site.
    pages: int = 3000
    #: Hosts the pages are spread over, each on its own loopback address.
    hosts: int = 20
    #: ``host_delay``: least seconds between two requests to one host.
    delay: float = 0.01
    #: ``host_concurrency``: most requests in flight to one host.
    concurrency: int = 2
    #: Crawler workers (coroutines).
    workers: int = 32
    #: Seed of the site generator.
    seed: int = 0
    #: Most seconds the server waits before answering a page.
    latency: float = 0.02
    #: Serve every host on 127.0.0.1 (distinct ports) even where 127.0.0.x binds.
    single_address: bool = False

    def __post_init__(self) -> None:
        if self.pages < 1:
            raise ValueError(f"pages must be >= 1, not {self.pages}")
        if not 1 <= self.hosts <= MAX_HOSTS:
            raise ValueError(f"hosts must be between 1 and {MAX_HOSTS}, not {self.hosts}")
        if self.hosts > self.pages:
            raise ValueError(f"hosts ({self.hosts}) must not exceed pages ({self.pages})")
        if self.delay < 0 or self.latency < 0:
            raise ValueError("delay and latency must be >= 0 seconds")
        if self.concurrency < 1 or self.workers < 1:
            raise ValueError("concurrency and workers must be >= 1")


@dataclass(frozen=True, slots=True)
class DemoProgress:
    """A snapshot of a running crawl, for a progress display."""

    fetched: int
    #: Fetches a complete crawl makes (site pages plus broken links).
    expected: int
    queued: int
    in_flight: int
    seen: int
    elapsed: float

    @property
    def pages_per_second(self) -> float:
        """Responses per second since the crawl started."""
        return self.fetched / self.elapsed if self.elapsed > 0 else 0.0


@dataclass(frozen=True, slots=True)
class DemoResult:
    """What a demo crawl did, and how it compares with the site the server holds."""

    config: DemoConfig
    #: Root URL of each host.
    base_urls: tuple[str, ...]
    #: True if every host was served on 127.0.0.1 with its own port.
    single_address: bool
    #: Pages of the site, and distinct URLs a complete crawl fetches.
    site_pages: int
    expected_fetches: int
    #: Responses the crawler received.
    fetched: int
    #: Failed fetches by kind (HTTP status or exception name).
    errors: dict[str, int]
    #: Links crawlq dropped as already seen (``add_many`` returned False).
    duplicates: int
    #: Links (and seeds) the crawler added.
    links: int
    #: Distinct fingerprints in the frontier at the end.
    seen: int
    #: Seconds the crawl took (site generation and server start excluded).
    elapsed: float
    #: Hosts the server received requests for.
    hosts_crawled: int
    #: Site pages the server never served.
    missing: tuple[str, ...]
    #: URLs the server served more than once, with their count.
    repeated: dict[str, int]
    #: Most requests each host handled at once, in host order.
    max_concurrency: tuple[int, ...]
    #: Least gap in seconds between two requests to each host (None: fewer than two).
    min_gap: tuple[float | None, ...]

    @property
    def complete(self) -> bool:
        """True if every page was fetched and no URL was fetched twice."""
        return not self.missing and not self.repeated

    @property
    def error_count(self) -> int:
        """Failed fetches of every kind."""
        return sum(self.errors.values())

    @property
    def pages_per_second(self) -> float:
        """Responses per second over the crawl."""
        return self.fetched / self.elapsed if self.elapsed > 0 else 0.0


async def run_demo(
    config: DemoConfig | None = None,
    *,
    on_progress: Callable[[DemoProgress], None] | None = None,
    progress_interval: float = 0.1,
) -> DemoResult:
    """Generate the site, serve it on loopback, crawl it and check the crawl.

    ``on_progress`` is called every ``progress_interval`` seconds during the
    crawl, and once at its end. The servers are stopped before returning,
    whatever happens. Raises what the crawl raises (not HTTP errors, which are
    counted in the result).
    """
    config = config or DemoConfig()
    site = generate_site(config.pages, config.hosts, seed=config.seed, latency=config.latency)
    async with SiteServer(site, single_address=config.single_address) as server:
        frontier = open_frontier(
            "memory://",
            host_delay=config.delay,
            host_concurrency=config.concurrency,
            fingerprinter=Fingerprinter(ignore_query_params=["utm_*"]),
        )
        try:
            scheduler = Scheduler(frontier)
            connector = aiohttp.TCPConnector(limit=config.workers)
            timeout = aiohttp.ClientTimeout(total=30)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                crawler = Crawler(
                    scheduler,
                    session,
                    allowed=server.netlocs,
                    slots={n: n for n in server.netlocs} if server.single_address else None,
                )
                start = time.monotonic()

                def snapshot() -> DemoProgress:
                    stats = scheduler.stats()
                    return DemoProgress(
                        fetched=crawler.fetched,
                        expected=site.expected_fetches,
                        queued=stats.queued,
                        in_flight=stats.in_flight,
                        seen=stats.seen,
                        elapsed=time.monotonic() - start,
                    )

                reporter = None
                if on_progress is not None:
                    reporter = asyncio.create_task(
                        _report(on_progress, snapshot, progress_interval)
                    )
                try:
                    await crawler.run(
                        [url + "/" for url in server.base_urls], workers=config.workers
                    )
                finally:
                    if reporter is not None:
                        reporter.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await reporter
                elapsed = time.monotonic() - start
                if on_progress is not None:
                    on_progress(snapshot())
            seen = frontier.stats().seen
        finally:
            frontier.close()
    return _result(config, site, server, crawler, seen=seen, elapsed=elapsed)


async def _report(
    on_progress: Callable[[DemoProgress], None],
    snapshot: Callable[[], DemoProgress],
    interval: float,
) -> None:
    while True:
        await asyncio.sleep(interval)
        on_progress(snapshot())


def _result(
    config: DemoConfig,
    site: Site,
    server: SiteServer,
    crawler: Crawler,
    *,
    seen: int,
    elapsed: float,
) -> DemoResult:
    urls = server.base_urls
    fetches = server.fetches
    return DemoResult(
        config=config,
        base_urls=tuple(urls),
        single_address=server.single_address,
        site_pages=len(site.pages),
        expected_fetches=site.expected_fetches,
        fetched=crawler.fetched,
        errors=dict(sorted(crawler.errors.items())),
        duplicates=crawler.duplicates,
        links=crawler.links,
        seen=seen,
        elapsed=elapsed,
        hosts_crawled=len({host for host, _ in fetches}),
        missing=tuple(urls[host] + path for host, path in site.pages if not fetches[(host, path)]),
        repeated={urls[host] + path: n for (host, path), n in fetches.items() if n > 1},
        max_concurrency=tuple(log.max_active for log in server.logs),
        min_gap=tuple(log.min_gap() for log in server.logs),
    )
