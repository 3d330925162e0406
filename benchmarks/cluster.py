"""The Redis Cluster benchmark: the W2 crawl step by worker processes, per setup, one run.

``python -m benchmarks.cluster [--quick] [--repeat N] [--workers N] [--primaries 1,3,6]
[--shards 16] [--pin CPU|off] [--output FILE]``

Measures the W2 step a user's loop makes (dequeue one request, offer its five
children from the W2 plan, half of them already seen, ack it) by ``--workers``
processes started together, on:

- crawlq on one plain redis-server (``redis://``),
- crawlq on a Redis Cluster of each size in ``--primaries`` (default 1, 3 and
  6 primaries; ``redis+cluster://``) with each shard count in ``--shards``
  (the crawl's ``shards`` option, fixed when it is created; default 16,
  crawlq's default): every size and shard count is a setup of its own,
  e.g. ``--primaries 3 --shards 16,3`` measures 3 primaries with 16 shards
  and with 3,
- scrapy-redis on one plain redis-server (its PriorityQueue and RFPDupeFilter,
  as `benchmarks.peers.ScrapyRedis` drives it).

crawlq steps are ``pop()`` then ``add_many(children, ack=request)``;
scrapy-redis steps are ``next_request()`` then ``enqueue_request`` per child
(it has no ack). Every measurement gets fresh servers (no persistence,
127.0.0.1, free ports) stopped by their pids at its end; 1,000 seeds go in
untimed; each worker takes its own step indexes (``index``, ``index +
workers``...). The timed section runs from "go" to the last worker's end; the
servers' CPU is read from ``/proc`` around it. After it, the rest of the
queue is drained (untimed) and the run is checked: every seed and distinct
child dequeued exactly once, and crawlq's counters agree.

Pinning (``--pin``, default CPU 1): every setup is measured twice per repeat,
once with the workers and every redis-server pinned to that one CPU (``taskset
-c 1`` for the servers, ``sched_setaffinity`` for the workers): the CPU
figures come from these; once unpinned: the steps/s come from these. On this
machine a round trip costs a server more CPU when its client runs on another
core, which would blur CPU ratios between setups whose processes land on
cores differently. ``--pin off`` measures unpinned only and takes both from
those runs.

``src/crawlq`` is copied at start, so the whole run measures the same code.
Writes ``benchmarks/CLUSTER.md`` (also printed) and the raw results to
``benchmarks/results/cluster-<time>.json`` (each run with its shard count;
the shards' placement on every measured and derived size, per shard count).

This module is the run: its options, one measurement and the results file.
The servers are in ``benchmarks.redis_servers``, the worker processes and the
check in ``benchmarks.cluster_workers``, the setups and the report in
``benchmarks.cluster_report``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import workloads
from benchmarks.cluster_capacity import DERIVED
from benchmarks.cluster_report import SHARDS, Setup, render, setups
from benchmarks.cluster_workers import Job, check, session, timed
from benchmarks.redis_servers import crawl_tags, placement, servers, shards_per_node

HERE = Path(__file__).resolve().parent
Result = dict[str, Any]
perf = time.perf_counter

SEEDS, HOSTS = workloads.FULL.w2_seeds, workloads.FULL.w1_hosts
STEPS = {"full": 20_000, "quick": 4_000}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- one measurement ---------------------------------------------------------------------


def measure(
    setup: Setup,
    args: argparse.Namespace,
    steps: int,
    run: int,
    root: Path,
    cpus: tuple[int, ...] | None,
) -> Result:
    """One fresh measurement: fresh servers, the seeds, the timed workers, then the check.

    ``cpus``: pin the servers and the worker processes there (None: unpinned).
    The crawl is named "bench" every time (the servers are new), so its shards
    sit on the same primaries in every run of a setup.
    """
    crawl = "bench"
    with servers(setup.primaries, root / f"{setup.key}-{run}", cpus) as nodes:
        where = ",".join(f"127.0.0.1:{n.port}" for n in nodes[:2])
        if setup.primaries:
            url, options = f"redis+cluster://{where}/?crawl={crawl}", {"shards": setup.shards}
        elif setup.impl == "crawlq":
            url, options = f"redis://{where}/0?crawl={crawl}", {}
        else:
            url, options = f"redis://{where}/0", {}
        job = Job(setup.impl, url, options, SEEDS, steps, HOSTS, args.workers, cpus)
        plan = job.plan()
        seeder = session(job)
        try:
            seeder.add(
                seeder.requests(list(zip(plan.seed_urls, plan.seed_priorities, strict=True)))
            )
        finally:
            seeder.close()
        result = timed(job, nodes)
        if "error" not in result:
            result["check"] = check(job, result.pop("urls"))
        if setup.primaries:
            # in node order, as primary_us; the tags let the report place them on N primaries
            result["tags"] = tags = crawl_tags(nodes, crawl)
            result["shards_per_node"] = shards_per_node(nodes, tags)
            result["shards_per_primary"] = sorted(result["shards_per_node"], reverse=True)
            if len(tags) != setup.shards:  # what the run measured is not the setup
                wrong, before = f"the crawl has {len(tags)} shards, not {setup.shards}", ""
                if result.get("check") not in (None, "ok"):
                    before = f"{result['check']}; "
                result["check"] = before + wrong
    return result


def freeze(root: Path) -> str:
    """Import crawlq from a copy of ``src/crawlq`` taken now (workers inherit sys.path)."""
    source = HERE.parent / "src" / "crawlq"
    if source.is_dir():
        shutil.copytree(
            source, root / "src" / "crawlq", ignore=shutil.ignore_patterns("__pycache__")
        )
        sys.path.insert(0, str(root / "src"))
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(root / "src"), str(HERE.parent), os.environ.get("PYTHONPATH")) if p
        )
    import crawlq

    return str(Path(crawlq.__file__).parent)


# -- the run -----------------------------------------------------------------------------


def environment() -> str:
    """The commit (and whether src/ differs from it), Python, CPUs and versions, in one line."""

    def run(*args: str) -> str:
        done = subprocess.run(args, capture_output=True, text=True, check=False, cwd=HERE.parent)
        return done.stdout.strip()

    dirty = " + uncommitted changes in src/" if run("git", "status", "--porcelain", "src") else ""
    versions = []
    for name in ("crawlq", "scrapy", "scrapy-redis", "redis"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions.append(f"{name} {metadata.version(name)}")
    server = run("redis-server", "--version").partition(" v=")[2].partition(" ")[0]
    return (
        f"crawlq commit {run('git', 'rev-parse', '--short', 'HEAD')}{dirty}, copied at the "
        f"start; Python {platform.python_version()}, {os.cpu_count()} CPUs; redis-server "
        f"{server}; {', '.join(versions)}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help=f"{STEPS['quick']:,} steps, not {STEPS['full']:,}"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per setup (default 3)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument(
        "--primaries",
        type=_sizes,
        default=(1, 3, 6),
        help="Redis Cluster sizes to measure, comma-separated (default 1,3,6)",
    )
    parser.add_argument(
        "--shards",
        type=_shards,
        default=(SHARDS,),
        help="the crawl's shard counts on each cluster size, comma-separated, one setup "
        f"each (default {SHARDS})",
    )
    parser.add_argument(
        "--pin",
        type=_pin,
        default=(1,),
        help="CPU for the pinned runs that give the CPU figures (default 1); "
        "'off': unpinned runs only",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=HERE / "CLUSTER.md",
        help="markdown report (default benchmarks/CLUSTER.md)",
    )
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.workers < 1:
        parser.error("--repeat and --workers must be at least 1")
    if args.pin and not set(args.pin) <= os.sched_getaffinity(0):
        parser.error(f"--pin {args.pin[0]}: this process may run on {os.sched_getaffinity(0)}")
    return args


def _sizes(text: str) -> tuple[int, ...]:
    sizes = tuple(sorted({int(n) for n in text.split(",") if n.strip()}))
    if not sizes or sizes[0] < 1 or 2 in sizes:
        # redis-cli --cluster create joins 3 or more; make_cluster gives 1 every slot itself
        raise argparse.ArgumentTypeError("cluster sizes are 1, or whole numbers of 3 or more")
    return sizes


def _shards(text: str) -> tuple[int, ...]:
    counts = tuple(dict.fromkeys(int(n) for n in text.split(",") if n.strip()))
    if not counts or not all(1 <= n <= 1024 for n in counts):
        raise argparse.ArgumentTypeError("shard counts are whole numbers from 1 to 1,024")
    return counts


def _pin(text: str) -> tuple[int, ...] | None:
    if text == "off":
        return None
    if not text.isdigit():
        raise argparse.ArgumentTypeError("a CPU number, or off")
    return (int(text),)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    steps = STEPS["quick" if args.quick else "full"]
    started, clock = dt.datetime.now(dt.UTC), perf()
    load_start = os.getloadavg()[0]
    chosen = setups(args.primaries, args.shards)
    # pinned first in each repeat, then unpinned, every setup once in each: noise spreads
    modes = [("pinned", args.pin), ("unpinned", None)] if args.pin else [("unpinned", None)]
    runs: dict[str, list[Result]] = {s.key: [] for s in chosen}
    total, n = args.repeat * len(modes) * len(chosen), 0
    with tempfile.TemporaryDirectory(prefix="crawlq-bench-cluster-") as tmp:
        root = Path(tmp)
        log(f"crawlq from {freeze(root)}; {total} runs of {steps:,} steps")
        where = environment()
        for repeat in range(args.repeat):
            for mode, cpus in modes:
                for setup in chosen:
                    n += 1
                    begin = perf()
                    try:
                        result = measure(setup, args, steps, n, root, cpus)
                    except Exception as exc:  # keep going: the report shows the error
                        result = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
                    result.update(mode=mode, repeat=repeat, wall_s=perf() - begin)
                    result["shards"] = setup.shards or None  # None: a plain server
                    result["load1"] = os.getloadavg()[0]
                    runs[setup.key].append(result)
                    outcome = result.get("error") or result.get("check")
                    log(
                        f"[{n}/{total} {perf() - clock:5.0f}s] {setup.label}, {mode}: "
                        f"{result.get('steps_rate', 0.0):,.0f} steps/s, "
                        f"{result.get('server_us', 0):.1f} us/step server, "
                        f"{result['wall_s']:.0f}s: {outcome}"
                    )
    document = {
        "started": started.isoformat(),
        "argv": sys.argv[1:] if argv is None else argv,
        "quick": args.quick,
        "repeat": args.repeat,
        "workers": args.workers,
        "primaries": list(args.primaries),
        "pin": list(args.pin) if args.pin else None,
        "steps": steps,
        "seeds": SEEDS,
        "seconds": perf() - clock,
        "load_start": load_start,
        "shards": list(args.shards),
        "setups": [asdict(s) for s in chosen],
        "runs": runs,
        "environment": where,
    }
    # per shard count, where redis-cli would put the crawl's shards on each size,
    # measured or derived
    sizes = sorted({*args.primaries, *DERIVED})
    document["placements"] = {}
    for count in args.shards:
        keys = {s.key for s in chosen if s.primaries and s.shards == count}
        found = (r["tags"] for key in keys for r in runs[key] if "tags" in r)
        if tags := next(found, None):
            document["placements"][str(count)] = {str(n): placement(tags, n) for n in sizes}
    raw = HERE / "results" / f"cluster-{started:%Y%m%d-%H%M%S}{'-quick' if args.quick else ''}.json"
    raw.parent.mkdir(exist_ok=True)
    raw.write_text(json.dumps(document, indent=1) + "\n")
    text = render(document)
    args.output.write_text(text)
    print(text)
    log(f"wrote {args.output} (raw: {raw})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
