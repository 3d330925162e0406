"""A downloader middleware that turns a server's "slow down" into a block every worker obeys.

A 429 or 503 response blocks its download slot in the crawl's frontier for
the ``Retry-After`` it carries (seconds or an HTTP date), for
``CRAWLQ_RETRY_AFTER_DEFAULT`` seconds without one, at most
``CRAWLQ_RETRY_AFTER_MAX``. A robots.txt ``Crawl-delay`` (with
``ROBOTSTXT_OBEY``) becomes the host's own delay (`Frontier.set_host_policy`).
Both live in the frontier, so every process sharing a Redis crawl obeys
them, and a SQLite job keeps them across restarts.
"""

from __future__ import annotations

import email.utils
import logging
import math
import time
from typing import TYPE_CHECKING, Any, Final, cast

from ..._errors import CrawlqError
from .engine import slot_key
from .settings import seconds_setting

if TYPE_CHECKING:
    import scrapy
    from scrapy.crawler import Crawler
    from scrapy.http import Response

    from ..._frontier import Frontier

__all__ = ["RetryAfterMiddleware", "crawler_frontier", "retry_after_seconds", "scheduler_name"]

log = logging.getLogger("crawlq.scrapy")

_STATUSES: Final = frozenset({429, 503})
_ROBOTS_PATH: Final = "/robots.txt"


def retry_after_seconds(value: bytes | str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header value asks to wait; None if it says nothing usable.

    Takes delta-seconds (``"120"``) or an HTTP date (``"Wed, 21 Oct 2026
    07:28:00 GMT"``, counted from ``now``, default the wall clock).
    """
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None  # an HTTP date is always GMT; one without a zone is not one
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _scheduler(crawler: Crawler) -> object:
    engine = getattr(crawler, "engine", None)
    slot = getattr(engine, "_slot", None)  # Scrapy's engine keeps its scheduler there
    return getattr(slot, "scheduler", None)


def crawler_frontier(crawler: Crawler) -> Frontier | None:
    """The frontier of the crawler's running crawlq ``Scheduler``, None with another."""
    scheduler = _scheduler(crawler)
    from .scheduler import Scheduler

    # Not isinstance: Scrapy's BaseScheduler answers it for any scheduler.
    if scheduler is not None and Scheduler in type(scheduler).__mro__:
        return cast(Scheduler, scheduler).frontier
    return None


def scheduler_name(crawler: Crawler) -> str:
    """The class name of the crawler's scheduler, for a warning."""
    return type(_scheduler(crawler)).__name__


class RetryAfterMiddleware:
    """Block a download slot in the frontier on 429 / 503; apply robots.txt ``Crawl-delay``.

    Enable it in ``DOWNLOADER_MIDDLEWARES`` (any order) with crawlq's
    ``Scheduler``; with another scheduler it logs a warning once and does
    nothing. It never changes the response: Scrapy's ``RetryMiddleware``
    still retries the request, which then waits in the frontier for the
    block to end. Stats: ``crawlq/retry_after/blocked`` (blocks set) and
    ``crawlq/robots/crawl_delay`` (hosts given a delay).
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.default = seconds_setting(crawler.settings, "CRAWLQ_RETRY_AFTER_DEFAULT", 60.0)
        self.maximum = seconds_setting(crawler.settings, "CRAWLQ_RETRY_AFTER_MAX", 3600.0)
        self.robots = crawler.settings.getbool("ROBOTSTXT_OBEY")
        user_agent = crawler.settings.get("ROBOTSTXT_USER_AGENT") or crawler.settings.get(
            "USER_AGENT"
        )
        self.user_agent = str(user_agent or "*")
        self._warned = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RetryAfterMiddleware:
        """Read the settings; raise `ConfigError` naming a bad one."""
        return cls(crawler)

    def _frontier(self) -> Frontier | None:
        frontier = crawler_frontier(self.crawler)
        if frontier is not None:
            return frontier
        if not self._warned:
            self._warned = True
            log.warning(
                "RetryAfterMiddleware needs SCHEDULER = 'crawlq.contrib.scrapy.Scheduler' "
                "(the scheduler is %s): 429/503 responses block nothing",
                scheduler_name(self.crawler),
            )
        return None

    def _slot(self, request: scrapy.Request) -> str:
        engine = getattr(self.crawler, "engine", None)
        downloader = getattr(engine, "downloader", None)
        if downloader is not None:
            return str(downloader.get_slot_key(request))
        return slot_key(request)

    def process_response(
        self, request: scrapy.Request, response: Response, spider: Any = None
    ) -> Response:
        """Block the slot of a 429/503 response; read a robots.txt ``Crawl-delay``."""
        if response.status in _STATUSES:
            seconds = retry_after_seconds(response.headers.get(b"Retry-After"))
            if seconds is None:
                seconds = self.default
            seconds = min(seconds, self.maximum)
            if seconds > 0:
                self._block(request, response, seconds)
        elif self.robots and response.status == 200 and request.url.endswith(_ROBOTS_PATH):
            self._crawl_delay(request, response)
        return response

    def _block(self, request: scrapy.Request, response: Response, seconds: float) -> None:
        frontier = self._frontier()
        if frontier is None:
            return
        slot = self._slot(request)
        try:
            frontier.block_host(slot, seconds)
        except CrawlqError as exc:  # a store that failed: the crawl goes on unblocked
            log.warning("could not block %s for %.0f s: %s", slot, seconds, exc)
            return
        log.info("%s answered %d: blocked for %.1f s", slot, response.status, seconds)
        stats = self.crawler.stats
        if stats is not None:
            stats.inc_value("crawlq/retry_after/blocked")

    def _crawl_delay(self, request: scrapy.Request, response: Response) -> None:
        try:
            from protego import Protego
        except ImportError:  # pragma: no cover - Scrapy depends on Protego
            return
        try:
            body = response.body.decode("utf-8", "replace")
            delay = Protego.parse(body).crawl_delay(self.user_agent)
        except Exception:  # a robots.txt Protego cannot read sets nothing
            return
        if delay is None or not math.isfinite(delay) or delay <= 0:
            return
        frontier = self._frontier()
        if frontier is None:
            return
        slot = self._slot(request)
        delay = min(float(delay), self.maximum)
        try:
            frontier.set_host_policy(slot, delay=delay)
        except CrawlqError as exc:
            log.warning("could not apply Crawl-delay %s to %s: %s", delay, slot, exc)
            return
        log.info("%s: robots.txt Crawl-delay %.1f s", slot, delay)
        stats = self.crawler.stats
        if stats is not None:
            stats.inc_value("crawlq/robots/crawl_delay")
