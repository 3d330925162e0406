"""Scrapy with crawlq's scheduler against Scrapy with its own, end to end and scheduler-level.

Two groups of measurements, each in a fresh subprocess, repeats interleaved,
medians reported with crawlq / Scrapy ratios (above 1: crawlq faster):

- ``sched``: the scheduler alone, driven like the engine drives it:
  ``enqueue_request`` and ``next_request`` of 100,000 requests (plus 10,000
  exact duplicates) over 1,000 hosts, random priorities in [-10, 10], with
  ``CONCURRENT_REQUESTS`` (16) in flight (each dequeued request enters its
  real downloader slot; once 16 are in flight the oldest completes, which for
  crawlq means the engine's ``_slot.remove_request``, i.e. the ack, timed).
  ``fill``: enqueue all, then drain. ``crawl``: pop one, enqueue its ten
  children, repeat (the shape of a crawl). Peer: Scrapy's default
  ``Scheduler`` with ``DownloaderAwarePriorityQueue`` (Scrapy 2.19's default)
  and ``RFPDupeFilter``, memory queues. Both with ``JOBDIR`` too (crawlq's
  SQLite job against Scrapy's pickle disk queues). With ``JOBDIR`` Scrapy's
  default queue cannot run this at all: it opens one disk queue per (download
  slot, priority), 21,000 files here, past the 20,000 file descriptors of
  this machine ("Too many open files"), so the peer there is
  ``ScrapyPriorityQueue``, the queue a Scrapy user must switch to.
- ``e2e``: ``scrapy runspider`` of a spider following every link of crawlq's
  demo site (2,000 pages over 20 hosts on 127.0.0.x, served from this
  process), in pages/s over Scrapy's ``elapsed_time_seconds``, and CPU
  milliseconds per page of the crawler process (steadier on a busy machine).
  With and without ``JOBDIR``. Every run checks that every page was fetched
  exactly once.

Run from the repository root: ``python benchmarks/scrapy_bench.py`` (options:
``--repeat N``, ``--only sched,e2e``, ``--quick``, ``--budget S``, and
``--src PATH`` to measure another crawlq source tree, e.g. a branch). Results
are printed and written to ``benchmarks/results/scrapy-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SPIDER = '''
import datetime, json, scrapy
from pathlib import Path

class SiteSpider(scrapy.Spider):
    name = "bench"

    def __init__(self, bases="", out="", **kwargs):
        super().__init__(**kwargs)
        self.bases, self.out = bases.split(","), out

    async def start(self):
        for base in self.bases:
            yield scrapy.Request(base + "/")

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            if not href.startswith("mailto:"):
                yield response.follow(href)

    def closed(self, reason):
        stats = self.crawler.stats.get_stats()
        now = datetime.datetime.now(datetime.timezone.utc)
        Path(self.out).write_text(json.dumps({
            "reason": reason,
            "elapsed": (now - stats["start_time"]).total_seconds(),
            "pages": stats.get("response_received_count", 0),
        }))
'''
#: The crawlq source tree the crawls and children import (``--src``).
SOURCE = os.environ.get("CRAWLQ_BENCH_SRC", str(ROOT / "src"))
SCRAPY_SCHEDULER = "scrapy.core.scheduler.Scheduler"
CRAWLQ_SCHEDULER = "crawlq.contrib.scrapy.Scheduler"
CONCURRENT_REQUESTS = 16


# -- scheduler-level ---------------------------------------------------------------------


def _workload(requests: int, hosts: int, seed: int = 11) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    urls, priorities = [], []
    for n in range(requests):
        urls.append(f"https://host{n % hosts}.example{n % 7}.com/path/{n}/page.html?id={n}")
        priorities.append(rng.randint(-10, 10))
        if n % 10 == 9:  # an exact duplicate of a recent URL
            urls.append(urls[-rng.randint(1, 10)])
            priorities.append(priorities[-1])
    return urls, priorities


class _StandInSlot:
    """The engine slot the crawlq scheduler hooks: remove_request and nextcall."""

    def __init__(self) -> None:
        self.nextcall = self

    def remove_request(self, request: Any) -> None:
        pass

    def schedule(self, delay: float = 0) -> None:
        pass


def _measure_scheduler(params: dict[str, Any]) -> dict[str, Any]:
    """One scheduler-level run, in this (fresh) process."""
    from scrapy import Request, Spider
    from scrapy.crawler import Crawler

    class BenchSpider(Spider):
        name = "bench"

    impl, shape = params["impl"], params["shape"]
    jobdir = params.get("jobdir")
    settings: dict[str, Any] = {
        "LOG_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "CONCURRENT_REQUESTS": CONCURRENT_REQUESTS,
        "SCHEDULER": CRAWLQ_SCHEDULER if impl == "crawlq" else SCRAPY_SCHEDULER,
    }
    if jobdir:
        settings["JOBDIR"] = jobdir
        if impl == "scrapy":  # see the module docstring
            settings["SCHEDULER_PRIORITY_QUEUE"] = "scrapy.pqueues.ScrapyPriorityQueue"
    crawler = Crawler(BenchSpider, settings, init_reactor=True)
    crawler.spider = crawler._create_spider()
    crawler._apply_settings()
    crawler.engine = crawler._create_engine()
    crawler.engine._slot = _StandInSlot()  # type: ignore[assignment]
    scheduler_cls = crawler.engine.scheduler_cls
    scheduler: Any = scheduler_cls.from_crawler(crawler)
    scheduler.open(crawler.spider)
    slot = crawler.engine._slot
    downloader = crawler.engine.downloader
    inflight: deque[tuple[Any, Any]] = deque()

    def fetch(request: Any) -> float:
        """Model the downloader (untimed); return the time the completion took (timed)."""
        _, dslot = downloader._get_slot(request)
        dslot.active.add(request)
        inflight.append((request, dslot))
        if len(inflight) < CONCURRENT_REQUESTS:
            return 0.0
        done, done_slot = inflight.popleft()
        done_slot.active.discard(done)
        start = time.perf_counter()
        slot.remove_request(done)  # crawlq acks here; a no-op for Scrapy's scheduler
        return time.perf_counter() - start

    urls, priorities = _workload(params["requests"], params["hosts"])
    requests = [Request(u, priority=p) for u, p in zip(urls, priorities, strict=True)]
    enqueue, next_request = scheduler.enqueue_request, scheduler.next_request
    budget = params["budget_s"]
    capped = False
    ops = 0
    gc.collect()

    def complete_one() -> float:
        done, done_slot = inflight.popleft()
        done_slot.active.discard(done)
        start = time.perf_counter()
        slot.remove_request(done)
        return time.perf_counter() - start

    out = 0
    timed = 0.0
    if shape == "fill":
        start = time.perf_counter()
        for n, request in enumerate(requests):
            enqueue(request)
            if n % 1000 == 999 and time.perf_counter() - start > budget / 2:
                capped = True
                break
        enqueued = n + 1
        timed = time.perf_counter() - start
        drained = 0.0
        while drained < budget / 2:
            start = time.perf_counter()
            request = next_request()
            drained += time.perf_counter() - start
            if request is None:
                if not inflight:
                    break
                drained += complete_one()
                continue
            out += 1
            drained += fetch(request)
        else:
            capped = True
        timed += drained
        ops = enqueued + out
    else:  # crawl: one pop, then ten children
        seeds, children = requests[: params["hosts"]], requests[params["hosts"] :]
        for request in seeds:
            enqueue(request)
        index = 0
        while timed < budget:
            start = time.perf_counter()
            request = next_request()
            if request is not None:
                for child in children[index : index + 10]:
                    enqueue(child)
                index += 10
            timed += time.perf_counter() - start
            if request is None:
                if not inflight:
                    break
                timed += complete_one()
                continue
            out += 1
            timed += fetch(request)
        else:
            capped = True
        ops = out + min(index, len(children))
    accepted = scheduler.crawler.stats.get_value("scheduler/enqueued")
    scheduler.close("finished")
    return {
        "ops_per_s": ops / timed,
        "dequeued": out,
        "accepted": accepted,
        # A capped run stopped at its time budget: its rate covers what it did.
        "capped": capped,
        "ok": capped or out == accepted,
        "seconds": timed,
    }


# -- end to end ------------------------------------------------------------------------------


class _ServedSite:
    """crawlq's demo site on 127.0.0.x, served from a thread of this process."""

    def __init__(self, pages: int, hosts: int) -> None:
        from crawlq._demo.server import SiteServer
        from crawlq._demo.site import generate_site

        site = generate_site(pages, hosts, seed=7)
        # Drop ?utm_* links: Scrapy keeps those parameters, the server counts by path.
        pages_ = {
            key: dataclasses.replace(
                page, links=tuple(x for x in page.links if not x.suffix.startswith("?"))
            )
            for key, page in site.pages.items()
        }
        self.site = dataclasses.replace(site, pages=pages_)
        self.expected = set(self.site.pages) | set(self.site.broken)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.server = SiteServer(self.site)
        self._run(self.server.__aenter__())

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)

    def reset(self) -> None:
        async def clear() -> None:
            self.server.fetches.clear()

        self._run(clear())

    def exactly_once(self) -> bool:
        async def copy() -> dict[Any, int]:
            return dict(self.server.fetches)

        fetches = self._run(copy())
        return set(fetches) == self.expected and all(c == 1 for c in fetches.values())

    def close(self) -> None:
        self._run(self.server.__aexit__(None, None, None))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _measure_crawl(site: _ServedSite, params: dict[str, Any], workdir: Path) -> dict[str, Any]:
    spider = workdir / "bench_spider.py"
    if not spider.exists():
        spider.write_text(SPIDER)
    out = workdir / "out.json"
    out.unlink(missing_ok=True)
    jobdir = workdir / "job"
    shutil.rmtree(jobdir, ignore_errors=True)
    settings = {
        "SCHEDULER": params["scheduler"],
        "LOG_LEVEL": "ERROR",
        "TELNETCONSOLE_ENABLED": "False",
        "RETRY_ENABLED": "False",
        "CONCURRENT_REQUESTS": str(CONCURRENT_REQUESTS),
        "CONCURRENT_ITEMS": "8",
    }
    if params["jobdir"]:
        settings["JOBDIR"] = str(jobdir)
    command = [
        sys.executable,
        "-m",
        "scrapy",
        "runspider",
        str(spider),
        "-a",
        "bases=" + ",".join(site.server.base_urls),
        "-a",
        f"out={out}",
    ]
    for name, value in settings.items():
        command += ["-s", f"{name}={value}"]
    site.reset()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    environment = {**os.environ, "PYTHONPATH": SOURCE}
    done = subprocess.run(command, cwd=workdir, env=environment, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if done.returncode or not out.exists():
        return {"ok": False, "error": done.stderr[-2000:]}
    data = json.loads(out.read_text())
    pages = data["pages"]
    return {
        "pages_per_s": pages / data["elapsed"],
        "cpu_ms_per_page": 1000 * cpu / pages,
        "pages": pages,
        "ok": data["reason"] == "finished" and site.exactly_once(),
    }


# -- driver ----------------------------------------------------------------------------------


def _child(params: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(params)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SOURCE},
        timeout=1800,
    )
    if done.returncode:
        return {"ok": False, "error": done.stderr[-2000:]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="sched,e2e")
    parser.add_argument("--quick", action="store_true", help="10x smaller scheduler workloads")
    parser.add_argument(
        "--budget", type=float, default=30.0, help="most timed seconds per scheduler run"
    )
    parser.add_argument(
        "--src", help="measure the crawlq source tree at this path (a branch checkout's src/)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.src:
        global SOURCE
        SOURCE = os.environ["CRAWLQ_BENCH_SRC"] = str(Path(args.src).resolve())
    if args.child:
        with tempfile.TemporaryDirectory() as tmp:
            params = json.loads(args.child)
            if params.get("jobdir"):
                params["jobdir"] = str(Path(tmp, "job"))
            print(json.dumps(_measure_scheduler(params)))
        return

    groups = set(args.only.split(","))
    requests = 10_000 if args.quick else 100_000
    measurements: list[tuple[str, dict[str, Any]]] = []
    if "sched" in groups:
        for shape in ("fill", "crawl"):
            for jobdir in (False, True):
                for impl in ("crawlq", "scrapy"):
                    name = f"sched {shape}{' JOBDIR' if jobdir else ''} {impl}"
                    params = {
                        "impl": impl,
                        "shape": shape,
                        "requests": requests,
                        "budget_s": args.budget,
                    }
                    measurements.append((name, {**params, "hosts": 1000, "jobdir": jobdir}))
    if "e2e" in groups:
        for jobdir in (False, True):
            for scheduler in (CRAWLQ_SCHEDULER, SCRAPY_SCHEDULER):
                impl = "crawlq" if scheduler == CRAWLQ_SCHEDULER else "scrapy"
                name = f"e2e{' JOBDIR' if jobdir else ''} {impl}"
                measurements.append((name, {"scheduler": scheduler, "jobdir": jobdir}))

    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in measurements}
    site = _ServedSite(2000, 20) if "e2e" in groups else None
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.repeat):
            for name, params in measurements:
                if name.startswith("e2e"):
                    assert site is not None
                    result = _measure_crawl(site, params, Path(tmp))
                else:
                    result = _child(params)
                results[name].append(result)
                metric = _metric(name)
                value = result.get(metric, result)
                print(f"[{round_ + 1}/{args.repeat}] {name}: {value}", flush=True)
    if site is not None:
        site.close()
    _report(results)


