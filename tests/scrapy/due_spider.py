"""The spider of ``test_due.py``: the requests of a plan, with their due-time meta.

Arguments (``-a``): ``plan`` (a JSON file), ``out`` (a JSON file written at
close: the close reason, the stats, every response with the time it was
parsed and its ``crawlq_not_before`` and ``crawlq_delay`` meta, how often
the engine found the scheduler empty, and the seconds from the spider's
start to its close).

The plan holds ``requests`` (each ``{"url": ..., "meta": {...}}``, yielded by
``start``), optionally ``children`` (requests of the same shape yielded by the
callback of the first response, so that a bad one is refused by
``enqueue_request`` there, not in ``start``) and ``fetches`` (a page fetched
that many times stops being refetched: its callback sets
``meta["crawlq_refetch_after"] = None``). In meta, ``{"aware": ISO}`` becomes
an aware datetime and ``{"naive": ISO}`` a naive one.
"""

from __future__ import annotations

import datetime
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import scrapy
from scrapy import signals


def _value(value: Any) -> Any:
    if isinstance(value, dict) and "aware" in value:
        return datetime.datetime.fromisoformat(value["aware"])
    if isinstance(value, dict) and "naive" in value:
        return datetime.datetime.fromisoformat(value["naive"]).replace(tzinfo=None)
    return value


class DueSpider(scrapy.Spider):
    name = "due"

    def __init__(self, plan: str = "", out: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan = json.loads(Path(plan).read_text())
        self.out = out
        self.parsed: list[dict[str, Any]] = []
        self.empty = 0
        self.fetches: Counter[str] = Counter()
        self.children_sent = False
        self.opened = time.time()

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> DueSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.on_empty, signal=signals.scheduler_empty)
        return spider

    def on_empty(self) -> None:
        self.empty += 1

    def request(self, spec: dict[str, Any]) -> scrapy.Request:
        meta = {key: _value(value) for key, value in spec.get("meta", {}).items()}
        return scrapy.Request(spec["url"], callback=self.parse, meta=meta, dont_filter=False)

    async def start(self) -> Any:
        for spec in self.plan["requests"]:
            yield self.request(spec)

    def parse(self, response: Any, **kwargs: Any) -> Any:
        url = response.url
        self.fetches[url] += 1
        meta = response.meta
        self.parsed.append(
            {
                "url": url,
                "at": time.time(),
                "status": response.status,
                "not_before": meta.get("crawlq_not_before"),
                "delay": meta.get("crawlq_delay"),
            }
        )
        limit = self.plan.get("fetches")
        if limit is not None and self.fetches[url] >= limit:
            response.meta["crawlq_refetch_after"] = None
        if self.plan.get("children") and not self.children_sent:
            self.children_sent = True
            for spec in self.plan["children"]:
                yield self.request(spec)

    def closed(self, reason: str) -> None:
        stats = {k: v for k, v in self.crawler.stats.get_stats().items() if not k.endswith("time")}
        data = {
            "reason": reason,
            "stats": stats,
            "parsed": self.parsed,
            "empty": self.empty,
            "duration": time.time() - self.opened,
        }
        Path(self.out).write_text(json.dumps(data, default=str))
