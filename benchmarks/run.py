"""Benchmark crawlq against its peers: Scrapy's scheduler and qcrawl's.

    python -m pip install -r benchmarks/requirements.txt
    python benchmarks/run.py [--repeat 5] [--only W1,W5] [--quick]

Every measurement runs in a fresh subprocess (``measure.py``), repeated; the
repeats are interleaved (all measurements once, then all again...) so that
machine noise spreads evenly. Prints medians, ratios (crawlq / peer) and the
targets, and writes the raw results to ``benchmarks/results/`` as JSON. See
README.md for what each workload measures.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import workloads

HERE = Path(__file__).resolve().parent
RESULT_MARKER = "@@RESULT@@ "  # keep in sync with measure.py
WORKLOADS = ("W1", "W2", "W3", "W5", "C1")
IMPL_NAMES = {
    "crawlq": "crawlq",
    "scrapy-spq": "Scrapy SPQ",
    "scrapy-dapq": "Scrapy DAPQ",
    "qcrawl": "qcrawl",
    "w3lib": "w3lib",
}


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


def plan(sizes: workloads.Sizes, only: set[str], impls: set[str] | None) -> list[Spec]:
    specs: list[Spec] = []
    if "W1" in only:
        specs += [
            Spec("W1", "crawlq", "crawlq add / pop", {"enqueue": "add", "dequeue": "pop"}),
            Spec(
                "W1",
                "crawlq",
                "crawlq add_many(100) / pop+ack",
                {"enqueue": "add_many", "dequeue": "pop+ack"},
            ),
            Spec("W1", "scrapy-spq", "Scrapy SPQ"),
            Spec("W1", "scrapy-dapq", "Scrapy DAPQ (default)"),
            Spec("W1", "qcrawl", "qcrawl"),
        ]
    if "W2" in only:
        specs += [
            Spec("W2", "crawlq", "crawlq pop, add_many(5), ack", {"children": "add_many"}),
            Spec("W2", "crawlq", "crawlq pop, 5 x add, ack", {"children": "add"}),
            Spec("W2", "scrapy-spq", "Scrapy SPQ"),
            Spec("W2", "scrapy-dapq", "Scrapy DAPQ (default)"),
            Spec("W2", "qcrawl", "qcrawl"),
        ]
    if "W3" in only:
        specs += [
            Spec("W3", "crawlq", "crawlq"),
            Spec("W3", "scrapy-spq", "Scrapy RFPDupeFilter"),
            Spec("W3", "qcrawl", "qcrawl"),
        ]
    if "W5" in only:
        for hosts in sizes.w5_hosts:
            specs += [
                Spec(
                    "W5",
                    "crawlq",
                    "crawlq pop+ack",
                    {"hosts": hosts, "enqueue": "add", "dequeue": "pop+ack"},
                ),
                Spec(
                    "W5",
                    "crawlq",
                    "crawlq pop",
                    {"hosts": hosts, "enqueue": "add", "dequeue": "pop"},
                ),
                Spec("W5", "scrapy-spq", "Scrapy SPQ", {"hosts": hosts}),
                Spec("W5", "scrapy-dapq", "Scrapy DAPQ", {"hosts": hosts}),
            ]
    if "C1" in only:
        specs += [
            Spec("C1", "crawlq", "crawlq Fingerprinter().canonical_url"),
            Spec("C1", "w3lib", "w3lib.url.canonicalize_url"),
            Spec("C1", "qcrawl", "qcrawl normalize_url (info)"),
        ]
    if impls is not None:
        specs = [s for s in specs if s.impl in impls]
    return specs


# -- running ------------------------------------------------------------------


def freeze_source(into: Path) -> Path | None:
    """Copy the repo's crawlq source, so that every run of this invocation
    measures the same code even if the work tree changes meanwhile."""
    source = HERE.parent / "src" / "crawlq"
    if not (source / "__init__.py").is_file():
        return None  # not a checkout: measure the installed crawlq
    shutil.copytree(source, into / "crawlq", ignore=shutil.ignore_patterns("__pycache__"))
    return into


def run_one(
    spec: Spec, quick: bool, timeout: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    payload = {"workload": spec.workload, "impl": spec.impl, "params": spec.params, "quick": quick}
    command = [sys.executable, str(HERE / "measure.py"), json.dumps(payload)]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False, env=env
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "wall_s": time.perf_counter() - start}
    wall = time.perf_counter() - start
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            result: dict[str, Any] = json.loads(line[len(RESULT_MARKER) :])
            result["wall_s"] = wall
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail), "wall_s": wall}


@dataclass
class Summary:
    """Medians and spreads of each measurement's metrics over its repeats."""

    runs: dict[str, list[dict[str, Any]]]

    def ok_runs(self, key: str) -> list[dict[str, Any]]:
        return [r for r in self.runs.get(key, []) if "error" not in r]

    def median(self, key: str, metric: str) -> float | None:
        values = [r[metric] for r in self.ok_runs(key) if isinstance(r.get(metric), int | float)]
        return statistics.median(values) if values else None

    def spread(self, key: str, metric: str) -> float | None:
        """Half the min-max range, relative to the median."""
        values = [r[metric] for r in self.ok_runs(key) if isinstance(r.get(metric), int | float)]
        if len(values) < 2:
            return None
        middle = statistics.median(values)
        return (max(values) - min(values)) / 2 / middle if middle else None

    def flag(self, key: str, metric: str) -> bool | None:
        values = [r[metric] for r in self.ok_runs(key) if metric in r]
        return all(values) if values else None

    def any_flag(self, key: str, metric: str) -> bool:
        return any(r.get(metric) for r in self.ok_runs(key))

    def errors(self, key: str) -> list[str]:
        return [r["error"] for r in self.runs.get(key, []) if "error" in r]

    def medians(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for key in self.runs:
            metrics = {m for r in self.ok_runs(key) for m, v in r.items() if _number(v)}
            out[key] = {
                m: value for m in sorted(metrics) if (value := self.median(key, m)) is not None
            }
        return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# -- reporting ----------------------------------------------------------------


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _pct(value: float | None) -> str:
    return "" if value is None else f"±{100 * value:.0f}%"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _x(value: float | None) -> str:
    return "-" if value is None else (f"{value:.2f}x" if value < 10 else f"{value:.1f}x")


class Report:
    def __init__(self, specs: list[Spec], summary: Summary, sizes: workloads.Sizes) -> None:
        self.specs = specs
        self.s = summary
        self.sizes = sizes
        self.lines: list[str] = []
        self.targets: list[dict[str, Any]] = []

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

    def value(self, key: str | None, metric: str) -> float | None:
        return None if key is None else self.s.median(key, metric)

    def cell(self, key: str | None, metric: str, width: int = 12) -> str:
        if key is None:
            return "-".rjust(width) + " " * 5
        if self.s.errors(key) and not self.s.ok_runs(key):
            return "error".rjust(width) + " " * 5
        return (
            _rate(self.value(key, metric)).rjust(width)
            + " "
            + _pct(self.s.spread(key, metric)).ljust(4)
        )

    def check(self, key: str) -> str:
        notes = []
        ok = self.s.flag(key, "ok")
        notes.append("-" if ok is None else ("ok" if ok else "WRONG"))
        order = self.s.flag(key, "priority_order")
        if order is not None:
            notes.append("priority order kept" if order else "priority order NOT kept")
        errors = self.s.errors(key)
        if errors:
            notes.append(f"{len(errors)} failed: {errors[0][:80]}")
        return ", ".join(notes)

    def target(self, name: str, value: float | None, goal: float, *, at_most: bool = False) -> None:
        if value is None:
            verdict = "n/a"
        else:
            verdict = "PASS" if (value <= goal if at_most else value >= goal) else "MISS"
        shown = "-" if value is None else (f"{value:.1f} B" if at_most else _x(value))
        self.targets.append({"target": name, "value": value, "goal": goal, "verdict": verdict})
        self.out(f"  {verdict:5} {name:58} {shown}")

    # -- sections --

    def w1(self) -> None:
        sz = self.sizes
        offered = sz.w1_unique + (sz.w1_unique // sz.w1_duplicate_every)
        self.out(
            f"W1  enqueue {offered:,} requests ({sz.w1_unique:,} unique, 10% exact duplicates "
            f"interleaved) over {sz.w1_hosts:,} hosts, random priorities; then dequeue all"
        )
        self.out(f"  {'implementation':34}{'enqueue/s':>12}{'':5}{'dequeue/s':>12}{'':5}  check")
        rows = [s for s in self.specs if s.workload == "W1"]
        for spec in rows:
            self.out(
                f"  {spec.label:34}{self.cell(spec.key, 'enqueue_rate')}"
                f"{self.cell(spec.key, 'dequeue_rate')}  {self.check(spec.key)}"
            )
        add = self.find("W1", "crawlq", enqueue="add")
        many = self.find("W1", "crawlq", enqueue="add_many")
        pop = self.find("W1", "crawlq", dequeue="pop")
        popack = self.find("W1", "crawlq", dequeue="pop+ack")
        self.out(f"  {'crawlq / peer':34}{'add':>9}{'add_many':>10}{'pop+ack':>10}{'pop':>8}")
        for spec in rows:
            if spec.impl == "crawlq":
                continue
            enq = self.value(spec.key, "enqueue_rate")
            deq = self.value(spec.key, "dequeue_rate")
            self.out(
                f"  {'vs ' + spec.label:34}"
                f"{_x(_ratio(self.value(add, 'enqueue_rate'), enq)):>9}"
                f"{_x(_ratio(self.value(many, 'enqueue_rate'), enq)):>10}"
                f"{_x(_ratio(self.value(popack, 'dequeue_rate'), deq)):>10}"
                f"{_x(_ratio(self.value(pop, 'dequeue_rate'), deq)):>8}"
            )

    def w2(self) -> None:
        sz = self.sizes
        self.out(
            f"W2  {sz.w2_seeds:,} seeds, then {sz.w2_steps:,} steps of: dequeue one, enqueue 5 "
            f"children (2-3 already seen) over {sz.w2_hosts:,} hosts"
        )
        self.out(f"  {'implementation':34}{'steps/s':>12}{'':5}  {'crawlq/peer':>20}  check")
        many = self.find("W2", "crawlq", children="add_many")
        single = self.find("W2", "crawlq", children="add")
        for spec in (s for s in self.specs if s.workload == "W2"):
            ratios = ""
            if spec.impl != "crawlq":
                rate = self.value(spec.key, "steps_rate")
                ratios = (
                    f"{_x(_ratio(self.value(many, 'steps_rate'), rate)):>12}"
                    f"{_x(_ratio(self.value(single, 'steps_rate'), rate)):>8}"
                )
            self.out(
                f"  {spec.label:34}{self.cell(spec.key, 'steps_rate')}  {ratios:20}"
                f"  {self.check(spec.key)}"
            )
        self.out("  (crawlq/peer: with add_many(5), with 5 x add)")

    def w3(self) -> None:
        self.out(
            f"W3  RSS growth per seen request after {self.sizes.w3_unique:,} unique requests "
            "were added and drained (chunks of 1,000)"
        )
        self.out(f"  {'implementation':34}{'bytes/seen':>12}{'malloc_trim':>13}{'run s':>8}  check")
        for spec in (s for s in self.specs if s.workload == "W3"):
            per = self.value(spec.key, "bytes_per_seen")
            trimmed = self.value(spec.key, "bytes_per_seen_trimmed")
            seconds = self.value(spec.key, "seconds")
            self.out(
                f"  {spec.label:34}{'-' if per is None else f'{per:.1f}':>12}"
                f"{'-' if trimmed is None else f'{trimmed:.1f}':>13}"
                f"{'-' if seconds is None else f'{seconds:.0f}':>8}  {self.check(spec.key)}"
            )

    def w5(self) -> None:
        sz = self.sizes
        self.out(
            f"W5  dequeue {sz.w5_requests:,} requests (random priorities) spread over N hosts; "
            "dequeue/s, and (N hosts)/(1 host)"
        )
        impls = [
            ("crawlq pop+ack", "crawlq", {"dequeue": "pop+ack"}),
            ("crawlq pop", "crawlq", {"dequeue": "pop"}),
            ("Scrapy SPQ", "scrapy-spq", {}),
            ("Scrapy DAPQ", "scrapy-dapq", {}),
        ]
        head = "".join(f"{name:>24}" for name, _, _ in impls)
        self.out(f"  {'hosts':>8}{head}{'crawlq/DAPQ':>13}")
        capped_notes: list[str] = []
        for hosts in sz.w5_hosts:
            cells = []
            for name, impl, params in impls:
                key = self.find("W5", impl, hosts=hosts, **params)
                base = self.find("W5", impl, hosts=sz.w5_hosts[0], **params)
                rate = self.value(key, "dequeue_rate")
                rel = _ratio(rate, self.value(base, "dequeue_rate"))
                mark = ""
                if key is not None and self.s.any_flag(key, "capped"):
                    mark = "*"
                    done = self.value(key, "dequeued")
                    est = self.value(key, "estimated_full_drain_s")
                    capped_notes.append(
                        f"  * {name} at {hosts:,} hosts: time budget {sz.w5_budget_s:.0f} s hit; "
                        f"rate of the first {_rate(done)} of {sz.w5_requests:,} dequeues (all "
                        f"hosts still queued), full drain extrapolated to ~{_rate(est)} s"
                    )
                text = "-"
                if rate is not None:
                    text = f"{_rate(rate)}{mark}" + ("" if rel is None else f" ({rel:.2f})")
                cells.append(f"{text:>24}")
            ours = self.value(
                self.find("W5", "crawlq", hosts=hosts, dequeue="pop+ack"), "dequeue_rate"
            )
            dapq = self.value(self.find("W5", "scrapy-dapq", hosts=hosts), "dequeue_rate")
            self.out(f"  {hosts:>8,}{''.join(cells)}{_x(_ratio(ours, dapq)):>13}")
        for note in capped_notes:
            self.out(note)
        bad = [
            s.label for s in self.specs if s.workload == "W5" and self.s.flag(s.key, "ok") is False
        ]
        if bad:
            self.out(f"  WRONG results from: {', '.join(sorted(set(bad)))}")

    def c1(self) -> None:
        offered = self.sizes.w1_unique + self.sizes.w1_unique // self.sizes.w1_duplicate_every
        self.out(f"C1  canonicalise the {offered:,} W1 URLs")
        ours_key = self.find("C1", "crawlq")
        ours = self.value(ours_key, "urls_rate")
        self.out(f"  {'implementation':38}{'URLs/s':>12}{'':5}{'crawlq/this':>13}")
        for spec in (s for s in self.specs if s.workload == "C1"):
            rate = self.value(spec.key, "urls_rate")
            ratio = "" if spec.impl == "crawlq" else _x(_ratio(ours, rate))
            self.out(f"  {spec.label:38}{self.cell(spec.key, 'urls_rate')}{ratio:>13}")
        differs = self.value(ours_key, "differs_from_w3lib")
        if differs is not None:
            self.out(
                f"  distinct URLs whose crawlq and w3lib canonical forms differ: {differs:.0f}"
            )

    def target_section(self) -> None:
        self.out("Targets")
        has = {s.workload for s in self.specs}
        if "W1" in has:
            spq = self.value(self.find("W1", "scrapy-spq"), "enqueue_rate")
            for how in ("add", "add_many"):
                ours = self.value(self.find("W1", "crawlq", enqueue=how), "enqueue_rate")
                self.target(f"W1 enqueue ({how}) >= 3x Scrapy SPQ", _ratio(ours, spq), 3.0)
            peers = [
                self.value(self.find("W1", impl), "dequeue_rate")
                for impl in ("scrapy-spq", "scrapy-dapq", "qcrawl")
            ]
            fastest = max((p for p in peers if p is not None), default=None)
            dapq = self.value(self.find("W1", "scrapy-dapq"), "dequeue_rate")
            for how in ("pop+ack", "pop"):
                ours = self.value(self.find("W1", "crawlq", dequeue=how), "dequeue_rate")
                self.target(f"W1 dequeue ({how}) >= 1.5x fastest peer", _ratio(ours, fastest), 1.5)
                self.target(f"W1 dequeue ({how}) >= 20x Scrapy DAPQ", _ratio(ours, dapq), 20.0)
        if "W2" in has:
            spq = self.value(self.find("W2", "scrapy-spq"), "steps_rate")
            for how in ("add_many", "add"):
                ours = self.value(self.find("W2", "crawlq", children=how), "steps_rate")
                self.target(f"W2 steps ({how}) >= 3x Scrapy SPQ", _ratio(ours, spq), 3.0)
        if "W3" in has:
            self.target(
                "W3 crawlq bytes per seen request <= 40",
                self.value(self.find("W3", "crawlq"), "bytes_per_seen"),
                40.0,
                at_most=True,
            )
        if "W5" in has:
            first, last = self.sizes.w5_hosts[0], self.sizes.w5_hosts[-1]
            for how in ("pop+ack", "pop"):
                rates = [
                    self.value(self.find("W5", "crawlq", hosts=h, dequeue=how), "dequeue_rate")
                    for h in (last, first)
                ]
                self.target(
                    f"W5 crawlq ({how}) {last:,} hosts >= 0.5x {first} host",
                    _ratio(rates[0], rates[1]),
                    0.5,
                )
        if "C1" in has:
            ours = self.value(self.find("C1", "crawlq"), "urls_rate")
            w3lib = self.value(self.find("C1", "w3lib"), "urls_rate")
            self.target("C1 canonical_url >= 3x w3lib canonicalize_url", _ratio(ours, w3lib), 3.0)

    def render(self, header: list[str]) -> str:
        self.lines = list(header)
        has = {s.workload for s in self.specs}
        sections: list[tuple[str, Callable[[], None]]] = [
            ("W1", self.w1),
            ("W2", self.w2),
            ("W3", self.w3),
            ("W5", self.w5),
            ("C1", self.c1),
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


def environment() -> dict[str, Any]:
    versions: dict[str, str | None] = {}
    for package in ("crawlq", "scrapy", "twisted", "w3lib", "qcrawl", "msgspec", "yarl"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "commit": _git("rev-parse", "--short", "HEAD"),
        "src_modified": bool(_git("status", "--porcelain", "--", "src")),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "versions": versions,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repeat", type=int, default=5, help="runs per measurement (>= 3; default 5)"
    )
    parser.add_argument(
        "--memory-repeat",
        type=int,
        default=3,
        help="runs per W3 memory measurement (>= 3, at most --repeat; default 3)",
    )
    parser.add_argument(
        "--only",
        default=",".join(WORKLOADS),
        help=f"workloads to run (default {','.join(WORKLOADS)})",
    )
    parser.add_argument(
        "--impls", default=None, help="only these implementations, e.g. crawlq,scrapy-spq"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="import crawlq as installed instead of a copy of src/crawlq taken at start",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds before one measurement is abandoned"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        help="JSON file (default benchmarks/results/<time>.json)",
    )
    args = parser.parse_args(argv)
    args.only = {w.strip().upper() for w in args.only.split(",") if w.strip()}
    unknown = args.only - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(sorted(unknown))}; choose from {WORKLOADS}")
    if args.impls is not None:
        args.impls = {i.strip() for i in args.impls.split(",") if i.strip()}
        unknown = args.impls - set(IMPL_NAMES)
        if unknown:
            parser.error(f"unknown implementation(s) {', '.join(sorted(unknown))}")
    if args.repeat < 1 or args.memory_repeat < 1:
        parser.error("--repeat and --memory-repeat must be >= 1")
    if args.repeat < 3 and not args.quick:
        print("note: fewer than 3 repeats; medians will be noisy", file=sys.stderr)
    args.memory_repeat = min(args.memory_repeat, args.repeat)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = workloads.sizes_for(args.quick)
    specs = plan(sizes, args.only, args.impls)
    if not specs:
        print("nothing to run", file=sys.stderr)
        return 2
    started = dt.datetime.now(dt.UTC)
    env = environment()
    with tempfile.TemporaryDirectory(prefix="crawlq-bench-") as tmp:
        frozen = None if args.no_freeze else freeze_source(Path(tmp))
        child_env = None
        if frozen is not None:
            child_env = dict(os.environ)
            child_env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(frozen), os.environ.get("PYTHONPATH")) if p
            )
        env["frozen_source"] = frozen is not None
        runs = run_all(specs, args, child_env)
    return finish(args, sizes, specs, runs, env, started)


