"""A1 on a Redis Cluster against one server: server CPU and server commands per step.

``python -m benchmarks.cluster_a1 [--steps 4000] [--runs 3] [--primaries 3] [--shards 16]
[--cpu 1] [--mark 1000] [--only cluster|single] [--source SRC] [--output FILE]``

A1 is crawlq's asyncio `Scheduler` with 32 coroutines, each doing the W2 step
(``get`` a request, ``sleep(0)``, ``add_many`` its five children from the W2
plan, half of them already seen, ``task_done``) until ``--steps`` steps are
done, after 1,000 seeds added untimed. It runs on a fresh Redis Cluster of
``--primaries`` primaries (``redis+cluster://``, ``--shards`` shards, default
16 as crawlq's) and on
one fresh plain redis-server (``redis://``), ``--runs`` times each, every run
with fresh servers and a fresh worker process (``python -m
benchmarks.cluster_a1 --child``).

The worker and every redis-server are pinned to one CPU (``--cpu``, ``taskset
-c``): on this machine a round trip costs a server more CPU when its client
runs on another core. Server CPU is user + system time from ``/proc/PID/stat``
(10 ms ticks) of each redis-server, read when the worker starts its steps, at
every ``--mark`` steps done (the cost per step of each window: does it grow
with the run?) and at the end; commands per step are ``INFO commandstats``
after a ``CONFIG RESETSTAT`` at the start (commands that crawlq's functions
run count as the commands they are), with their microseconds (each
command's own; FCALL's include the commands it runs, and commandstats'
microsecond clock makes small commands' figures coarse). Each timed run holds ``flock
/tmp/crawlq-bench.lock`` (others benchmark on this machine). ``src/crawlq`` is
copied at start (``--source``: another ``src`` folder, e.g. an older
checkout's), so every run measures the same code. Prints medians of the
runs, and writes every run to ``--output`` (JSON) when given.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from benchmarks import workloads
from benchmarks.redis_servers import Node, servers

HERE = Path(__file__).resolve().parent
LOCK = "/tmp/crawlq-bench.lock"
Result = dict[str, Any]
SEEDS, HOSTS = workloads.FULL.w2_seeds, workloads.FULL.w1_hosts
COROUTINES = workloads.A1_COROUTINES
#: Commands shown per step (besides any other that runs at least once a step).
SHOWN = ("fcall", "zadd", "zrem", "lindex", "lrange", "zpopmin", "hset", "hmget")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the worker process ------------------------------------------------------------


def child(url: str, steps: int, mark: int, shards: int) -> None:
    """The worker: seeds, then A1's steps on "go"; reports on stdout, one line each."""
    import crawlq

    plan = workloads.w2_plan(SEEDS, steps, HOSTS)
    make = crawlq.Request
    seeds = [make(u, priority=p) for u, p in zip(plan.seed_urls, plan.seed_priorities, strict=True)]
    children = [
        make(u, priority=p) for u, p in zip(plan.child_urls, plan.child_priorities, strict=True)
    ]
    batches = [children[i : i + plan.fanout] for i in range(0, len(children), plan.fanout)]
    options: dict[str, Any] = {"shards": shards} if url.startswith("redis+cluster") else {}
    frontier = crawlq.open_frontier(url, host_delay=0.0, host_concurrency=None, **options)
    frontier.add_many(seeds)
    frontier.flush()
    say("ready")
    if sys.stdin.readline().strip() != "go":
        return
    done = 0

    async def crawl() -> float:
        nonlocal done
        scheduler = crawlq.Scheduler(frontier)
        work = iter(batches)

        async def worker() -> None:
            nonlocal done
            for batch in work:
                request = await scheduler.get()
                await asyncio.sleep(0)
                await scheduler.add_many(batch)
                scheduler.task_done(request)
                done += 1
                if done % mark == 0 and done < steps:
                    say(f"at {done}")

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(COROUTINES)))
        await scheduler.close()
        return time.perf_counter() - start

    seconds = asyncio.run(crawl())
    frontier.flush()
    say(f"done {done} {seconds:.6f}")
    if sys.stdin.readline().strip() != "check":
        return
    left = len({*plan.seed_urls, *plan.child_urls}) - steps
    say(f"left {len(frontier)} {left}")
    frontier.close()


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# -- one measurement ---------------------------------------------------------------


