"""The Redis cost model: server CPU per function call, fixed + per item, per call kind.

``python -m benchmarks.redis_cost [--repeat N] [--calls N] [--output FILE]``

Every measurement is one call shape (``benchmarks.redis_cost_shapes``: add of
k new or seen links, with or without an ack, pops of n, acks of n, the W2
step, the floors, and scrapy-redis's operations) run by a fresh process on a
fresh redis-server (no persistence, 127.0.0.1, a free port, stopped by its
pid), both pinned to one core. The servers' CPU comes from ``/proc`` and the
time spent in the functions and the commands they run from ``INFO
commandstats``. The fit, per call kind (add, pop, ack_or_release), is least
squares over the shapes' medians:

    server CPU per call = fixed + a * links offered + b * accepted + c * pops + d * acks

once for the whole server CPU (main thread, from ``/proc/PID/schedstat``) and
once for the FCALL's own time (``cmdstat_fcall`` usec). A second section
runs the add shapes and the W2 step on a Redis Cluster of 3 primaries (16
shards), per primary. ``src/crawlq`` is copied at start, so the whole run
measures the same code. Writes ``benchmarks/REDIS_COST.md`` and the raw
results to ``benchmarks/results/redis-cost-<time>.json``; the fit and the
report are in ``benchmarks.redis_cost_report``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.redis_cost_report import render
from benchmarks.redis_cost_shapes import FLOORS, RESULT_MARKER
from benchmarks.redis_servers import servers

HERE = Path(__file__).resolve().parent
Result = dict[str, Any]
_TIMEOUT = 600.0
#: Items (links, pops, acks) per timed window at most: calls = min(--calls, this / k).
_ITEMS = 20_000

#: (shape, k) of one server: the floors, then each call kind's shapes, then scrapy-redis.
SINGLE = [
    *((floor, 0) for floor in FLOORS),
    *((s, k) for s in ("add_new", "add_dup") for k in (1, 5, 20, 100)),
    *(("add_ack", k) for k in (0, 1, 5, 20)),
    *(("add_pop", k) for k in (1, 5, 20)),
    ("w2", 5),
    ("pop_empty", 0),
    *((s, k) for s in ("pop", "ack", "popack") for k in (1, 5, 20, 100)),
    ("sr_new", 1),
    ("sr_dup", 1),
    ("sr_pop", 1),
    ("sr_w2", 5),
]
#: (shape, k) on the 3-primary cluster: the add shapes and the W2 step.
CLUSTER = [
    *(("add_new", k) for k in (1, 5, 20, 100)),
    *(("add_dup", k) for k in (5, 100)),
    ("w2", 5),
]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def pin(pid: int, core: int) -> None:
    """Pin every thread of process ``pid`` to ``core``."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), {core})


