"""crawlq's Redis store against scrapy-redis and qcrawl's Redis queue, one local server.

    python benchmarks/redis_bench.py [--repeat 3] [--quick] [--only W1,W2,W6] [--impls crawlq]

Starts one redis-server on a free 127.0.0.1 port (no persistence), runs every
measurement in a fresh Python process against it (the server is flushed
before each), prints medians and crawlq's ratios, and stops the server by its
pid. Repeats are interleaved (every measurement once, then again) and the
table shows medians with ±half the min-max range. Needs redis-server,
scrapy-redis and qcrawl (benchmark-only peers).

Workloads (data from workloads.py, so they match the other benchmarks):

W1  100,000 distinct URLs over 1,000 hosts, priorities in [-10, 10], 10%
    exact duplicates mixed in. Enqueue all, then dequeue all. crawlq enqueues
    through ``add_many`` in batches of 100 (and, in its own run, one ``add``
    per request); peers have no batch API. Dequeue is crawlq's ``pop`` (a
    lease; its prefetch serves most pops locally), scrapy-redis's
    ``next_request`` and qcrawl's ``get``.
W2  1,000 seeds; each step dequeues one request, offers its 5 children (half
    already seen) and, for crawlq, acks the parent: ``pop`` then
    ``add_many(5, ack=parent)`` (one round trip), or ``pop``, ``add_many(5)``,
    ``ack``. Peers: dequeue, then 5 single enqueues.
W6  the W1 frontier drained by 1, then 2, worker processes, each completing
    what it takes (crawlq: ``pop`` + ``ack``; scrapy-redis: ``next_request``);
    total dequeues per second.

Peers are configured as documented: scrapy-redis's Scheduler with its
PriorityQueue, RFPDupeFilter and default (pickle) serializer; qcrawl's
RedisQueue with ``dedupe=True`` (its default, ``dedupe=False``, keeps every
duplicate), given crawlq's priorities as is since that queue serves the
highest number first.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads

perf = time.perf_counter
BATCH = 100
Result = dict[str, Any]


class Section:
    """A timed section: its wall time and the redis-server's CPU time.

    The server's CPU per operation is what bounds a shared frontier: one
    server runs on one core however many workers it serves. It is read from
    /proc (Linux) for the pid in CRAWLQ_BENCH_SERVER_PID.
    """

    def __init__(self) -> None:
        self.wall = perf()
        self.cpu = _server_cpu()

    def record(self, result: Result, metric: str, count: int) -> None:
        """Put ``metric``_rate (per second) and ``metric``_server_us (per op) in ``result``."""
        wall, cpu = perf() - self.wall, _server_cpu() - self.cpu
        result[f"{metric}_rate"] = count / wall
        if cpu >= 0:
            result[f"{metric}_server_us"] = 1e6 * cpu / count


def _server_cpu() -> float:
    """CPU seconds the benchmark's redis-server has used; -1 where unknown."""
    pid = os.environ.get("CRAWLQ_BENCH_SERVER_PID")
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return -1.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _crawl(url: str) -> str:
    """The crawlq frontier URL on the benchmark server."""
    return f"{url}?crawl=bench"


# -- crawlq -------------------------------------------------------------------------


def _crawlq_requests(urls: list[str], priorities: list[int]) -> list[Any]:
    import crawlq

    return [crawlq.Request(u, priority=p) for u, p in zip(urls, priorities, strict=True)]


def crawlq_w1(url: str, sizes: workloads.Sizes, params: dict[str, Any]) -> Result:
    import crawlq

    data = workloads.w1_data(sizes.w1_unique, sizes.w1_hosts)
    requests = _crawlq_requests(data.urls, data.priorities)
    frontier = crawlq.open_frontier(_crawl(url))
    result: Result = {}
    gc.collect()
    section = Section()
    if params["enqueue"] == "add_many":
        for i in range(0, len(requests), BATCH):
            frontier.add_many(requests[i : i + BATCH])
    else:
        for request in requests:
            frontier.add(request)
    section.record(result, "enqueue", len(requests))
    result["accepted"] = accepted = len(frontier)
    if params.get("dequeue", True):
        pop = frontier.pop
        priorities: list[int] = []
        append = priorities.append
        section = Section()
        while (request := pop()) is not None:
            append(request.priority)
        section.record(result, "dequeue", len(priorities))
        result["ok"] = accepted == data.unique == len(priorities) and _non_increasing(priorities)
    else:
        result["ok"] = accepted == data.unique
    frontier.close()
    return result


