"""One adapter per implementation: build its requests, drive its queue, time it.

Each adapter turns the implementation-neutral workloads of ``workloads.py``
into its own request objects *before* any timer starts, calls
``gc.collect()`` before each timed section (the collector stays enabled, as
for users), and returns plain dicts of numbers. The timed loops are written
out per implementation so that no adapter layer sits inside them.

Adapters:

- ``crawlq``: ``crawlq.open_frontier("memory://", host_delay=0.0,
  host_concurrency=None)``; the pacing machinery of the memory store is
  always active.
- ``scrapy-spq`` / ``scrapy-dapq``: ``scrapy.core.scheduler.Scheduler`` built
  with ``Scheduler.from_crawler`` from a real ``Crawler`` (asyncio reactor,
  real ``ExecutionEngine`` and ``Downloader``), opened with ``open(spider)``:
  memory queues (no JOBDIR), ``RFPDupeFilter``, default LIFO memory queues,
  and ``SCHEDULER_PRIORITY_QUEUE`` set to ``ScrapyPriorityQueue`` or
  ``DownloaderAwarePriorityQueue``.
- ``qcrawl``: ``qcrawl.core.scheduler.Scheduler`` over ``MemoryPriorityQueue``
  with ``RequestFingerprinter``, driven from one asyncio loop
  (``await add``, ``await get``, ``task_done``).

DAPQ picks the download slot with the fewest *active* downloads, so its
behaviour and cost depend on what the downloader holds. We model a crawl with
``CONCURRENT_REQUESTS`` (16) downloads in flight: every dequeued request
enters its real ``Downloader`` slot (``Downloader._get_slot``, then
``slot.active``), as ``Downloader._enqueue_request`` does, and once 16 are in
flight the oldest completes (leaves ``slot.active``) before the next
``next_request``, as the engine only asks the scheduler for more while the
downloader has room. Only ``next_request`` (and ``enqueue_request``) calls are
timed; the in-flight bookkeeping, which is the downloader's work, is not.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import itertools
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from workloads import W1Data, W2Plan, w3_urls

__all__ = ["ADAPTERS", "canonicalizer", "rss_bytes"]

Result = dict[str, Any]
_BATCH = 100  # add_many batch size in W1
_W3_CHUNK = 1_000  # W3 adds this many, then drains, so transient objects stay few
# W3 adds and drains these first, before its baseline, so that one-time
# allocations (lazy imports, caches, first arenas) are not charged to the count.
_W3_WARMUP = [f"https://warmup{n % 10}.example.net/{n}" for n in range(_W3_CHUNK)]
_PAGE = os.sysconf("SC_PAGE_SIZE")
perf = time.perf_counter


def rss_bytes() -> int:
    """Resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def _malloc_trim() -> bool:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    libc.malloc_trim(0)
    return True


def _memory(seen: int, count: int, before: int, seconds: float) -> Result:
    """Bytes per seen request from RSS; ``seen`` includes the warm-up URLs."""
    gc.collect()
    after = rss_bytes()
    trimmed = after
    if _malloc_trim():
        trimmed = rss_bytes()
    return {
        "bytes_per_seen": (after - before) / count,
        "bytes_per_seen_trimmed": (trimmed - before) / count,
        "rss_before": before,
        "rss_after": after,
        "seen": seen - len(_W3_WARMUP),
        "ok": seen == count + len(_W3_WARMUP),
        "seconds": seconds,
    }


def _check(got_urls: Sequence[str], built_urls: Iterable[str], unique: int) -> bool:
    """All unique requests came out, each once."""
    expected = set(built_urls)
    return len(got_urls) == unique == len(expected) and set(got_urls) == expected


def _non_increasing(priorities: Sequence[int]) -> bool:
    return all(a >= b for a, b in itertools.pairwise(priorities))


