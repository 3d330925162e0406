"""One durable-store measurement in this (fresh) process; see ``durable.py``.

``durable.py`` starts this script with a JSON spec as its only argument. It
prints its result as JSON on the last line of stdout, after ``RESULT_MARKER``.
The drain that ``durable.py`` kills prints ``PROGRESS_MARKER n`` lines instead
and records what it dequeued in a file, one unbuffered write per request.

Operations (``spec["op"]``):

- ``w1``: enqueue the W1 offers, then dequeue everything; rates per second.
- ``w2``: seeds, then steps of dequeue one / enqueue five children.
- ``fill``: add ``count`` unique requests into ``dir`` and close cleanly.
- ``reopen``: reopen ``dir``; time to open and to the first request, then
  drain (all, or ``drain`` requests, within ``budget_s``); RSS along the way.
- ``drain``: drain ``dir`` (after filling it here when ``fill`` is true,
  without ever closing it), recording each dequeue, until killed.
- ``count``: reopen ``dir`` after the kill and compare what comes out with
  what was recorded.

Implementations (``spec["impl"]``):

- ``crawlq``: ``crawlq.open_frontier(dir, host_delay=0.0, host_concurrency=None)``
  (a SQLite job).
- ``scrapy-lifo`` / ``scrapy-fifo`` / ``scrapy-dapq``: Scrapy's stock
  ``scrapy.core.scheduler.Scheduler`` built with ``Scheduler.from_crawler``
  from a real ``Crawler`` (asyncio reactor, spider, settings and engine with
  its ``Downloader``, as ``Crawler.crawl()`` sets up before the engine opens
  the scheduler), then ``open(spider)``, with ``JOBDIR=dir`` and the default
  ``RFPDupeFilter`` (which persists ``requests.seen``). ``lifo`` and ``fifo``
  use ``scrapy.pqueues.ScrapyPriorityQueue`` over ``PickleLifoDiskQueue``
  (the default disk queue) or ``PickleFifoDiskQueue``; ``dapq`` keeps every
  default of Scrapy 2.19: ``DownloaderAwarePriorityQueue`` over
  ``PickleLifoDiskQueue``.
- ``qcrawl``: ``qcrawl.core.scheduler.Scheduler(queue=DiskQueue(dir),
  fingerprinter=RequestFingerprinter())``, one asyncio loop, ``await add``,
  ``await get``, ``task_done`` (after a reopen its pending count starts at 0,
  so only ``get`` is called there). Its seen set is in memory only.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import os
import random
import resource
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import workloads

RESULT_MARKER = "@@RESULT@@ "
PROGRESS_MARKER = "@@PROGRESS@@ "
PROGRESS_EVERY = 1_000
BATCH = 100  # crawlq add_many batch size (W1, fills)
CHUNK = 1_000  # fills build this many request objects at a time

Result = dict[str, Any]
perf = time.perf_counter
_PAGE = os.sysconf("SC_PAGE_SIZE")

SCRAPY_QUEUES: dict[str, tuple[str | None, str | None]] = {
    # impl: (SCHEDULER_PRIORITY_QUEUE, SCHEDULER_DISK_QUEUE); None: Scrapy's default
    "scrapy-lifo": ("scrapy.pqueues.ScrapyPriorityQueue", None),
    "scrapy-fifo": ("scrapy.pqueues.ScrapyPriorityQueue", "scrapy.squeues.PickleFifoDiskQueue"),
    "scrapy-dapq": (None, None),
}


# -- helpers ------------------------------------------------------------------


def rss_bytes() -> int:
    """Resident set size now, from /proc/self/statm."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk under ``path`` (st_blocks, like ``du``)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def fill_items(count: int, hosts: int, seed: int = 4) -> Iterator[tuple[str, int]]:
    """``count`` distinct W1-shaped URLs over ``hosts`` hosts and random
    priorities, built lazily so that a 1M fill holds few strings at once."""
    rng = random.Random(seed)
    low, high = workloads.PRIORITY_RANGE
    for n in range(count):
        yield workloads.w1_url(n, n % hosts), rng.randint(low, high)


