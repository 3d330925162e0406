"""The Redis Cluster benchmark's workers: sessions, the timed section and the check.

``Job`` is what every worker process of one measurement needs; a ``Session``
is one process's connection to the frontier under test (``Crawlq``: ``pop()``
then ``add_many(children, ack=request)``; ``ScrapyRedis``: ``next_request()``
then ``enqueue_request`` per child), and its ``steps`` is the timed loop.
``timed`` starts the worker processes together, times their steps, reads the
servers' CPU around them and notes where workers and servers were allowed to
run (``Job.cpus`` pins the workers); ``check`` drains what is left and
verifies that every URL came out exactly once (and, for crawlq, its counters).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks import workloads
from benchmarks.redis_servers import Node

Result = dict[str, Any]
perf = time.perf_counter

FANOUT = 5
_WORKER_TIMEOUT = 1800.0
#: Seconds a worker keeps asking for a ready request before it gives up.
_EMPTY_LIMIT = 30.0


@dataclass(frozen=True)
class Job:
    """What every worker of one measurement needs (pickled to spawned processes)."""

    impl: str
    url: str
    options: dict[str, Any]  # open_frontier's, for crawlq
    seeds: int
    steps: int
    hosts: int
    workers: int
    cpus: tuple[int, ...] | None = None  # pin each worker process to these CPUs

    def plan(self) -> workloads.W2Plan:
        return workloads.w2_plan(self.seeds, self.steps, self.hosts)


class Session:
    """One process's connection to the frontier under test."""

    pop: Callable[[], Any]
    empty = 0  # pops that found nothing ready (other workers' adds not in yet)

    def requests(self, items: Sequence[tuple[str, int]]) -> list[Any]:
        raise NotImplementedError

    def add(self, requests: list[Any]) -> None:
        """Offer ``requests`` untimed (the seeds)."""
        raise NotImplementedError

    def steps(self, batches: list[list[Any]]) -> list[Any]:
        """The timed loop: one step per batch of children; returns what it dequeued."""
        raise NotImplementedError

    def drain(self) -> list[str]:
        """Dequeue (and ack) everything left; return its URLs."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the connection (crawlq gives back its unserved prefetch)."""

    def wait_pop(self) -> Any:
        """Pop until a request comes, counting the empty pops in ``empty``.

        Raises RuntimeError after ``_EMPTY_LIMIT`` seconds without one.
        """
        deadline = perf() + _EMPTY_LIMIT
        while (request := self.pop()) is None:
            self.empty += 1
            if perf() > deadline:
                raise RuntimeError(f"no request ready for {_EMPTY_LIMIT:.0f} s")
            time.sleep(0.001)
        return request


class Crawlq(Session):
    """crawlq's Frontier: ``pop()``, then ``add_many(children, ack=request)``."""

    def __init__(self, job: Job) -> None:
        import crawlq

        self.make = crawlq.Request
        self.frontier = crawlq.open_frontier(
            job.url, host_delay=0.0, host_concurrency=None, **job.options
        )
        self.pop = self.frontier.pop

    def requests(self, items: Sequence[tuple[str, int]]) -> list[Any]:
        make = self.make
        return [make(url, priority=priority) for url, priority in items]

    def add(self, requests: list[Any]) -> None:
        for start in range(0, len(requests), 100):
            self.frontier.add_many(requests[start : start + 100])

    def steps(self, batches: list[list[Any]]) -> list[Any]:
        pop, add_many = self.frontier.pop, self.frontier.add_many
        dequeued: list[Any] = []
        append = dequeued.append
        for batch in batches:
            request = pop()
            if request is None:
                request = self.wait_pop()
            add_many(batch, ack=request)
            append(request)
        return dequeued

    def drain(self) -> list[str]:
        pop, ack = self.frontier.pop, self.frontier.ack
        urls: list[str] = []
        for _ in range(5):  # a shard found empty is asked again after half a second
            while (request := pop()) is not None:
                ack(request)
                urls.append(str(request.url))
            if not len(self.frontier):
                break
            time.sleep(0.6)
        self.frontier.flush()
        return urls

    def close(self) -> None:
        self.frontier.close()