def _metric(name: str) -> str:
    return "pages_per_s" if name.startswith("e2e") else "ops_per_s"


def _median(runs: list[dict[str, Any]], key: str) -> float:
    values = [run[key] for run in runs if key in run]
    return statistics.median(values) if values else float("nan")


def _report(results: dict[str, list[dict[str, Any]]]) -> None:
    rows = []
    print()
    print(f"{'measurement':<28} {'crawlq':>12} {'scrapy':>12} {'ratio':>7}  unit")
    pairs = sorted({name.rsplit(" ", 1)[0] for name in results})
    for base in pairs:
        ours, theirs = results[f"{base} crawlq"], results[f"{base} scrapy"]
        metrics = [_metric(base)] + (["cpu_ms_per_page"] if base.startswith("e2e") else [])
        for metric in metrics:
            a, b = _median(ours, metric), _median(theirs, metric)
            ratio = a / b if metric != "cpu_ms_per_page" else b / a
            ok = all(run.get("ok") for run in ours + theirs)
            label = base if metric == metrics[0] else f"{base} (cpu)"
            if any(run.get("capped") for run in ours + theirs):
                label += " *"
            flag = "" if ok else "  NOT OK"
            print(f"{label:<28} {a:>12,.1f} {b:>12,.1f} {ratio:>6.2f}x  {metric}{flag}")
            rows.append(
                {
                    "measurement": label,
                    "metric": metric,
                    "crawlq": a,
                    "scrapy": b,
                    "ratio": ratio,
                    "ok": ok,
                }
            )
    if any(run.get("capped") for runs in results.values() for run in runs):
        print("* some runs stopped at --budget seconds; their rate covers the part they did")
    print(
        "ratio: crawlq over Scrapy (for cpu_ms_per_page: Scrapy over crawlq); "
        "above 1 is crawlq faster"
    )
    import scrapy

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = ROOT / "benchmarks" / "results" / f"scrapy-{stamp}.json"
    out.parent.mkdir(exist_ok=True)
    environment = {
        "scrapy": scrapy.__version__,
        "python": sys.version,
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(),
    }
    out.write_text(json.dumps({"rows": rows, "raw": results, **environment}, indent=1))
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
