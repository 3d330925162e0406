"""The spider the Scrapy tests run with ``scrapy runspider``.

Arguments (``-a``): ``bases`` (comma-separated root URLs of the site's
hosts), ``out`` (a JSON file written at close with the stats, the close
reason and the number of ``request_dropped`` signals), and ``mode``:

- ``plain``: follow every link;
- ``unserializable``: also give some requests a lambda callback, or an object
  in ``meta``, which crawlq cannot store;
- ``priorities``: give requests a priority from their path, and record the
  order in which pages are parsed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import scrapy
from scrapy import signals


class Opaque:
    """Something msgpack cannot store."""


class SiteSpider(scrapy.Spider):
    name = "site"

    def __init__(self, bases: str = "", out: str = "", mode: str = "plain", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bases = [base for base in bases.split(",") if base]
        self.out = out
        self.mode = mode
        self.dropped = 0
        self.parsed: list[str] = []

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> SiteSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.on_dropped, signal=signals.request_dropped)
        return spider

    def on_dropped(self, request: scrapy.Request, spider: scrapy.Spider) -> None:
        self.dropped += 1

    async def start(self) -> Any:
        for base in self.bases:
            yield scrapy.Request(base + "/", callback=self.parse)

    def parse(self, response: Any, **kwargs: Any) -> Any:
        self.parsed.append(response.url)
        for n, href in enumerate(response.css("a::attr(href)").getall()):
            if href.startswith("mailto:"):
                continue
            if self.mode == "unserializable" and n % 7 == 3:
                yield response.follow(href, callback=lambda r: self.parse(r))
            elif self.mode == "unserializable" and n % 7 == 5:
                yield response.follow(href, meta={"thing": Opaque()})
            else:
                yield response.follow(href, callback=self.parse, cb_kwargs={"n": n})

    def closed(self, reason: str) -> None:
        if not self.out:
            return
        stats = {k: v for k, v in self.crawler.stats.get_stats().items() if not k.endswith("time")}
        data = {"reason": reason, "dropped": self.dropped, "stats": stats, "parsed": self.parsed}
        Path(self.out).write_text(json.dumps(data, default=str))
