"""W7, requests with due times: ``python -m benchmarks.due [options]`` writes ``benchmarks/DUE.md``.

    python -m benchmarks.due                            # W7 on every store whose due tests pass
    python -m benchmarks.due --before /tmp/before/src   # + W1/W2 on that crawlq and this one

W7: 100,000 requests over 1,000 hosts (``host_delay=0``, no concurrency
limit: lateness measures the frontier, not pacing), priority 0; half carry a
``not_before`` spread uniformly over 10 s, half are due now. All are added
first (``add_many`` of 100, timed on its own), due times counted from the
drain's start, an instant fixed before the add (``LEAD`` s after it starts;
an add that overruns it runs again with twice the lead) and slept to. The
scheduled half is added first: once due, a request is the oldest there and
goes before the due-now backlog (priority, then order), so its lateness is
the frontier's, not queueing behind older work. The drain runs until every
request was handed out. sync: one loop doing what a user's does (``pop``,
``ack`` each, ``time.sleep(next_ready_in())`` when ``pop`` returns None,
never a fixed poll); asyncio: ``crawlq.Scheduler``, 32 coroutines looping
``get()`` + ``task_done()``. Lateness = ``time.time()`` as ``pop``/``get``
returns a scheduled request - its ``not_before`` (an early one fails the
check); requests/s = requests / (last hand-out - drain start), at most about
10,000/s; beside them the worker's CPU (all threads), the Redis server's
(``/proc``), and the collector's full passes during the drain.

Each measurement is a fresh process on a fresh SQLite job or redis-server
(127.0.0.1, a free port, no persistence, stopped by its pid); repeats
interleave; figures are medians. ``src/crawlq`` is copied at the start; a
store is measured only if ``tests/conformance/test_due.py -k STORE`` passes
on the copy. ``--before DIR`` (holding a ``crawlq`` package) also runs the
runner's W1 (``add_many(100)``, ``pop`` + ``ack``) and W2 on that crawlq and
this one (``benchmarks.__main__.Runner``; before and after alternate, the
order flipped every repeat). A "## Notes" section in the output is kept.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import gc
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULT_MARKER = "@@RESULT@@ "
Result = dict[str, Any]
TARGET_P99_MS = {"memory": 50.0, "sqlite": 50.0, "redis": 100.0}
#: Seconds from the start of the add to the drain's start (doubled on an overrun).
LEAD = {"memory": 3.0, "sqlite": 6.0, "redis": 6.0}
FULL = {"n": 100_000, "hosts": 1_000, "window": 10.0}
QUICK = {"n": 10_000, "hosts": 1_000, "window": 3.0}
COROUTINES = 32
BATCH = 100


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


Record = tuple["array[float]", list[str]]  # hand-out times and URLs: nothing gc tracks


def _drain_sync(frontier: Any, n: int, deadline: float) -> tuple[Record, int]:
    """Pop, ack each, sleep(next_ready_in()) when pop returns None; (hand-outs, sleeps)."""
    pop, ack, ready_in = frontier.pop, frontier.ack, frontier.next_ready_in
    now, sleep = time.time, time.sleep
    times, urls = array("d"), list[str]()
    stamp, name, sleeps = times.append, urls.append, 0
    while len(urls) < n:
        request = pop()
        if request is None:
            wait = ready_in()
            if wait is None or now() > deadline:
                break
            sleeps += 1
            sleep(wait)
            continue
        stamp(now())
        name(request.url)
        ack(request)
    return (times, urls), sleeps


async def _drain_async(frontier: Any, n: int, start: float, deadline: float) -> Record:
    """32 coroutines on crawlq.Scheduler, each looping get() then task_done()."""
    import crawlq

    scheduler = crawlq.Scheduler(frontier)
    times, urls = array("d"), list[str]()
    finished = asyncio.Event()

    async def worker() -> None:
        get, done, now = scheduler.get, scheduler.task_done, time.time
        stamp, name = times.append, urls.append
        while True:
            try:
                request = await get()
            except crawlq.SchedulerClosed:
                return
            stamp(now())
            name(request.url)
            done(request)
            if len(urls) >= n:
                finished.set()

    await asyncio.sleep(max(0.0, start - time.time()))
    tasks = [asyncio.create_task(worker()) for _ in range(COROUTINES)]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(finished.wait(), max(1.0, deadline - time.time()))
    await scheduler.close()
    await asyncio.gather(*tasks)
    return times, urls


def _full_collections(durations: list[float]) -> Any:
    """A gc callback appending each full (generation 2) collection's seconds to ``durations``."""

    def watch(phase: str, info: dict[str, int]) -> None:
        if info["generation"] == 2 and phase == "start":
            durations.append(time.perf_counter())
        elif info["generation"] == 2:
            durations[-1] = time.perf_counter() - durations[-1]

    return watch


