"""A retry middleware whose retries wait in the frontier, with exponential backoff.

Scrapy's ``RetryMiddleware`` schedules a retry at once: a server that failed
is asked again as soon as its slot allows. `BackoffRetryMiddleware` retries
the same requests (``RETRY_TIMES``, ``RETRY_HTTP_CODES``,
``RETRY_EXCEPTIONS``, meta ``dont_retry`` and ``max_retry_times``, the same
stats) but gives each retry ``meta["crawlq_delay"]``: crawlq's scheduler
stores it at once and hands it out only when that delay has passed. While it
waits it holds no downloader slot and no place in ``CONCURRENT_REQUESTS``,
the rest of the crawl goes on, and the crawl stays open for it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy.downloadermiddlewares.retry import RetryMiddleware

from .due import DELAY
from .retry_after import crawler_frontier, retry_after_seconds, scheduler_name
from .settings import seconds_setting

if TYPE_CHECKING:
    import scrapy
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

__all__ = ["BackoffRetryMiddleware", "backoff_delay"]

log = logging.getLogger("crawlq.scrapy")


def backoff_delay(retry_times: int, base: float, maximum: float) -> float:
    """Seconds the ``retry_times``-th retry waits: ``min(maximum, base * 2 ** (retry_times - 1))``.

    The first retry waits ``base`` seconds, each later one twice as long as
    the one before, none longer than ``maximum``. ``retry_times`` below 1
    counts as 1.
    """
    exponent = max(0, retry_times - 1)
    if exponent >= 1024:  # 2.0 ** 1024 overflows; the cap applies long before
        return maximum
    return min(maximum, base * 2.0**exponent)


class BackoffRetryMiddleware(RetryMiddleware):
    """Scrapy's ``RetryMiddleware``, its retries delayed in the frontier with exponential backoff.

    Enable it in place of Scrapy's::

        DOWNLOADER_MIDDLEWARES = {
            "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
            "crawlq.contrib.scrapy.BackoffRetryMiddleware": 550,
        }

    The ``n``-th retry of a request waits
    ``min(CRAWLQ_RETRY_BACKOFF_MAX, CRAWLQ_RETRY_BACKOFF_BASE * 2 ** (n - 1))``
    seconds (defaults 1 and 300), or longer if the response's
    ``Retry-After`` asks for it (at most ``CRAWLQ_RETRY_AFTER_MAX``, as
    `RetryAfterMiddleware` reads it). The retry is a new request, as with
    Scrapy's middleware, carrying that delay in ``meta["crawlq_delay"]``.
    Needs crawlq's ``Scheduler``: with another one it logs a warning once
    and the retries go out at once. Stats: Scrapy's ``retry/*``, and
    ``crawlq/retry/delayed`` (retries given a delay).

    Raises ``NotConfigured`` when ``RETRY_ENABLED`` is off, and `ConfigError`
    for a bad ``CRAWLQ_RETRY_BACKOFF_BASE`` or ``CRAWLQ_RETRY_BACKOFF_MAX``.
    """

    crawler: Crawler

    def __init__(self, settings: BaseSettings) -> None:
        super().__init__(settings)
        self.base = seconds_setting(settings, "CRAWLQ_RETRY_BACKOFF_BASE", 1.0, positive=True)
        self.maximum = seconds_setting(settings, "CRAWLQ_RETRY_BACKOFF_MAX", 300.0)
        self.retry_after_max = seconds_setting(settings, "CRAWLQ_RETRY_AFTER_MAX", 3600.0)
        self._checked = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BackoffRetryMiddleware:
        """Read the settings; raise as the class says."""
        middleware = cls(crawler.settings)
        middleware.crawler = crawler
        return middleware

    def process_response(
        self, request: scrapy.Request, response: Response, spider: Any = None
    ) -> scrapy.Request | Response:
        """A delayed retry of ``request`` for a status in ``RETRY_HTTP_CODES``, or ``response``."""
        args = () if spider is None else (spider,)  # Scrapy 2.13 passes the spider
        result = super().process_response(request, response, *args)
        if result is not response and result is not None:
            wait = retry_after_seconds(response.headers.get(b"Retry-After"))
            self._delay(result, None if wait is None else min(wait, self.retry_after_max))
        return result

    def process_exception(
        self, request: scrapy.Request, exception: Exception, spider: Any = None
    ) -> scrapy.Request | Response | None:
        """A delayed retry of ``request`` for an exception in ``RETRY_EXCEPTIONS``, else None."""
        args = () if spider is None else (spider,)
        result = super().process_exception(request, exception, *args)
        if result is not None and result is not request:
            self._delay(result, None)
        return result

    def _delay(self, retry: Any, retry_after: float | None) -> None:
        """Give a retry request its backoff (or the server's ``Retry-After``, if longer)."""
        meta = getattr(retry, "meta", None)
        if meta is None:
            return  # a Response: not a retry
        delay = backoff_delay(int(meta.get("retry_times", 1)), self.base, self.maximum)
        if retry_after is not None:
            delay = max(delay, retry_after)
        meta[DELAY] = delay
        self._check_scheduler()
        stats = self.crawler.stats
        if stats is not None:
            stats.inc_value("crawlq/retry/delayed")
        log.debug("retry of %s waits %.1f s in the frontier", retry, delay)

    def _check_scheduler(self) -> None:
        if self._checked:
            return
        self._checked = True
        if crawler_frontier(self.crawler) is None:
            log.warning(
                "BackoffRetryMiddleware needs SCHEDULER = 'crawlq.contrib.scrapy.Scheduler' "
                "(this crawl uses %s): its retries go out at once, without backoff",
                scheduler_name(self.crawler),
            )