def chunks(items: Iterator[tuple[str, int]], size: int) -> Iterator[list[tuple[str, int]]]:
    chunk: list[tuple[str, int]] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def non_increasing(priorities: Sequence[int]) -> bool:
    return all(a >= b for a, b in itertools.pairwise(priorities))


def check(got_urls: Sequence[str], built_urls: Sequence[str], unique: int) -> bool:
    """Every unique request came out, each exactly once."""
    expected = set(built_urls)
    return len(got_urls) == unique == len(expected) and set(got_urls) == expected


def batches(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class Recorder:
    """Appends one line per event to a file with one unbuffered write each,
    so a SIGKILL loses at most the event in flight."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.count = 0

    def write(self, kind: str, url: str) -> None:
        os.write(self.fd, f"{kind}\t{url}\n".encode())

    def dequeued(self) -> None:
        self.count += 1
        if self.count % PROGRESS_EVERY == 0:
            sys.stdout.write(f"{PROGRESS_MARKER}{self.count}\n")
            sys.stdout.flush()


# -- crawlq -------------------------------------------------------------------


class Crawlq:
    def __init__(self) -> None:
        import crawlq

        self.crawlq = crawlq

    def open(self, path: str) -> Any:
        return self.crawlq.open_frontier(path, host_delay=0.0, host_concurrency=None)

    def requests(self, items: Sequence[tuple[str, int]]) -> list[Any]:
        make = self.crawlq.Request
        return [make(url, priority=priority) for url, priority in items]

    def w1(self, spec: Result, data: workloads.W1Data) -> Result:
        enqueue_how, dequeue_how = spec["params"]["enqueue"], spec["params"]["dequeue"]
        requests = self.requests(list(zip(data.urls, data.priorities, strict=True)))
        frontier = self.open(spec["dir"])
        if enqueue_how == "add_many":
            groups = batches(requests, BATCH)
            add_many = frontier.add_many
            gc.collect()
            start = perf()
            for group in groups:
                add_many(group)
            enqueue_s = perf() - start
        else:
            add = frontier.add
            gc.collect()
            start = perf()
            for request in requests:
                add(request)
            enqueue_s = perf() - start
        accepted = len(frontier)
        out: list[Any] = []
        append = out.append
        pop = frontier.pop
        gc.collect()
        if dequeue_how == "pop+ack":
            ack = frontier.ack
            start = perf()
            while (request := pop()) is not None:
                ack(request)
                append(request)
            dequeue_s = perf() - start
        else:
            start = perf()
            while (request := pop()) is not None:
                append(request)
            dequeue_s = perf() - start
        frontier.close()
        return {
            "enqueue_rate": len(requests) / enqueue_s,
            "dequeue_rate": len(out) / dequeue_s,
            "accepted": accepted,
            "dequeued": len(out),
            "ok": check([r.url for r in out], [r.url for r in requests], data.unique),
            "priority_order": non_increasing([r.priority for r in out]),
        }

    def w2(self, spec: Result, plan: workloads.W2Plan, expected_queued: int) -> Result:
        seeds = self.requests(list(zip(plan.seed_urls, plan.seed_priorities, strict=True)))
        children = self.requests(list(zip(plan.child_urls, plan.child_priorities, strict=True)))
        groups = batches(children, plan.fanout)
        frontier = self.open(spec["dir"])
        frontier.add_many(seeds)
        pop, add_many, ack = frontier.pop, frontier.add_many, frontier.ack
        gc.collect()
        start = perf()
        for group in groups:
            request = pop()
            add_many(group)
            ack(request)
        elapsed = perf() - start
        stats = frontier.stats()
        frontier.close()
        return {
            "steps_rate": plan.steps / elapsed,
            "steps": plan.steps,
            "queued": stats.queued,
            "ok": stats.queued == expected_queued and stats.leased == 0,
        }

    def fill(self, frontier: Any, count: int, hosts: int) -> None:
        add_many = frontier.add_many
        for chunk in chunks(fill_items(count, hosts), BATCH):
            add_many(self.requests(chunk))

    def fill_op(self, spec: Result) -> Result:
        frontier = self.open(spec["dir"])
        start = perf()
        self.fill(frontier, spec["count"], spec["hosts"])
        fill_s = perf() - start
        stats = frontier.stats()
        rss_filled = rss_bytes()
        frontier.close()
        return {
            "fill_s": fill_s,
            "fill_rate": spec["count"] / fill_s,
            "queued": stats.queued,
            "seen": stats.seen,
            "rss_filled": rss_filled,
            "peak_rss": peak_rss_bytes(),
            "ok": stats.queued == spec["count"] == stats.seen,
        }

    def reopen(self, spec: Result) -> Result:
        limit: int | None = spec.get("drain")
        budget: float | None = spec.get("budget_s")
        rss_start = rss_bytes()
        gc.collect()
        start = perf()
        frontier = self.open(spec["dir"])
        open_s = perf() - start
        first = frontier.pop()
        first_s = perf() - start
        rss_reopen = rss_bytes()
        queued = len(frontier)  # queued plus leased: the first request counts
        pop, ack = frontier.pop, frontier.ack
        drained = 0
        capped = False
        ack(first)
        start = perf()
        while limit is None or drained < limit - 1:
            request = pop()
            if request is None:
                break
            ack(request)
            drained += 1
            if budget is not None and not drained % 1000 and perf() - start > budget:
                capped = True
                break
        drain_s = perf() - start
        rss_drained = rss_bytes()
        stats = frontier.stats()
        frontier.close()
        return {
            "open_s": open_s,
            "first_s": first_s,
            "queued_at_open": queued,
            "drained": drained + 1,
            "drain_s": drain_s,
            "drain_rate": drained / drain_s if drain_s else 0.0,
            "capped": capped,
            "rss_start": rss_start,
            "rss_reopen": rss_reopen,
            "rss_drained": rss_drained,
            "peak_rss": peak_rss_bytes(),
            "bloom_ready_after_drain": bool(stats.extra.get("bloom_ready")),
            "seen_after_reopen": stats.seen,
            "ok": first is not None and (limit is not None or capped or stats.queued == 0),
        }

    def drain(self, spec: Result) -> Result:
        frontier = self.open(spec["dir"])
        if spec.get("fill"):
            self.fill(frontier, spec["count"], spec["hosts"])
        sys.stdout.write(f"{PROGRESS_MARKER}0\n")
        sys.stdout.flush()
        record = Recorder(spec["record"])
        pop, ack, write, dequeued = frontier.pop, frontier.ack, record.write, record.dequeued
        while (request := pop()) is not None:
            write("P", request.url)
            ack(request)
            write("A", request.url)
            dequeued()
        frontier.close()
        return {"drained": record.count, "killed": False}

    def count(self, spec: Result) -> tuple[list[str], str | None, int | None, set[str]]:
        expected = {
            r.url
            for c in chunks(fill_items(spec["count"], spec["hosts"]), CHUNK)
            for r in self.requests(c)
        }
        frontier = self.open(spec["dir"])
        seen = frontier.stats().seen
        found: list[str] = []
        error = None
        try:
            while (request := frontier.pop()) is not None and len(found) < 3 * spec["count"]:
                found.append(request.url)
        except Exception as exc:  # report what the store does, whatever it is
            error = f"{type(exc).__name__}: {exc}"
        frontier.close()
        return found, error, seen, expected


# -- Scrapy -------------------------------------------------------------------


class Scrapy:
    def __init__(self, impl: str) -> None:
        from scrapy import Request

        self.impl = impl
        self.Request = Request

    def crawler(self, jobdir: str) -> Any:
        """A Crawler set up as ``Crawler.crawl()`` leaves it before the engine
        opens the scheduler: spider, settings, engine with its Downloader."""
        from scrapy import Spider
        from scrapy.crawler import Crawler

        class BenchSpider(Spider):
            name = "bench"

        pqueue, dqueue = SCRAPY_QUEUES[self.impl]
        settings: dict[str, Any] = {
            "JOBDIR": jobdir,
            "LOG_ENABLED": False,
            "TELNETCONSOLE_ENABLED": False,
        }
        if pqueue:
            settings["SCHEDULER_PRIORITY_QUEUE"] = pqueue
        if dqueue:
            settings["SCHEDULER_DISK_QUEUE"] = dqueue
        crawler = Crawler(BenchSpider, settings, init_reactor=True)
        crawler.spider = crawler._create_spider()
        crawler._apply_settings()
        crawler.engine = crawler._create_engine()
        return crawler

    def open(self, crawler: Any) -> Any:
        from scrapy.core.scheduler import Scheduler

        scheduler = Scheduler.from_crawler(crawler)
        scheduler.open(crawler.spider)
        return scheduler

    def requests(self, items: Sequence[tuple[str, int]]) -> list[Any]:
        make = self.Request
        return [make(url, priority=priority) for url, priority in items]

    def settings_used(self, crawler: Any) -> dict[str, str]:
        return {
            name: str(crawler.settings[name])
            for name in ("SCHEDULER_PRIORITY_QUEUE", "SCHEDULER_DISK_QUEUE", "DUPEFILTER_CLASS")
        }

    def w1(self, spec: Result, data: workloads.W1Data) -> Result:
        requests = self.requests(list(zip(data.urls, data.priorities, strict=True)))
        crawler = self.crawler(spec["dir"])
        scheduler = self.open(crawler)
        enqueue = scheduler.enqueue_request
        gc.collect()
        done = 0
        start = perf()
        try:
            for request in requests:
                enqueue(request)
                done += 1
        except OSError as exc:
            return {
                "error": f"{type(exc).__name__} [Errno {exc.errno}] {exc.strerror} "
                f"after {done:,} offers ({len(scheduler):,} queued), "
                f"RLIMIT_NOFILE={resource.getrlimit(resource.RLIMIT_NOFILE)[0]}",
                "enqueue_rate_until_error": done / (perf() - start),
                "offers_before_error": done,
                "queued_before_error": len(scheduler),
                "settings": self.settings_used(crawler),
            }
        enqueue_s = perf() - start
        accepted = len(scheduler)
        out: list[Any] = []
        append = out.append
        next_request = scheduler.next_request
        gc.collect()
        start = perf()
        while (request := next_request()) is not None:
            append(request)
        dequeue_s = perf() - start
        scheduler.close("finished")
        return {
            "enqueue_rate": len(requests) / enqueue_s,
            "dequeue_rate": len(out) / dequeue_s,
            "accepted": accepted,
            "dequeued": len(out),
            "ok": check([r.url for r in out], [r.url for r in requests], data.unique),
            "priority_order": non_increasing([r.priority for r in out]),
            "settings": self.settings_used(crawler),
        }

    def w2(self, spec: Result, plan: workloads.W2Plan, expected_queued: int) -> Result:
        seeds = self.requests(list(zip(plan.seed_urls, plan.seed_priorities, strict=True)))
        children = self.requests(list(zip(plan.child_urls, plan.child_priorities, strict=True)))
        groups = batches(children, plan.fanout)
        crawler = self.crawler(spec["dir"])
        scheduler = self.open(crawler)
        enqueue, next_request = scheduler.enqueue_request, scheduler.next_request
        for seed in seeds:
            enqueue(seed)
        gc.collect()
        steps = 0
        start = perf()
        try:
            for group in groups:
                next_request()
                for child in group:
                    enqueue(child)
                steps += 1
        except OSError as exc:
            return {
                "error": f"{type(exc).__name__} [Errno {exc.errno}] {exc.strerror} "
                f"after {steps:,} steps ({len(scheduler):,} queued), "
                f"RLIMIT_NOFILE={resource.getrlimit(resource.RLIMIT_NOFILE)[0]}",
                "steps_rate_until_error": steps / (perf() - start),
                "settings": self.settings_used(crawler),
            }
        elapsed = perf() - start
        queued = len(scheduler)
        scheduler.close("finished")
        return {
            "steps_rate": plan.steps / elapsed,
            "steps": plan.steps,
            "queued": queued,
            "ok": queued == expected_queued,
            "settings": self.settings_used(crawler),
        }

    def fill(self, scheduler: Any, count: int, hosts: int) -> None:
        enqueue = scheduler.enqueue_request
        for chunk in chunks(fill_items(count, hosts), CHUNK):
            for request in self.requests(chunk):
                enqueue(request)

    def fill_op(self, spec: Result) -> Result:
        crawler = self.crawler(spec["dir"])
        scheduler = self.open(crawler)
        start = perf()
        self.fill(scheduler, spec["count"], spec["hosts"])
        fill_s = perf() - start
        queued = len(scheduler)
        rss_filled = rss_bytes()
        scheduler.close("finished")
        return {
            "fill_s": fill_s,
            "fill_rate": spec["count"] / fill_s,
            "queued": queued,
            "rss_filled": rss_filled,
            "peak_rss": peak_rss_bytes(),
            "ok": queued == spec["count"],
            "settings": self.settings_used(crawler),
        }

    def reopen(self, spec: Result) -> Result:
        limit: int | None = spec.get("drain")
        crawler = self.crawler(spec["dir"])  # not timed: the crawl's own set-up
        rss_start = rss_bytes()
        gc.collect()
        start = perf()
        scheduler = self.open(crawler)  # reads requests.seen and active.json
        open_s = perf() - start
        first = scheduler.next_request()
        first_s = perf() - start
        rss_reopen = rss_bytes()
        queued = len(scheduler) + 1
        next_request = scheduler.next_request
        drained = 0
        start = perf()
        while limit is None or drained < limit - 1:
            if next_request() is None:
                break
            drained += 1
        drain_s = perf() - start
        rss_drained = rss_bytes()
        return {
            "open_s": open_s,
            "first_s": first_s,
            "queued_at_open": queued,
            "drained": drained + 1,
            "drain_s": drain_s,
            "drain_rate": drained / drain_s if drain_s else 0.0,
            "capped": False,
            "rss_start": rss_start,
            "rss_reopen": rss_reopen,
            "rss_drained": rss_drained,
            "peak_rss": peak_rss_bytes(),
            "ok": first is not None and (limit is not None or len(scheduler) == 0),
        }

    def drain(self, spec: Result) -> Result:
        crawler = self.crawler(spec["dir"])
        scheduler = self.open(crawler)
        if spec.get("fill"):
            self.fill(scheduler, spec["count"], spec["hosts"])
        sys.stdout.write(f"{PROGRESS_MARKER}0\n")
        sys.stdout.flush()
        record = Recorder(spec["record"])
        next_request, write, dequeued = scheduler.next_request, record.write, record.dequeued
        while (request := next_request()) is not None:
            write("D", request.url)
            dequeued()
        scheduler.close("finished")
        return {"drained": record.count, "killed": False}

    def count(self, spec: Result) -> tuple[list[str], str | None, int | None, set[str]]:
        expected = {
            r.url
            for c in chunks(fill_items(spec["count"], spec["hosts"]), CHUNK)
            for r in self.requests(c)
        }
        crawler = self.crawler(spec["dir"])
        found: list[str] = []
        error = None
        seen = None
        try:
            scheduler = self.open(crawler)
            seen = len(scheduler.df._fingerprints)
            while (request := scheduler.next_request()) is not None:
                found.append(request.url)
                if len(found) >= 3 * spec["count"]:
                    break
        except Exception as exc:  # report what the store does, whatever it is
            error = f"{type(exc).__name__}: {exc}"
        return found, error, seen, expected


# -- qcrawl -------------------------------------------------------------------


class Qcrawl:
    def __init__(self) -> None:
        from qcrawl.core.queues.disk import DiskQueue
        from qcrawl.core.request import Request
        from qcrawl.core.scheduler import Scheduler
        from qcrawl.utils.fingerprint import RequestFingerprinter

        self.Request = Request
        self.DiskQueue = DiskQueue
        self.Scheduler = Scheduler
        self.Fingerprinter = RequestFingerprinter

    def open(self, path: str) -> Any:
        return self.Scheduler(queue=self.DiskQueue(path), fingerprinter=self.Fingerprinter())

    def requests(self, items: Sequence[tuple[str, int]]) -> list[Any]:
        make = self.Request
        # qcrawl serves the lowest number first: negate to keep the same order.
        return [make(url=url, priority=-priority) for url, priority in items]

    def w1(self, spec: Result, data: workloads.W1Data) -> Result:
        requests = self.requests(list(zip(data.urls, data.priorities, strict=True)))

        async def main() -> Result:
            scheduler = self.open(spec["dir"])
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
            await scheduler.close()
            return {
                "enqueue_rate": len(requests) / enqueue_s,
                "dequeue_rate": len(out) / dequeue_s,
                "accepted": accepted,
                "dequeued": len(out),
                "ok": check([r.url for r in out], [r.url for r in requests], data.unique),
                "priority_order": non_increasing([-r.priority for r in out]),
            }

        return asyncio.run(main())

    def w2(self, spec: Result, plan: workloads.W2Plan, expected_queued: int) -> Result:
        seeds = self.requests(list(zip(plan.seed_urls, plan.seed_priorities, strict=True)))
        children = self.requests(list(zip(plan.child_urls, plan.child_priorities, strict=True)))
        groups = batches(children, plan.fanout)

        async def main() -> Result:
            scheduler = self.open(spec["dir"])
            add, get, task_done = scheduler.add, scheduler.get, scheduler.task_done
            for seed in seeds:
                await add(seed)
            gc.collect()
            start = perf()
            for group in groups:
                await get()
                for child in group:
                    await add(child)
                task_done()
            elapsed = perf() - start
            queued = await scheduler.qsize()
            await scheduler.close()
            return {
                "steps_rate": plan.steps / elapsed,
                "steps": plan.steps,
                "queued": queued,
                "ok": queued == expected_queued,
            }

        return asyncio.run(main())

    async def fill(self, scheduler: Any, count: int, hosts: int) -> None:
        add = scheduler.add
        for chunk in chunks(fill_items(count, hosts), CHUNK):
            for request in self.requests(chunk):
                await add(request)

    def fill_op(self, spec: Result) -> Result:
        async def main() -> Result:
            scheduler = self.open(spec["dir"])
            start = perf()
            await self.fill(scheduler, spec["count"], spec["hosts"])
            fill_s = perf() - start
            queued = await scheduler.qsize()
            rss_filled = rss_bytes()
            await scheduler.close()
            return {
                "fill_s": fill_s,
                "fill_rate": spec["count"] / fill_s,
                "queued": queued,
                "rss_filled": rss_filled,
                "peak_rss": peak_rss_bytes(),
                "ok": queued == spec["count"],
            }

        return asyncio.run(main())

    def reopen(self, spec: Result) -> Result:
        limit: int | None = spec.get("drain")
        budget: float | None = spec.get("budget_s")

        async def main() -> Result:
            rss_start = rss_bytes()
            gc.collect()
            start = perf()
            scheduler = self.open(spec["dir"])
            open_s = perf() - start  # the queue reads its directory on first use
            first = await scheduler.get()
            first_s = perf() - start
            rss_reopen = rss_bytes()
            remaining = await scheduler.qsize()
            if limit is not None:
                remaining = min(remaining, limit - 1)
            get = scheduler.get
            drained = 0
            capped = False
            start = perf()
            for _ in range(remaining):
                await get()
                drained += 1
                if budget is not None and not drained % 100 and perf() - start > budget:
                    capped = True
                    break
            drain_s = perf() - start
            return {
                "open_s": open_s,
                "first_s": first_s,
                "queued_at_open": remaining + 1,
                "drained": drained + 1,
                "drain_s": drain_s,
                "drain_rate": drained / drain_s if drain_s else 0.0,
                "capped": capped,
                "rss_start": rss_start,
                "rss_reopen": rss_reopen,
                "rss_drained": rss_bytes(),
                "peak_rss": peak_rss_bytes(),
                "ok": first is not None,
            }

        return asyncio.run(main())

    def drain(self, spec: Result) -> Result:
        async def main() -> Result:
            scheduler = self.open(spec["dir"])
            if spec.get("fill"):
                await self.fill(scheduler, spec["count"], spec["hosts"])
            sys.stdout.write(f"{PROGRESS_MARKER}0\n")
            sys.stdout.flush()
            record = Recorder(spec["record"])
            get, write, dequeued = scheduler.get, record.write, record.dequeued
            for _ in range(await scheduler.qsize()):
                request = await get()
                write("D", request.url)
                dequeued()
            return {"drained": record.count, "killed": False}

        return asyncio.run(main())

    def count(self, spec: Result) -> tuple[list[str], str | None, int | None, set[str]]:
        expected = {
            r.url
            for c in chunks(fill_items(spec["count"], spec["hosts"]), CHUNK)
            for r in self.requests(c)
        }

        async def main() -> tuple[list[str], str | None]:
            scheduler = self.open(spec["dir"])
            found: list[str] = []
            errors: list[str] = []
            for _ in range(await scheduler.qsize()):
                try:
                    found.append((await scheduler.get()).url)
                except RuntimeError as exc:  # a file it cannot read back
                    errors.append(f"{type(exc).__name__}: {exc}")
            error = f"{len(errors)} unreadable, first: {errors[0]}" if errors else None
            return found, error

        found, error = asyncio.run(main())
        return found, error, None, expected


# -- operations ---------------------------------------------------------------


def make_impl(impl: str) -> Any:
    if impl == "crawlq":
        return Crawlq()
    if impl in SCRAPY_QUEUES:
        return Scrapy(impl)
    if impl == "qcrawl":
        return Qcrawl()
    raise ValueError(f"unknown implementation {impl!r}")


def count_after_kill(impl: Any, spec: Result) -> Result:
    """Reopen after the kill; compare what comes out with the record.

    Each dequeue was recorded (``D``, or for crawlq ``P`` after ``pop`` and
    ``A`` after ``ack``) right after the call returned, so a kill can miss at
    most the one record in flight.
    """
    popped: set[str] = set()
    done: set[str] = set()
    with open(spec["record"], encoding="utf-8") as record:
        for line in record:
            kind, _, url = line.rstrip("\n").partition("\t")
            if kind in ("P", "D"):
                popped.add(url)
            if kind in ("A", "D"):
                done.add(url)
    found, error, seen, expected = impl.count(spec)
    found_set = set(found)
    remaining = expected - popped  # never handed out before the kill
    leased = popped - done  # crawlq: popped, not acked at the kill
    return {
        "filled": len(expected),
        "dequeued_at_kill": len(popped),
        "done_at_kill": len(done),
        "leased_at_kill": len(leased),
        "remaining": len(remaining),
        "found": len(found),
        "lost": len(remaining - found_set),
        "redelivered": len(found_set & leased),
        "resurrected": len(found_set & done),
        "duplicates": len(found) - len(found_set),
        "unknown": len(found_set - expected),
        "seen_after_reopen": seen,
        "reopen_error": error,
        "ok": error is None and not (remaining - found_set),
    }


def run(spec: Result) -> Result:
    op: str = spec["op"]
    impl = make_impl(spec["impl"])
    if op == "w1":
        data = workloads.w1_data(spec["unique"], spec["hosts"], spec["duplicate_every"])
        return dict(impl.w1(spec, data))
    if op == "w2":
        plan = workloads.w2_plan(spec["seeds"], spec["steps"], spec["hosts"])
        expected = len({*plan.seed_urls, *plan.child_urls}) - plan.steps
        return dict(impl.w2(spec, plan, expected))
    if op == "fill":
        result = dict(impl.fill_op(spec))
        result["disk_bytes"] = disk_bytes(Path(spec["dir"]))
        return result
    if op == "reopen":
        return dict(impl.reopen(spec))
    if op == "drain":
        return dict(impl.drain(spec))
    if op == "count":
        return count_after_kill(impl, spec)
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    spec = json.loads(sys.argv[1])
    result = run(spec)
    sys.stdout.write("\n" + RESULT_MARKER + json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