def crawlq_w2(url: str, sizes: workloads.Sizes, params: dict[str, Any]) -> Result:
    import crawlq

    plan = workloads.w2_plan(sizes.w2_seeds, W2_STEPS[sizes is QUICK], sizes.w2_hosts)
    seeds = _crawlq_requests(plan.seed_urls, plan.seed_priorities)
    children = _crawlq_requests(plan.child_urls, plan.child_priorities)
    batches = [children[i : i + 5] for i in range(0, len(children), 5)]
    frontier = crawlq.open_frontier(_crawl(url))
    frontier.add_many(seeds)
    pop, add_many, ack = frontier.pop, frontier.add_many, frontier.ack
    result: Result = {}
    gc.collect()
    section = Section()
    if params.get("ack") == "in add_many":
        for batch in batches:
            add_many(batch, ack=pop())
    else:
        for batch in batches:
            request = pop()
            add_many(batch)
            ack(request)  # type: ignore[arg-type]  # never None: seeds outnumber steps
    section.record(result, "steps", len(batches))
    result["ok"] = frontier.stats().leased <= 1
    frontier.close()
    return result


def _crawlq_drain(url: str, ready: Any, go: Any, out: Any) -> None:
    import crawlq

    frontier = crawlq.open_frontier(_crawl(url))
    pop, ack = frontier.pop, frontier.ack
    done = 0
    ready.release()
    go.wait()
    while (request := pop()) is not None:
        ack(request)
        done += 1
    out.put((done, perf()))
    frontier.close()


def crawlq_w6(url: str, sizes: workloads.Sizes, params: dict[str, Any]) -> Result:
    import crawlq

    data = workloads.w1_data(W6_SIZE[sizes is QUICK], sizes.w1_hosts, duplicate_every=0)
    with crawlq.open_frontier(_crawl(url)) as frontier:
        requests = _crawlq_requests(data.urls, data.priorities)
        for i in range(0, len(requests), 1000):
            frontier.add_many(requests[i : i + 1000])
    return _run_workers(_crawlq_drain, url, params["workers"], data.unique)


# -- scrapy-redis -------------------------------------------------------------------


def _scrapy_scheduler(url: str) -> Any:
    import redis
    from scrapy import Spider
    from scrapy_redis.dupefilter import RFPDupeFilter  # type: ignore[import-untyped]
    from scrapy_redis.scheduler import Scheduler  # type: ignore[import-untyped]

    server = redis.Redis.from_url(url)
    scheduler = Scheduler(
        server,
        persist=True,
        queue_key="%(spider)s:requests",
        queue_cls="scrapy_redis.queue.PriorityQueue",
        dupefilter=RFPDupeFilter(server, "bench:dupefilter"),
    )
    scheduler.open(Spider(name="bench"))
    return scheduler


def _scrapy_requests(urls: list[str], priorities: list[int]) -> list[Any]:
    from scrapy import Request

    return [Request(u, priority=p) for u, p in zip(urls, priorities, strict=True)]


def scrapy_w1(url: str, sizes: workloads.Sizes, params: dict[str, Any]) -> Result:
    data = workloads.w1_data(sizes.w1_unique, sizes.w1_hosts)
    requests = _scrapy_requests(data.urls, data.priorities)
    scheduler = _scrapy_scheduler(url)
    enqueue = scheduler.enqueue_request
    result: Result = {}
    gc.collect()
    section = Section()
    for request in requests:
        enqueue(request)
    section.record(result, "enqueue", len(requests))
    result["accepted"] = accepted = len(scheduler)
    priorities = []
    section = Section()
    while (request := scheduler.next_request()) is not None:
        priorities.append(request.priority)
    section.record(result, "dequeue", len(priorities))
    result["ok"] = accepted == data.unique == len(priorities) and _non_increasing(priorities)
    return result


