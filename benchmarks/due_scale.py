"""Due times at scale: what making a due request ready costs as the scheduled pile grows.

    python -m benchmarks.due_scale                                # memory, SQLite, Redis
    python -m benchmarks.due_scale --stores sqlite --sizes 10000,10000000

The issue's promise: with millions of requests scheduled, due ones become
ready in O(log n) or better per request, and a pop with nothing due costs
about what it costs with nothing scheduled. For each store and each size N:
N requests scheduled far in the future (1,000 hosts, due times spread over
N ms starting a day ahead), then K = 10,000 more due one second after they
are added (scattered over the same hosts). Once they are due, a loop does
what a user's does, ``pop`` + ``ack`` each, until the K are out: microseconds
per request (worker wall time; on Redis also the server's CPU from ``/proc``).
Then 2,000 ``pop`` calls with nothing due: microseconds per empty pop. A fresh
process and a fresh job or redis-server (127.0.0.1, free port, stopped by its
pid) per measurement; medians of ``--repeat`` runs. Ratios are against the
smallest size in the same run: O(n) would make 1,000 times more scheduled
requests cost about 1,000 times more per request; O(log n) a small factor:
log(10^7)/log(10^4) = 1.75 in steps, more in time once the structure no
longer fits in the CPU's caches (each step a cache miss).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.due import RESULT_MARKER, place

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HOSTS = 1000
DUE = 10_000
EMPTY_POPS = 2000


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement in this process: ``spec`` names the store URL and N."""
    import crawlq
    from benchmarks.redis_servers import cpu_seconds

    n = int(spec["n"])
    frontier = crawlq.open_frontier(spec["where"], host_delay=0, lease_timeout=3600)
    far = time.time() + 86_400
    batch: list[crawlq.Request] = []
    started = time.perf_counter()
    for i in range(n):
        batch.append(
            crawlq.Request(f"https://h{i % HOSTS}.example/later/{i}", not_before=far + i / 1000)
        )
        if len(batch) == 1000:
            frontier.add_many(batch)
            batch = []
    if batch:
        frontier.add_many(batch)
    add_s = time.perf_counter() - started
    due_at = time.time() + 1.0
    frontier.add_many(
        [
            crawlq.Request(f"https://h{(i * 7) % HOSTS}.example/due/{i}", not_before=due_at)
            for i in range(DUE)
        ]
    )
    frontier.flush()
    time.sleep(max(0.0, due_at - time.time()) + 0.05)
    pid = spec.get("server_pid")
    server_before = cpu_seconds(pid) if pid else 0.0
    started = time.perf_counter()
    out = 0
    while out < DUE:
        request = frontier.pop()
        if request is None:
            raise RuntimeError(f"only {out:,} of {DUE:,} due requests came out")
        frontier.ack(request)
        out += 1
    drain = time.perf_counter() - started
    server = (cpu_seconds(pid) - server_before) if pid else None
    started = time.perf_counter()
    for _ in range(EMPTY_POPS):
        if frontier.pop() is not None:
            raise RuntimeError("a request due a day from now came out")
    empty = time.perf_counter() - started
    scheduled = frontier.stats().scheduled
    frontier.close()
    if scheduled != n:
        raise RuntimeError(f"{scheduled:,} scheduled at the end, not {n:,}")
    return {
        "add_s": add_s,
        "us_per_request": drain / DUE * 1e6,
        "server_us_per_request": None if server is None else server / DUE * 1e6,
        "us_per_empty_pop": empty / EMPTY_POPS * 1e6,
    }


def run(store: str, n: int, root: Path, run_number: int, timeout: float) -> dict[str, Any]:
    """``measure`` in a fresh process on a fresh job or server."""
    with place(store, root, run_number) as (where, pid):
        spec = {"where": where, "n": n, "server_pid": pid}
        command = [sys.executable, "-m", "benchmarks.due_scale", "--child", json.dumps(spec)]
        environment = dict(os.environ, PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}")
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, env=environment, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return {"error": f"no result in {timeout:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return dict(json.loads(line[len(RESULT_MARKER) :]))
    return {"error": " | ".join(done.stderr.strip().splitlines()[-3:])[:800]}


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--stores", default="memory,sqlite,redis")
    parser.add_argument("--sizes", default="10000,1000000", help="scheduled requests N")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args(argv)
    if args.child:
        print(RESULT_MARKER + json.dumps(measure(json.loads(args.child))), flush=True)
        return 0
    sizes = [int(size) for size in args.sizes.split(",")]
    print(f"# due times at scale: {args.repeat} runs per row, medians, K = {DUE:,} due")
    print(
        "| store | scheduled N | add s | us per pop + ack of a due one | ratio | "
        "server us per request | ratio | us per empty pop | ratio | runs |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory(prefix="due-scale-") as directory:
        for store in args.stores.split(","):
            first: dict[str, float | None] = {}
            for n in sizes:
                runs = [run(store, n, Path(directory), k, args.timeout) for k in range(args.repeat)]
                errors = [r["error"] for r in runs if "error" in r]
                good = [r for r in runs if "error" not in r]
                row = [store, f"{n:,}", _fmt(_median(good, "add_s"), 1)]
                for key in ("us_per_request", "server_us_per_request", "us_per_empty_pop"):
                    value = _median(good, key)
                    first.setdefault(key, value)
                    base = first[key]
                    ratio = f"{value / base:.2f}x" if value is not None and base else "-"
                    row += [_fmt(value, 1), ratio]
                row.append(f"{len(good)} ok" + (f"; errors: {errors}" if errors else ""))
                print("| " + " | ".join(row) + " |", flush=True)
    return 0


def _fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
