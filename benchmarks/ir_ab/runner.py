"""The measurements of one run: every (shape, variant, replica) on a fresh server.

`snapshot` copies each variant's ``crawlq`` and the ``benchmarks`` package
(with this tool) into the run folder; `measure_all` measures every (shape,
variant, replica), ``--jobs`` at once, each by `run_one`: a fresh
redis-server under callgrind and a fresh ``benchmarks.ir_ab.child``, again
afresh when a serverCron leaked into the window. On an error or interrupt
it stops every process it started.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.ir_ab import procs
from benchmarks.ir_ab.child import RESULT, RETRY
from benchmarks.ir_ab.server import CLUSTER_ARGS, own_all_slots, start_server
from benchmarks.ir_ab.shapes import CLUSTER_SHAPES, Shape, replica

HERE = Path(__file__).resolve().parent
Result = dict[str, Any]
Key = tuple[int, int, int]  # (shape, variant, replica)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def snapshot(sources: list[str], bench_root: Path, root: Path) -> list[str]:
    """Copy each SRC's crawlq and the benchmarks package into the run folder: the copies'
    src folders (what the children import), in order. The copy's ``ir_ab`` is this one,
    whatever --bench-root holds, so the children run the same tool as this process."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "results")
    bench = root / "bench" / "benchmarks"
    shutil.copytree(
        bench_root / "benchmarks",
        bench,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "results", "ir_ab"),
    )
    shutil.copytree(HERE, bench / "ir_ab", ignore=ignore)
    copies: dict[str, str] = {}  # one copy per folder: a folder given twice is the same code
    for src in sources:
        if src not in copies:
            target = root / f"src{len(copies)}"
            shutil.copytree(Path(src) / "crawlq", target / "crawlq", ignore=ignore)
            copies[src] = str(target)
    return [copies[src] for src in sources]


def run_one(shape: Shape, index: int, src: str, args: argparse.Namespace, root: Path) -> Result:
    """One (shape, variant) on a fresh server; again, afresh, if a serverCron leaked in."""
    leaks = []
    for attempt in range(args.retries + 1):
        result = _run_once(shape, index, src, args, root, attempt)
        if "leak" not in result:
            result["leaks"] = leaks
            return result
        leaks.append(result["leak"])
    raise RuntimeError(f"{shape['label']} on {src}: a cron leaked in every time: {leaks}")


def _run_once(
    shape: Shape, index: int, src: str, args: argparse.Namespace, root: Path, attempt: int
) -> Result:
    label = shape["label"].replace(":", "-")
    folder = root / "servers" / f"{label}.v{index}.r{shape.get('replica', 0)}.{attempt}"
    begin = time.perf_counter()
    cluster = shape["shape"] in CLUSTER_SHAPES
    extra = [*CLUSTER_ARGS, *args.redis_args] if cluster else args.redis_args
    proc, port, out = start_server(args.redis_bin, folder, args.server_env, extra)
    try:
        if cluster:
            own_all_slots(port)
        crawl = "a1" if shape["shape"] in ("a1", *CLUSTER_SHAPES) else "bench"
        scheme = "redis+cluster" if cluster else "redis"
        spec = {
            **shape,
            "src": src,
            "port": port,
            "pid": proc.pid,
            "cg_out": out,
            "url": f"{scheme}://127.0.0.1:{port}/0?crawl={crawl}",
            "real_clock": args.real_clock,
        }
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([src, str(root / "bench")]),
            "PYTHONHASHSEED": "0",
        }
        worker = procs.spawn(
            [sys.executable, "-m", "benchmarks.ir_ab.child", json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(folder),
        )
        try:
            stdout, stderr = worker.communicate(timeout=args.timeout)
        finally:
            procs.stop(worker)
        result = None
        for line in stdout.splitlines():
            if line.startswith(RESULT):
                result = json.loads(line[len(RESULT) :])
            elif line.startswith(RETRY):
                result = {"leak": line[len(RETRY) :]}
                log(f"  {shape['label']} v{index}: {result['leak']}: again")
        if result is None:
            tail = "\n".join(stderr.strip().splitlines()[-10:])
            raise RuntimeError(f"{shape['label']} on {src}: exit {worker.returncode}\n{tail}")
    finally:
        procs.stop(proc)
    result["wall_s"] = time.perf_counter() - begin
    result["folder"] = str(folder)
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)
    return result


def measure_all(
    shapes: list[Shape], copies: list[str], names: list[str], args: argparse.Namespace, root: Path
) -> dict[Key, Result]:
    """Every (shape, variant, replica), --jobs at once; progress on stderr."""
    clock = time.perf_counter()
    results: dict[Key, Result] = {}
    futures: dict[concurrent.futures.Future[Result], Key] = {}
    pool = concurrent.futures.ThreadPoolExecutor(args.jobs)
    try:
        for s, shape in enumerate(shapes):
            for r in range(args.replicas):
                for v, src in enumerate(copies):
                    one = replica(shape, r, args.jitter)
                    futures[pool.submit(run_one, one, v, src, args, root)] = (s, v, r)
        for future in concurrent.futures.as_completed(futures):
            s, v, r = futures[future]
            done = results[(s, v, r)] = future.result()
            tag = f" r{r}" if args.replicas > 1 else ""
            log(
                f"  [{time.perf_counter() - clock:4.0f}s] {shapes[s]['label']} {names[v]}{tag}: "
                f"{done['ir']:,} Ir ({done['wall_s']:.0f}s)"
            )
    except BaseException:
        for future in futures:
            future.cancel()
        procs.stop_all()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    return results