def scrapy_w2(url: str, sizes: workloads.Sizes, params: dict[str, Any]) -> Result:
    plan = workloads.w2_plan(sizes.w2_seeds, W2_STEPS[sizes is QUICK], sizes.w2_hosts)
    scheduler = _scrapy_scheduler(url)
    for request in _scrapy_requests(plan.seed_urls, plan.seed_priorities):
        scheduler.enqueue_request(request)
    children = _scrapy_requests(plan.child_urls, plan.child_priorities)
    batches = [children[i : i + 5] for i in range(0, len(children), 5)]
    next_request, enqueue = scheduler.next_request, scheduler.enqueue_request
    result: Result = {"ok": True}
    gc.collect()
    section = Section()
    for batch in batches:
        next_request()
        for child in batch:
            enqueue(child)
    section.record(result, "steps", len(batches))
    return result


def _scrapy_drain(url: str, ready: Any, go: Any, out: Any) -> None:
    scheduler = _scrapy_scheduler(url)
    done = 0
    ready.release()
    go.wait()
    while scheduler.next_request() is not None:
        done += 1
    out.put((done, perf()))


def scrapy_w6(url: str, sizes: workloads.Sizes, params: dict[str, Any]) -> Result:
    data = workloads.w1_data(W6_SIZE[sizes is QUICK], sizes.w1_hosts, duplicate_every=0)
    scheduler = _scrapy_scheduler(url)
    for request in _scrapy_requests(data.urls, data.priorities):
        scheduler.enqueue_request(request)
    return _run_workers(_scrapy_drain, url, params["workers"], data.unique)


# -- qcrawl -------------------------------------------------------------------------


def qcrawl_w1(url: str, sizes: workloads.Sizes, params: dict[str, Any]) -> Result:
    from qcrawl.core.queues.redis import RedisQueue  # type: ignore[import-untyped]
    from qcrawl.core.request import Request  # type: ignore[import-untyped]

    data = workloads.w1_data(sizes.w1_unique, sizes.w1_hosts)
    requests = [Request(url=u) for u in data.urls]

    async def main() -> Result:
        queue = RedisQueue(url=url, namespace="bench", dedupe=True)
        put = queue.put
        result: Result = {}
        gc.collect()
        section = Section()
        for request, priority in zip(requests, data.priorities, strict=True):
            await put(request, priority)
        section.record(result, "enqueue", len(requests))
        result["accepted"] = accepted = await queue.size()
        got = 0
        section = Section()
        for _ in range(accepted):
            await queue.get(timeout=1.0)
            got += 1
        section.record(result, "dequeue", got)
        await queue.close()
        result["ok"] = accepted == data.unique == got
        return result

    return asyncio.run(main())


def qcrawl_w2(url: str, sizes: workloads.Sizes, params: dict[str, Any]) -> Result:
    from qcrawl.core.queues.redis import RedisQueue
    from qcrawl.core.request import Request

    plan = workloads.w2_plan(sizes.w2_seeds, W2_STEPS[sizes is QUICK], sizes.w2_hosts)
    children = [Request(url=u) for u in plan.child_urls]

    async def main() -> Result:
        queue = RedisQueue(url=url, namespace="bench", dedupe=True)
        for seed in plan.seed_urls:
            await queue.put(Request(url=seed), 0)
        gc.collect()
        result: Result = {"ok": True}
        section = Section()
        for step in range(plan.steps):
            await queue.get(timeout=1.0)
            for k in range(step * 5, step * 5 + 5):
                await queue.put(children[k], plan.child_priorities[k])
        section.record(result, "steps", plan.steps)
        await queue.close()
        return result

    return asyncio.run(main())


# -- shared -------------------------------------------------------------------------

QUICK = workloads.QUICK
W2_STEPS = {False: 10_000, True: 2_000}
W6_SIZE = {False: 40_000, True: 8_000}


def _non_increasing(priorities: list[int]) -> bool:
    return all(a >= b for a, b in itertools.pairwise(priorities))


def _run_workers(target: Callable[..., None], url: str, count: int, expected: int) -> Result:
    """Drain a seeded frontier with ``count`` processes started together."""
    context = multiprocessing.get_context("spawn")
    ready, go, out = context.Semaphore(0), context.Event(), context.Queue()
    processes = [context.Process(target=target, args=(url, ready, go, out)) for _ in range(count)]
    for process in processes:
        process.start()
    for _ in processes:
        ready.acquire()
    section = Section()
    go.set()
    results = [out.get(timeout=600) for _ in processes]
    done = sum(n for n, _ in results)
    # The rate counts until the last worker finished (its own clock reading).
    finished = max(t for _, t in results)
    result: Result = {"ok": done == expected}
    section.record(result, "dequeue", done)
    result["dequeue_rate"] = done / (finished - section.wall)
    for process in processes:
        process.join()
    return result


