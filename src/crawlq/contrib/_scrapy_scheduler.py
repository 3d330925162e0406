"""`Scheduler`: crawlq as Scrapy's ``SCHEDULER``.

How requests are stored, ordered and acknowledged: see ``_scrapy_frontiers``.

Pacing
    Each request is filed under the download slot Scrapy's downloader will
    use (``Downloader.get_slot_key``: ``meta["download_slot"]``, else the
    host name, or its IP with ``CONCURRENT_REQUESTS_PER_IP``), with the
    slot's delay and concurrency. crawlq therefore hands a request out only
    when its slot can take it, and requests do not queue in the downloader's
    per-slot queues, where priority is ignored.

Failures
    If the store fails mid-crawl (a full disk, say), the scheduler stops
    acknowledging, keeps new requests in memory and closes the spider; what
    was in flight comes back, with its children, when the job is resumed.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Self

from scrapy.core.scheduler import BaseScheduler

from .._errors import ConfigError, IncompatibleStore, StoreError
from .._fingerprint import Fingerprinter
from .._frontier import Frontier
from .._open import open_frontier
from ._scrapy_codec import RequestCodec, Unserializable
from ._scrapy_engine import EngineHook
from ._scrapy_frontiers import Frontiers
from ._scrapy_settings import SchedulerConfig

if TYPE_CHECKING:
    import scrapy
    from scrapy.crawler import Crawler

__all__ = ["Scheduler"]

logger = logging.getLogger("crawlq.contrib.scrapy")

#: Slot for requests Scrapy files under "" (URLs without a host, e.g. data:).
_NO_HOST_SLOT: Final = "(no host)"
_NO_FINGERPRINT: Final = bytes(16)


class _RecentlySeen:
    """The last `SIZE` fingerprints known to be recorded as seen by the store.

    Most requests a crawl enqueues are links to pages it has already met:
    a hit here refuses such a duplicate without building, encoding or
    looking anything up in the store (a disk read for a SQLite job). It is
    exact: a fingerprint enters only once the store has recorded it, and a
    store never forgets one. About 7 MB at its size.
    """

    SIZE: Final = 65_536

    __slots__ = ("_keys",)

    def __init__(self) -> None:
        self._keys: dict[bytes, None] = {}

    def __contains__(self, fingerprint: bytes) -> bool:
        return fingerprint in self._keys

    def add(self, fingerprint: bytes) -> None:
        keys = self._keys
        if len(keys) >= self.SIZE:
            del keys[next(iter(keys))]  # the oldest: dicts keep insertion order
        keys[fingerprint] = None


class _Counts:
    """Scrapy stats incremented in batches.

    Each ``crawler.stats.inc_value`` call goes through Scrapy's deprecation
    wrappers; on the hot path the scheduler adds to plain ints here instead
    and hands them to the stats collector every `EVERY` increments and at
    close, so the stats lag by at most that many operations.
    """

    EVERY: Final = 256

    __slots__ = ("_pending", "_stats", "counts")

    def __init__(self, stats: Any) -> None:
        self._stats = stats
        self.counts: dict[str, int] = {}
        self._pending = 0

    def add(self, key: str) -> None:
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        self._pending += 1
        if self._pending >= self.EVERY:
            self.flush()

    def flush(self) -> None:
        inc = self._stats.inc_value
        for key, count in self.counts.items():
            inc(key, count)
        self.counts = {}
        self._pending = 0


class Scheduler(BaseScheduler):
    """crawlq as Scrapy's scheduler: ``SCHEDULER = "crawlq.contrib.scrapy.Scheduler"``.

    Durable with ``JOBDIR`` (or ``CRAWLQ_URL``): a request handed to the
    engine is acknowledged only once the engine is done with it and every
    request it produced is stored, in the same commit or an earlier one, so
    Ctrl-C or ``kill -9`` followed by the same command resumes with nothing
    lost (see ``_scrapy_frontiers`` for when writes happen). Deduplicates
    with ``crawler.request_fingerprinter`` (``dont_filter`` skips it),
    orders by Scrapy priority with Scrapy's start-request rule, and paces
    each download slot with ``DOWNLOAD_DELAY`` and
    ``CONCURRENT_REQUESTS_PER_DOMAIN``. The settings are listed in
    ``crawlq.contrib.scrapy``.

    ``DOWNLOAD_DELAY`` is the least gap crawlq leaves between two requests of
    a slot; Scrapy's downloader still adds its jitter (``DOWNLOAD_DELAY_JITTER``
    or ``RANDOMIZE_DOWNLOAD_DELAY``, ±50% by default) on top, so the average
    gap comes out about 12% above ``DOWNLOAD_DELAY`` where Scrapy's own
    scheduler averages it. Handing requests out at the lower end of the jitter
    instead would let them queue in the downloader's slots, which is what
    this scheduler exists to avoid. ``CRAWLQ_HOST_DELAY`` overrides it.

    Stats: Scrapy's ``scheduler/enqueued[/disk|/memory]``,
    ``scheduler/dequeued[/disk|/memory]``, ``dupefilter/filtered``,
    ``scheduler/unserializable``; and crawlq's ``crawlq/acked``,
    ``crawlq/resumed`` (requests found in the store at open),
    ``crawlq/released`` (handed out, not finished at close),
    ``crawlq/unserializable_lost`` (kept in memory by an earlier run, gone),
    ``crawlq/undecodable`` (stored requests that cannot be rebuilt, e.g.
    their callback no longer exists; logged and dropped). Scrapy's stats are
    updated in batches of a few hundred operations, and whenever the
    scheduler has nothing ready.

    Raises `ConfigError` at open for a bad setting or store URL (naming the
    setting), and the store's `StoreError` (e.g. `JobLocked`) when the store
    cannot be opened; the crawl then stops before any request is fetched.
    """

    def __init__(self, crawler: Crawler, config: SchedulerConfig) -> None:
        self.crawler = crawler
        self.config = config
        self.stats = crawler.stats
        self._counts = _Counts(crawler.stats)
        self._count = self._counts.add
        self.spider: scrapy.Spider | None = None
        self._frontiers: Frontiers | None = None
        self._hook: EngineHook | None = None
        self._log_unserializable = True
        self._log_duplicate = True
        self._log_lost = True
        self._failed: StoreError | None = None
        self._recent = _RecentlySeen()

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build the scheduler from the crawler's settings; raise `ConfigError` for a bad one."""
        return cls(crawler, SchedulerConfig.from_crawler(crawler))

    # -- opening and closing ------------------------------------------------------

    @property
    def frontier(self) -> Frontier:
        """The crawlq frontier holding the requests (after `open`)."""
        if self._frontiers is None:
            raise RuntimeError("the scheduler is not open")
        return self._frontiers.main.frontier

    def open(self, spider: scrapy.Spider) -> None:
        """Open the store, resume what it holds, and attach to the engine."""
        self.spider = spider
        crawler = self.crawler
        self._fingerprint = crawler.request_fingerprinter.fingerprint
        self._slot_key = crawler.engine.downloader.get_slot_key
        config = self.config
        self._warn_about_settings()
        host_delay = config.host_delay
        if crawler.settings.get("CRAWLQ_HOST_DELAY") is None:
            # Scrapy 2.13 reads a spider's download_delay attribute in its
            # downloader; later releases turn it into DOWNLOAD_DELAY.
            host_delay = float(getattr(spider, "download_delay", host_delay))
        store = self._open(config.url, host_delay)
        try:
            self._hook = EngineHook(crawler, self._finished)
        except BaseException:
            store.close()
            raise
        self._frontiers = Frontiers(
            store, config, RequestCodec(spider), self._count, self._dropped, self._store_failed
        )
        resumed = len(store)
        if resumed:
            logger.info(
                "Resuming crawl (%(queuesize)d requests scheduled)",
                {"queuesize": resumed},
                extra={"spider": spider},
            )
            self.stats.set_value("crawlq/resumed", resumed)

    def _open(self, url: str, host_delay: float) -> Frontier:
        config = self.config
        options = {
            "host_delay": host_delay,
            "host_concurrency": config.host_concurrency,
            "lifo": config.lifo,
            "lease_timeout": config.lease_timeout,
            "fingerprinter": Fingerprinter(mode="scrapy"),
            # The scheduler writes a page's acks with its links itself, and its
            # bound (at most CONCURRENT_REQUESTS refetched after a kill) needs
            # an ack on its own to be durable when it returns.
            "ack_delay": 0.0,
            **config.options,
        }
        try:
            return open_frontier(url, **options)
        except IncompatibleStore as exc:
            hint = ""
            if exc.setting == "lifo":
                hint = (
                    f" (this crawl asks for CRAWLQ_LIFO={config.lifo}, from CRAWLQ_LIFO or "
                    "SCHEDULER_DISK_QUEUE: set CRAWLQ_LIFO to the job's value)"
                )
            raise IncompatibleStore(
                f"CRAWLQ_URL={url!r}: {exc}{hint}", setting=exc.setting
            ) from None
        except ConfigError as exc:
            raise ConfigError(f"CRAWLQ_URL={url!r} (or CRAWLQ_OPTIONS): {exc}") from None
        except StoreError as exc:
            raise type(exc)(f"CRAWLQ_URL={url!r}: {exc}") from None

    def _warn_about_settings(self) -> None:
        settings = self.crawler.settings
        jobdir = self.config.jobdir
        if (
            jobdir
            and not settings.get("CRAWLQ_URL")
            and Path(jobdir, "requests.queue").exists()
            and any(Path(jobdir, "requests.queue").iterdir())
        ):
            logger.warning(
                "JOBDIR %s holds requests queued by Scrapy's own scheduler "
                "(requests.queue); crawlq keeps its job in crawlq.db and does not read them",
                jobdir,
            )
        if settings.getdict("DOWNLOAD_SLOTS"):
            logger.info(
                "crawlq paces every download slot with CRAWLQ_HOST_DELAY/"
                "CRAWLQ_HOST_CONCURRENCY; the per-slot values of DOWNLOAD_SLOTS are "
                "still applied by Scrapy's downloader"
            )

    def close(self, reason: str) -> None:
        """Put back what the engine did not finish, then close the store."""
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        frontiers = self._frontiers
        if frontiers is None:
            return
        frontiers.settle()  # requests held for a write are stored (or in memory) now
        main = frontiers.main
        left = main.pending() if not main.frontier.closed else 0
        memory_only = frontiers.local.pending() if frontiers.local is not None else 0
        released = frontiers.close()
        self._counts.flush()
        if released:
            self.stats.set_value("crawlq/released", released)
        if left and self.config.durable:
            logger.info(
                "crawlq: %(left)d requests left in %(store)s (reason: %(reason)s)",
                {"left": left, "store": main.frontier.url, "reason": reason},
            )
        if memory_only and self.config.durable:
            logger.warning(
                "crawlq: %d requests that could not be stored were lost at close", memory_only
            )

    # -- the BaseScheduler interface ------------------------------------------------

    def has_pending_requests(self) -> bool:
        """True while requests are queued (in-flight ones excepted)."""
        return len(self) > 0

    def __len__(self) -> int:
        """Requests queued and not handed to the engine."""
        frontiers = self._frontiers
        return 0 if frontiers is None else len(frontiers)

    def enqueue_request(self, request: scrapy.Request) -> bool:
        """Store ``request``; return False if it is a duplicate (the engine drops it)."""
        frontiers = self._frontiers
        assert frontiers is not None, "the scheduler is not open"
        config = self.config
        dont_filter = request.dont_filter or not config.dedup
        if dont_filter:
            fingerprint = _NO_FINGERPRINT
        else:
            fingerprint = self._fingerprint(request)
            recent = self._recent
            if fingerprint in recent:
                self._duplicate(request)
                return False
            seen = frontiers.seen_many
            if seen is not None and seen((fingerprint,))[0]:
                # Refused before anything is built or encoded.
                recent.add(fingerprint)
                self._duplicate(request)
                return False
        start = config.start_requests_apart and bool(request.meta.get("is_start_request"))
        slot = self._slot_key(request) or _NO_HOST_SLOT
        add = frontiers.add
        try:
            added, stored, why = add(
                request, fingerprint=fingerprint, dont_filter=dont_filter, start=start, slot=slot
            )
        except StoreError as exc:
            self._store_failed(exc)  # from now on, requests are kept in memory
            added, stored, why = add(
                request, fingerprint=fingerprint, dont_filter=dont_filter, start=start, slot=slot
            )
        if not dont_filter:
            self._recent.add(fingerprint)  # recorded now, if it was not before
        if not added:
            self._duplicate(request)
            return False
        count = self._count
        count("scheduler/enqueued")
        count("scheduler/enqueued/disk" if stored else "scheduler/enqueued/memory")
        if why is not None:  # counted like Scrapy: after deduplication
            self._unserializable(request, why)
        return True

    def next_request(self) -> scrapy.Request | None:
        """Hand out the next request that is ready, or None (then wake the engine later).

        None also while ``CRAWLQ_MAX_IN_FLIGHT`` requests are in the engine:
        the engine asks again as soon as one finishes.
        """
        frontiers = self._frontiers
        assert frontiers is not None, "the scheduler is not open"
        try:
            frontiers.flush()
            limit = self.config.max_in_flight
            if limit and frontiers.handed_out >= limit:
                return None
            popped = frontiers.pop()
        except StoreError as exc:
            self._store_failed(exc)
            return None
        if popped is None:
            self._counts.flush()  # idle: let the stats catch up
            self._wake_later()
            return None
        request, stored = popped
        count = self._count
        count("scheduler/dequeued")
        count("scheduler/dequeued/disk" if stored else "scheduler/dequeued/memory")
        return request

    def _wake_later(self) -> None:
        hook = self._hook
        frontiers = self._frontiers
        if hook is None or frontiers is None:
            return
        delay = frontiers.next_ready_in()  # None when nothing is queued or leased
        if delay is not None:
            # Never 0: the engine just heard None, it must not spin on it.
            hook.wake_in(max(delay, 0.005), time.monotonic())

    def _finished(self, request: Any) -> None:
        """Ack a request the engine is done with (called by `EngineHook`)."""
        frontiers = self._frontiers
        if frontiers is None:
            return
        try:
            frontiers.finished(request)
        except StoreError as exc:
            self._store_failed(exc)

    # -- the unusual paths --------------------------------------------------------------

    def _duplicate(self, request: scrapy.Request) -> None:
        self._count("dupefilter/filtered")
        if self.config.log_every_duplicate:
            referer = request.headers.get("Referer")
            logger.debug(
                "Filtered duplicate request: %(request)s (referer: %(referer)s)",
                {"request": request, "referer": referer.decode() if referer else None},
                extra={"spider": self.spider},
            )
        elif self._log_duplicate:
            logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates will be "
                "shown (see DUPEFILTER_DEBUG to show all duplicates)",
                {"request": request},
                extra={"spider": self.spider},
            )
            self._log_duplicate = False

    def _unserializable(self, request: scrapy.Request, exc: Unserializable) -> None:
        self._count("scheduler/unserializable")
        if self._log_unserializable or self.config.log_every_unserializable:
            logger.warning(
                "Unable to serialize request: %(request)s - reason: %(reason)s - it is "
                "kept in memory, in its place, and is lost if the crawl stops; no more "
                "unserializable requests will be logged (stats being collected; "
                "SCHEDULER_DEBUG logs them all)",
                {"request": request, "reason": exc},
                extra={"spider": self.spider},
            )
            self._log_unserializable = False

    def _dropped(self, url: str, reason: Exception | None) -> None:
        """Log a stored request dropped while being handed out (see `Frontiers.pop`)."""
        if reason is None:
            self._count("crawlq/unserializable_lost")
            if self._log_lost:
                logger.warning(
                    "crawlq dropped %(url)s: the request could not be stored (see "
                    "scheduler/unserializable) and was lost when the crawl stopped; more "
                    "are counted in crawlq/unserializable_lost",
                    {"url": url},
                    extra={"spider": self.spider},
                )
                self._log_lost = False
            return
        self._count("crawlq/undecodable")
        logger.error(
            "crawlq dropped stored request %(url)s: it cannot be rebuilt (%(reason)s)",
            {"url": url, "reason": reason},
            extra={"spider": self.spider},
        )

    def _store_failed(self, exc: StoreError) -> None:
        """Stop acking, keep new requests in memory, and close the spider.

        Nothing is lost: every request handed out since stays un-acked and
        comes back, with its children, when the job is resumed.
        """
        if self._failed is not None:
            return
        self._failed = exc
        if self._frontiers is not None:
            self._frontiers.failed = True
        logger.error(
            "crawlq store failed: %(error)s; closing the spider. Requests in flight are "
            "not acknowledged and will be fetched again when the job is resumed.",
            {"error": exc},
            extra={"spider": self.spider},
        )
        from scrapy.utils.defer import deferred_from_coro

        engine = self.crawler.engine
        if hasattr(engine, "close_spider_async"):
            deferred_from_coro(engine.close_spider_async(reason="crawlq_store_error"))
        elif self.spider is not None:  # Scrapy 2.13
            engine.close_spider(self.spider, reason="crawlq_store_error")
