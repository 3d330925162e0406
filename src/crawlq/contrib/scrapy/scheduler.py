"""`Scheduler`: crawlq as Scrapy's ``SCHEDULER``.

How requests are stored, ordered and acknowledged: see ``frontiers``.

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

import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Self

from scrapy.core.scheduler import BaseScheduler
from scrapy.dupefilters import RFPDupeFilter
from scrapy.settings import Settings
from scrapy.utils.job import job_dir
from scrapy.utils.misc import build_from_crawler, load_object

from ..._errors import ConfigError, InvalidRequest, StoreError
from ..._frontier import Frontier
from .bookkeeping import Counts, RecentlySeen
from .codec import RequestCodec
from .due import DELAY, NOT_BEFORE, REFETCH_AFTER, due_of, settle_delay
from .dupefilter import DupeFilter
from .engine import EngineHook, hookable, running_engine, slot_key
from .frontiers import Frontiers
from .idle import IdleClose
from .opening import open_store, warn_about_settings
from .reports import OffPathReports, logger
from .settings import SchedulerConfig

if TYPE_CHECKING:
    import scrapy
    from scrapy.crawler import Crawler

__all__ = ["Scheduler"]

#: Slot for requests Scrapy files under "" (URLs without a host, e.g. data:).
_NO_HOST_SLOT: Final = "(no host)"
_NO_FINGERPRINT: Final = bytes(16)
#: Longest a shared store's "nothing ready" is believed while requests are in
#: flight (see `Scheduler.next_request`), in seconds.
_DRY_FOR: Final = 0.1


class Scheduler(OffPathReports, BaseScheduler):
    """crawlq as Scrapy's scheduler: ``SCHEDULER = "crawlq.contrib.scrapy.Scheduler"``.

    Durable with ``JOBDIR`` (or ``CRAWLQ_URL``): a request handed to the
    engine is acknowledged only once the engine is done with it and every
    request it produced is stored, in the same commit or an earlier one, so
    Ctrl-C or ``kill -9`` followed by the same command resumes with nothing
    lost (see ``frontiers`` for when writes happen). Orders by
    Scrapy priority with Scrapy's start-request rule, and paces each
    download slot with ``DOWNLOAD_DELAY`` and
    ``CONCURRENT_REQUESTS_PER_DOMAIN``. The settings are listed in
    ``crawlq.contrib.scrapy``.

    Duplicates: ``scheduler.df`` is the dupefilter, as in Scrapy's
    scheduler. With the default ``DUPEFILTER_CLASS`` it is a
    `DupeFilter` (an ``RFPDupeFilter``) and crawlq deduplicates with
    ``crawler.request_fingerprinter`` in the frontier's seen set, which a
    durable store keeps with the job; ``df.request_seen`` answers from that
    set. With another class, that class decides (``df.request_seen``, then
    ``df.log``), as in Scrapy, and the frontier keeps every request it lets
    through. ``dont_filter`` skips both.

    The constructor takes the arguments of Scrapy's scheduler; ``jobdir``
    and ``logunser`` win over ``JOBDIR`` and ``SCHEDULER_DEBUG``, ``dqclass``
    and ``mqclass`` over ``SCHEDULER_DISK_QUEUE`` and
    ``SCHEDULER_MEMORY_QUEUE`` (which pick FIFO or LIFO), and ``pqclass`` is
    not used. Opened with no engine at all (a test, say), it gives each
    request up for good as it hands it out, as Scrapy's scheduler does.

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
    ``crawlq/unrebuildable`` (stored requests that cannot be rebuilt, e.g.
    their callback no longer exists: logged as errors and parked, leased and
    not fetched, until this worker closes or their lease times out; never
    acked), ``crawlq/declined`` (fed requests the spider's
    ``make_request_from_crawlq`` returned None for; acked),
    ``crawlq/invalid`` (requests refused for a bad ``crawlq_*`` meta value
    or URL, see `enqueue_request`; and pages not refetched for a bad
    ``crawlq_refetch_after`` a callback set, logged as errors),
    ``crawlq/refetch_scheduled`` (pages acked with a refetch).

    Due times: ``meta["crawlq_not_before"]``, ``meta["crawlq_delay"]`` (and
    `BackoffRetryMiddleware`'s retries) keep a request in the frontier until
    it is due; ``CRAWLQ_REFETCH_AFTER`` and ``meta["crawlq_refetch_after"]``
    fetch a finished page again later (see ``due``). The spider stays open
    for the first, not for the second unless ``CRAWLQ_WAIT_FOR_REVISITS``
    is set (`has_pending_requests`).

    Fed requests: a stored request without Scrapy's fields (fed by ``crawlq
    add``, ``crawlq import`` or ``Frontier.add_many`` from another process)
    becomes a Scrapy request for the spider's default callback, or what the
    spider's ``make_request_from_crawlq(request)`` returns (see ``fed``).
    ``CRAWLQ_IDLE_CLOSE`` keeps a worker open while it waits for them (see
    ``idle``). Scrapy's stats are
    updated in batches of a few hundred operations, and whenever the
    scheduler has nothing ready.

    Raises `ConfigError` at open for a bad setting or store URL (naming the
    setting), and the store's `StoreError` (e.g. `JobLocked`) when the store
    cannot be opened; the crawl then stops before any request is fetched.
    """

    def __init__(
        self,
        dupefilter: Any,
        jobdir: str | None = None,
        dqclass: type | None = None,
        mqclass: type | None = None,
        logunser: bool = False,
        stats: Any = None,
        pqclass: type | None = None,
        crawler: Crawler | None = None,
    ) -> None:
        settings = Settings(crawler.settings.copy_to_dict() if crawler is not None else None)
        overrides: dict[str, Any] = {"JOBDIR": jobdir, "SCHEDULER_DEBUG": logunser}
        if dqclass is not None:
            overrides["SCHEDULER_DISK_QUEUE"] = dqclass
        if mqclass is not None:
            overrides["SCHEDULER_MEMORY_QUEUE"] = mqclass
        settings.setdict(overrides, priority="cmdline")
        self.config = SchedulerConfig.from_settings(settings)
        if jobdir:
            Path(jobdir).mkdir(parents=True, exist_ok=True)  # as Scrapy's scheduler does
        self.crawler = crawler
        self.df = dupefilter
        # The default dupefilter: crawlq deduplicates in the frontier.
        self._dedup = isinstance(dupefilter, DupeFilter)
        if stats is None and crawler is not None:
            stats = crawler.stats
        self.stats = stats
        self._counts = Counts(stats)
        self._count = self._counts.add
        self.spider: scrapy.Spider | None = None
        self._frontiers: Frontiers | None = None
        self._hook: EngineHook | None = None
        self._in_engine = False
        self._log_unserializable = True
        self._log_lost = True
        self._failed: StoreError | None = None
        self._recent = RecentlySeen()
        self._idle: IdleClose | None = None
        # Until when (monotonic) a shared store's last "nothing ready" holds.
        self._dry_until = 0.0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build the scheduler from the crawler's settings; raise `ConfigError` for a bad one.

        ``DUPEFILTER_CLASS`` is built with ``build_from_crawler``; Scrapy's
        default ``RFPDupeFilter`` becomes crawlq's `DupeFilter`.
        """
        settings = crawler.settings
        dupefilter_cls = load_object(settings["DUPEFILTER_CLASS"])
        if dupefilter_cls is RFPDupeFilter:
            dupefilter_cls = DupeFilter
        return cls(
            dupefilter=build_from_crawler(dupefilter_cls, crawler),
            jobdir=job_dir(settings),
            dqclass=load_object(settings["SCHEDULER_DISK_QUEUE"]),
            mqclass=load_object(settings["SCHEDULER_MEMORY_QUEUE"]),
            logunser=settings.getbool("SCHEDULER_DEBUG"),
            stats=crawler.stats,
            crawler=crawler,
        )

    # -- opening and closing ------------------------------------------------------

    @property
    def frontier(self) -> Frontier:
        """The crawlq frontier holding the requests (after `open`)."""
        if self._frontiers is None:
            raise RuntimeError("the scheduler is not open")
        return self._frontiers.main.frontier

    def open(self, spider: scrapy.Spider) -> Any:
        """Open the store, resume what it holds, attach to the engine, open the dupefilter.

        Returns what the dupefilter's ``open()`` returns.
        """
        self.spider = spider
        crawler = self.crawler
        if crawler is None:
            crawler = self.crawler = getattr(spider, "crawler", None)
        if crawler is None:
            raise ConfigError(
                "crawlq.contrib.scrapy.Scheduler needs a crawler: build it with "
                "Scheduler.from_crawler(crawler) or pass crawler=, or open it with a "
                "spider made by Spider.from_crawler"
            )
        if self.stats is None:
            self.stats = crawler.stats
            self._counts.stats = crawler.stats
        if self._dedup:
            self._fingerprint = self.df.fingerprinter.fingerprint
        engine = running_engine(crawler)
        downloader = getattr(engine, "downloader", None)
        self._slot_key = downloader.get_slot_key if downloader is not None else slot_key
        self._in_engine = engine is not None
        config = self.config
        warn_about_settings(crawler.settings, config)
        host_delay = config.host_delay
        if crawler.settings.get("CRAWLQ_HOST_DELAY") is None:
            # Scrapy 2.13 reads a spider's download_delay attribute in its
            # downloader; later releases turn it into DOWNLOAD_DELAY.
            host_delay = float(getattr(spider, "download_delay", host_delay))
        store = open_store(config, host_delay)
        try:
            # A stand-in engine without a slot (as in Scrapy's own tests)
            # reports no finished requests: they stay leased until close.
            if engine is not None and hookable(engine):
                self._hook = EngineHook(crawler, self._finished)
        except BaseException:
            store.close()
            raise
        # A crawl whose dedup expires (seen_ttl) may take a fingerprint again;
        # a Redis server that may have lost writes forgets them here too.
        self._recent = RecentlySeen(enabled=store.policy.seen_ttl is None)
        store._on_store_fault(self._recent.clear)
        self._frontiers = Frontiers(
            store,
            config,
            RequestCodec(spider),
            self._count,
            self._dropped,
            self._store_failed,
            self._late_duplicate,
        )
        if config.idle_close is not None and self._hook is not None:
            self._idle = IdleClose(crawler, config.idle_close, self._wake_in)
        if self._dedup:
            self.df.attach(self._seen, self._count)
        resumed = len(store)
        if resumed:
            logger.info(
                "Resuming crawl (%(queuesize)d requests scheduled)",
                {"queuesize": resumed},
                extra={"spider": spider},
            )
            self.stats.set_value("crawlq/resumed", resumed)
        return self.df.open()

    def close(self, reason: str) -> Any:
        """Put back what the engine did not finish, close the store, then the dupefilter.

        Returns what the dupefilter's ``close(reason)`` returns.
        """
        if self._idle is not None:
            self._idle.remove()
            self._idle = None
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._dedup:
            self.df.detach()
        frontiers = self._frontiers
        if frontiers is None:
            return self.df.close(reason)
        frontiers.settle()  # requests held for a write are stored (or in memory) now
        main = frontiers.main
        left = revisits = 0
        if not main.frontier.closed:
            left = main.pending()
            revisits = left - main.pending(revisits=False)
        parked = len(frontiers.parked)
        memory_only = frontiers.local.pending() if frontiers.local is not None else 0
        released = frontiers.close()
        self._counts.flush()
        if released:
            self.stats.set_value("crawlq/released", released)
        if parked:
            logger.error(
                "crawlq: %(parked)d stored requests could not be rebuilt (crawlq/unrebuildable)"
                " and go back to %(store)s unfetched",
                {"parked": parked, "store": main.frontier.url},
            )
        if left and self.config.durable:
            logger.info(
                "crawlq: %(left)d requests left in %(store)s (%(revisits)d of them pages to "
                "fetch again later; reason: %(reason)s)",
                {"left": left, "revisits": revisits, "store": main.frontier.url, "reason": reason},
            )
        if memory_only and self.config.durable:
            logger.warning(
                "crawlq: %d requests that could not be stored were lost at close", memory_only
            )
        return self.df.close(reason)

    # -- the BaseScheduler interface ------------------------------------------------

    def has_pending_requests(self) -> bool:
        """True while the crawl has requests to hand out, now or later (in-flight ones excepted).

        The join rule of `crawlq.Scheduler.join`: a request scheduled by its
        ``crawlq_not_before``, ``crawlq_delay`` or a retry's backoff keeps the
        spider open (it waits for it, woken when it is due); a revisit (a
        page acked with a refetch) does not, unless
        ``CRAWLQ_WAIT_FOR_REVISITS`` is set (a continuous crawl).
        """
        frontiers = self._frontiers
        if frontiers is None:
            return False
        return frontiers.pending(revisits=self.config.wait_for_revisits) > 0

    def __len__(self) -> int:
        """Requests held and not handed to the engine: queued, or scheduled for later."""
        frontiers = self._frontiers
        return 0 if frontiers is None else len(frontiers)

    def enqueue_request(self, request: scrapy.Request) -> bool:
        """Store ``request``; return False if it is a duplicate (the engine drops it).

        A durable store gets it with the next batch (see ``frontiers``). On
        a shared store (Redis) True means "new to this process": if the
        batch's write finds another worker or an earlier run stored it, it is
        counted as a duplicate then (``scheduler/enqueued`` back down,
        ``dupefilter/filtered`` up, logged by the dupefilter) and
        ``request_dropped`` is sent for it, after the engine's
        ``request_scheduled``; it is not fetched. SQLite and memory answer
        exactly.

        ``meta["crawlq_not_before"]`` / ``meta["crawlq_delay"]`` store it to
        be handed out at that time (see ``due``). Raises `InvalidRequest`
        (counted in ``crawlq/invalid``) for a bad value of one of them or of
        ``crawlq_refetch_after``, or for a URL over ``max_url_length``;
        nothing is stored then.
        """
        frontiers = self._frontiers
        assert frontiers is not None, "the scheduler is not open"
        config = self.config
        meta = request.meta
        due = None
        if NOT_BEFORE in meta or DELAY in meta or REFETCH_AFTER in meta:
            try:
                due = due_of(request)
            except InvalidRequest:
                self._count("crawlq/invalid")
                raise
        dont_filter = request.dont_filter
        if dont_filter:
            fingerprint = _NO_FINGERPRINT
        elif not self._dedup:
            # Another DUPEFILTER_CLASS decides, as in Scrapy's scheduler.
            if self.df.request_seen(request):
                self.df.log(request, self.spider)
                return False
            fingerprint = _NO_FINGERPRINT
            dont_filter = True
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
            if self.df.marks and self.df.marked(fingerprint):
                self._duplicate(request)  # df.request_seen was asked about it
                return False
        start = config.start_requests_apart and bool(meta.get("is_start_request"))
        slot = self._slot_key(request) or _NO_HOST_SLOT
        if DELAY in meta:
            settle_delay(request, due)  # before it is encoded: the delay applies once
        add = partial(
            frontiers.add,
            fingerprint=fingerprint,
            dont_filter=dont_filter,
            start=start,
            slot=slot,
            not_before=due,
        )
        try:
            try:
                added, stored, why = add(request)
            except StoreError as exc:
                self._store_failed(exc)  # from now on, requests are kept in memory
                added, stored, why = add(request)
        except InvalidRequest:
            self._count("crawlq/invalid")
            raise
        if not dont_filter:
            self._recent.add(fingerprint)  # recorded now, if it was not before
        if not added:
            self._duplicate(request)
            return False
        self._dry_until = 0.0  # the store may have a request ready now
        count = self._count
        count("scheduler/enqueued")
        count("scheduler/enqueued/disk" if stored else "scheduler/enqueued/memory")
        if why is not None:  # counted like Scrapy: after deduplication
            self._unserializable(request, why)
        return True

    def next_request(self) -> scrapy.Request | None:
        """Hand out the next request that is ready, or None (then wake the engine later).

        None also while ``CRAWLQ_MAX_IN_FLIGHT`` requests are in the engine:
        the engine asks again as soon as one finishes. On a shared store, once
        it said "nothing ready" while requests of this process are in flight,
        None without a round trip until a request finishes or is enqueued, or
        0.1 s or the store's next ready time passes (only other workers could
        change the answer before: the engine asks after every download).
        """
        frontiers = self._frontiers
        assert frontiers is not None, "the scheduler is not open"
        if self._dry_until and frontiers.handed_out:
            if time.monotonic() < self._dry_until:
                return None
            self._dry_until = 0.0
        try:
            frontiers.flush(lease=True)
            limit = self.config.max_in_flight
            if limit and frontiers.handed_out >= limit:
                return None
            popped = frontiers.pop()
        except StoreError as exc:
            self._store_failed(exc)
            return None
        if popped is None:
            self._counts.flush()  # idle: let the stats catch up
            delay = self._wake_later()
            if self.config.shared:
                now = time.monotonic()
                self._dry_until = now + _DRY_FOR if delay is None else now + min(delay, _DRY_FOR)
            return None
        request, stored = popped
        if self._idle is not None:
            self._idle.busy()
        if not self._in_engine:
            frontiers.finished(request)  # no engine to report it finished: done now
        count = self._count
        count("scheduler/dequeued")
        count("scheduler/dequeued/disk" if stored else "scheduler/dequeued/memory")
        return request

    def _wake_in(self, delay: float) -> None:
        if self._hook is not None:
            self._hook.wake_in(delay, time.monotonic())

    def _wake_later(self) -> float | None:
        """Have the engine ask again when a request may be ready; return in how long (or None)."""
        hook = self._hook
        frontiers = self._frontiers
        if hook is None or frontiers is None:
            return 0.0
        delay = frontiers.next_ready_in()  # None when nothing is queued or leased
        if delay is not None:
            # Never 0: the engine just heard None, it must not spin on it.
            hook.wake_in(max(delay, 0.005), time.monotonic())
        return delay

    def _finished(self, request: Any) -> None:
        """Ack a request the engine is done with (called by `EngineHook`)."""
        frontiers = self._frontiers
        if frontiers is None:
            return
        self._dry_until = 0.0  # a slot is free: ask the store again
        try:
            frontiers.finished(request)
        except StoreError as exc:
            self._store_failed(exc)