def run_all(
    specs: list[Spec], args: argparse.Namespace, child_env: dict[str, str] | None
) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {spec.key: [] for spec in specs}
    schedule = [
        (repeat, spec)
        for repeat in range(args.repeat)
        for spec in specs
        if spec.workload != "W3" or repeat < args.memory_repeat
    ]
    print(
        f"{len(schedule)} runs ({len(specs)} measurements, {args.repeat} repeats, "
        f"W3 {args.memory_repeat}){' [quick]' if args.quick else ''}",
        file=sys.stderr,
    )
    clock = time.perf_counter()
    for index, (repeat, spec) in enumerate(schedule, 1):
        result = run_one(spec, args.quick, args.timeout, child_env)
        result["repeat"] = repeat
        runs[spec.key].append(result)
        status = result.get("error", "ok")
        print(
            f"[{index}/{len(schedule)} {time.perf_counter() - clock:6.0f}s] "
            f"{spec.workload} {spec.label} {spec.params or ''}: {result['wall_s']:.1f}s {status}",
            file=sys.stderr,
            flush=True,
        )
    return runs


def finish(
    args: argparse.Namespace,
    sizes: workloads.Sizes,
    specs: list[Spec],
    runs: dict[str, list[dict[str, Any]]],
    env: dict[str, Any],
    started: dt.datetime,
) -> int:
    summary = Summary(runs)
    report = Report(specs, summary, sizes)
    header = [
        f"crawlq peer benchmarks, {started:%Y-%m-%d %H:%M} UTC"
        f"{' [QUICK sizes]' if args.quick else ''}",
        f"medians of {args.repeat} runs (W3: {args.memory_repeat}), each in a fresh process; "
        "±: half the min-max range",
        f"crawlq commit {env['commit']}{' (src modified)' if env['src_modified'] else ''}; "
        f"Python {env['python']} on {env['platform']}, {env['cpus']} CPUs; "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v),
    ]
    text = report.render(header)
    print(text)

    output = args.output
    if output is None:
        results = HERE / "results"
        results.mkdir(exist_ok=True)
        output = results / f"{started:%Y%m%d-%H%M%S}{'-quick' if args.quick else ''}.json"
    document = {
        "started": started.isoformat(),
        "seconds": (dt.datetime.now(dt.UTC) - started).total_seconds(),
        "args": {
            k: sorted(v) if isinstance(v, set) else str(v) if isinstance(v, Path) else v
            for k, v in vars(args).items()
        },
        "sizes": asdict(sizes),
        "environment": env,
        "specs": [{**asdict(s), "key": s.key} for s in specs],
        "runs": runs,
        "medians": summary.medians(),
        "targets": report.targets,
        "report": text,
    }
    output.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nraw results: {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