class ScrapyRedis(Session):
    """scrapy-redis's Scheduler: ``next_request()``, then ``enqueue_request`` per child."""

    def __init__(self, job: Job) -> None:
        from scrapy.exceptions import ScrapyDeprecationWarning

        from benchmarks.peers import ScrapyRedis as Adapter

        self.adapter = Adapter("redis", job.url)
        with warnings.catch_warnings():  # its open() calls the deprecated Spider.log
            warnings.simplefilter("ignore", ScrapyDeprecationWarning)
            self.adapter.open()
        self.pop = self.adapter.pop

    def requests(self, items: Sequence[tuple[str, int]]) -> list[Any]:
        return self.adapter.requests(items)

    def add(self, requests: list[Any]) -> None:
        for request in requests:
            self.adapter.add(request)

    def steps(self, batches: list[list[Any]]) -> list[Any]:
        pop, add = self.adapter.pop, self.adapter.add
        dequeued: list[Any] = []
        append = dequeued.append
        for batch in batches:
            request = pop()
            if request is None:
                request = self.wait_pop()
            for child in batch:
                add(child)
            append(request)
        return dequeued

    def drain(self) -> list[str]:
        urls: list[str] = []
        while (request := self.pop()) is not None:
            urls.append(str(request.url))
        return urls


def session(job: Job) -> Session:
    return Crawlq(job) if job.impl == "crawlq" else ScrapyRedis(job)


def _worker(job: Job, index: int, ready: Any, go: Any, finish: Any, out: Any) -> None:
    """One worker process: its steps (``index``, ``index + workers``...), timed from "go".

    Puts two messages on ``out``: ("done", index, result or error) when its
    steps are done, then ("closed", index, error or None) after ``finish`` is
    set, once the servers' CPU was read, when it has closed its frontier.
    """
    released, opened = False, None
    try:
        try:
            if job.cpus:  # before any thread starts, so all of them inherit it
                os.sched_setaffinity(0, job.cpus)
            plan = job.plan()
            mine = range(index, plan.steps, job.workers)
            opened = session(job)
            items = list(zip(plan.child_urls, plan.child_priorities, strict=True))
            batches = [opened.requests(items[FANOUT * s : FANOUT * (s + 1)]) for s in mine]
            ready.release()
            released = True
            go.wait()
            cpu = time.process_time()
            dequeued = opened.steps(batches)
            end = perf()
            cpu = time.process_time() - cpu
            urls = [str(r.url) for r in dequeued]
            result: Result = {"steps": len(batches), "end": end, "cpu": cpu, "empty": opened.empty}
            result["cpus"] = sorted(os.sched_getaffinity(0))
            out.put(("done", index, {**result, "urls": urls}))
        except Exception as exc:  # report what the frontier does, whatever it is
            out.put(("done", index, {"error": f"worker {index}: {type(exc).__name__}: {exc}"}))
            if not released:
                ready.release()
        finish.wait()
    finally:
        error = None
        try:
            if opened is not None:
                opened.close()
        except Exception as exc:
            error = f"worker {index} close: {type(exc).__name__}: {exc}"
        out.put(("closed", index, error))


def _collect(out: Any, kind: str, count: int) -> list[Any]:
    """``count`` messages of ``kind`` from the workers, in any order."""
    found = []
    for _ in range(count):
        try:
            got, _, payload = out.get(timeout=_WORKER_TIMEOUT)
        except queue.Empty:
            raise RuntimeError(f"a worker died or hung: no {kind!r} message") from None
        if got != kind:
            raise RuntimeError(f"worker message {got!r} where {kind!r} was expected")
        found.append(payload)
    return found


def _threads_cpus(nodes: Sequence[Node]) -> list[int]:
    """The CPUs any thread of the servers may run on."""
    cpus: set[int] = set()
    for node in nodes:
        for thread in os.listdir(f"/proc/{node.pid}/task"):
            cpus.update(os.sched_getaffinity(int(thread)))
    return sorted(cpus)


