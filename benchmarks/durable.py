"""Benchmark crawlq's SQLite job against Scrapy's JOBDIR and qcrawl's disk queue.

    python benchmarks/durable.py [--repeat 5] [--only W1,W2,W4,W4K] [--quick]

Every measurement runs in a fresh subprocess (``_durable_child.py``) on a
fresh directory; the repeats are interleaved (every measurement once, then
every measurement again...) so that noise on the machine spreads over all
implementations. Prints medians, crawlq's ratios and the targets of issue 3,
with the machine's load average, and writes the raw results to
``benchmarks/results/durable-<UTC time>.json``.

Workloads (see README.md):

W1   110,000 offers (100,000 unique over 1,000 hosts, random priorities in
     [-10, 10], an exact duplicate after every 10th) enqueued, then all
     dequeued. crawlq runs twice: ``add_many`` in batches of 100 then ``pop``
     + ``ack``, and one ``add`` at a time then ``pop`` alone.
W2   1,000 seeds, then steps of: dequeue one, enqueue its five children (half
     already seen); crawlq: ``pop``, ``add_many(children)``, ``ack``.
W4   100,000 queued and closed cleanly (filled once, copied for each run);
     reopen in a fresh process: time to open and to the first request, then
     to drain all. crawlq also at 1,000,000 queued (drain 100,000), with RSS.
W4K  kill -9 halfway through a drain, reopen, count what is lost. Two cases:
     the job was filled and drained in the killed process and never closed
     ("first session"), or it was filled and closed cleanly and the drain
     runs on the reopened job ("after a resume").
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CHILD = HERE / "_durable_child.py"
RESULT_MARKER = "@@RESULT@@ "  # keep in sync with _durable_child.py
PROGRESS_MARKER = "@@PROGRESS@@ "
WORKLOADS = ("W1", "W2", "W4", "W4K")
MB = 1024 * 1024
Result = dict[str, Any]

NAMES = {
    "crawlq": "crawlq",
    "scrapy-lifo": "Scrapy JOBDIR, LIFO disk q (default)",
    "scrapy-fifo": "Scrapy JOBDIR, FIFO disk q",
    "scrapy-dapq": "Scrapy JOBDIR, all 2.19 defaults (DAPQ)",
    "qcrawl": "qcrawl DiskQueue",
}
SCRAPY_JOBDIR = ("scrapy-lifo", "scrapy-fifo")
FILLED_IMPLS = ("crawlq", "scrapy-lifo", "scrapy-fifo", "qcrawl")


@dataclass(frozen=True)
class Sizes:
    """How big each workload is; ``quick`` divides them by about 10."""

    w1_unique: int = 100_000
    w1_hosts: int = 1_000
    w1_duplicate_every: int = 10
    qcrawl_w1_unique: int = 20_000  # qcrawl writes a file per request (~1k/s)
    w2_seeds: int = 1_000
    w2_steps: int = 20_000
    w2_hosts: int = 1_000
    qcrawl_w2_steps: int = 2_000
    w4_count: int = 100_000
    w4_hosts: int = 1_000
    w4_big: int = 1_000_000  # crawlq only
    w4_big_drain: int = 100_000
    qcrawl_drain_budget_s: float = 20.0  # W4 drain; the rate is extrapolated beyond


FULL = Sizes()
QUICK = Sizes(
    w1_unique=10_000,
    qcrawl_w1_unique=2_000,
    w2_steps=2_000,
    qcrawl_w2_steps=200,
    w4_count=10_000,
    w4_big=100_000,
    w4_big_drain=10_000,
    qcrawl_drain_budget_s=3.0,
)


@dataclass(frozen=True)
class Spec:
    """One measurement: a workload, an implementation and its variant."""

    workload: str
    impl: str
    label: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.workload}/{self.impl}" + (f"/{extra}" if extra else "")


def plan(sizes: Sizes, only: set[str]) -> list[Spec]:
    specs: list[Spec] = []
    if "W1" in only:
        specs += [
            Spec(
                "W1",
                "crawlq",
                "crawlq add_many(100) / pop+ack",
                {"enqueue": "add_many", "dequeue": "pop+ack"},
            ),
            Spec("W1", "crawlq", "crawlq add / pop", {"enqueue": "add", "dequeue": "pop"}),
            *(Spec("W1", impl, NAMES[impl]) for impl in (*SCRAPY_JOBDIR, "scrapy-dapq")),
            Spec("W1", "qcrawl", f"{NAMES['qcrawl']} [{sizes.qcrawl_w1_unique:,} unique]"),
        ]
    if "W2" in only:
        specs += [
            Spec("W2", "crawlq", "crawlq pop, add_many(5), ack"),
            *(Spec("W2", impl, NAMES[impl]) for impl in (*SCRAPY_JOBDIR, "scrapy-dapq")),
            Spec("W2", "qcrawl", f"{NAMES['qcrawl']} [{sizes.qcrawl_w2_steps:,} steps]"),
        ]
    if "W4" in only:
        specs += [
            Spec("W4", impl, NAMES[impl], {"queued": sizes.w4_count}) for impl in FILLED_IMPLS
        ]
        specs.append(
            Spec(
                "W4",
                "crawlq",
                f"crawlq, {sizes.w4_big:,} queued",
                {"queued": sizes.w4_big, "drain": sizes.w4_big_drain},
            )
        )
    if "W4K" in only:
        for impl in FILLED_IMPLS:
            if impl != "qcrawl":  # no close-time state: both cases are the same for it
                specs.append(Spec("W4K", impl, NAMES[impl], {"case": "first-session"}))
        for impl in FILLED_IMPLS:
            specs.append(Spec("W4K", impl, NAMES[impl], {"case": "resumed"}))
    return specs


# -- running ------------------------------------------------------------------


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def child(
    payload: Result,
    ctx: Context,
    on_line: Callable[[str, subprocess.Popen[str]], None] | None = None,
) -> Result:
    """Run one child with ``payload``; return its result, or ``{"error": ...}``."""
    command = [sys.executable, str(CHILD), json.dumps(payload)]
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=ctx.env, cwd=HERE
        )
        timer = threading.Timer(ctx.timeout, proc.kill)
        timer.start()
        result: Result | None = None
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(RESULT_MARKER):
                    result = json.loads(line[len(RESULT_MARKER) :])
                elif on_line is not None:
                    on_line(line, proc)
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if result is None:
            stderr.seek(0)
            tail = stderr.read().strip().splitlines()[-3:]
            result = {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
    result["wall_s"] = time.perf_counter() - start
    return result


@dataclass
class Context:
    sizes: Sizes
    root: Path
    env: dict[str, str] | None
    timeout: float
    filled: dict[str, Path] = field(default_factory=dict)  # "impl:count" -> closed job

    def fresh_dir(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.root))


def fill_key(impl: str, count: int) -> str:
    return f"{impl}:{count}"


def prepare(specs: list[Spec], ctx: Context) -> dict[str, Result]:
    """Fill, once, every job that W4 and the resumed W4K runs copy."""
    wanted: set[tuple[str, int]] = set()
    for spec in specs:
        if spec.workload == "W4":
            wanted.add((spec.impl, spec.params["queued"]))
        elif spec.workload == "W4K" and spec.params["case"] == "resumed":
            wanted.add((spec.impl, ctx.sizes.w4_count))
    fills: dict[str, Result] = {}
    for impl, count in sorted(wanted, key=lambda item: (item[1], item[0])):
        path = ctx.fresh_dir(f"fill-{impl}-{count}")
        payload = {
            "op": "fill",
            "impl": impl,
            "dir": str(path),
            "count": count,
            "hosts": ctx.sizes.w4_hosts,
        }
        load1 = load()[0]
        result = child(payload, ctx)
        result["load1"] = load1
        fills[fill_key(impl, count)] = result
        if "error" not in result:
            ctx.filled[fill_key(impl, count)] = path
        log(f"fill {impl} {count:,}: {result['wall_s']:.1f}s {result.get('error', 'ok')}")
    return fills


def copy_job(ctx: Context, impl: str, count: int) -> tuple[Path, float]:
    source = ctx.filled.get(fill_key(impl, count))
    if source is None:
        raise RuntimeError(f"the {count:,} fill of {impl} failed")
    start = time.perf_counter()
    target = ctx.fresh_dir(f"copy-{impl}")
    shutil.copytree(source, target, dirs_exist_ok=True)
    return target, time.perf_counter() - start


def run_spec(spec: Spec, ctx: Context) -> Result:
    sz = ctx.sizes
    base = {"impl": spec.impl}
    if spec.workload == "W1":
        path = ctx.fresh_dir("w1")
        unique = sz.qcrawl_w1_unique if spec.impl == "qcrawl" else sz.w1_unique
        payload = {
            **base,
            "op": "w1",
            "dir": str(path),
            "unique": unique,
            "hosts": sz.w1_hosts,
            "duplicate_every": sz.w1_duplicate_every,
            "params": spec.params,
        }
        try:
            return child(payload, ctx)
        finally:
            shutil.rmtree(path, ignore_errors=True)
    if spec.workload == "W2":
        path = ctx.fresh_dir("w2")
        steps = sz.qcrawl_w2_steps if spec.impl == "qcrawl" else sz.w2_steps
        payload = {
            **base,
            "op": "w2",
            "dir": str(path),
            "seeds": sz.w2_seeds,
            "steps": steps,
            "hosts": sz.w2_hosts,
        }
        try:
            return child(payload, ctx)
        finally:
            shutil.rmtree(path, ignore_errors=True)
    if spec.workload == "W4":
        try:
            path, copy_s = copy_job(ctx, spec.impl, spec.params["queued"])
        except RuntimeError as exc:
            return {"error": str(exc)}
        payload = {
            **base,
            "op": "reopen",
            "dir": str(path),
            "drain": spec.params.get("drain"),
            "budget_s": sz.qcrawl_drain_budget_s if spec.impl == "qcrawl" else None,
        }
        try:
            result = child(payload, ctx)
        finally:
            shutil.rmtree(path, ignore_errors=True)
        result["copy_s"] = copy_s
        return result
    if spec.workload == "W4K":
        return run_kill(spec, ctx)
    raise ValueError(spec.workload)


def run_kill(spec: Spec, ctx: Context) -> Result:
    """Drain in a child, SIGKILL it once it reports half the queue dequeued,
    then count in another fresh child what the reopened job still holds."""
    count = ctx.sizes.w4_count
    kill_at = count // 2
    first_session = spec.params["case"] == "first-session"
    if first_session:
        path = ctx.fresh_dir(f"kill-{spec.impl}")
    else:
        try:
            path, _ = copy_job(ctx, spec.impl, count)
        except RuntimeError as exc:
            return {"error": str(exc)}
    record = path.parent / f"{path.name}.record"
    killed: list[int] = []

    def watch(line: str, proc: subprocess.Popen[str]) -> None:
        if line.startswith(PROGRESS_MARKER) and not killed:
            done = int(line[len(PROGRESS_MARKER) :])
            if done >= kill_at:
                os.kill(proc.pid, signal.SIGKILL)
                killed.append(done)

    common = {"impl": spec.impl, "dir": str(path), "record": str(record), "count": count}
    common["hosts"] = ctx.sizes.w4_hosts
    try:
        drain = child({**common, "op": "drain", "fill": first_session}, ctx, watch)
        if not killed:
            return {"error": f"the drain was not killed: {drain.get('error', drain)}"}
        result = child({**common, "op": "count"}, ctx)
        result["killed_after_report"] = killed[0]
        result["drain_wall_s"] = drain["wall_s"]
        return result
    finally:
        shutil.rmtree(path, ignore_errors=True)
        record.unlink(missing_ok=True)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_all(specs: list[Spec], args: argparse.Namespace, ctx: Context) -> dict[str, list[Result]]:
    runs: dict[str, list[Result]] = {spec.key: [] for spec in specs}
    schedule = [(repeat, spec) for repeat in range(args.repeat) for spec in specs]
    log(f"{len(schedule)} runs ({len(specs)} measurements x {args.repeat} repeats)")
    clock = time.perf_counter()
    for index, (repeat, spec) in enumerate(schedule, 1):
        load1 = load()[0]
        result = run_spec(spec, ctx)
        result["repeat"] = repeat
        result["load1"] = load1
        runs[spec.key].append(result)
        log(
            f"[{index}/{len(schedule)} {time.perf_counter() - clock:6.0f}s load {load1:.1f}] "
            f"{spec.workload} {spec.label} {spec.params or ''}: "
            f"{result.get('wall_s', 0.0):.1f}s {result.get('error', 'ok')}"
        )
    return runs


# -- summarising --------------------------------------------------------------


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class Summary:
    def __init__(self, runs: dict[str, list[Result]]) -> None:
        self.runs = runs

    def ok_runs(self, key: str | None) -> list[Result]:
        return [r for r in self.runs.get(key or "", []) if "error" not in r]

    def values(self, key: str | None, metric: str) -> list[float]:
        return [r[metric] for r in self.ok_runs(key) if _number(r.get(metric))]

    def median(self, key: str | None, metric: str) -> float | None:
        values = self.values(key, metric)
        return statistics.median(values) if values else None

    def spread(self, key: str | None, metric: str) -> float | None:
        """Half the min-max range, relative to the median."""
        values = self.values(key, metric)
        if len(values) < 2:
            return None
        middle = statistics.median(values)
        return (max(values) - min(values)) / 2 / middle if middle else None

    def errors(self, key: str | None) -> list[str]:
        return [r["error"] for r in self.runs.get(key or "", []) if "error" in r]

    def flag(self, key: str | None, metric: str) -> bool | None:
        values = [r[metric] for r in self.ok_runs(key) if metric in r]
        return all(values) if values else None

    def medians(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for key in self.runs:
            metrics = sorted({m for r in self.ok_runs(key) for m, v in r.items() if _number(v)})
            out[key] = {m: v for m in metrics if (v := self.median(key, m)) is not None}
        return out


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _pct(value: float | None) -> str:
    return "" if value is None else f"±{100 * value:.0f}%"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _x(value: float | None) -> str:
    return "-" if value is None else (f"{value:.2f}x" if value < 10 else f"{value:.1f}x")


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / MB:.0f} MB"


class Report:
    def __init__(
        self, specs: list[Spec], summary: Summary, sizes: Sizes, fills: dict[str, Result]
    ) -> None:
        self.specs = specs
        self.s = summary
        self.sizes = sizes
        self.fills = fills
        self.lines: list[str] = []
        self.targets: list[Result] = []

    def out(self, line: str = "") -> None:
        self.lines.append(line)

    def find(self, workload: str, impl: str, **params: Any) -> str | None:
        for spec in self.specs:
            if (
                spec.workload == workload
                and spec.impl == impl
                and all(spec.params.get(k) == v for k, v in params.items())
            ):
                return spec.key
        return None

    def med(self, key: str | None, metric: str) -> float | None:
        return self.s.median(key, metric)

    def cell(self, key: str | None, metric: str, width: int = 10) -> str:
        return (
            _rate(self.med(key, metric)).rjust(width)
            + " "
            + _pct(self.s.spread(key, metric)).ljust(5)
        )

    def check(self, key: str) -> str:
        notes = []
        ok = self.s.flag(key, "ok")
        if ok is not None:
            notes.append("ok" if ok else "WRONG")
        order = self.s.flag(key, "priority_order")
        if order is not None:
            notes.append("priority order kept" if order else "priority order NOT kept")
        errors = self.s.errors(key)
        if errors:
            notes.append(f"{len(errors)}/{len(self.s.runs[key])} failed")
        return ", ".join(notes)

    def error_line(self, key: str) -> None:
        errors = self.s.errors(key)
        if errors:
            self.out(f"      error: {errors[0][:150]}")

    def target(
        self, name: str, value: float | None, goal: float, shown: str, *, at_most: bool = False
    ) -> None:
        if value is None:
            verdict = "n/a"
        else:
            verdict = "PASS" if (value <= goal if at_most else value >= goal) else "MISS"
        self.targets.append({"target": name, "value": value, "goal": goal, "verdict": verdict})
        self.out(f"  {verdict:5} {name:62} {shown}")

    def best_scrapy(self, workload: str, metric: str) -> tuple[float | None, str]:
        best: tuple[float | None, str] = (None, "-")
        for impl in SCRAPY_JOBDIR:
            value = self.med(self.find(workload, impl), metric)
            if value is not None and (best[0] is None or value > best[0]):
                best = (value, impl.removeprefix("scrapy-").upper())
        return best

    # -- sections --

    def w1(self) -> None:
        sz = self.sizes
        offered = sz.w1_unique + sz.w1_unique // sz.w1_duplicate_every
        self.out(
            f"W1  enqueue {offered:,} offers ({sz.w1_unique:,} unique + 10% exact duplicates) over "
            f"{sz.w1_hosts:,} hosts, priorities in [-10, 10]; then dequeue all. On disk."
        )
        self.out(f"  {'implementation':42}{'enqueue/s':>10}{'':6}{'dequeue/s':>10}{'':6}  check")
        rows = [s for s in self.specs if s.workload == "W1"]
        for spec in rows:
            self.out(
                f"  {spec.label:42}{self.cell(spec.key, 'enqueue_rate')}"
                f"{self.cell(spec.key, 'dequeue_rate')}  {self.check(spec.key)}"
            )
            self.error_line(spec.key)
        many = self.find("W1", "crawlq", enqueue="add_many")
        single = self.find("W1", "crawlq", enqueue="add")
        self.out(f"  {'crawlq / peer':42}{'add_many':>9}{'add':>7}{'pop+ack':>9}{'pop':>7}")
        for spec in rows:
            enq = self.med(spec.key, "enqueue_rate")
            deq = self.med(spec.key, "dequeue_rate")
            if spec.impl == "crawlq" or enq is None:
                continue
            self.out(
                f"  {'vs ' + spec.label:42}"
                f"{_x(_ratio(self.med(many, 'enqueue_rate'), enq)):>9}"
                f"{_x(_ratio(self.med(single, 'enqueue_rate'), enq)):>7}"
                f"{_x(_ratio(self.med(many, 'dequeue_rate'), deq)):>9}"
                f"{_x(_ratio(self.med(single, 'dequeue_rate'), deq)):>7}"
            )

    def w2(self) -> None:
        sz = self.sizes
        self.out(
            f"W2  {sz.w2_seeds:,} seeds, then {sz.w2_steps:,} steps of: dequeue one, enqueue 5 "
            f"children (2-3 already seen) over {sz.w2_hosts:,} hosts. On disk."
        )
        self.out(f"  {'implementation':42}{'steps/s':>10}{'':6}{'crawlq/this':>12}  check")
        ours = self.med(self.find("W2", "crawlq"), "steps_rate")
        for spec in (s for s in self.specs if s.workload == "W2"):
            rate = self.med(spec.key, "steps_rate")
            ratio = "" if spec.impl == "crawlq" else _x(_ratio(ours, rate))
            self.out(
                f"  {spec.label:42}{self.cell(spec.key, 'steps_rate')}{ratio:>12}"
                f"  {self.check(spec.key)}"
            )
            self.error_line(spec.key)

    def w4(self) -> None:
        sz = self.sizes
        self.out(
            f"W4  {sz.w4_count:,} queued over {sz.w4_hosts:,} hosts, closed cleanly; reopened in a "
            "fresh process"
        )
        self.out(
            "    (open and first request are timed after imports; for Scrapy, after building its "
            "Crawler)"
        )
        self.out(
            f"  {'implementation':36}{'open':>10}{'first req':>11}{'drain':>10}{'drain/s':>9}"
            f"{'RSS reopen':>12}{'RSS drained':>13}  check"
        )
        notes: list[str] = []
        for spec in (s for s in self.specs if s.workload == "W4"):
            key = spec.key
            label = spec.label
            if spec.params.get("drain"):
                label += f" (drain {spec.params['drain']:,})"
            capped = any(r.get("capped") for r in self.s.ok_runs(key))
            drain_s = self.med(key, "drain_s")
            if capped:
                rate = self.med(key, "drain_rate")
                queued = self.med(key, "queued_at_open")
                drain_s = queued / rate if rate and queued else None
                notes.append(
                    f"  * {label}: drain stopped after the {sz.qcrawl_drain_budget_s:.0f} s budget "
                    f"(median {_rate(self.med(key, 'drained'))} dequeued); full drain extrapolated"
                )
            self.out(
                f"  {label:36}{_s(self.med(key, 'open_s')):>10}{_s(self.med(key, 'first_s')):>11}"
                f"{_s(drain_s) + ('*' if capped else ''):>10}"
                f"{_rate(self.med(key, 'drain_rate')):>9}"
                f"{_mb(self.med(key, 'rss_reopen')):>12}{_mb(self.med(key, 'rss_drained')):>13}"
                f"  {self.check(key)}"
            )
            self.error_line(key)
        self.lines += notes
        if self.fills:
            self.out(
                "  fills (once, each in a fresh process; a 1M fill builds requests 100 at a time)"
            )
            self.out(f"  {'job':46}{'fill/s':>10}{'on disk':>11}{'RSS end':>10}{'peak RSS':>10}")
            for name, fill in self.fills.items():
                impl, count = name.split(":")
                label = f"{NAMES[impl]}, {int(count):,}"
                if "error" in fill:
                    self.out(f"  {label:46}  error: {fill['error'][:100]}")
                    continue
                self.out(
                    f"  {label:46}{_rate(fill.get('fill_rate')):>10}"
                    f"{_mb(fill.get('disk_bytes')):>11}"
                    f"{_mb(fill.get('rss_filled')):>10}"
                    f"{_mb(max(fill.get('peak_rss', 0), fill.get('rss_filled', 0))):>10}"
                )

    def w4k(self) -> None:
        sz = self.sizes
        self.out(
            f"W4K {sz.w4_count:,} queued; a child drains (crawlq pop+ack, Scrapy next_request, "
            f"qcrawl get) and gets SIGKILL once it reports {sz.w4_count // 2:,} dequeued;"
        )
        self.out("    then a fresh process reopens the job, drains it and counts")
        self.out(
            f"  {'implementation':38}{'case':>14}{'at kill':>9}{'remaining':>10}{'found':>8}"
            f"{'LOST':>8}{'max':>7}{'leased':>8}{'done':>7}{'seen':>8}"
        )
        for spec in (s for s in self.specs if s.workload == "W4K"):
            key = spec.key
            lost = self.s.values(key, "lost")
            leased = self.med(key, "redelivered")
            leased_text = "-"
            if spec.impl == "crawlq":
                leased_text = f"{_rate(leased)}/{_rate(self.med(key, 'leased_at_kill'))}"
            self.out(
                f"  {spec.label:38}{spec.params['case']:>14}"
                f"{_rate(self.med(key, 'dequeued_at_kill')):>9}"
                f"{_rate(self.med(key, 'remaining')):>10}"
                f"{_rate(self.med(key, 'found')):>8}{_rate(self.med(key, 'lost')):>8}"
                f"{_rate(max(lost) if lost else None):>7}{leased_text:>8}"
                f"{_rate(self.med(key, 'resurrected')):>7}"
                f"{_rate(self.med(key, 'seen_after_reopen')):>8}"
            )
            errors = [r["reopen_error"] for r in self.s.ok_runs(key) if r.get("reopen_error")]
            if errors:
                self.out(f"      {len(errors)} reopen(s) failed: {errors[0][:120]}")
            self.error_line(key)
        self.out(
            "  at kill: dequeued when killed; remaining: never dequeued; LOST: remaining that did "
            "not come back"
        )
        self.out("  (median, and max over runs; ±1 for peers: a dequeue may complete unrecorded);")
        self.out(
            "  leased: crawlq's popped-not-acked at the kill that came back / that were leased;"
        )
        self.out(
            "  done: already dequeued (acked) requests handed out again; seen: fingerprints kept "
            "(qcrawl keeps none on disk)"
        )

    def target_section(self) -> None:
        self.out("Targets (issue 3, point 10)")
        has = {s.workload for s in self.specs}
        if "W1" in has:
            many = self.find("W1", "crawlq", enqueue="add_many")
            single = self.find("W1", "crawlq", enqueue="add")
            best, name = self.best_scrapy("W1", "enqueue_rate")
            ours = self.med(many, "enqueue_rate")
            self.target(
                "W1 crawlq add_many enqueue >= best Scrapy JOBDIR enqueue",
                _ratio(ours, best),
                1.0,
                f"{_rate(ours)} vs {_rate(best)}/s ({name}) = {_x(_ratio(ours, best))}"
                f" (single add: {_rate(self.med(single, 'enqueue_rate'))}/s)",
            )
            best, name = self.best_scrapy("W1", "dequeue_rate")
            ours = self.med(many, "dequeue_rate")
            self.target(
                "W1 crawlq pop+ack dequeue >= best Scrapy JOBDIR dequeue",
                _ratio(ours, best),
                1.0,
                f"{_rate(ours)} vs {_rate(best)}/s ({name}) = {_x(_ratio(ours, best))}"
                f" (pop only: {_rate(self.med(single, 'dequeue_rate'))}/s)",
            )
        if "W4K" in has:
            lost = [
                value
                for spec in self.specs
                if spec.workload == "W4K" and spec.impl == "crawlq"
                for value in self.s.values(spec.key, "lost")
            ]
            failed = sum(
                len(self.s.errors(s.key))
                for s in self.specs
                if s.workload == "W4K" and s.impl == "crawlq"
            )
            total = max(lost) if lost and not failed else None
            self.target(
                "crawlq zero loss under kill -9 (every W4K run)",
                total,
                0.0,
                f"max lost {_rate(total)} over {len(lost)} runs"
                + (f", {failed} failed" if failed else ""),
                at_most=True,
            )
        if "W2" in has:
            ours = self.med(self.find("W2", "crawlq"), "steps_rate")
            best, name = self.best_scrapy("W2", "steps_rate")
            self.target(
                "W2 crawlq >= 10,000 steps/s",
                ours,
                10_000.0,
                f"{_rate(ours)}/s; {_x(_ratio(ours, best))} Scrapy JOBDIR {name} ({_rate(best)}/s)",
            )
        if "W4" in has:
            big = self.find("W4", "crawlq", queued=self.sizes.w4_big)
            first = self.med(big, "first_s")
            values = self.s.values(big, "first_s")
            self.target(
                f"W4 crawlq first request <= 0.5 s at {self.sizes.w4_big:,} queued",
                first,
                0.5,
                f"median {_s(first)}, max {_s(max(values) if values else None)}",
                at_most=True,
            )
            fill = self.fills.get(fill_key("crawlq", self.sizes.w4_big), {})
            peak = max(fill.get("peak_rss", 0), fill.get("rss_filled", 0)) or None
            reopened = self.s.values(big, "rss_drained") + self.s.values(big, "rss_reopen")
            worst = max([peak or 0, *reopened]) or None
            self.target(
                f"RSS < 150 MB at {self.sizes.w4_big:,} queued + {self.sizes.w4_big:,} seen",
                worst,
                150 * MB,
                f"fill peak {_mb(peak)}, after reopen {_mb(self.med(big, 'rss_reopen'))}, "
                f"after draining {self.sizes.w4_big_drain:,} {_mb(self.med(big, 'rss_drained'))}",
                at_most=True,
            )
        if self.sizes != FULL:
            self.out("  (QUICK sizes: the targets are stated for the full sizes)")

    def render(self, header: list[str]) -> str:
        self.lines = list(header)
        has = {s.workload for s in self.specs}
        sections: list[tuple[str, Callable[[], None]]] = [
            ("W1", self.w1),
            ("W2", self.w2),
            ("W4", self.w4),
            ("W4K", self.w4k),
        ]
        for name, section in sections:
            if name in has:
                self.out()
                section()
        self.out()
        self.target_section()
        return "\n".join(self.lines)


# -- main ---------------------------------------------------------------------


def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", *args], cwd=HERE, capture_output=True, text=True, check=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip()


def environment() -> Result:
    versions = {}
    for package in ("crawlq", "scrapy", "queuelib", "qcrawl", "aiofiles", "msgspec"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    import resource
    import sqlite3

    return {
        "commit": _git("rev-parse", "--short", "HEAD"),
        "src_modified": bool(_git("status", "--porcelain", "--", "src")),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
        "rlimit_nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "tmp": tempfile.gettempdir(),
        "versions": versions,
    }


def freeze_source(into: Path) -> Path | None:
    """Copy src/crawlq so every run measures the same code even if the work
    tree changes meanwhile; None if this is not a checkout."""
    source = HERE.parent / "src" / "crawlq"
    if not (source / "__init__.py").is_file():
        return None
    shutil.copytree(source, into / "crawlq", ignore=shutil.ignore_patterns("__pycache__"))
    return into


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (default 5)")
    parser.add_argument(
        "--only", default=",".join(WORKLOADS), help=f"workloads (default {','.join(WORKLOADS)})"
    )
    parser.add_argument("--quick", action="store_true", help="sizes divided by about 10")
    parser.add_argument(
        "--no-freeze", action="store_true", help="import crawlq as installed, not a copy of src/"
    )
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds before one child is abandoned"
    )
    parser.add_argument("--output", type=Path, default=None, help="JSON file for the raw results")
    args = parser.parse_args(argv)
    aliases = {"W4-KILL": "W4K", "W4KILL": "W4K"}
    args.only = {
        aliases.get(w.strip().upper(), w.strip().upper()) for w in args.only.split(",") if w.strip()
    }
    unknown = args.only - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(sorted(unknown))}; choose from {WORKLOADS}")
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    if args.repeat < 3 and not args.quick:
        log("note: fewer than 3 repeats; medians will be noisy")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    specs = plan(sizes, args.only)
    started = dt.datetime.now(dt.UTC)
    env = environment()
    load_start = load()
    with tempfile.TemporaryDirectory(prefix="crawlq-durable-") as tmp:
        root = Path(tmp)
        frozen = None if args.no_freeze else freeze_source(root / "src")
        child_env = None
        if frozen is not None:
            child_env = dict(os.environ)
            child_env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(frozen), os.environ.get("PYTHONPATH")) if p
            )
        env["frozen_source"] = frozen is not None
        ctx = Context(sizes, root, child_env, args.timeout)
        fills = prepare(specs, ctx)
        runs = run_all(specs, args, ctx)
    load_end = load()
    summary = Summary(runs)
    report = Report(specs, summary, sizes, fills)
    run_loads = [r["load1"] for rs in runs.values() for r in rs if "load1" in r]
    header = [
        f"crawlq durable-store benchmarks, {started:%Y-%m-%d %H:%M} UTC"
        f"{' [QUICK sizes]' if args.quick else ''}",
        f"medians of {args.repeat} runs, each in a fresh process on a fresh directory "
        f"({env['tmp']}); ±: half the min-max range",
        f"machine load (1/5/15 min): {' '.join(map(str, load_start))} at start, "
        f"{' '.join(map(str, load_end))} at end; 1-min load at each run start: median "
        f"{statistics.median(run_loads) if run_loads else 0:.1f}, "
        f"max {max(run_loads, default=0):.1f}"
        f" on {env['cpus']} CPUs",
        f"crawlq commit {env['commit']}{' (src modified)' if env['src_modified'] else ''}; "
        f"Python {env['python']}, SQLite {env['sqlite']}, RLIMIT_NOFILE {env['rlimit_nofile']}; "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v),
    ]
    text = report.render(header)
    print(text)
    output = args.output
    if output is None:
        results = HERE / "results"
        results.mkdir(exist_ok=True)
        output = results / f"durable-{started:%Y%m%d-%H%M%S}{'-quick' if args.quick else ''}.json"
    document = {
        "started": started.isoformat(),
        "seconds": (dt.datetime.now(dt.UTC) - started).total_seconds(),
        "args": {
            k: sorted(v) if isinstance(v, set) else str(v) if isinstance(v, Path) else v
            for k, v in vars(args).items()
        },
        "sizes": asdict(sizes),
        "environment": env,
        "load": {"start": load_start, "end": load_end},
        "specs": [{**asdict(s), "key": s.key} for s in specs],
        "fills": fills,
        "runs": runs,
        "medians": summary.medians(),
        "targets": report.targets,
        "report": text,
    }
    output.write_text(json.dumps(document, indent=2) + "\n")
    log(f"\nraw results: {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
