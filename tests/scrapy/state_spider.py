"""A spider that counts its runs in ``spider.state`` (for crawlq's SpiderState).

Arguments (``-a``): ``bases`` (root URLs), ``out`` (a JSON file written at
close with the state as loaded at open and as saved), ``bad`` ("1": put a
value msgpack cannot store into the state).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import scrapy


class StateSpider(scrapy.Spider):
    name = "state"

    def __init__(self, bases: str = "", out: str = "", bad: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bases = [base for base in bases.split(",") if base]
        self.out = out
        self.bad = bad == "1"
        self.loaded: Any = None

    def opened(self) -> None:
        self.loaded = json.loads(json.dumps(self.state, default=repr))
        self.state["runs"] = self.state.get("runs", 0) + 1
        self.state.setdefault("pages", [])
        self.state["blob"] = b"\x00\x80pickle-free"
        if self.bad:
            self.state["opaque"] = object()

    async def start(self) -> Any:
        self.opened()  # after spider_opened: the state is loaded by now
        for base in self.bases:
            yield scrapy.Request(base + "/", callback=self.parse)

    def parse(self, response: Any) -> Any:
        self.state["pages"].append(response.url)
        return None

    def closed(self, reason: str) -> None:
        if self.out:
            data = {"reason": reason, "loaded": self.loaded}
            Path(self.out).write_text(json.dumps(data))
