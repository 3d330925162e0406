"""The peers' adapters: Scrapy's scheduler (SPQ, DAPQ, JOBDIR), scrapy-redis, qcrawl.

Benchmark-only: none of these is a runtime dependency of crawlq.

- ``Scrapy``: Scrapy's stock ``scrapy.core.scheduler.Scheduler`` built with
  ``Scheduler.from_crawler`` from a real ``Crawler`` set up as
  ``Crawler.crawl()`` leaves it before the engine opens the scheduler
  (asyncio reactor, spider, settings, ``ExecutionEngine`` with its real
  ``Downloader``), then ``open(spider)``; default ``RFPDupeFilter``. Memory:
  ``ScrapyPriorityQueue`` (SPQ) or ``DownloaderAwarePriorityQueue`` (DAPQ,
  the default). SQLite's counterpart: ``JOBDIR`` with ``ScrapyPriorityQueue``
  over the default ``PickleLifoDiskQueue`` (DAPQ with JOBDIR opens one file
  per (host, priority) and runs out of file descriptors at 1,000 hosts).
  DAPQ picks the slot with the fewest active downloads, so its adapter models
  ``CONCURRENT_REQUESTS`` (16) downloads in flight, untimed (``after_pop``):
  each dequeued request enters its real downloader slot, and once 16 are in
  flight the oldest leaves its slot.
- ``ScrapyRedis``: scrapy-redis's Scheduler with its PriorityQueue,
  RFPDupeFilter and default (pickle) serializer.
- ``Qcrawl``: ``qcrawl.core.scheduler.Scheduler`` over ``MemoryPriorityQueue``
  or ``DiskQueue`` (lower numbers first, so priorities are negated), with
  ``RequestFingerprinter``: ``await add``, ``await get``, ``task_done``; on
  Redis its ``RedisQueue(dedupe=True)`` (its default keeps every duplicate),
  which serves the highest number first. In memory its coroutines never
  suspend, so each call is stepped once inside the running event loop (the
  cost of ``await`` without a task switch); on disk and Redis each call is
  ``loop.run_until_complete`` (about 20 us more than an ``await``, a few per
  cent of those calls).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from benchmarks.adapters import Adapter, Items


class Scrapy(Adapter):
    """Scrapy's scheduler: memory SPQ or DAPQ, or JOBDIR on the sqlite backend."""

    def __init__(self, backend: str, where: str, dapq: bool = False) -> None:
        super().__init__(backend, where)
        from scrapy import Request

        self.make, self.dapq = Request, dapq

    def requests(self, items: Items) -> list[Any]:
        make = self.make
        return [make(url, priority=priority) for url, priority in items]

    def prepare(self) -> None:
        from scrapy import Spider
        from scrapy.crawler import Crawler

        class BenchSpider(Spider):
            name = "bench"

        settings: dict[str, Any] = {"LOG_ENABLED": False, "TELNETCONSOLE_ENABLED": False}
        if not self.dapq:
            settings["SCHEDULER_PRIORITY_QUEUE"] = "scrapy.pqueues.ScrapyPriorityQueue"
        if self.backend == "sqlite":
            settings["JOBDIR"] = self.where
        crawler = Crawler(BenchSpider, settings, init_reactor=True)
        crawler.spider = crawler._create_spider()
        crawler._apply_settings()
        crawler.engine = crawler._create_engine()
        self.crawler = crawler

    def open(self) -> None:
        from scrapy.core.scheduler import Scheduler

        if not hasattr(self, "crawler"):
            self.prepare()
        crawler = self.crawler
        self.scheduler = s = Scheduler.from_crawler(crawler)
        s.open(crawler.spider)
        self.add, self.pop = s.enqueue_request, s.next_request
        if self.dapq:
            downloader, inflight = crawler.engine.downloader, deque[tuple[Any, Any]]()
            concurrency = crawler.settings.getint("CONCURRENT_REQUESTS")

            def fetch(request: Any) -> None:
                _, slot = downloader._get_slot(request)
                slot.active.add(request)
                inflight.append((request, slot))
                if len(inflight) >= concurrency:
                    done, done_slot = inflight.popleft()
                    done_slot.active.discard(done)

            self.after_pop = fetch

    def size(self) -> int:
        return len(self.scheduler)

    def seen(self) -> int:
        return len(self.scheduler.df._fingerprints)

    def close(self) -> None:
        self.scheduler.close("finished")