def freeze(root: Path) -> dict[str, str]:
    """The workers' environment: crawlq from a copy of ``src/crawlq`` taken now."""
    paths = [str(HERE.parent), os.environ.get("PYTHONPATH", "")]
    source = HERE.parent / "src" / "crawlq"
    if source.is_dir():
        target = root / "src" / "crawlq"
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        paths.insert(0, str(root / "src"))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def calls_for(shape: str, k: int, calls: int) -> int:
    if shape in (*FLOORS, "pop_empty", "w2") or shape.startswith("sr_"):
        return calls
    return max(50, min(calls, _ITEMS // max(k, 1)))


def measure(
    shape: str, k: int, primaries: int, args: argparse.Namespace, env: dict[str, str], root: Path
) -> Result:
    """One fresh measurement: fresh servers pinned to the core, one worker process."""
    calls = calls_for(shape, k, args.calls if not primaries else args.calls // 2)
    with servers(primaries, root / f"{shape}-{k}-{primaries}") as nodes:
        for node in nodes:
            pin(node.pid, args.core)
        ports = [n.port for n in nodes]
        if primaries:
            url = f"redis+cluster://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/?crawl=bench"
        elif shape.startswith("sr_"):
            url = f"redis://127.0.0.1:{ports[0]}/0"
        else:
            url = f"redis://127.0.0.1:{ports[0]}/0?crawl=bench"
        spec = {
            "shape": shape,
            "k": k,
            "calls": calls,
            "warmup": max(20, calls // 10),
            "url": url,
            "ports": ports,
            "pids": [n.pid for n in nodes],
            "core": args.core,
            "cluster": bool(primaries),
        }
        python = args.peer_python if shape.startswith("sr_") else sys.executable
        done = subprocess.run(
            [python, "-m", "benchmarks.redis_cost_shapes", json.dumps(spec)],
            capture_output=True,
            text=True,
            env=env,
            cwd=HERE.parent,
            timeout=_TIMEOUT,
            check=False,
        )
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_MARKER):
            return {**json.loads(line[len(RESULT_MARKER) :]), "calls": calls}
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    return {"error": f"exit {done.returncode}: {tail}"[:2000]}


def git(*args: str) -> str:
    done = subprocess.run(
        ["git", *args], capture_output=True, text=True, check=False, cwd=HERE.parent
    )
    return done.stdout.strip()


def environment(args: argparse.Namespace) -> Result:
    server = subprocess.run(
        ["redis-server", "--version"], capture_output=True, text=True, check=False
    ).stdout
    return {
        "commit": git("rev-parse", "HEAD"),
        "src_dirty": bool(git("status", "--porcelain", "--", "src")),
        "cpus": os.cpu_count(),
        "core": args.core,
        "redis_server": server.partition(" v=")[2].partition(" ")[0],
        "python": sys.version.split()[0],
        "peer_python": args.peer_python,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.redis_cost", description=__doc__)
    parser.add_argument("--repeat", type=int, default=3, help="runs per shape (default 3)")
    parser.add_argument(
        "--calls",
        type=int,
        default=2000,
        help=f"timed calls per shape (default 2000; at most "
        f"{_ITEMS:,} items per window; half on the cluster)",
    )
    parser.add_argument(
        "--core", type=int, default=(os.cpu_count() or 1) - 1, help="the core (default the last)"
    )
    parser.add_argument(
        "--peer-python",
        default=sys.executable,
        help="a Python with scrapy-redis installed, for its shapes (default this one)",
    )
    parser.add_argument("--no-cluster", action="store_true", help="skip the cluster section")
    parser.add_argument(
        "--output", type=Path, default=HERE / "REDIS_COST.md", help="the markdown report"
    )
    parser.add_argument("--report", type=Path, help="only rewrite the report from this raw file")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.calls < 100:
        parser.error("--repeat must be at least 1 and --calls at least 100")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        args.output.write_text(render(json.loads(args.report.read_text())))
        return 0
    has_peer = (
        subprocess.run(
            [args.peer_python, "-c", "import scrapy_redis"], capture_output=True, check=False
        ).returncode
        == 0
    )
    plan = [(s, k, 0) for s, k in SINGLE if has_peer or not s.startswith("sr_")]
    if not has_peer:
        log(f"{args.peer_python} cannot import scrapy_redis: its shapes are skipped")
    if not args.no_cluster:
        plan += [(s, k, 3) for s, k in CLUSTER]
    started, clock = dt.datetime.now(dt.UTC), time.perf_counter()
    runs: dict[str, list[Result]] = {f"{s}:{k}:{p}": [] for s, k, p in plan}
    loads = [os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="crawlq-redis-cost-") as tmp:
        root = Path(tmp)
        env = freeze(root)
        where = environment(args)
        total = args.repeat * len(plan)
        log(f"{total} runs: {len(plan)} shapes x {args.repeat}, pinned to core {args.core}")
        for repeat in range(args.repeat):
            for index, (shape, k, primaries) in enumerate(plan, 1 + repeat * len(plan)):
                begin = time.perf_counter()
                try:
                    result = measure(shape, k, primaries, args, env, root)
                except Exception as exc:  # keep going: the report shows the error
                    result = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
                result["wall_s"] = time.perf_counter() - begin
                result["load"] = os.getloadavg()
                loads.append(result["load"])
                runs[f"{shape}:{k}:{primaries}"].append(result)
                per_call = 1e6 * sum(result.get("sched_s", [0])) / result.get("calls", 1)
                log(
                    f"[{index}/{total} {time.perf_counter() - clock:5.0f}s] {shape} k={k}"
                    f"{' cluster' if primaries else ''}: {per_call:.1f} us/call, "
                    f"{result['wall_s']:.1f}s {result.get('error', 'ok')}"
                )
    document = {
        "started": started.isoformat(),
        "argv": sys.argv[1:] if argv is None else argv,
        "repeat": args.repeat,
        "calls": args.calls,
        "seconds": time.perf_counter() - clock,
        "loads": loads,
        "environment": where,
        "plan": plan,
        "runs": runs,
    }
    raw = HERE / "results" / f"redis-cost-{started:%Y%m%d-%H%M%S}.json"
    raw.parent.mkdir(exist_ok=True)
    raw.write_text(json.dumps(document, indent=1) + "\n")
    args.output.write_text(render(document))
    log(f"wrote {args.output} (raw: {raw})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