def _quantile(ordered: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of a sorted list."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def measure(spec: Result) -> Result:
    """W7 once: build, add (timed), sleep until the drain's start, drain, check."""
    import crawlq
    from benchmarks.redis_servers import cpu_seconds

    n, hosts, window = spec["n"], spec["hosts"], spec["window"]
    frontier = crawlq.open_frontier(spec["where"], host_delay=0.0, host_concurrency=None)
    rng = random.Random(7)
    scheduled = n // 2
    names = [f"host{h}.example{h % 7}.com" for h in range(hosts)]
    urls = [f"https://{names[i % hosts]}/due/{i}.html" for i in range(n)]
    offsets = [rng.uniform(0.0, window) for _ in range(scheduled)]
    start = time.time() + spec["lead"]  # the drain's start: due times count from it
    dues = [start + o for o in offsets] + [None] * (n - scheduled)
    requests = [crawlq.Request(u, not_before=d) for u, d in zip(urls, dues, strict=True)]
    due = {r.url: r.not_before for r in requests}
    gc.collect()
    began = time.perf_counter()
    add_many = frontier.add_many
    for first in range(0, n, BATCH):
        add_many(requests[first : first + BATCH])
    add_s = time.perf_counter() - began
    result: Result = {"add_rate": n / add_s, "add_s": add_s, "lead": spec["lead"]}
    if time.time() > start - 0.05:
        frontier.close()
        return {**result, "late_start": True}
    del requests
    gc.collect()
    deadline = start + window + spec["timeout"]
    pid = spec.get("server_pid")
    cpu, server = time.process_time(), cpu_seconds(pid) if pid else 0.0
    full: list[float] = []
    gc.callbacks.append(watch := _full_collections(full))
    sleeps = 0
    if spec["mode"] == "sync":
        time.sleep(max(0.0, start - time.time()))
        out, sleeps = _drain_sync(frontier, n, deadline)
    else:
        out = asyncio.run(_drain_async(frontier, n, start, deadline))
    cpu, server_s = time.process_time() - cpu, cpu_seconds(pid) - server if pid else None
    gc.callbacks.remove(watch)
    times, urls = out
    lateness = sorted(t - d for t, u in zip(times, urls, strict=True) if (d := due[u]) is not None)
    backlog = [t for t, u in zip(times, urls, strict=True) if due[u] is None]
    last = max(times, default=start)
    handed, distinct = len(urls), len(set(urls))
    left = len(frontier)
    frontier.close()
    early = sum(1 for x in lateness if x < -0.001)
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0), ("min", 0.0)):
        result[f"{name}_ms"] = 1e3 * _quantile(lateness, q) if lateness else None
    result.update(
        handed=handed,
        distinct=distinct,
        drain_s=last - start,
        rate=handed / max(last - start, 1e-9),
        backlog_s=max(backlog, default=start) - start,
        early=early,
        cpu_us=1e6 * cpu / max(handed, 1),
        server_us=None if server_s is None else 1e6 * server_s / max(handed, 1),
        sleeps=sleeps,
        gc_full=len(full),
        gc_full_ms=1e3 * max(full, default=0.0),
        left=left,
        ok=handed == n == distinct and len(lateness) == scheduled and not early and left == 0,
    )
    return result


@contextlib.contextmanager
def place(store: str, root: Path, run: int) -> Iterator[tuple[str, int | None]]:
    """Where one measurement's frontier lives (a fresh job or server), and a server pid."""
    if store != "redis":
        job = Path(tempfile.mkdtemp(prefix="w7-", dir=root))
        yield ("memory://" if store == "memory" else f"sqlite:///{job}/job.db"), None
        shutil.rmtree(job, ignore_errors=True)
    else:
        from benchmarks.redis_servers import servers

        with servers(0, root / f"redis-{run}") as nodes:
            yield f"redis://127.0.0.1:{nodes[0].port}/0?crawl=w7", nodes[0].pid


