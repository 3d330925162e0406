"""Compare crawlq versions on the same workloads in one run: ``python -m benchmarks.compare``.

    python -m benchmarks.compare --only W1,W2 --repeat 5 before=/tmp/old/src after=src

Each NAME=PATH is a directory holding a ``crawlq`` package (a checkout's
``src``; copied at start, so edits during the run change nothing). Every
measurement runs in a fresh process, interleaved across versions (each
version once, then each again...), so the machine's noise spreads over all of
them. Prints, per measurement and rate, each version's median and its ratio
to the first version's: the before/after figure for a change's cost.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import workloads
from benchmarks.__main__ import HERE, RedisServer, Runner, log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare", description=__doc__)
    parser.add_argument("versions", nargs="+", help="NAME=PATH of a directory holding crawlq/")
    parser.add_argument("--only", default="W1,W2", help="workloads (default W1,W2)")
    parser.add_argument("--backends", help="memory,sqlite,redis (default all)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (default 5)")
    parser.add_argument("--quick", action="store_true", help="sizes divided by about 10")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    args = parser.parse_args(argv)
    only = {w.strip().upper() for w in args.only.split(",")}
    backends = None if args.backends is None else set(args.backends.split(","))
    sizes = workloads.QUICK if args.quick else workloads.FULL
    specs = [
        s
        for s in workloads.plan(sizes)
        if s.impl == "crawlq" and s.workload in only and (backends is None or s.backend in backends)
    ]
    versions = dict(v.split("=", 1) for v in args.versions)
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="crawlq-compare-") as tmp:
        root = Path(tmp)
        runners: dict[str, Runner] = {}
        redis = RedisServer() if any(s.backend == "redis" for s in specs) else None
        try:
            for name, path in versions.items():
                copy = root / name / "crawlq"
                shutil.copytree(
                    Path(path) / "crawlq", copy, ignore=shutil.ignore_patterns("__pycache__")
                )
                env = {**os.environ, "PYTHONPATH": f"{copy.parent}:{HERE.parent}"}
                runner = runners[name] = Runner(args, root, env)
                runner.redis = redis
            for repeat in range(args.repeat):
                for spec in specs:
                    for name, runner in runners.items():
                        result = runner.run(spec)
                        results.setdefault((spec.key, name), []).append(result)
                        outcome = result.get("error", "ok")
                        log(f"[{repeat + 1}/{args.repeat}] {spec.label} {name}: {outcome}")
        finally:
            if redis is not None:
                redis.stop()
    first = next(iter(versions))
    for spec in specs:
        print(f"\n{spec.group}: {spec.label}")
        rates = sorted(
            {k for r in results[(spec.key, first)] for k in r if k.endswith(("_rate", "_us"))}
        )
        for rate in rates:
            medians = {
                name: statistics.median(r[rate] for r in results[(spec.key, name)] if rate in r)
                for name in versions
                if any(rate in r for r in results[(spec.key, name)])
            }
            base = medians.get(first)
            cells = [
                f"{name} {value:,.1f}"
                + (f" ({value / base:.3f}x)" if base and name != first else "")
                for name, value in medians.items()
            ]
            print(f"  {rate:32} " + "  ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