RUNNERS: dict[tuple[str, str], Callable[[str, workloads.Sizes, dict[str, Any]], Result]] = {
    ("W1", "crawlq"): crawlq_w1,
    ("W2", "crawlq"): crawlq_w2,
    ("W6", "crawlq"): crawlq_w6,
    ("W1", "scrapy-redis"): scrapy_w1,
    ("W2", "scrapy-redis"): scrapy_w2,
    ("W6", "scrapy-redis"): scrapy_w6,
    ("W1", "qcrawl"): qcrawl_w1,
    ("W2", "qcrawl"): qcrawl_w2,
}

# (workload, implementation, label, params)
PLAN: list[tuple[str, str, str, dict[str, Any]]] = [
    ("W1", "crawlq", "crawlq add_many(100) / pop", {"enqueue": "add_many"}),
    ("W1", "crawlq", "crawlq add (single)", {"enqueue": "add", "dequeue": False}),
    ("W1", "scrapy-redis", "scrapy-redis", {}),
    ("W1", "qcrawl", "qcrawl RedisQueue", {}),
    ("W2", "crawlq", "crawlq pop, add_many(5, ack=parent)", {"ack": "in add_many"}),
    ("W2", "crawlq", "crawlq pop, add_many(5), ack", {}),
    ("W2", "scrapy-redis", "scrapy-redis", {}),
    ("W2", "qcrawl", "qcrawl RedisQueue", {}),
    ("W6", "crawlq", "crawlq, 1 worker", {"workers": 1}),
    ("W6", "crawlq", "crawlq, 2 workers", {"workers": 2}),
    ("W6", "scrapy-redis", "scrapy-redis, 1 worker", {"workers": 1}),
    ("W6", "scrapy-redis", "scrapy-redis, 2 workers", {"workers": 2}),
]


# -- the server and the driver ------------------------------------------------------