def child(spec: Result, env: dict[str, str], timeout: float) -> Result:
    """Run ``measure(spec)`` in a fresh process; its result, or {"error": ...}."""
    command = [sys.executable, "-m", "benchmarks.due", "--child", json.dumps(spec)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no result in {timeout:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return dict(json.loads(line[len(RESULT_MARKER) :]))
    tail = " | ".join(done.stderr.strip().splitlines()[-3:])
    return {"error": f"exit {done.returncode}: {tail}"[:1000]}


def run_w7(spec: Result, env: dict[str, str], root: Path, run: int, timeout: float) -> Result:
    """One W7 measurement; an add that overruns the lead is run again with twice the lead."""
    spec = dict(spec)
    for _ in range(4):
        with place(spec["store"], root, run) as (where, pid):
            result = child({**spec, "where": where, "server_pid": pid}, env, timeout)
        if not result.get("late_start"):
            return result
        log(f"  the add took {result['add_s']:.1f} s, over a {spec['lead']:.0f} s lead: again")
        spec["lead"] *= 2
    return {"error": "the add overran its lead four times"}


def freeze(source: Path, target: Path) -> str:
    """Copy the crawlq package in ``source`` to ``target/crawlq``; the PYTHONPATH to use."""
    shutil.copytree(source / "crawlq", target / "crawlq", ignore=shutil.ignore_patterns("*.pyc"))
    return os.pathsep.join(p for p in (str(target), str(ROOT), os.environ.get("PYTHONPATH")) if p)


def store_ready(store: str, env: dict[str, str]) -> tuple[bool, str]:
    """Does ``tests/conformance/test_due.py -k STORE`` pass on the copied crawlq?"""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["tests/conformance/test_due.py", "-k", store]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200)
    lines = done.stdout.strip().splitlines()
    return done.returncode == 0, (lines[-1].strip("= ") if lines else done.stderr[-200:])


def before_after(
    args: argparse.Namespace, stores: list[str], envs: dict[str, dict[str, str]], root: Path
) -> dict[str, Any]:
    """W1 (pop + ack) and W2 for each store, before and after, alternating; raw runs."""
    from benchmarks import workloads
    from benchmarks.__main__ import RedisServer, Runner

    plan = workloads.plan(workloads.QUICK if args.quick else workloads.FULL)
    kinds = {("W1", "pop+ack"), ("W2", None)}
    specs = [s for s in plan if (s.workload, s.params.get("dequeue")) in kinds]
    specs = [s for s in specs if s.impl == "crawlq" and s.backend in stores]
    redis = RedisServer() if "redis" in stores else None
    runners = {name: Runner(args, root, env) for name, env in envs.items()}
    runs: dict[str, list[Result]] = {}
    try:
        for runner in runners.values():
            runner.redis = redis
        for repeat in range(args.repeat):
            names = list(runners) if repeat % 2 == 0 else list(reversed(runners))
            for spec in specs:
                for name in names:
                    result = runners[name].run(spec)
                    runs.setdefault(f"{spec.key}|{name}", []).append(result)
                    log(f"[{repeat + 1}/{args.repeat}] {spec.key} {name}: {_check([result])}")
    finally:
        if redis is not None:
            redis.stop()
    return {"specs": [vars(s) | {"key": s.key} for s in specs], "runs": runs, "quick": args.quick}


def environment() -> Result:
    def run(*command: str) -> str:
        return subprocess.run(command, capture_output=True, text=True, cwd=ROOT).stdout.strip()

    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((x.split(":", 1)[1].strip() for x in cpuinfo if x.startswith("model name")), "?")
    server = run("redis-server", "--version").partition(" v=")[2].partition(" ")[0]
    status = run("git", "status", "--porcelain", "--", "src").splitlines()
    return {
        "machine": f"{cpu}, {os.cpu_count()} CPUs, Linux {platform.release()}, "
        f"Python {platform.python_version()}, redis-server {server}",
        "commit": run("git", "rev-parse", "--short", "HEAD"),
        "modified": [line.split(maxsplit=1)[-1] for line in status],
    }


def _median(runs: list[Result], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None and "error" not in r]
    return statistics.median(values) if values else None


def _spread(runs: list[Result], key: str) -> str:
    """±half the min-max range, relative to the median (as RESULTS.md gives it)."""
    middle, values = _median(runs, key), [r[key] for r in runs if r.get(key) is not None]
    return f" ±{50 * (max(values) - min(values)) / middle:.0f}%" if middle else ""


def _num(value: float | None, digits: int = 0, unit: str = "") -> str:
    return "-" if value is None else f"{value:,.{digits}f}{unit}"


def _check(runs: list[Result]) -> str:
    """The check: ok, or what went wrong in the runs that were not."""
    keys = ("early", "handed", "left")
    bad = [r.get("error") or ", ".join(f"{k} {r.get(k)}" for k in keys) for r in runs]
    return "; ".join(b for b, r in zip(bad, runs, strict=True) if not r.get("ok"))[:300] or "ok"


def render(document: Result, notes: str = "") -> str:
    env, w7, modified = document["environment"], document["w7"], document["environment"]["modified"]
    changes = f" + uncommitted changes to {', '.join(modified)}" if modified else ""
    lines = [
        "# W7: requests with due times",
        "",
        f"`python -m benchmarks.due {' '.join(document['argv'])}`, started "
        f"{document['started'][:16]} UTC{' (QUICK sizes)' if document['quick'] else ''}; "
        f"medians of {document['repeat']} runs per row, each a fresh process, interleaved; "
        f"1-minute load average {document['load'][0]:.2f} at the start, "
        f"{document['load'][1]:.2f} at the end.",
        "",
        f"Machine: {env['machine']}. crawlq: commit {env['commit']}{changes} (src/ copied at "
        "the start).",
        "",
        f"W7: {w7['n']:,} requests, {w7['hosts']:,} hosts, half due over {w7['window']:g} s "
        "from the drain's start: see `benchmarks/due.py`'s docstring.",
        "",
        "Stores: " + "; ".join(f"{s}: {why}" for s, why in document["readiness"].items()) + ".",
        "",
        "| store | worker | add/s | requests/s | due-now half out | lateness p50 | p99 | max "
        "| p99 per run | worker CPU/request | server CPU/request | full GCs in drain (longest) "
        "| p99 target | check |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, runs in document["runs"].items():
        store, mode = key.split("/")
        p99, target = _median(runs, "p99_ms"), TARGET_P99_MS[store]
        met = "-" if p99 is None else ("met" if p99 <= target else "**missed**")
        fulls = " / ".join(str(r.get("gc_full", "-")) for r in runs)
        p99s = " / ".join(_num(r.get("p99_ms"), 1) for r in runs)
        lines.append(
            f"| {store} | {mode} | {_num(_median(runs, 'add_rate'))} | "
            f"{_num(_median(runs, 'rate'))} | {_num(_median(runs, 'backlog_s'), 2, ' s')} | "
            f"{_num(_median(runs, 'p50_ms'), 1, ' ms')} | {_num(p99, 1, ' ms')} | "
            f"{_num(_median(runs, 'max_ms'), 1, ' ms')} | "
            f"{p99s} | "
            f"{_num(_median(runs, 'cpu_us'), 1, ' us')} | "
            f"{_num(_median(runs, 'server_us'), 1, ' us')} | "
            f"{fulls} ({_num(_median(runs, 'gc_full_ms'), 0, ' ms')}) | "
            f"<= {target:g} ms: {met} | {_check(runs)} |"
        )
    if document.get("before_after"):
        lines += _before_after_lines(document["before_after"], document["before"])
    return "\n".join(lines) + "\n" + notes


def _before_after_lines(data: Result, before: str) -> list[str]:
    lines = [
        "",
        "## W1/W2 before and after due times",
        "",
        f"The runner's W1 and W2 ({'QUICK' if data.get('quick') else 'full'} sizes), crawlq "
        f"from `{before}` (before) and the copy above (after), this tree's benchmark code for "
        "both; after/before above 1: after is faster (server CPU per operation: below 1 is).",
        "",
        "| store | measurement | figure | before | after | after/before | runs |",
        "|---|---|---|---|---|---|---|",
    ]
    for spec in data["specs"]:
        runs = {n: data["runs"].get(f"{spec['key']}|{n}", []) for n in ("before", "after")}
        figures = sorted({k for r in runs["before"] for k in r if k.endswith(("_rate", "_us"))})
        bad = _check(runs["before"] + runs["after"])
        problems = "" if bad == "ok" else f" ({bad[:120]})"
        for figure in figures:
            b, a = _median(runs["before"], figure), _median(runs["after"], figure)
            lines.append(
                f"| {spec['backend']} | {spec['workload']} {spec['label']} | {figure} | "
                f"{_num(b, 1)}{_spread(runs['before'], figure)} | "
                f"{_num(a, 1)}{_spread(runs['after'], figure)} | "
                f"{f'{a / b:.3f}x' if a is not None and b else '-'} | "
                f"{len(runs['before'])} + {len(runs['after'])}"
                f"{problems} |"
            )
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.due", description=__doc__)
    parser.add_argument("--stores", default="memory,sqlite,redis", help="memory,sqlite,redis")
    parser.add_argument("--modes", default="sync,asyncio", help="sync,asyncio")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row (default 3)")
    parser.add_argument("--quick", action="store_true", help="10,000 requests over 3 s")
    parser.add_argument("--before", type=Path, help="a directory holding the 'before' crawlq")
    parser.add_argument("--no-check", action="store_true", help="measure stores whose tests fail")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per process")
    parser.add_argument("--output", type=Path, default=HERE / "DUE.md", help="the report")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def run_all(args: argparse.Namespace, document: Result, root: Path) -> None:
    """Check the stores, run W7 (interleaved repeats), then W1/W2 before/after if asked."""
    envs = {"after": {**os.environ, "PYTHONPATH": freeze(ROOT / "src", root / "after")}}
    if args.before:
        before = {**os.environ, "PYTHONPATH": freeze(args.before, root / "before")}
        envs = {"before": before, **envs}
    ready = []
    for store in args.stores.split(","):
        ok, why = (True, "not checked") if args.no_check else store_ready(store, envs["after"])
        verdict = "due-time tests pass" if ok else "NOT measured: its due-time tests fail"
        document["readiness"][store] = f"{verdict} ({why})"
        log(f"{store}: {document['readiness'][store]}")
        ready += [store] if ok else []
    keys = [(s, m) for s in ready for m in args.modes.split(",")]
    runs: dict[str, list[Result]] = {f"{s}/{m}": [] for s, m in keys}
    document["runs"] = runs
    for repeat in range(args.repeat):
        for index, (store, mode) in enumerate(keys, 1 + repeat * len(keys)):
            spec = {**document["w7"], "store": store, "mode": mode, "lead": LEAD[store]}
            spec["timeout"] = args.timeout / 2
            result = run_w7(spec, envs["after"], root, index, args.timeout)
            result["load1"] = os.getloadavg()[0]
            runs[f"{store}/{mode}"].append(result)
            figures = {k: _num(result.get(k), 1) for k in ("p50_ms", "p99_ms", "max_ms", "rate")}
            log(f"[{index}/{args.repeat * len(keys)}] {store} {mode}: {figures} {_check([result])}")
    if args.before:
        document["before_after"] = before_after(args, ready, envs, root)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        result = measure(json.loads(args.child))
        sys.stdout.write("\n" + RESULT_MARKER + json.dumps(result) + "\n")
        return 0
    started = dt.datetime.now(dt.UTC)
    document: Result = {
        "started": started.isoformat(),
        "argv": sys.argv[1:] if argv is None else argv,
        "quick": args.quick,
        "repeat": args.repeat,
        "environment": environment(),
        "w7": QUICK if args.quick else FULL,
        "readiness": {},
        "before": str(args.before or ""),
        "load": [os.getloadavg()[0]],
    }
    with tempfile.TemporaryDirectory(prefix="crawlq-due-") as tmp:
        run_all(args, document, Path(tmp))
    document["load"].append(os.getloadavg()[0])
    raw = HERE / "results" / f"due-{started:%Y%m%d-%H%M%S}.json"
    raw.parent.mkdir(exist_ok=True)
    raw.write_text(json.dumps(document, indent=1, default=str) + "\n")
    old = args.output.read_text() if args.output.exists() else ""
    notes = old[old.index("\n## Notes") + 1 :] if "\n## Notes" in old else ""
    text = render(document, "\n" + notes if notes else "")
    args.output.write_text(text)
    log(f"wrote {args.output} (raw results: {raw})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
