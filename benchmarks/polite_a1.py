"""A polite asyncio crawl on Redis: pages/s against the hosts' pace, and calls a page.

``python -m benchmarks.polite_a1 [--hosts 20] [--delay 0.05] [--pages 3000] [--runs 3]
[--before SRC]``

crawlq's asyncio `Scheduler` with 32 coroutines, each doing ``get``, a 2 ms
``sleep`` (its fetch), then ``add_many`` of 5 links with the page's ack, on
``--hosts`` hosts with ``host_delay`` ``--delay``: at most hosts / delay
pages a second, and far fewer requests ready than workers waiting, so most
writes lease fewer than the pops said to follow them. It measures what the
A1 benchmark's deep queue never meets: how close the crawl runs to its
hosts' pace, and the function calls and server CPU a page of a crawl that
waits on politeness.

Each run is a fresh redis-server (127.0.0.1, a free port, stopped by its
pid) and a fresh worker process, both pinned to ``--cpu``. Reported per run:
pages/s, the store's changing calls a page, FCALLs a page (reads
included, from ``INFO commandstats``), server CPU a page (``/proc``).
``--before``: another ``src`` folder (an older checkout's), run interleaved
with this one's. Prints the medians. Each run holds ``flock
/tmp/crawlq-bench.lock``.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LOCK = "/tmp/crawlq-bench.lock"
WORKERS = 32


async def _crawl(url: str, hosts: int, delay: float, pages: int) -> tuple[int, int, float]:
    import crawlq
    from crawlq import Request

    async with crawlq.Scheduler(crawlq.open_frontier(url, host_delay=delay)) as scheduler:
        store: Any = scheduler._frontier._store
        await scheduler.add_many([Request(f"https://h{i}.example/") for i in range(hosts)])
        done = 0

        async def worker() -> None:
            nonlocal done
            while done < pages:
                request = await scheduler.get()
                await asyncio.sleep(0.002)  # its fetch
                n = done = done + 1
                links = [
                    Request(f"https://h{(n * 5 + k) % hosts}.example/{n}/{k}") for k in range(5)
                ]
                await scheduler.add_many(links, ack=request)

        calls, started = store._calls, time.monotonic()
        await asyncio.gather(*(worker() for _ in range(WORKERS)))
        return done, store._calls - calls, time.monotonic() - started


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One run, in this process: its own server, the crawl, the figures."""
    from benchmarks.redis_servers import Node, cpu_seconds

    node = Node(Path(tempfile.mkdtemp(prefix="crawlq-bench-polite-")), False, [args.cpu])
    node.start()
    try:
        os.sched_setaffinity(0, {args.cpu})
        assert node.client is not None and node.process is not None
        before = node.client.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0)
        cpu = cpu_seconds(node.process.pid)
        url = f"redis://127.0.0.1:{node.port}/0?crawl=polite"
        pages, calls, wall = asyncio.run(_crawl(url, args.hosts, args.delay, args.pages))
        cpu = cpu_seconds(node.process.pid) - cpu
        fcalls = node.client.info("commandstats")["cmdstat_fcall"]["calls"] - before
    finally:
        node.stop()
    return {
        "pages_per_s": pages / wall,
        "pace": args.hosts / args.delay,
        "calls_per_page": calls / pages,
        "fcalls_per_page": fcalls / pages,
        "server_us_per_page": 1e6 * cpu / pages,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--pages", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cpu", type=int, default=1)
    parser.add_argument("--before", type=Path, help="also run with this copy of src/")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return
    sources = {"crawlq": HERE.parent / "src"}
    if args.before is not None:
        sources = {"crawlq-before": args.before, **sources}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in sources}
    flags = ["--hosts", str(args.hosts), "--delay", str(args.delay), "--pages", str(args.pages)]
    flags += ["--cpu", str(args.cpu), "--child"]
    for run in range(args.runs):
        for name, src in sources.items():
            path = os.pathsep.join([str(Path(src).resolve()), str(HERE.parent)])
            with open(LOCK, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                out = subprocess.run(
                    [sys.executable, "-m", "benchmarks.polite_a1", *flags],
                    env=dict(os.environ, PYTHONPATH=path),
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            result = json.loads(out.strip().splitlines()[-1])
            results[name].append(result)
            print(f"run {run + 1} {name}: {json.dumps(result)}", file=sys.stderr, flush=True)
    pace = args.hosts / args.delay
    print(f"{args.hosts} hosts, host_delay {args.delay} s (pace {pace:.0f} pages/s)")
    print("| | pages/s | changing calls a page | FCALLs a page | server us a page |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, runs in results.items():
        keys = ("pages_per_s", "calls_per_page", "fcalls_per_page", "server_us_per_page")
        rate, calls, fcalls, cpu = (statistics.median(r[k] for r in runs) for k in keys)
        print(f"| {name} | {rate:.0f} | {calls:.2f} | {fcalls:.2f} | {cpu:.0f} |")


if __name__ == "__main__":
    main()