def timed(job: Job, nodes: Sequence[Node]) -> Result:
    """Start the workers together (spawn), time their steps, read the servers' CPU around.

    The servers' command statistics are reset before and read after the
    timed section (outside the CPU readings): calls and microseconds of
    each command per step, all primaries summed.
    """
    context = multiprocessing.get_context("spawn")
    ready, go, finish, out = context.Semaphore(0), context.Event(), context.Event(), context.Queue()
    workers = [
        context.Process(target=_worker, args=(job, i, ready, go, finish, out))
        for i in range(job.workers)
    ]
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            if not ready.acquire(timeout=300):
                raise RuntimeError("a worker did not get ready in 300 s")
        for node in nodes:
            node.command("CONFIG", "RESETSTAT")
        before = [node.cpu() for node in nodes]
        start = perf()
        go.set()
        done = _collect(out, "done", len(workers))
        after = [node.cpu() for node in nodes]
        commands = [node.commands() for node in nodes]
        finish.set()
        closed = [error for error in _collect(out, "closed", len(workers)) if error]
    finally:
        go.set()
        finish.set()
        for worker in workers:
            worker.join(timeout=60)
            if worker.is_alive():
                worker.terminate()
                worker.join()
    if errors := [r["error"] for r in done if "error" in r] + closed:
        return {"error": " | ".join(errors)[:2000]}
    steps = sum(r["steps"] for r in done)
    spent = [b - a for a, b in zip(before, after, strict=True)]
    per_step: dict[str, list[float]] = {}
    for stats in commands:
        for name, (calls, usec) in stats.items():
            if name in ("config|resetstat", "info"):  # the benchmark's own
                continue
            total = per_step.setdefault(name, [0.0, 0.0])
            total[0] += calls / steps
            total[1] += usec / steps
    return {
        "steps": steps,
        "steps_rate": steps / (max(r["end"] for r in done) - start),
        "server_us": 1e6 * sum(spent) / steps,
        "busiest_us": 1e6 * max(spent) / steps,
        "primary_us": [1e6 * s / steps for s in spent],
        "client_us": 1e6 * sum(r["cpu"] for r in done) / steps,
        "empty_pops": sum(r["empty"] for r in done),
        "commands": per_step,
        # where the processes were allowed to run: proof of the pinning, or its absence
        "worker_cpus": sorted({c for r in done for c in r["cpus"]}),
        "server_cpus": _threads_cpus(nodes),
        "urls": [url for r in done for url in r["urls"]],
    }


# -- the check ---------------------------------------------------------------------------


def check(job: Job, dequeued: list[str]) -> str:
    """Drain what is left, then "ok" or what is wrong: every seed and distinct child
    dequeued exactly once; for crawlq also its counters (accepted == acked == popped,
    nothing queued, leased, released or expired, duplicates as offered)."""
    opened = session(job)
    try:
        dequeued = dequeued + opened.drain()
    finally:
        opened.close()
    plan = job.plan()
    distinct = {*plan.seed_urls, *plan.child_urls}
    got = set(dequeued)
    problems = [
        f"{what}: {count}"
        for what, count in (
            ("dequeued twice", len(dequeued) - len(got)),
            ("never dequeued", len(distinct - got)),
            ("not offered", len(got - distinct)),
        )
        if count
    ]
    if job.impl == "crawlq":
        reopened = Crawlq(job)
        try:
            stats = reopened.frontier.stats()
        finally:
            reopened.close()
        c, offered = stats.counters, len(plan.seed_urls) + len(plan.child_urls)
        expected = {
            "accepted": (c.accepted, len(distinct)),
            "acked": (c.acked, c.accepted),
            "popped": (c.popped, c.acked),
            "duplicates": (c.duplicates, offered - c.accepted),
            "released": (c.released, 0),
            "expired": (c.expired, 0),
            "queued": (stats.queued, 0),
            "leased": (stats.leased, 0),
        }
        problems += [f"{k} {v} (expected {e})" for k, (v, e) in expected.items() if v != e]
    return "; ".join(problems) or "ok"