def _batches(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


# -- crawlq -------------------------------------------------------------------


class Crawlq:
    name = "crawlq"

    def __init__(self) -> None:
        import crawlq

        self._crawlq = crawlq

    def _frontier(self) -> Any:
        return self._crawlq.open_frontier("memory://", host_delay=0.0, host_concurrency=None)

    def _requests(self, urls: Sequence[str], priorities: Sequence[int]) -> list[Any]:
        request = self._crawlq.Request
        return [request(u, priority=p) for u, p in zip(urls, priorities, strict=True)]

    def _enqueue(self, frontier: Any, requests: list[Any], how: str) -> float:
        if how == "add":
            add = frontier.add
            gc.collect()
            start = perf()
            for request in requests:
                add(request)
            return perf() - start
        if how == "add_many":
            batches = _batches(requests, _BATCH)
            add_many = frontier.add_many
            gc.collect()
            start = perf()
            for batch in batches:
                add_many(batch)
            return perf() - start
        raise ValueError(f"unknown enqueue variant {how!r}")

    def _dequeue(self, frontier: Any, how: str) -> tuple[list[Any], float]:
        out: list[Any] = []
        append = out.append
        pop = frontier.pop
        gc.collect()
        if how == "pop":
            start = perf()
            while (request := pop()) is not None:
                append(request)
        elif how == "pop+ack":
            ack = frontier.ack
            start = perf()
            while (request := pop()) is not None:
                ack(request)
                append(request)
        else:
            raise ValueError(f"unknown dequeue variant {how!r}")
        return out, perf() - start

    def queue_run(self, data: W1Data, params: dict[str, Any]) -> Result:
        requests = self._requests(data.urls, data.priorities)
        frontier = self._frontier()
        enqueue_s = self._enqueue(frontier, requests, params["enqueue"])
        accepted = len(frontier)
        out, dequeue_s = self._dequeue(frontier, params["dequeue"])
        return {
            "enqueue_rate": len(requests) / enqueue_s,
            "dequeue_rate": len(out) / dequeue_s,
            "accepted": accepted,
            "dequeued": len(out),
            "total": accepted,
            "capped": False,
            "ok": _check([r.url for r in out], (r.url for r in requests), data.unique),
            "priority_order": _non_increasing([r.priority for r in out]),
        }

    def w2(self, plan: W2Plan, params: dict[str, Any]) -> Result:
        seeds = self._requests(plan.seed_urls, plan.seed_priorities)
        batches = _batches(self._requests(plan.child_urls, plan.child_priorities), plan.fanout)
        frontier = self._frontier()
        frontier.add_many(seeds)
        pop, ack = frontier.pop, frontier.ack
        gc.collect()
        if params["children"] == "add_many":
            add_many = frontier.add_many
            start = perf()
            for batch in batches:
                request = pop()
                add_many(batch)
                ack(request)
            elapsed = perf() - start
        else:
            add = frontier.add
            start = perf()
            for batch in batches:
                request = pop()
                for child in batch:
                    add(child)
                ack(request)
            elapsed = perf() - start
        stats = frontier.stats()
        return {
            "steps_rate": plan.steps / elapsed,
            "queued": stats.queued,
            "seen": stats.seen,
            "ok": stats.leased == 0,
        }

    def w3(self, count: int) -> Result:
        request = self._crawlq.Request
        frontier = self._frontier()
        add, pop, ack = frontier.add, frontier.pop, frontier.ack

        def run(urls: Iterable[str]) -> None:
            urls = iter(urls)
            while chunk := list(itertools.islice(urls, _W3_CHUNK)):
                for url in chunk:
                    add(request(url))
                del chunk
                while (popped := pop()) is not None:
                    ack(popped)

        run(_W3_WARMUP)
        gc.collect()
        before = rss_bytes()
        start = perf()
        run(w3_urls(count))
        seconds = perf() - start
        return _memory(frontier.stats().seen, count, before, seconds)


# -- Scrapy -------------------------------------------------------------------


class ScrapyPeer:
    """Scrapy's default scheduler over memory queues, from a real Crawler."""

    def __init__(self, name: str, priority_queue: str) -> None:
        self.name = name
        self.dapq = priority_queue.endswith("DownloaderAwarePriorityQueue")
        from scrapy.core.scheduler import Scheduler
        from scrapy.crawler import Crawler
        from scrapy.http import Request
        from scrapy.spiders import Spider

        class BenchSpider(Spider):
            name = "bench"

        settings = {
            "SCHEDULER_PRIORITY_QUEUE": priority_queue,
            "LOG_ENABLED": False,
            "TELNETCONSOLE_ENABLED": False,
        }
        crawler = Crawler(BenchSpider, settings, init_reactor=True)
        # What Crawler.crawl() does before the engine starts: spider, settings,
        # engine (with its Downloader). The engine opens the scheduler below.
        crawler.spider = crawler._create_spider()
        crawler._apply_settings()
        crawler.engine = crawler._create_engine()
        self._crawler = crawler
        self._request = Request
        self.scheduler: Any = Scheduler.from_crawler(crawler)
        self.scheduler.open(crawler.spider)
        self.downloader = crawler.engine.downloader
        self.concurrency = crawler.settings.getint("CONCURRENT_REQUESTS")
        self._inflight: deque[tuple[Any, Any]] = deque()

    def _requests(self, urls: Sequence[str], priorities: Sequence[int]) -> list[Any]:
        request = self._request
        return [request(u, priority=p) for u, p in zip(urls, priorities, strict=True)]

    def _fetch(self, request: Any) -> None:
        """Model the downloader: the request becomes active in its slot, and
        the oldest of ``concurrency`` in-flight requests completes."""
        _, slot = self.downloader._get_slot(request)
        slot.active.add(request)
        inflight = self._inflight
        inflight.append((request, slot))
        if len(inflight) >= self.concurrency:
            done, done_slot = inflight.popleft()
            done_slot.active.discard(done)

    def _drain(self, budget_s: float | None) -> tuple[list[Any], float, bool]:
        out: list[Any] = []
        append = out.append
        next_request = self.scheduler.next_request
        gc.collect()
        if not self.dapq:
            start = perf()
            while (request := next_request()) is not None:
                append(request)
            return out, perf() - start, False
        fetch = self._fetch
        elapsed = 0.0
        while True:
            start = perf()
            request = next_request()
            elapsed += perf() - start
            if request is None:
                return out, elapsed, False
            append(request)
            fetch(request)
            if budget_s is not None and elapsed > budget_s:
                return out, elapsed, True

    def queue_run(self, data: W1Data, params: dict[str, Any]) -> Result:
        requests = self._requests(data.urls, data.priorities)
        enqueue = self.scheduler.enqueue_request
        gc.collect()
        start = perf()
        for request in requests:
            enqueue(request)
        enqueue_s = perf() - start
        accepted = len(self.scheduler)
        out, dequeue_s, capped = self._drain(params.get("budget_s"))
        result: Result = {
            "enqueue_rate": len(requests) / enqueue_s,
            "dequeue_rate": len(out) / dequeue_s,
            "accepted": accepted,
            "dequeued": len(out),
            "total": accepted,
            "capped": capped,
            "priority_order": _non_increasing([r.priority for r in out]),
        }
        if capped:
            result["ok"] = accepted == data.unique
            result["estimated_full_drain_s"] = accepted / result["dequeue_rate"]
        else:
            result["ok"] = _check([r.url for r in out], (r.url for r in requests), data.unique)
        return result

    def w2(self, plan: W2Plan, params: dict[str, Any]) -> Result:
        seeds = self._requests(plan.seed_urls, plan.seed_priorities)
        batches = _batches(self._requests(plan.child_urls, plan.child_priorities), plan.fanout)
        enqueue = self.scheduler.enqueue_request
        next_request = self.scheduler.next_request
        for seed in seeds:
            enqueue(seed)
        gc.collect()
        if not self.dapq:
            start = perf()
            for batch in batches:
                next_request()
                for child in batch:
                    enqueue(child)
            elapsed = perf() - start
        else:
            fetch = self._fetch
            elapsed = 0.0
            for batch in batches:
                start = perf()
                request = next_request()
                for child in batch:
                    enqueue(child)
                elapsed += perf() - start
                fetch(request)
        return {
            "steps_rate": plan.steps / elapsed,
            "queued": len(self.scheduler),
            "seen": len(self.scheduler.df._fingerprints),
            "ok": True,
        }

    def w3(self, count: int) -> Result:
        request = self._request
        enqueue = self.scheduler.enqueue_request
        next_request = self.scheduler.next_request

        def run(urls: Iterable[str]) -> None:
            urls = iter(urls)
            while chunk := list(itertools.islice(urls, _W3_CHUNK)):
                for url in chunk:
                    enqueue(request(url))
                del chunk
                while next_request() is not None:
                    pass

        run(_W3_WARMUP)
        gc.collect()
        before = rss_bytes()
        start = perf()
        run(w3_urls(count))
        seconds = perf() - start
        return _memory(len(self.scheduler.df._fingerprints), count, before, seconds)


# -- qcrawl -------------------------------------------------------------------


class Qcrawl:
    """qcrawl's scheduler and in-memory priority queue (lower number first)."""

    name = "qcrawl"

    def __init__(self) -> None:
        from qcrawl.core.queues.memory import MemoryPriorityQueue
        from qcrawl.core.request import Request
        from qcrawl.core.scheduler import Scheduler
        from qcrawl.utils.fingerprint import RequestFingerprinter

        self._request = Request
        self._scheduler = Scheduler
        self._queue = MemoryPriorityQueue
        self._fingerprinter = RequestFingerprinter

    def _make(self) -> Any:
        return self._scheduler(queue=self._queue(), fingerprinter=self._fingerprinter())

    def _requests(self, urls: Sequence[str], priorities: Sequence[int]) -> list[Any]:
        request = self._request
        # qcrawl serves the lowest number first: negate to keep the same order.
        return [request(url=u, priority=-p) for u, p in zip(urls, priorities, strict=True)]

    def queue_run(self, data: W1Data, params: dict[str, Any]) -> Result:
        requests = self._requests(data.urls, data.priorities)

        async def main() -> Result:
            scheduler = self._make()
            add, get, task_done = scheduler.add, scheduler.get, scheduler.task_done
            gc.collect()
            start = perf()
            for request in requests:
                await add(request)
            enqueue_s = perf() - start
            accepted = await scheduler.qsize()
            out: list[Any] = []
            append = out.append
            gc.collect()
            start = perf()
            for _ in range(accepted):  # get() would wait forever on an empty queue
                append(await get())
                task_done()
            dequeue_s = perf() - start
            return {
                "enqueue_rate": len(requests) / enqueue_s,
                "dequeue_rate": len(out) / dequeue_s,
                "accepted": accepted,
                "dequeued": len(out),
                "total": accepted,
                "capped": False,
                "ok": _check([r.url for r in out], (r.url for r in requests), data.unique),
                "priority_order": _non_increasing([-r.priority for r in out]),
            }

        return asyncio.run(main())

    def w2(self, plan: W2Plan, params: dict[str, Any]) -> Result:
        seeds = self._requests(plan.seed_urls, plan.seed_priorities)
        batches = _batches(self._requests(plan.child_urls, plan.child_priorities), plan.fanout)

        async def main() -> Result:
            scheduler = self._make()
            add, get, task_done = scheduler.add, scheduler.get, scheduler.task_done
            for seed in seeds:
                await add(seed)
            gc.collect()
            start = perf()
            for batch in batches:
                await get()
                for child in batch:
                    await add(child)
                task_done()
            elapsed = perf() - start
            return {
                "steps_rate": plan.steps / elapsed,
                "queued": await scheduler.qsize(),
                "seen": len(scheduler.seen),
                "ok": scheduler.pending == await scheduler.qsize(),
            }

        return asyncio.run(main())

    def w3(self, count: int) -> Result:
        request = self._request

        async def main() -> Result:
            scheduler = self._make()
            add, get, task_done = scheduler.add, scheduler.get, scheduler.task_done

            async def run(urls: Iterable[str]) -> None:
                urls = iter(urls)
                while chunk := list(itertools.islice(urls, _W3_CHUNK)):
                    for url in chunk:
                        await add(request(url=url))
                    del chunk
                    for _ in range(await scheduler.qsize()):
                        await get()
                        task_done()

            await run(_W3_WARMUP)
            gc.collect()
            before = rss_bytes()
            start = perf()
            await run(w3_urls(count))
            seconds = perf() - start
            return _memory(len(scheduler.seen), count, before, seconds)

        return asyncio.run(main())


# -- canonicalisation (C1) ----------------------------------------------------


def canonicalizer(name: str) -> Callable[[str], str]:
    if name == "crawlq":
        from crawlq import Fingerprinter

        return Fingerprinter().canonical_url
    if name == "w3lib":
        from w3lib.url import canonicalize_url

        w3lib_canonical: Callable[[str], str] = canonicalize_url
        return w3lib_canonical
    if name == "qcrawl":
        from qcrawl.utils.url import normalize_url

        qcrawl_canonical: Callable[[str], str] = normalize_url
        return qcrawl_canonical
    raise ValueError(f"unknown canonicaliser {name!r}")


ADAPTERS: dict[str, Callable[[], Any]] = {
    "crawlq": Crawlq,
    "scrapy-spq": lambda: ScrapyPeer("scrapy-spq", "scrapy.pqueues.ScrapyPriorityQueue"),
    "scrapy-dapq": lambda: ScrapyPeer("scrapy-dapq", "scrapy.pqueues.DownloaderAwarePriorityQueue"),
    "qcrawl": Qcrawl,
}
