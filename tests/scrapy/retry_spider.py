"""The spider of ``test_retry_after.py``: fetch ``/0`` .. ``/N-1`` of each base URL.

Arguments (``-a``): ``bases`` (comma-separated), ``pages`` (per base), ``out``
(a JSON file written at close with the stats).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import scrapy


class RetrySpider(scrapy.Spider):
    name = "retry"

    def __init__(self, bases: str = "", pages: str = "5", out: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bases = [base for base in bases.split(",") if base]
        self.pages = int(pages)
        self.out = out

    async def start(self) -> Any:
        for base in self.bases:
            for n in range(self.pages):
                yield scrapy.Request(f"{base}/{n}", callback=self.parse)

    def parse(self, response: Any, **kwargs: Any) -> Any:
        return None

    def closed(self, reason: str) -> None:
        stats = self.crawler.stats.get_stats()
        data = {"reason": reason, "stats": {k: str(v) for k, v in stats.items()}}
        Path(self.out).write_text(json.dumps(data))
