"""The spider of ``test_metrics.py``: fetch ``/0`` .. ``/N-1``, scraping metrics in each parse.

Arguments (``-a``): ``base``, ``pages``, ``metrics`` (the metrics URL), ``out``
(the last scrape is written there).
"""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import scrapy


class MetricsSpider(scrapy.Spider):
    name = "metrics"

    def __init__(
        self, base: str = "", pages: str = "5", metrics: str = "", out: str = "", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.base, self.pages, self.metrics, self.out = base, int(pages), metrics, out

    async def start(self) -> Any:
        for n in range(self.pages):
            yield scrapy.Request(f"{self.base}/{n}", callback=self.parse)

    def parse(self, response: Any, **kwargs: Any) -> Any:
        # The exporter runs on its own thread: a blocking read is fine here.
        with urllib.request.urlopen(self.metrics, timeout=10) as scraped:
            Path(self.out).write_bytes(scraped.read())
        return None
