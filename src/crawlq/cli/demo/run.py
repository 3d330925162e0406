"""`run_demo`: generate a site, serve it on loopback, crawl it, check the crawl.

The crawl uses a frontier whose fingerprinter ignores ``utm_*`` parameters
(fragments are always ignored), so tracking links dedup with the plain ones:
a SQLite job in a directory (resumable: see `DemoJob`), or a memory frontier.
Once the crawl is over the server's own log is compared with the site: every
page must have been fetched, and exactly once, except that requests in flight
when an earlier run was stopped may have been fetched a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass

import aiohttp

from ..._fingerprint import Fingerprinter
from ..._frontier import Frontier
from ...scheduler.scheduler import Scheduler
from .crawler import Crawler
from .job import DemoJob, DemoJobError, Totals
from .server import SiteServer
from .site import PageKey, Site, generate_site

__all__ = ["DemoConfig", "DemoProgress", "DemoResult", "run_demo"]

MAX_HOSTS = 250
#: The pace ``crawlq demo`` crawls at unless given ``--fast``: slow enough
#: (about half a minute for the default site) to watch it and press Ctrl-C.
PACED_DELAY = 0.2
PACED_LATENCY = 0.05


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

    #: Requests done (fetched and acked), earlier runs of the job included.
    fetched: int
    #: Fetches a complete crawl makes (site pages plus broken links).
    expected: int
    queued: int
    in_flight: int
    seen: int
    #: Seconds since this run started.
    elapsed: float
    #: Requests done when this run started.
    fetched_before: int = 0

    @property
    def pages_per_second(self) -> float:
        """Responses per second since this run started."""
        fetched = self.fetched - self.fetched_before
        return fetched / self.elapsed if self.elapsed > 0 else 0.0


@dataclass(frozen=True, slots=True)
class DemoResult:
    """What a demo crawl did, and how it compares with the site the server holds.

    Counters are totals over every run of the job; the per-host figures
    (``max_concurrency``, ``min_gap``) are this run's.
    """

    config: DemoConfig
    #: Root URL of each host.
    base_urls: tuple[str, ...]
    #: True if every host was served on 127.0.0.1 with its own port.
    single_address: bool
    #: Pages of the site, and distinct URLs a complete crawl fetches.
    site_pages: int
    expected_fetches: int
    #: Requests done: fetched and acked, counted from the job's durable counts
    #: (seen minus queued and leased), so a ``kill -9`` cannot make it lag.
    fetched: int
    #: Failed fetches by kind: HTTP statuses as the server's log tells them, and
    #: the crawler's network errors (exception names).
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
    #: The job directory (None: a memory frontier).
    job: str | None = None
    #: Runs of the job, this one included.
    runs: int = 1
    #: True if this run was stopped (``stop`` was set) before the crawl was over.
    interrupted: bool = False
    #: Requests this run put back unfinished when it stopped.
    in_flight_at_stop: int = 0
    #: Requests in flight at every stop before this run: the most that may repeat.
    refetch_bound: int = 0
    #: Requests left in the frontier (queued or leased).
    queued: int = 0
    #: True if the job was already complete: nothing was crawled this time.
    already_complete: bool = False
    #: Lines of the server's fetch log (every fetch, repeats included), and
    #: the distinct URLs in it.
    server_fetches: int = 0
    server_urls: int = 0

    @property
    def resumed(self) -> bool:
        """True if this run continued a job that an earlier run started."""
        return self.runs > 1

    @property
    def refetches(self) -> int:
        """Fetches beyond the first of each URL."""
        return sum(n - 1 for n in self.repeated.values())

    @property
    def complete(self) -> bool:
        """True if the crawl is over, every page was fetched, and none more than allowed.

        Allowed: exactly once, except that up to ``refetch_bound`` fetches may
        repeat (requests in flight when an earlier run was stopped).
        """
        return not self.interrupted and not self.missing and self.refetches <= self.refetch_bound

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
    job: str | os.PathLike[str] | None = None,
    fresh: bool = False,
    stop: asyncio.Event | None = None,
    stop_now: asyncio.Event | None = None,
    on_progress: Callable[[DemoProgress], None] | None = None,
    progress_interval: float = 0.1,
    save_interval: float = 1.0,
) -> DemoResult:
    """Generate the site, serve it on loopback, crawl it and check the crawl.

    With ``job`` (a directory) the frontier is a SQLite job there: a job left
    unfinished is resumed (same site, same URLs, its queued requests), one
    already complete is reported without crawling; ``fresh`` deletes the job
    first. Without ``job`` the frontier is in memory. Setting ``stop`` ends
    the run early and cleanly: requests in flight are finished (fetched,
    their links added, acked) and no new one is started; setting
    ``stop_now`` as well releases the requests in flight instead. The job is
    saved and closed, and the result has ``interrupted`` set.

    ``on_progress`` is called every ``progress_interval`` seconds during the
    crawl, and once at its end; the job's totals are saved every
    ``save_interval`` seconds. The servers are stopped and the job closed
    before returning, whatever happens. Raises `DemoJobError` for a job that
    cannot be resumed as asked, what `open_frontier` raises (`JobLocked`...),
    and what the crawl raises (not HTTP errors, which are counted).
    """
    config = config or DemoConfig()
    site = generate_site(config.pages, config.hosts, seed=config.seed, latency=config.latency)
    demo_job = DemoJob.open(
        job,
        site={"pages": config.pages, "hosts": config.hosts, "seed": config.seed},
        fresh=fresh,
        host_delay=config.delay,
        host_concurrency=config.concurrency,
        fingerprinter=Fingerprinter(ignore_query_params=["utm_*"]),
    )
    try:
        if demo_job.complete:
            return _result(config, site, demo_job, demo_job.fetches, already_complete=True)
        return await _crawl(
            config, site, demo_job, (stop, stop_now), on_progress, progress_interval, save_interval
        )
    finally:
        demo_job.close()


async def _crawl(
    config: DemoConfig,
    site: Site,
    demo_job: DemoJob,
    stops: tuple[asyncio.Event | None, asyncio.Event | None],
    on_progress: Callable[[DemoProgress], None] | None,
    progress_interval: float,
    save_interval: float,
) -> DemoResult:
    frontier = demo_job.frontier
    async with _serve(config, site, demo_job) as server:
        demo_job.start(server.base_urls, server.single_address, config.workers)
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
            done_before = _done(frontier)

            def totals() -> Totals:
                return demo_job.totals.plus(
                    crawler.fetched,
                    crawler.duplicates,
                    crawler.links,
                    time.monotonic() - start,
                    crawler.errors,
                )

            def snapshot() -> DemoProgress:
                stats = scheduler.stats()
                return DemoProgress(
                    fetched=stats.seen - stats.queued - stats.in_flight,
                    expected=site.expected_fetches,
                    queued=stats.queued,
                    in_flight=stats.in_flight,
                    seen=stats.seen,
                    elapsed=time.monotonic() - start,
                    fetched_before=done_before,
                )

            async def report() -> None:
                if on_progress is not None:
                    on_progress(snapshot())

            async def save() -> None:
                demo_job.save(totals())

            background = [asyncio.create_task(_every(save_interval, save))]
            if on_progress is not None:
                background.append(asyncio.create_task(_every(progress_interval, report)))
            finished = False
            try:
                if not demo_job.is_seeded:
                    await crawler.add(crawler.request(url + "/") for url in server.base_urls)
                    demo_job.seeded()
                finished = await crawler.run(
                    [], workers=config.workers, stop=stops[0], stop_now=stops[1]
                )
            finally:
                for task in background:
                    task.cancel()
                await asyncio.gather(*background, return_exceptions=True)
                in_flight = crawler.released + frontier.stats().leased
                demo_job.finish(totals(), in_flight)
            if on_progress is not None:
                on_progress(snapshot())
    return _result(
        config,
        site,
        demo_job,
        server.fetches,
        totals=totals(),
        interrupted=not finished,
        in_flight=in_flight,
        max_concurrency=tuple(log.max_active for log in server.logs),
        min_gap=tuple(log.min_gap() for log in server.logs),
        base_urls=server.base_urls,
        single_address=server.single_address,
    )


@contextlib.asynccontextmanager
async def _serve(config: DemoConfig, site: Site, demo_job: DemoJob) -> AsyncIterator[SiteServer]:
    """Serve the site: where the job's requests point, or on fresh ports for a new job."""
    rebind = demo_job.base_urls
    server = SiteServer(
        site,
        single_address=demo_job.single_address if rebind else config.single_address,
        base_urls=rebind,
        fetches=demo_job.fetches,
        on_fetch=demo_job.record_fetch,
    )
    try:
        await server.__aenter__()
    except OSError as exc:
        if rebind is None:
            raise
        raise DemoJobError(
            f"cannot serve the site again where the job's requests point ({exc.strerror}); "
            "stop what uses that port and try again, or add --fresh to start over"
        ) from None
    try:
        yield server
    finally:
        await server.__aexit__(None, None, None)


