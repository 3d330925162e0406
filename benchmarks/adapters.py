"""The adapter protocol, crawlq's adapters, and ``make`` to build any adapter.

An adapter builds its implementation's own request objects and exposes bound
methods the timed loops of ``measure.py`` call: ``add``, ``add_many`` (None
where there is no batch API), ``pop``, ``ack`` (None where a dequeue needs no
completion), ``after_pop`` (untimed work after a pop, None almost everywhere),
``size``, ``seen`` and ``close``. ``run(fn)`` runs a measurement in whatever
context the implementation needs (qcrawl: inside its event loop).

crawlq runs on every store through ``crawlq.open_frontier`` with
``host_delay=0.0, host_concurrency=None`` (the defaults): ``memory://``, a
SQLite job directory, or ``redis://...?crawl=bench`` on the benchmark's
server. Its pacing machinery is active all the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

Items = Iterable[tuple[str, int]]


class Adapter:
    """Base: what every adapter has; subclasses set the methods in ``open``."""

    add: Callable[[Any], Any]
    add_many: Callable[..., Any] | None = None
    pop: Callable[[], Any]
    ack: Callable[[Any], Any] | None = None
    after_pop: Callable[[Any], None] | None = None

    def __init__(self, backend: str, where: str) -> None:
        self.backend, self.where = backend, where

    def requests(self, items: Items) -> list[Any]:
        raise NotImplementedError

    def prepare(self) -> None:
        """Untimed set-up before a timed ``open`` (W4): Scrapy builds its Crawler."""

    def open(self) -> None:
        raise NotImplementedError

    def size(self) -> int:
        raise NotImplementedError

    def seen(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        """Close cleanly (most adapters have nothing to do)."""

    def url(self, request: Any) -> str:
        return str(request.url)

    def priority(self, request: Any) -> int:
        return int(request.priority)

    def run(self, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        return fn()

    def async_scheduler(self) -> Any:
        """A1: the implementation's asyncio scheduler (``get``, ``add_many``, ``task_done``...)."""
        raise NotImplementedError

    def run_coroutine(self, coroutine: Any) -> Any:
        """A1: run ``coroutine`` to its end in the implementation's event loop."""
        return asyncio.run(coroutine)


class Crawlq(Adapter):
    """crawlq's Frontier on memory, a SQLite job, or Redis."""

    def __init__(self, backend: str, where: str) -> None:
        super().__init__(backend, where)
        import crawlq

        self.crawlq = crawlq
        self.target = {"memory": "memory://", "sqlite": where, "redis": f"{where}?crawl=bench"}[
            backend
        ]

    def requests(self, items: Items) -> list[Any]:
        make = self.crawlq.Request
        return [make(url, priority=priority) for url, priority in items]

    def open(self) -> None:
        f = self.frontier = self.crawlq.open_frontier(
            self.target, host_delay=0.0, host_concurrency=None
        )
        self.add, self.add_many, self.pop, self.ack = f.add, f.add_many, f.pop, f.ack

    def size(self) -> int:
        return len(self.frontier)

    def seen(self) -> int:
        return int(self.frontier.stats().seen)

    def close(self) -> None:
        self.frontier.close()

    def async_scheduler(self) -> Any:
        return self.crawlq.Scheduler(self.frontier)


def make(spec: dict[str, Any]) -> Adapter:
    """The adapter for ``spec`` (impl, backend and ``where``: a directory or Redis URL)."""
    from benchmarks import peers

    impl, backend, where = spec["impl"], spec["backend"], spec.get("where", "")
    if impl == "crawlq":
        return Crawlq(backend, where)
    if impl.startswith("scrapy-redis"):
        return peers.ScrapyRedis(backend, where)
    if impl.startswith("scrapy"):
        return peers.Scrapy(backend, where, dapq=impl == "scrapy-dapq")
    if impl == "qcrawl":
        return peers.Qcrawl(backend, where)
    raise ValueError(f"unknown implementation {impl!r}")


def canonicalizer(name: str) -> Callable[[str], str]:
    """C1: the URL canonicaliser of ``name`` (crawlq, w3lib or qcrawl)."""
    if name == "crawlq":
        from crawlq import Fingerprinter

        return Fingerprinter().canonical_url
    if name == "w3lib":
        from w3lib.url import canonicalize_url

        return canonicalize_url  # type: ignore[no-any-return]
    from qcrawl.utils.url import normalize_url

    return normalize_url  # type: ignore[no-any-return]