class Server:
    """A redis-server on a free loopback port, stopped by its pid."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            sys.exit("redis-server is not installed: apt-get install -y redis-server")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="crawlq-redis-bench-")
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", self.dir, "--logfile", f"{self.dir}/log"]
        self.process = subprocess.Popen(args)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        for _ in range(500):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        self.stop()
        sys.exit("redis-server did not start")

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(16)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def run_one(
    server: Server, workload: str, impl: str, params: dict[str, Any], quick: bool
) -> Result:
    server.flush()
    spec = json.dumps({"workload": workload, "impl": impl, "params": params, "quick": quick})
    done = subprocess.run(
        [sys.executable, __file__, "--one", spec, "--url", server.url],
        capture_output=True,
        text=True,
        timeout=1800,
        env={**os.environ, "CRAWLQ_BENCH_SERVER_PID": str(server.process.pid)},
    )
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def label_of(item: tuple[str, str, str, dict[str, Any]]) -> str:
    return f"{item[0]} {item[2]}"


def _spread(runs: list[Result], metric: str, median: float) -> str:
    """Half the min-max range of the runs, relative to their median."""
    values = [r[metric] for r in runs if metric in r]
    if len(values) < 2:
        return ""
    return f" ±{50 * (max(values) - min(values)) / median:.0f}%"


def _median(runs: list[Result], metric: str) -> float | None:
    values = [r[metric] for r in runs if metric in r]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="W1,W2,W6")
    parser.add_argument(
        "--impls", default="crawlq,scrapy-redis,qcrawl", help="implementations to run"
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        spec = json.loads(args.one)
        sizes = workloads.sizes_for(spec["quick"])
        result = RUNNERS[spec["workload"], spec["impl"]](args.url, sizes, spec["params"])
        print(json.dumps(result))
        return
    only = set(args.only.split(","))
    impls = set(args.impls.split(","))
    server = Server()
    medians: dict[tuple[str, str], dict[str, float | None]] = {}
    plan = [item for item in PLAN if item[0] in only and item[1] in impls]
    runs: dict[str, list[Result]] = {label_of(item): [] for item in plan}
    try:
        # Repeats interleaved: every measurement once, then again, so that
        # drift in the machine's speed spreads over all of them.
        for round_ in range(args.repeat):
            for item in plan:
                workload, impl, label, params = item
                result = run_one(server, workload, impl, params, args.quick)
                runs[label_of(item)].append(result)
                print(f"[{round_ + 1}/{args.repeat}] {label_of(item)}: {result}", flush=True)
    finally:
        server.stop()
    print()
    for item in plan:
        workload, _, label, _ = item
        done = runs[label_of(item)]
        errors = [r["error"] for r in done if "error" in r]
        metrics = [f"{name}_{unit}" for name in ("enqueue", "dequeue", "steps") for unit in UNITS]
        medians[workload, label] = {m: _median(done, m) for m in metrics}
        shown = ", ".join(
            _shown(name, medians[workload, label], done)
            for name in ("enqueue", "dequeue", "steps")
            if medians[workload, label][f"{name}_rate"]
        )
        okay = all(r.get("ok") for r in done if "error" not in r)
        print(
            f"{workload}  {label:32s} {shown or '-'}"
            + ("" if okay else "  [CHECK FAILED]")
            + (f"  [{len(errors)} failed: {errors[0]}]" if errors else ""),
            flush=True,
        )
    _ratios(medians)


UNITS = ("rate", "server_us")


def _shown(name: str, medians: dict[str, float | None], runs: list[Result]) -> str:
    """``name 12,345/s ±3% (server 45.6 us/op)`` from the runs of one measurement."""
    rate = medians[f"{name}_rate"] or 0.0
    text = f"{name} {rate:,.0f}/s{_spread(runs, f'{name}_rate', rate)}"
    server = medians[f"{name}_server_us"]
    return text + (f" (server {server:.1f} us/op)" if server else "")


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}x" if a and b else "n/a"


def _ratios(m: dict[tuple[str, str], dict[str, float | None]]) -> None:
    def rate(workload: str, label: str, metric: str) -> float | None:
        return m.get((workload, label), {}).get(metric)

    print("\nRatios of medians:")
    for peer in ("scrapy-redis", "qcrawl RedisQueue"):
        if (("W1", peer)) not in m:
            continue
        enqueue = rate("W1", peer, "enqueue_rate")
        batched = rate("W1", "crawlq add_many(100) / pop", "enqueue_rate")
        single = rate("W1", "crawlq add (single)", "enqueue_rate")
        dequeue = _ratio(
            rate("W1", "crawlq add_many(100) / pop", "dequeue_rate"),
            rate("W1", peer, "dequeue_rate"),
        )
        print(
            f"  W1 crawlq / {peer}: enqueue {_ratio(batched, enqueue)} "
            f"(single add {_ratio(single, enqueue)}), dequeue {dequeue}"
        )
    for peer in ("scrapy-redis", "qcrawl RedisQueue"):
        if ("W2", peer) in m:
            other = rate("W2", peer, "steps_rate")
            joint = rate("W2", "crawlq pop, add_many(5, ack=parent)", "steps_rate")
            apart = rate("W2", "crawlq pop, add_many(5), ack", "steps_rate")
            print(
                f"  W2 crawlq / {peer}: {_ratio(joint, other)} with ack=parent, "
                f"{_ratio(apart, other)} with a separate ack"
            )
    # What one redis-server core can serve: the limit however many workers share it.
    print("\nRedis server CPU per operation (medians), crawlq against each peer:")
    crawlq_w1 = "crawlq add_many(100) / pop"
    crawlq_w2 = "crawlq pop, add_many(5, ack=parent)"
    for peer in ("scrapy-redis", "qcrawl RedisQueue"):
        for workload, ours, metric in (
            ("W1", crawlq_w1, "enqueue_server_us"),
            ("W1", crawlq_w1, "dequeue_server_us"),
            ("W2", crawlq_w2, "steps_server_us"),
        ):
            mine, theirs = rate(workload, ours, metric), rate(workload, peer, metric)
            if mine and theirs:
                name = metric.partition("_")[0]
                print(
                    f"  {workload} {name} vs {peer}: {mine:.1f} vs {theirs:.1f} us "
                    f"({theirs / mine:.1f}x less; one core serves {1e6 / mine:,.0f}/s)"
                )
    for impl in ("crawlq", "scrapy-redis"):
        one = rate("W6", f"{impl}, 1 worker", "dequeue_rate")
        two = rate("W6", f"{impl}, 2 workers", "dequeue_rate")
        if one and two:
            print(f"  W6 {impl}: 2 workers / 1 worker = {_ratio(two, one)}")


if __name__ == "__main__":
    main()