def _done(frontier: Frontier) -> int:
    """Requests done (acked) in the job: every one seen is queued, leased or done."""
    stats = frontier.stats()
    return stats.seen - stats.queued - stats.leased


async def _every(interval: float, action: Callable[[], Awaitable[None]]) -> None:
    while True:
        await asyncio.sleep(interval)
        await action()


def _result(
    config: DemoConfig,
    site: Site,
    demo_job: DemoJob,
    fetches: Mapping[PageKey, int],
    *,
    totals: Totals | None = None,
    interrupted: bool = False,
    in_flight: int = 0,
    max_concurrency: tuple[int, ...] = (),
    min_gap: tuple[float | None, ...] = (),
    base_urls: list[str] | None = None,
    single_address: bool | None = None,
    already_complete: bool = False,
) -> DemoResult:
    urls = base_urls if base_urls is not None else demo_job.base_urls or []
    totals = totals or demo_job.totals
    stats = demo_job.frontier.stats()
    # HTTP errors as the server's log tells them; network errors as the crawler saw them.
    errors = Counter({k: n for k, n in totals.errors.items() if not k.isdigit()})
    for key in fetches:
        if key in site.broken:
            errors["404"] += 1
        elif key in site.pages and site.pages[key].status != 200:
            errors[str(site.pages[key].status)] += 1
    return DemoResult(
        config=config,
        base_urls=tuple(urls),
        single_address=demo_job.single_address if single_address is None else single_address,
        site_pages=len(site.pages),
        expected_fetches=site.expected_fetches,
        fetched=stats.seen - stats.queued - stats.leased,
        errors=dict(sorted(errors.items())),
        duplicates=totals.duplicates,
        links=totals.links,
        seen=stats.seen,
        elapsed=totals.elapsed,
        hosts_crawled=len({host for host, _ in fetches}),
        missing=tuple(
            urls[host] + path for host, path in site.pages if not fetches.get((host, path))
        ),
        repeated={urls[host] + path: n for (host, path), n in fetches.items() if n > 1},
        max_concurrency=max_concurrency,
        min_gap=min_gap,
        job=str(demo_job.path) if demo_job.path is not None else None,
        runs=demo_job.runs,
        interrupted=interrupted,
        in_flight_at_stop=in_flight if interrupted else 0,
        refetch_bound=demo_job.refetch_bound,
        queued=stats.queued + stats.leased,
        already_complete=already_complete,
        server_fetches=sum(fetches.values()),
        server_urls=sum(1 for n in fetches.values() if n),
    )
