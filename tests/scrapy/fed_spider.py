"""A worker spider fed from outside, as scrapy-redis's ``RedisSpider`` workers are.

It has no start requests: every URL it fetches was fed to its crawl (``crawlq
add``, ``crawlq import``, ``Frontier.add_many``). Arguments (``-a``): ``out``
(a JSON file written at close with the stats, the close reason and the URLs
parsed; ``OUT.ready`` is written once the spider is open) and ``mode``:

- ``plain``: parse each fed page with ``parse`` and follow nothing;
- ``hook``: the spider defines ``make_request_from_crawlq``, which sends
  every fed URL to ``parse_fed`` with ``meta["fed"]``, and declines URLs
  whose path ends in ``/skip``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import scrapy
from scrapy import signals

import crawlq


class FedSpider(scrapy.Spider):
    name = "fed"

    def __init__(self, out: str = "", mode: str = "plain", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.out = out
        self.mode = mode
        self.parsed: list[str] = []
        self.parsed_fed: list[str] = []
        if mode == "hook":
            self.make_request_from_crawlq = self._make_request

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> FedSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.on_opened, signal=signals.spider_opened)
        return spider

    def on_opened(self, spider: scrapy.Spider) -> None:
        if self.out:
            Path(self.out + ".ready").write_text("open")

    async def start(self) -> Any:
        return
        yield  # an async generator that yields nothing

    def _make_request(self, request: crawlq.Request) -> scrapy.Request | None:
        if request.url.endswith("/skip"):
            return None
        return scrapy.Request(request.url, callback=self.parse_fed, meta={"fed": True})

    def parse(self, response: Any, **kwargs: Any) -> Any:
        self.parsed.append(response.url)
        return []

    def parse_fed(self, response: Any) -> Any:
        assert response.meta["fed"] is True
        self.parsed_fed.append(response.url)
        return []

    def closed(self, reason: str) -> None:
        if not self.out:
            return
        stats = {k: v for k, v in self.crawler.stats.get_stats().items() if not k.endswith("time")}
        data = {
            "reason": reason,
            "stats": stats,
            "parsed": self.parsed,
            "parsed_fed": self.parsed_fed,
        }
        Path(self.out).write_text(json.dumps(data, default=str))