class ScrapyRedis(Adapter):
    """scrapy-redis's Scheduler on the benchmark's Redis server."""

    def requests(self, items: Items) -> list[Any]:
        from scrapy import Request

        return [Request(url, priority=priority) for url, priority in items]

    def open(self) -> None:
        import redis
        from scrapy import Spider
        from scrapy_redis.dupefilter import RFPDupeFilter
        from scrapy_redis.scheduler import Scheduler

        self.server = redis.Redis.from_url(self.where)
        self.scheduler = s = Scheduler(
            self.server,
            persist=True,
            queue_key="%(spider)s:requests",
            queue_cls="scrapy_redis.queue.PriorityQueue",
            dupefilter=RFPDupeFilter(self.server, "bench:dupefilter"),
        )
        s.open(Spider(name="bench"))
        self.add, self.pop = s.enqueue_request, s.next_request

    def size(self) -> int:
        return len(self.scheduler)

    def seen(self) -> int:
        return int(self.server.scard("bench:dupefilter"))


def _step(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never suspends to its end, in one step."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    coroutine.close()
    raise RuntimeError("a qcrawl memory call suspended: it cannot be stepped")


class _QcrawlAsync:
    """qcrawl's Scheduler with the A1 loop's calls: it has no batch add, so one add each."""

    def __init__(self, scheduler: Any) -> None:
        self._scheduler = scheduler
        self.get = scheduler.get

    async def add_many(self, requests: list[Any]) -> None:
        for request in requests:
            await self._scheduler.add(request)

    def task_done(self, request: Any) -> None:
        self._scheduler.task_done()

    async def close(self) -> None:
        """Left open: the adapter reads its size, then closes it."""


class Qcrawl(Adapter):
    """qcrawl's Scheduler over its memory or disk queue, or its RedisQueue."""

    def __init__(self, backend: str, where: str) -> None:
        super().__init__(backend, where)
        from qcrawl.core.queues.disk import DiskQueue
        from qcrawl.core.queues.memory import MemoryPriorityQueue
        from qcrawl.core.queues.redis import RedisQueue
        from qcrawl.core.request import Request
        from qcrawl.core.scheduler import Scheduler
        from qcrawl.utils.fingerprint import RequestFingerprinter

        self.make, self.redis_queue, self.scheduler_cls = Request, RedisQueue, Scheduler
        self.queue_cls = MemoryPriorityQueue if backend == "memory" else DiskQueue
        self.fingerprinter = RequestFingerprinter
        self.sign = 1 if backend == "redis" else -1  # its own queues: lower first
        self.loop = asyncio.new_event_loop()
        self.call: Callable[[Any], Any] = (
            _step if backend == "memory" else self.loop.run_until_complete
        )

    def requests(self, items: Items) -> list[Any]:
        make, sign = self.make, self.sign
        return [make(url=url, priority=sign * priority) for url, priority in items]

    def priority(self, request: Any) -> int:
        return self.sign * int(request.priority)

    def run(self, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        if self.backend != "memory":
            return fn()

        async def inside() -> dict[str, Any]:
            return fn()

        return self.loop.run_until_complete(inside())

    def open(self) -> None:
        call = self.call
        if self.backend == "redis":
            q = self.queue = self.redis_queue(url=self.where, namespace="bench", dedupe=True)
            self.add = lambda request: call(q.put(request, request.priority))
            self.pop = lambda: call(q.get(timeout=1.0))
            return
        queue = self.queue_cls(*([self.where] if self.backend == "sqlite" else []))
        s = self.scheduler = self.scheduler_cls(queue=queue, fingerprinter=self.fingerprinter())
        self.add = lambda request: call(s.add(request))
        self.pop = lambda: call(s.get())

        def ack(request: Any) -> None:
            if s._pending:  # after a reopen, get() hands out what no add() counted
                s.task_done()

        self.ack = ack

    def size(self) -> int:
        if self.backend == "redis":
            return int(self.call(self.queue.size()))
        return int(self.call(self.scheduler.qsize()))

    def async_scheduler(self) -> Any:
        """A1: qcrawl's Scheduler (on Redis over a RedisQueue; it deduplicates in the process)."""
        if self.backend == "redis":
            self.queue = self.redis_queue(url=self.where, namespace="bench", dedupe=False)
            self.scheduler = self.scheduler_cls(
                queue=self.queue, fingerprinter=self.fingerprinter()
            )
        return _QcrawlAsync(self.scheduler)

    def run_coroutine(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    def seen(self) -> int:
        return len(self.scheduler.seen)

    def close(self) -> None:
        target = self.queue if self.backend == "redis" else self.scheduler
        self.call(target.close())