@contextlib.contextmanager
def bench_lock() -> Iterator[None]:
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def freeze(root: Path, source: Path) -> dict[str, str]:
    """The workers' environment: crawlq from a copy of ``source/crawlq`` taken now."""
    target = root / "src" / "crawlq"
    shutil.copytree(source / "crawlq", target, ignore=shutil.ignore_patterns("__pycache__"))
    paths = [str(root / "src"), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _expect(stream: IO[str], word: str) -> list[str]:
    line = stream.readline()
    parts = line.split()
    if not parts or parts[0] != word:
        raise RuntimeError(f"the worker said {line!r}, not {word!r}")
    return parts[1:]


def _cpus(nodes: list[Node]) -> list[float]:
    return [node.cpu() for node in nodes]


def _commands(nodes: list[Node]) -> dict[str, tuple[int, int]]:
    """Calls and microseconds of each command, all nodes summed."""
    total: dict[str, tuple[int, int]] = {}
    for node in nodes:
        for name, (calls, usec) in node.commands().items():
            had = total.get(name, (0, 0))
            total[name] = (had[0] + calls, had[1] + usec)
    return total


def measure(primaries: int, args: argparse.Namespace, env: dict[str, str], root: Path) -> Result:
    """One run: fresh servers, a fresh worker, all on ``args.cpu``; figures per step."""
    cpus = [args.cpu]
    with bench_lock(), servers(primaries, root / f"a1-{primaries}", cpus) as nodes:
        if primaries:
            seeds = ",".join(f"127.0.0.1:{n.port}" for n in nodes[:2])
            url = f"redis+cluster://{seeds}/?crawl=a1"
        else:
            url = f"redis://127.0.0.1:{nodes[0].port}/0?crawl=a1"
        command = ["taskset", "-c", str(args.cpu), sys.executable, "-m", "benchmarks.cluster_a1"]
        command += ["--child", url, "--steps", str(args.steps), "--mark", str(args.mark)]
        command += ["--shards", str(args.shards)]
        worker = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=HERE.parent,
        )
        assert worker.stdin is not None and worker.stdout is not None
        try:
            _expect(worker.stdout, "ready")
            for node in nodes:
                node.command("CONFIG", "RESETSTAT")
            marks = [(0, _cpus(nodes))]
            worker.stdin.write("go\n")
            worker.stdin.flush()
            while True:
                line = worker.stdout.readline().split()
                if not line:
                    raise RuntimeError("the worker ended early")
                if line[0] == "at":
                    marks.append((int(line[1]), _cpus(nodes)))
                    continue
                if line[0] != "done":
                    raise RuntimeError(f"the worker said {line!r}")
                marks.append((int(line[1]), _cpus(nodes)))
                seconds = float(line[2])
                break
            commands = _commands(nodes)
            worker.stdin.write("check\n")
            worker.stdin.flush()
            left, want = map(int, _expect(worker.stdout, "left"))
        finally:
            worker.stdin.close()
            worker.wait(timeout=60)
    steps = marks[-1][0]
    first, last = marks[0][1], marks[-1][1]
    per_node = [(b - a) * 1e6 / steps for a, b in zip(first, last, strict=True)]
    windows = []
    for (n0, c0), (n1, c1) in itertools.pairwise(marks):
        windows.append(sum(c1) - sum(c0))
        windows[-1] = windows[-1] * 1e6 / max(1, n1 - n0)
    return {
        "primaries": primaries,
        "steps": steps,
        "seconds": seconds,
        "server_us": sum(per_node),
        "busiest_us": max(per_node),
        "per_node_us": per_node,
        "window_us": windows,
        "commands": {name: calls / steps for name, (calls, _) in commands.items()},
        "fcall_us": commands.get("fcall", (0, 0))[1] / steps,
        "command_us": {name: usec / steps for name, (_, usec) in commands.items()},
        "ok": left == want,
        "left": left,
        "want": want,
    }


