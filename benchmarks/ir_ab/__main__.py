"""``python -m benchmarks.ir_ab``: the options, one run, its table (and --out JSON).

Checks the variants and the tools, builds the shim and copies the code into
a run folder (under the system's temp folder; removed at the end unless
``--keep``, kept on an error), measures every shape on every variant
(``runner``) and prints the table (``report``). The package docstring is the
``--help`` text: what is measured, how, and its limits.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import benchmarks.ir_ab as package
from benchmarks.ir_ab import procs, runner, shim
from benchmarks.ir_ab.report import report
from benchmarks.ir_ab.server import missing_tools
from benchmarks.ir_ab.shapes import DEFAULT_SHAPES, parse_shapes

REPO = Path(__file__).resolve().parents[2]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.ir_ab",
        description=package.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = p.add_argument
    add("sources", nargs="?", help="SRC_A[,SRC_B,...]: folders holding a crawlq package")
    add(
        "--shapes",
        default=DEFAULT_SHAPES,
        help="comma list of name[:k][@calls] (default %(default)s); ping is added",
    )
    add(
        "--calls",
        type=int,
        default=200,
        help="timed calls per shape (k<=1 shapes, w2, floors; default %(default)s)",
    )
    add(
        "--items",
        type=int,
        default=5000,
        help="k>1 shapes: calls = max(10, min(--calls, items / k)) (default %(default)s)",
    )
    add("--warm", type=int, default=None, help="warm-up calls (default max(20, calls/10))")
    add("--a1-steps", type=int, default=1000, help="A1 steps (default %(default)s)")
    add(
        "--replicas",
        type=int,
        default=1,
        help="measurements per shape and variant, each with a warm-up --jitter calls longer "
        "than the one before: means, spread and the range of the paired differences "
        "(default 1)",
    )
    add("--jitter", type=int, default=7, help="see --replicas (default %(default)s)")
    add("--jobs", type=int, default=2, help="servers measured at once (default %(default)s)")
    add(
        "--redis-bin",
        default=os.environ.get("REDIS_BIN", "redis-server"),
        help="default $REDIS_BIN or redis-server from PATH (stripped: exact totals, GC only "
        "partly; a build with symbols adds the GC breakdown)",
    )
    add(
        "--redis-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more redis-server argument, after $IR_AB_REDIS_ARGS (split like a shell) "
        "and the tool's own; repeat it: --redis-arg=--zset-max-listpack-entries "
        "--redis-arg=0",
    )
    add(
        "--bench-root",
        type=Path,
        default=REPO,
        help="the folder holding the benchmarks package (default %(default)s)",
    )
    add(
        "--real-clock",
        action="store_true",
        help="crawlq sees the real monotonic clock, pid and random tokens",
    )
    add(
        "--random-seed",
        action="store_true",
        help="redis-server as it is: real /dev/urandom, srandom, wall clock, purging",
    )
    add(
        "--server-clock-us",
        type=int,
        default=100,
        help="us the server's virtual wall clock moves per TIME command "
        "(default %(default)s, about one native call; 0: the real clock)",
    )
    add(
        "--keep",
        action="store_true",
        help="keep the run folder: copies, server logs, callgrind dumps",
    )
    add("--out", type=Path, default=None, help="also write the results as JSON here")
    add("--retries", type=int, default=3, help="fresh tries when a cron leaks in")
    add("--timeout", type=float, default=900.0, help="seconds per measurement")
    return p


def check(p: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The variants' src folders (real paths), after checking them and the tools."""
    if not args.sources:
        p.error("give SRC_A[,SRC_B,...]")
    sources = [os.path.realpath(s) for s in args.sources.split(",")]
    for src in sources:
        if not os.path.isfile(os.path.join(src, "crawlq", "__init__.py")):
            p.error(f"{src} holds no crawlq package")
    if not (args.bench_root / "benchmarks" / "redis_cost_shapes.py").is_file():
        p.error(f"{args.bench_root} holds no benchmarks/redis_cost_shapes.py")
    missing = missing_tools(args.redis_bin, shim=not args.random_seed)
    if missing:
        p.exit(
            2,
            f"benchmarks.ir_ab needs valgrind (callgrind, vgdb), gcc and redis-server; "
            f"missing: {', '.join(missing)} (apt-get install -y valgrind gcc redis-server)\n",
        )
    args.redis_bin = shutil.which(args.redis_bin)
    args.redis_args = shlex.split(os.environ.get("IR_AB_REDIS_ARGS", "")) + args.redis_arg
    return sources


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    sources = check(p, args)
    shapes = parse_shapes(args.shapes, args)
    names = [chr(ord("A") + i) for i in range(len(sources))]
    stamp = time.strftime("%m%d-%H%M%S")
    root = Path(tempfile.mkdtemp(prefix=f"crawlq-ir-ab-{stamp}-"))
    previous = signal.signal(signal.SIGTERM, procs.interrupt)
    try:
        clock = time.perf_counter()
        args.server_env = {}
        if not args.random_seed:
            args.server_env = shim.server_env(root / "shim", args.server_clock_us)
        copies = runner.snapshot(sources, args.bench_root, root)
        for name, src in zip(names, sources, strict=True):
            print(f"{name} = {src}", flush=True)
        extra = f" {shlex.join(args.redis_args)}" if args.redis_args else ""
        print(f"redis-server = {args.redis_bin}{extra}", flush=True)
        print(
            f"{len(shapes)} shapes x {len(sources)} variants, {args.jobs} at once; "
            f"run folder {root}",
            flush=True,
        )
        results = runner.measure_all(shapes, copies, names, args, root)
    except BaseException:
        procs.stop_all()
        print(f"stopped; run folder kept: {root}", file=sys.stderr, flush=True)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    seconds = time.perf_counter() - clock
    libraries = [f"{names[v]} {results[(0, v, 0)]['library']}" for v in range(len(sources))]
    print("libraries: " + ", ".join(libraries))
    if args.real_clock:
        print("crawlq ran on the real clock")
    if args.random_seed:
        print("redis-server ran with real randomness and clock")
    lines, rows = report(shapes, names, results, args.replicas)
    print("\n".join(lines))
    retried = sum(len(r["leaks"]) for r in results.values())
    redone = f"; {retried} measurement(s) redone (cron leaked in)" if retried else ""
    print(f"run time {seconds:.0f}s{redone}", flush=True)
    if args.out:
        raw = {
            "sources": dict(zip(names, sources, strict=True)),
            "argv": sys.argv[1:],
            "redis": [args.redis_bin, *args.redis_args],
            "seconds": seconds,
            "rows": rows,
        }
        args.out.write_text(json.dumps(raw, indent=1) + "\n")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        procs.stop_all()
        sys.exit(130)
