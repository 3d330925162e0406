"""A Scrapy extension serving the crawl's Prometheus metrics while the spider runs.

Enable it in ``EXTENSIONS`` and set ``CRAWLQ_METRICS_PORT``; it serves
`crawlq.metrics` for the frontier of crawlq's ``Scheduler`` at
``http://CRAWLQ_METRICS_ADDR:CRAWLQ_METRICS_PORT/metrics`` from the spider's
open to its close, store call latencies included.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from scrapy import signals
from scrapy.exceptions import NotConfigured

from .retry_after import crawler_frontier, scheduler_name

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["MetricsExtension"]

log = logging.getLogger(__name__)


class MetricsExtension:
    """Serve the frontier's Prometheus metrics while the spider runs.

    Settings: ``CRAWLQ_METRICS_PORT`` (unset or 0: the extension is off),
    ``CRAWLQ_METRICS_ADDR`` (``127.0.0.1``), ``CRAWLQ_METRICS_HOSTS`` (10:
    busiest hosts with series of their own). Needs ``crawlq[metrics]`` and
    crawlq's ``Scheduler``; with another scheduler it logs a warning and
    serves nothing. Raises `crawlq.ConfigError` without the extra.
    """

    def __init__(self, crawler: Crawler, port: int, addr: str, hosts: int) -> None:
        from ...metrics import _prometheus

        _prometheus()  # the extra is missing: say so at start, not at the spider's open
        self.crawler = crawler
        self.port, self.addr, self.hosts = port, addr, hosts
        self.server: Any = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> MetricsExtension:
        """Read the settings; raise ``NotConfigured`` without ``CRAWLQ_METRICS_PORT``."""
        settings = crawler.settings
        port = settings.getint("CRAWLQ_METRICS_PORT", 0)
        if not port:
            raise NotConfigured("CRAWLQ_METRICS_PORT is not set")
        extension = cls(
            crawler,
            port,
            settings.get("CRAWLQ_METRICS_ADDR") or "127.0.0.1",
            settings.getint("CRAWLQ_METRICS_HOSTS", 10),
        )
        crawler.signals.connect(extension.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    def spider_opened(self, spider: object) -> None:
        """Start serving the metrics of the scheduler's frontier (a warning without one)."""
        frontier = crawler_frontier(self.crawler)
        if frontier is None:
            log.warning(
                "MetricsExtension needs SCHEDULER = 'crawlq.contrib.scrapy.Scheduler' "
                "(the scheduler is %s): no metrics are served",
                scheduler_name(self.crawler),
            )
            return
        from ...metrics import serve

        self.server = serve(frontier, self.port, addr=self.addr, host_series=self.hosts)
        log.info("crawlq metrics at http://%s:%d/metrics", self.addr, self.port)

    def spider_closed(self, spider: object) -> None:
        """Stop serving."""
        if self.server is not None:
            self.server.shutdown()
            self.server = None