# -- the report --------------------------------------------------------------------


def summary(kind: str, runs: list[Result]) -> list[str]:
    med = statistics.median
    each = ", ".join(f"{r['server_us']:.0f}" for r in runs)
    lines = [
        f"{kind}: {len(runs)} runs of {runs[0]['steps']:,} steps, all ok: "
        f"{all(r['ok'] for r in runs)}",
        f"  server CPU/step, all servers: {med(r['server_us'] for r in runs):.0f} us "
        f"(runs: {each})",
        f"  busiest server: {med(r['busiest_us'] for r in runs):.0f} us",
        f"  inside function calls (commandstats): {med(r['fcall_us'] for r in runs):.0f} us/step",
        f"  steps/s (pinned, one core for all): {med(r['steps'] / r['seconds'] for r in runs):.0f}",
    ]
    windows = [med(w) for w in zip(*(r["window_us"] for r in runs), strict=True)]
    if len(windows) > 1:
        lines.append("  per window of steps (us/step): " + ", ".join(f"{w:.0f}" for w in windows))
    names = sorted({n for r in runs for n in r["commands"]})
    shown = [n for n in names if n in SHOWN or med(r["commands"].get(n, 0) for r in runs) >= 1]
    per = {n: med(r["commands"].get(n, 0.0) for r in runs) for n in shown}
    lines.append(
        "  commands/step: "
        + ", ".join(f"{n.upper()} {v:.1f}" for n, v in sorted(per.items(), key=lambda kv: -kv[1]))
    )
    us = {n: med(r["command_us"].get(n, 0.0) for r in runs) for n in shown}
    lines.append(
        "  commands' own us/step (commandstats): "
        + ", ".join(f"{n.upper()} {v:.1f}" for n, v in sorted(us.items(), key=lambda kv: -kv[1]))
    )
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster_a1")
    parser.add_argument("--steps", type=int, default=4_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--primaries", type=int, default=3)
    parser.add_argument("--shards", type=int, default=16, help="the cluster crawl's shards")
    parser.add_argument("--cpu", type=int, default=1)
    parser.add_argument("--mark", type=int, default=1_000, help="steps per window")
    parser.add_argument("--only", choices=("cluster", "single"), default=None)
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument(
        "--source", type=Path, default=HERE.parent / "src", help="the src folder crawlq runs from"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        child(args.child, args.steps, args.mark, args.shards)
        return 0
    kinds = [("cluster", args.primaries), ("single", 0)]
    if args.only:
        kinds = [k for k in kinds if k[0] == args.only]
    results: dict[str, list[Result]] = {}
    with tempfile.TemporaryDirectory(prefix="crawlq-a1-") as tmp:
        env = freeze(Path(tmp), args.source)
        for run in range(args.runs):
            for kind, primaries in kinds:
                log(f"{kind} run {run + 1}/{args.runs}")
                results.setdefault(kind, []).append(measure(primaries, args, env, Path(tmp)))
    lines = []
    for kind, runs in results.items():
        label = (
            f"cluster of {args.primaries} primaries, {args.shards} shards"
            if kind == "cluster"
            else "one server"
        )
        lines += summary(label, runs)
    if len(results) == 2:
        med = statistics.median
        cluster = med(r["server_us"] for r in results["cluster"])
        single = med(r["server_us"] for r in results["single"])
        busiest = med(r["busiest_us"] for r in results["cluster"])
        lines.append(
            f"ratio cluster/one server: all primaries {cluster / single:.1f}x, "
            f"busiest primary {busiest / single:.1f}x"
        )
    print("\n".join(lines))
    if args.output:
        args.output.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
