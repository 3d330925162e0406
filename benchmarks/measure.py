"""Run ONE measurement in this (fresh) process; print its result as JSON.

The runner (``python -m benchmarks``) starts this module once per measurement
and repeat. To profile one measurement, run it by hand, e.g.::

    python -m cProfile -s cumtime -m benchmarks.measure \\
        '{"workload": "W1", "backend": "memory", "impl": "crawlq",
          "params": {"n": 100000, "hosts": 1000, "enqueue": "add_many", "dequeue": "pop+ack"}}'

Each timed loop is written once, over any adapter (``adapters.make``): the
adapter's bound methods are looked up before the timer starts, requests are
built before it, and ``gc.collect()`` runs before it (the collector stays
enabled, as for users). The result is the last line of stdout, after
``RESULT_MARKER``; the W4K drain prints ``PROGRESS_MARKER n`` lines as it goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import itertools
import json
import multiprocessing
import os
import resource
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from benchmarks import workloads
from benchmarks.adapters import Adapter, canonicalizer, make

RESULT_MARKER = "@@RESULT@@ "
PROGRESS_MARKER = "@@PROGRESS@@ "
Result = dict[str, Any]
perf = time.perf_counter
_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Section:
    """A timed section: wall time and, on Redis, the redis-server's CPU time.

    The server's CPU per operation bounds a shared frontier however many
    workers it has (one server runs on one core); read from /proc for the pid
    in CRAWLQ_BENCH_SERVER_PID.
    """

    def __init__(self) -> None:
        self.cpu = _server_cpu()
        self.start = perf()

    def record(self, result: Result, name: str, count: int, wall: float | None = None) -> None:
        wall = perf() - self.start if wall is None else wall
        cpu = _server_cpu() - self.cpu
        result[f"{name}_rate"] = count / wall
        if self.cpu >= 0 and count:
            result[f"{name}_server_us"] = 1e6 * cpu / count


def _server_cpu() -> float:
    try:
        with open(f"/proc/{os.environ['CRAWLQ_BENCH_SERVER_PID']}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except (KeyError, OSError):
        return -1.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while chunk := list(itertools.islice(iterator, size)):
        yield chunk


def _non_increasing(priorities: list[int]) -> bool:
    return all(a >= b for a, b in itertools.pairwise(priorities))


def enqueue(a: Adapter, requests: list[Any], how: str, batch: int = 100) -> None:
    """Offer ``requests`` with ``add_many`` in batches, or one ``add`` each."""
    if how == "add_many" and a.add_many is not None:
        add_many = a.add_many
        for group in _chunks(requests, batch):
            add_many(group)
    else:
        add = a.add
        for request in requests:
            add(request)


def drain(a: Adapter, count: int, ack: bool, budget: float | None) -> tuple[list[Any], float]:
    """Dequeue ``count`` requests (pop, then ack where the adapter has one).

    An adapter with ``after_pop`` (Scrapy DAPQ's modelled downloader) is timed
    per call, without that hook, and stops once ``budget`` timed seconds pass.
    """
    pop, done, after = a.pop, a.ack if ack else None, a.after_pop
    out: list[Any] = []
    append = out.append
    gc.collect()
    if after is None:
        start = perf()
        if done is not None:
            for _ in range(count):
                request = pop()
                done(request)
                append(request)
        else:
            for _ in range(count):
                append(pop())
        return out, perf() - start
    elapsed = 0.0
    for _ in range(count):
        start = perf()
        request = pop()
        if done is not None:
            done(request)
        elapsed += perf() - start
        append(request)
        after(request)
        if budget is not None and elapsed > budget:
            break
    return out, elapsed


def w1(a: Adapter, spec: Result) -> Result:
    """W1 (and W5): enqueue everything, then dequeue everything."""
    p = spec["params"]
    maker = workloads.w5_data if spec["workload"] == "W5" else workloads.w1_data
    data = maker(p["n"], p["hosts"])
    requests = a.requests(zip(data.urls, data.priorities, strict=True))
    a.open()
    result: Result = {}
    gc.collect()
    section = Section()
    enqueue(a, requests, p.get("enqueue", "add"))
    section.record(result, "enqueue", len(requests))
    accepted = a.size()
    ack = p.get("dequeue", "pop+ack") == "pop+ack"
    section = Section()
    out, seconds = drain(a, accepted, ack, p.get("budget_s"))
    section.record(result, "dequeue" if ack else "pop_only", len(out), seconds)
    urls = [a.url(r) for r in out if r is not None]
    result["capped"] = capped = len(out) < accepted
    result["ok"] = accepted == data.unique and (
        capped or (len(urls) == accepted and set(urls) == {a.url(r) for r in requests})
    )
    result["priority_order"] = _non_increasing([a.priority(r) for r in out if r is not None])
    a.close()
    return result


def _w2_requests(a: Adapter, p: Result) -> tuple[workloads.W2Plan, list[Any], list[list[Any]]]:
    """W2's and A1's plan, its seeds and its batches of children as ``a``'s requests."""
    plan = workloads.w2_plan(p["seeds"], p["steps"], p["hosts"])
    seeds = a.requests(zip(plan.seed_urls, plan.seed_priorities, strict=True))
    children = a.requests(zip(plan.child_urls, plan.child_priorities, strict=True))
    return plan, seeds, list(_chunks(children, plan.fanout))


def _left_after(plan: workloads.W2Plan) -> int:
    """What a run of ``plan`` leaves queued: every distinct URL offered, less one per step."""
    return len({*plan.seed_urls, *plan.child_urls}) - plan.steps


def w2(a: Adapter, spec: Result) -> Result:
    """W2: seeds, then steps of: dequeue one, offer its five children, ack it."""
    p = spec["params"]
    plan, seeds, batches = _w2_requests(a, p)
    a.open()
    enqueue(a, seeds, "add_many")
    pop, ack, add, add_many = a.pop, a.ack, a.add, a.add_many
    how = p.get("children", "add")

    def step(batch: list[Any]) -> Any:  # one call per step, for every adapter
        request = pop()
        if how == "add_many_ack":
            add_many(batch, ack=request)
            return request
        if how == "add_many":
            add_many(batch)
        else:
            for child in batch:
                add(child)
        if ack is not None:
            ack(request)
        return request

    result: Result = {}
    after = a.after_pop
    gc.collect()
    section = Section()
    if after is None:
        for batch in batches:
            step(batch)
        section.record(result, "steps", len(batches))
    else:
        elapsed = 0.0
        for batch in batches:
            start = perf()
            request = step(batch)
            elapsed += perf() - start
            after(request)
        section.record(result, "steps", len(batches), elapsed)
    result["ok"] = a.size() == _left_after(plan)
    a.close()
    return result


def a1(a: Adapter, spec: Result) -> Result:
    """A1: asyncio, coroutines in one process, each: get, sleep(0), offer five children, done.

    The W2 plan (the same seeds and children), served by the implementation's
    own asyncio scheduler (crawlq's ``Scheduler``, qcrawl's ``Scheduler``):
    what an asyncio crawler with that many workers does per page, minus the
    fetch. A worker takes the next batch of five children, waits in ``get``,
    yields once to the loop (a fetch would), offers the batch (``add_many``,
    or one ``add`` each where there is none) and marks its request done.
    """
    p = spec["params"]
    plan, seeds, batches = _w2_requests(a, p)
    a.open()
    result: Result = {}

    async def crawl() -> None:
        scheduler = a.async_scheduler()
        await scheduler.add_many(seeds)
        work = iter(batches)

        async def worker() -> None:
            for batch in work:
                request = await scheduler.get()
                await asyncio.sleep(0)
                await scheduler.add_many(batch)
                scheduler.task_done(request)

        gc.collect()
        section = Section()
        await asyncio.gather(*(worker() for _ in range(p["coroutines"])))
        section.record(result, "steps", len(batches))
        await scheduler.close()

    a.run_coroutine(crawl())
    result["ok"] = a.size() == _left_after(plan)
    a.close()
    return result


def w3(a: Adapter, spec: Result) -> Result:
    """W3: RSS growth per seen request, adding and draining in chunks of 1,000."""
    count = spec["params"]["n"]
    a.open()
    pop, ack, add, size = a.pop, a.ack, a.add, a.size
    warmup = [f"https://warmup{n % 10}.example.net/{n}" for n in range(1_000)]

    def run(urls: Iterable[str]) -> None:
        for chunk in _chunks(urls, 1_000):
            for request in a.requests((url, 0) for url in chunk):
                add(request)
            for _ in range(size()):
                request = pop()
                if ack is not None:
                    ack(request)

    run(warmup)
    gc.collect()
    before = rss()
    start = perf()
    run(workloads.w3_urls(count))
    seconds = perf() - start
    gc.collect()
    after = rss()
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return {
        "bytes_per_seen": (after - before) / count,
        "bytes_per_seen_trimmed": (rss() - before) / count,
        "seconds": seconds,
        "ok": a.seen() == count + len(warmup),
    }


def fill(a: Adapter, spec: Result) -> Result:
    """W4 / W4K preparation: ``n`` unique requests into a fresh job, closed cleanly."""
    p = spec["params"]
    a.open()
    start = perf()
    _fill(a, p["n"], p["hosts"])
    seconds = perf() - start
    queued = a.size()
    rss_filled = rss()
    a.close()
    disk = sum(f.stat().st_blocks * 512 for f in Path(spec["where"]).rglob("*") if f.is_file())
    return {
        "fill_rate": p["n"] / seconds,
        "rss_filled": rss_filled,
        "peak_rss": peak_rss(),
        "disk_bytes": disk,
        "ok": queued == p["n"],
    }


def _fill(a: Adapter, count: int, hosts: int) -> None:
    for chunk in _chunks(workloads.fill_items(count, hosts), 1_000):
        enqueue(a, a.requests(chunk), "add_many")


def reopen(a: Adapter, spec: Result) -> Result:
    """W4: reopen a filled job; time to open and to the first request, then drain."""
    p = spec["params"]
    limit, budget = p.get("drain"), p.get("budget_s")
    a.prepare()
    gc.collect()
    start = perf()
    a.open()
    open_s = perf() - start
    first = a.pop()
    first_s = perf() - start
    rss_reopen = rss()
    if a.ack is not None:
        a.ack(first)
    count = a.size() if limit is None else min(a.size(), limit - 1)  # crawlq's counts the lease
    pop, ack, budget = a.pop, a.ack, budget or float("inf")
    drained, start = 0, perf()
    while drained < count and (drained % 100 or perf() - start < budget):
        if (request := pop()) is None:
            break
        if ack is not None:
            ack(request)
        drained += 1
    seconds = perf() - start
    result = {
        "open_s": open_s,
        "first_s": first_s,
        "drain_rate": drained / seconds,
        "rss_reopen": rss_reopen,
        "rss_drained": rss(),
        "peak_rss": peak_rss(),
        "capped": drained < count,
        "ok": first is not None,
    }
    a.close()
    return result


def kill_drain(a: Adapter, spec: Result) -> Result:
    """W4K: drain (after filling here, never closed, in the first-session case),
    recording each pop (P) and ack (A) with one unbuffered write, until killed."""
    p = spec["params"]
    a.open()
    if p["case"] == "first-session":
        _fill(a, p["n"], p["hosts"])
    fd = os.open(spec["record"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for n in range(a.size()):
        if n % 1_000 == 0:
            print(f"{PROGRESS_MARKER}{n}", flush=True)
        request = a.pop()
        os.write(fd, f"P\t{a.url(request)}\n".encode())
        if a.ack is not None:
            a.ack(request)
        os.write(fd, f"A\t{a.url(request)}\n".encode())
    return {"error": "the drain finished before it was killed"}


def kill_count(a: Adapter, spec: Result) -> Result:
    """W4K: reopen after the kill; compare what comes out with the record."""
    p = spec["params"]
    expected = {a.url(r) for r in a.requests(workloads.fill_items(p["n"], p["hosts"]))}
    popped, done = set(), set()
    with open(spec["record"], encoding="utf-8") as record:
        for line in record:
            kind, _, url = line.rstrip("\n").partition("\t")
            (popped if kind == "P" else done).add(url)
    found: list[str] = []
    error = None
    try:
        a.open()
        found = [a.url(r) for r in drain(a, min(a.size(), 3 * p["n"]), True, None)[0]]
    except Exception as exc:  # report what the store does, whatever it is
        error = f"{type(exc).__name__}: {exc}"[:300]
    remaining, leased = expected - popped, popped - done
    return {
        "dequeued_at_kill": len(popped),
        "remaining": len(remaining),
        "found": len(found),
        "lost": len(remaining - set(found)),
        "redelivered": len(set(found) & leased),
        "resurrected": len(set(found) & done),
        "reopen_error": error,
        "ok": error is None and not remaining - set(found),
    }


def _worker(spec: Result, ready: Any, go: Any, out: Any) -> None:
    a = make(spec)
    a.open()
    pop, ack = a.pop, a.ack
    done = 0
    ready.release()
    go.wait()
    while (request := pop()) is not None:
        if ack is not None:
            ack(request)
        done += 1
    out.put((done, perf()))
    a.close()


def w6(a: Adapter, spec: Result) -> Result:
    """W6: a filled frontier drained by ``workers`` processes started together."""
    p = spec["params"]
    data = workloads.w1_data(p["n"], p["hosts"], duplicate_every=0)
    a.open()
    enqueue(a, a.requests(zip(data.urls, data.priorities, strict=True)), "add_many", 1_000)
    a.close()
    context = multiprocessing.get_context("spawn")
    ready, go, out = context.Semaphore(0), context.Event(), context.Queue()
    workers = [
        context.Process(target=_worker, args=(spec, ready, go, out)) for _ in range(p["workers"])
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.acquire()
    section = Section()
    go.set()
    results = [out.get(timeout=600) for _ in workers]
    done = sum(n for n, _ in results)
    result: Result = {"ok": done == p["n"]}
    section.record(result, "dequeue", done, max(t for _, t in results) - section.start)
    for worker in workers:
        worker.join()
    return result


def c1(spec: Result) -> Result:
    """C1: canonicalise the W1 URLs."""
    urls = workloads.w1_data(spec["params"]["n"], spec["params"]["hosts"]).urls
    canonical = canonicalizer(spec["impl"])
    gc.collect()
    start = perf()
    for url in urls:
        canonical(url)
    result: Result = {"urls_rate": len(urls) / (perf() - start), "ok": True}
    if spec["impl"] == "crawlq":  # not timed: how often crawlq and w3lib differ
        w3lib = canonicalizer("w3lib")
        result["differs_from_w3lib"] = sum(canonical(u) != w3lib(u) for u in set(urls))
    return result


OPS = {
    "W1": w1,
    "W5": w1,
    "W2": w2,
    "W3": w3,
    "W6": w6,
    "fill": fill,
    "reopen": reopen,
    "drain": kill_drain,
    "count": kill_count,
}


def measure(spec: Result) -> Result:
    if spec["workload"] == "C1":
        return c1(spec)
    if spec["workload"] == "E2E":
        from benchmarks.e2e import crawl

        return crawl(spec)
    a = make(spec)
    if spec["workload"] == "A1":  # runs its own event loop (run_coroutine)
        return a1(a, spec)
    return a.run(lambda: OPS[spec.get("op", spec["workload"])](a, spec))


if __name__ == "__main__":
    result = measure(json.loads(sys.argv[1]))
    sys.stdout.write("\n" + RESULT_MARKER + json.dumps(result) + "\n")
