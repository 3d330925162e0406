"""What the Scrapy scheduler does off the usual path: duplicates, lost requests, failures.

`OffPathReports` is the part of `Scheduler` that logs and counts what does
not go as planned: a duplicate (through the dupefilter, as Scrapy does, also
when a shared store finds one only at the batch's write), a request that
cannot be serialized (kept in memory), a stored request that
cannot be rebuilt (parked), lost with an earlier run or declined by the
spider, and a store failure (stop acking, keep new requests
in memory, close the spider: nothing is lost, it comes back on resume).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..._errors import StoreError
from .bookkeeping import Counts, RecentlySeen
from .codec import Unserializable
from .engine import running_engine
from .frontiers import Frontiers

if TYPE_CHECKING:
    import scrapy
    from scrapy.crawler import Crawler

__all__ = ["OffPathReports", "logger"]

logger = logging.getLogger("crawlq.contrib.scrapy")


class OffPathReports:
    """Off-path reports of `Scheduler` (a mixin: its ``__init__`` sets the state)."""

    if TYPE_CHECKING:
        crawler: Crawler | None
        df: Any
        spider: scrapy.Spider | None
        _failed: StoreError | None
        _frontiers: Frontiers | None
        _log_lost: bool
        _log_unserializable: bool
        _recent: RecentlySeen
        _count: Callable[[str], None]
        _counts: Counts
        _in_engine: bool

    def _duplicate(self, request: scrapy.Request) -> None:
        # Logged (DUPEFILTER_DEBUG) and counted by the dupefilter, as in Scrapy.
        self.df.log(request, self.spider)

    def _late_duplicate(self, request: scrapy.Request, stored: bool) -> None:
        """Count a request found a duplicate only when its batch was written (a shared store).

        `enqueue_request` accepted it (the engine sent ``request_scheduled``):
        its enqueued stats are taken back, it is counted and logged as a
        filtered duplicate, and ``request_dropped`` is sent, as the engine
        does for a request the scheduler refuses.
        """
        counts = self._counts
        counts.subtract("scheduler/enqueued")
        counts.subtract("scheduler/enqueued/disk" if stored else "scheduler/enqueued/memory")
        self._duplicate(request)
        crawler = self.crawler
        if crawler is not None and self._in_engine:
            from scrapy import signals

            crawler.signals.send_catch_log(
                signals.request_dropped, request=request, spider=self.spider
            )

    def _seen(self, fingerprint: bytes) -> bool:
        """Whether the frontier has seen ``fingerprint`` (for `DupeFilter.request_seen`)."""
        frontiers = self._frontiers
        if fingerprint in self._recent or frontiers is None:
            return fingerprint in self._recent
        try:
            return frontiers.seen(fingerprint)
        except StoreError as exc:
            self._store_failed(exc)
            return False

    def _unserializable(self, request: scrapy.Request, exc: Unserializable) -> None:
        self._count("scheduler/unserializable")
        if self._log_unserializable:
            # Once, as Scrapy's scheduler does with SCHEDULER_DEBUG (crawlq
            # logs it without it too: such a request is not durable).
            logger.warning(
                "Unable to serialize request: %(request)s - reason: %(reason)s - it is "
                "kept in memory, in its place, and is lost if the crawl stops; no more "
                "unserializable requests will be logged (stats being collected)",
                {"request": request, "reason": exc},
                extra={"spider": self.spider},
            )
            self._log_unserializable = False

    def _dropped(self, url: str, kind: str, reason: Exception | None) -> None:
        """Log a stored request not handed out (see `Frontiers.pop`), or not refetched.

        ``kind`` "invalid": a finished request whose refetch value is bad
        (see `Frontiers.finished`); it was acked for good.
        """
        if kind == "invalid":
            self._count("crawlq/invalid")
            logger.error(
                "crawlq: %(reason)s; %(url)s is done and not fetched again",
                {"url": url, "reason": reason},
                extra={"spider": self.spider},
            )
            return
        if kind == "declined":
            self._count("crawlq/declined")
            logger.debug(
                "crawlq: the spider's make_request_from_crawlq declined %(url)s (acked)",
                {"url": url},
                extra={"spider": self.spider},
            )
            return
        if kind == "lost":
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
        self._count("crawlq/unrebuildable")
        logger.error(
            "crawlq cannot rebuild stored request %(url)s (%(reason)s): it is not fetched "
            "and stays in the store, leased by this worker (crawlq inspect counts it), until "
            "this worker closes or CRAWLQ_LEASE_TIMEOUT passes; fix the spider (the method "
            "it names, make_request_from_crawlq) to fetch it",
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

        engine = running_engine(self.crawler) if self.crawler is not None else None
        if engine is None:
            return
        if hasattr(engine, "close_spider_async"):
            deferred_from_coro(engine.close_spider_async(reason="crawlq_store_error"))
        elif self.spider is not None:  # Scrapy 2.13
            engine.close_spider(self.spider, reason="crawlq_store_error")
