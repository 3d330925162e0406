"""The report: medians, spreads and crawlq / peer ratios as markdown, and their chart.

A figure is the median over the repeats (each a fresh process); ``±`` is half
the min-max range relative to the median. A ratio is crawlq's median over the
peer's (for costs such as bytes or seconds, the peer's over crawlq's), so
above 1 always means crawlq does better.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import subprocess
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

Result = dict[str, Any]
MB = 1024 * 1024
_FORMATS: dict[str, Callable[[float], str]] = {
    "rate": lambda v: f"{v:,.0f}",
    "us": lambda v: f"{v:.1f} us",
    "s": lambda v: f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s",
    "MB": lambda v: f"{v / MB:.0f} MB",
    "B": lambda v: f"{v:.1f}",
    "n": lambda v: f"{v:,.0f}",
}
# workload -> columns: (metric, header, format)
COLUMNS: dict[str, list[tuple[str, str, str]]] = {
    "W1": [
        ("enqueue_rate", "enqueue/s", "rate"),
        ("dequeue_rate", "dequeue/s (pop + ack)", "rate"),
        ("pop_only_rate", "dequeue/s, pop only", "rate"),
        ("enqueue_server_us", "server CPU/enqueue", "us"),
        ("dequeue_server_us", "server CPU/dequeue", "us"),
    ],
    "W2": [("steps_rate", "steps/s", "rate"), ("steps_server_us", "server CPU/step", "us")],
    "A1": [("steps_rate", "steps/s", "rate"), ("steps_server_us", "server CPU/step", "us")],
    "W3": [
        ("bytes_per_seen", "bytes/seen", "B"),
        ("bytes_per_seen_trimmed", "after malloc_trim", "B"),
        ("seconds", "run s", "s"),
    ],
    "W4": [
        ("open_s", "open", "s"),
        ("first_s", "first request", "s"),
        ("drain_rate", "drain/s", "rate"),
        ("rss_reopen", "RSS reopened", "MB"),
        ("rss_drained", "RSS drained", "MB"),
    ],
    "W4K": [
        ("dequeued_at_kill", "dequeued at kill", "n"),
        ("remaining", "never dequeued", "n"),
        ("found", "found after reopen", "n"),
        ("lost", "LOST", "n"),
        ("redelivered", "leased, came back", "n"),
        ("resurrected", "acked, came back", "n"),
    ],
    "W5": [
        ("dequeue_rate", "dequeue/s (pop + ack)", "rate"),
        ("pop_only_rate", "dequeue/s, pop only", "rate"),
    ],
    "W6": [
        ("dequeue_rate", "dequeue/s (pop + ack)", "rate"),
        ("dequeue_server_us", "server CPU/dequeue", "us"),
    ],
    "C1": [("urls_rate", "URLs/s", "rate"), ("differs_from_w3lib", "differ from w3lib", "n")],
    "E2E": [("pages_per_s", "pages/s", "rate"), ("cpu_ms_per_page", "CPU ms/page", "B")],
}
# workload -> ratio columns: (header, crawlq's params, crawlq metric, peer metric, higher is better)
RATIOS: dict[str, list[tuple[str, dict[str, Any], str, str, bool]]] = {
    "W1": [
        ("enqueue, add_many(100)", {"enqueue": "add_many"}, "enqueue_rate", "enqueue_rate", True),
        ("enqueue, add", {"enqueue": "add"}, "enqueue_rate", "enqueue_rate", True),
        ("dequeue, pop + ack", {"dequeue": "pop+ack"}, "dequeue_rate", "dequeue_rate", True),
        ("dequeue, pop only", {"dequeue": "pop"}, "pop_only_rate", "dequeue_rate", True),
    ],
    "W2": [
        ("add_many(5)", {"children": "add_many"}, "steps_rate", "steps_rate", True),
        ("5 x add", {"children": "add"}, "steps_rate", "steps_rate", True),
        ("add_many(5, ack=parent)", {"children": "add_many_ack"}, "steps_rate", "steps_rate", True),
    ],
    "A1": [("steps/s", {}, "steps_rate", "steps_rate", True)],
    "W3": [("bytes/seen", {}, "bytes_per_seen", "bytes_per_seen", False)],
    "W4": [
        ("first request", {"drain": None}, "first_s", "first_s", False),
        ("drain/s", {"drain": None}, "drain_rate", "drain_rate", True),
        ("RSS drained", {"drain": None}, "rss_drained", "rss_drained", False),
    ],
    "W5": [
        ("pop + ack", {"dequeue": "pop+ack"}, "dequeue_rate", "dequeue_rate", True),
        ("pop only", {"dequeue": "pop"}, "pop_only_rate", "dequeue_rate", True),
    ],
    "W6": [("pop + ack", {}, "dequeue_rate", "dequeue_rate", True)],
    "C1": [("canonicalise", {}, "urls_rate", "urls_rate", True)],
    "E2E": [
        ("pages/s", {}, "pages_per_s", "pages_per_s", True),
        ("CPU per page", {}, "cpu_ms_per_page", "cpu_ms_per_page", False),
    ],
}
# (group, ratio column, peer impl, at least): the targets of the issues, as ratios
TARGETS = [
    ("W1 memory", "enqueue, add", "scrapy-spq", 3.0),
    ("W1 memory", "enqueue, add_many(100)", "scrapy-spq", 3.0),
    ("W1 memory", "dequeue, pop + ack", "scrapy-spq", 1.5),
    ("W1 memory", "dequeue, pop + ack", "scrapy-dapq", 20.0),
    ("W2 memory", "add_many(5)", "scrapy-spq", 3.0),
    ("W1 sqlite", "enqueue, add", "scrapy-jobdir", 1.0),
    ("W1 sqlite", "dequeue, pop + ack", "scrapy-jobdir", 1.5),
    ("W1 redis", "dequeue, pop + ack", "scrapy-redis", 8.0),
    ("W2 redis", "add_many(5)", "scrapy-redis", 8.0),
    ("A1 redis", "steps/s", "scrapy-redis", 10.0),
    ("A1 sqlite", "steps/s", "scrapy-jobdir", 3.0),
    ("C1 memory", "canonicalise", "w3lib", 3.0),
    ("E2E sqlite", "pages/s", "scrapy", 1.0),
]


class Summary:
    """Medians and spreads of every measurement's numbers over its repeats."""

    def __init__(self, document: Result) -> None:
        self.specs: list[Result] = document["specs"]
        self.runs: dict[str, list[Result]] = document["runs"]

    def values(self, key: str, metric: str) -> list[float]:
        ok = (r for r in self.runs.get(key, []) if "error" not in r)
        return [r[metric] for r in ok if isinstance(r.get(metric), int | float)]

    def median(self, key: str | None, metric: str) -> float | None:
        values = self.values(key, metric) if key else []
        return statistics.median(values) if values else None

    def cell(self, key: str, metric: str, kind: str) -> str:
        values = self.values(key, metric)
        if not values:
            return "-"
        middle = statistics.median(values)
        text = _FORMATS[kind](middle)
        if len(values) > 1 and middle and kind == "rate":
            text += f" ±{50 * (max(values) - min(values)) / middle:.0f}%"
        capped = any(r.get("capped") for r in self.runs[key] if "error" not in r)
        return text + ("*" if capped and metric.endswith("rate") else "")

    def check(self, key: str) -> str:
        runs = self.runs[key]
        errors = [r["error"] for r in runs if "error" in r]
        ok = [r for r in runs if "error" not in r]
        words = ("nothing lost", "LOST requests") if "lost" in (ok or [{}])[0] else ("ok", "WRONG")
        notes = [] if not ok else [words[0] if all(r.get("ok") for r in ok) else words[1]]
        order = [r["priority_order"] for r in ok if "priority_order" in r]
        if order and not all(order):
            notes.append("priority order NOT kept")
        notes += [
            f"reopen failed: {r['reopen_error'][:60]}" for r in ok[:1] if r.get("reopen_error")
        ]
        if errors:
            notes.append(f"{len(errors)} failed: {errors[0][:80]}")
        return ", ".join(notes).replace("|", "/")

    def crawlq_key(self, group: str, params: dict[str, Any]) -> str | None:
        for s in self.specs:
            if (
                s["group"] == group
                and s["impl"] == "crawlq"
                and all(s["params"].get(k) == v for k, v in params.items())
            ):
                return str(s["key"])
        return None

    def ratio(
        self, group: str, column: tuple[str, dict[str, Any], str, str, bool], peer: Result
    ) -> float | None:
        _, params, ours, theirs, higher = column
        a = self.median(self.crawlq_key(group, params), ours)
        b = self.median(peer["key"], theirs)
        if not a or not b:
            return None
        return a / b if higher else b / a


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows] + [""]


def environment() -> str:
    """The commit, Python and the versions of crawlq and the peers, in one line."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], capture_output=True, text=True, check=False, cwd=Path(__file__).parent
        )
        return done.stdout.strip()

    versions = []
    for name in ("crawlq", "scrapy", "scrapy-redis", "qcrawl", "w3lib", "redis"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions.append(f"{name} {metadata.version(name)}")
    dirty = " (src modified)" if git("status", "--porcelain", "--", "src") else ""
    return (
        f"crawlq commit {git('rev-parse', '--short', 'HEAD')}{dirty}; Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs; {', '.join(versions)}"
    )


def write(document: Result, path: Path) -> None:
    """Write the markdown report to ``path`` and the chart beside it (results.png)."""
    s = Summary(document)
    loads = [r["load1"] for runs in s.runs.values() for r in runs if "load1" in r]
    lines = [
        "# Benchmark results",
        "",
        f"`python -m benchmarks {' '.join(document['argv'])}`, started {document['started'][:16]} "
        f"UTC{' with QUICK sizes' if document['quick'] else ''}. Medians of "
        f"{document['repeat']} runs, each in a fresh process; ± is half the min-max range; "
        f"crawlq / peer ratios: above 1 is crawlq better. * a run stopped at its time budget "
        f"(its rate covers what it did). 1-minute load average during the runs: median "
        f"{statistics.median(loads) if loads else 0:.1f}, max {max(loads, default=0):.1f}.",
        "",
        document.get("environment") or environment(),
        "",
    ]
    groups: dict[str, list[Result]] = {}
    for spec in s.specs:
        groups.setdefault(spec["group"], []).append(spec)
    bars: list[tuple[str, float]] = []
    for group, specs in groups.items():
        workload = specs[0]["workload"]
        columns = [c for c in COLUMNS[workload] if any(s.values(x["key"], c[0]) for x in specs)]
        lines += [f"## {group}", ""]
        rows = [
            [x["label"], *(s.cell(x["key"], m, k) for m, _, k in columns), s.check(x["key"])]
            for x in specs
        ]
        lines += _table(["implementation", *(c[1] for c in columns), "check"], rows)
        ratios = [c for c in RATIOS.get(workload, []) if s.crawlq_key(group, c[1])]
        peers = _peers(group, groups)
        if ratios and peers:
            rows = []
            for peer in peers:
                values = [s.ratio(group, c, peer) for c in ratios]
                rows.append([f"vs {peer['label']}", *map(_x, values)])
                bars += [
                    (f"{group}: {c[0]} vs {peer['label']}", v)
                    for c, v in zip(ratios, values, strict=True)
                    if v is not None and "pop only" not in c[0]
                ]
            lines += _table(["crawlq / peer", *(c[0] for c in ratios)], rows)
    fills = [
        [
            name,
            _FORMATS["rate"](f["fill_rate"]),
            _FORMATS["MB"](f["disk_bytes"]),
            _FORMATS["MB"](f["peak_rss"]),
        ]
        for name, f in document.get("fills", {}).items()
        if "error" not in f
    ]
    if fills:
        lines += ["W4 and W4K jobs, filled once per run (`add_many` of 1,000, or `add`):", ""]
        lines += _table(["job", "fill/s", "on disk", "peak RSS"], fills)
    lines += ["## Targets", ""]
    rows = []
    for group, column, impl, goal in TARGETS:
        spec = next((x for x in _peers(group, groups) if x["impl"] == impl), None)
        if spec is None:
            continue
        col = next(c for c in RATIOS[group.split()[0]] if c[0] == column)
        value = None if spec is None else s.ratio(group, col, spec)
        verdict = "n/a" if value is None else "PASS" if value >= goal else "MISS"
        rows.append([verdict, f"{group}: crawlq {column} >= {goal:g}x {spec['label']}", _x(value)])
    rows += _absolute_targets(s, groups)
    lines += _table(["", "target", "measured"], rows)
    if document["quick"]:
        lines += ["The targets are stated for the full sizes; these are QUICK sizes.", ""]
    path.write_text("\n".join(lines))
    chart(bars, chart_path(path), document)


def _peers(group: str, groups: dict[str, list[Result]]) -> list[Result]:
    """The peers crawlq is compared with in ``group``.

    A1 (asyncio) adds the synchronous peers of W2 on the same backend: they
    have no asyncio scheduler, so the comparison is with what one process of
    theirs does on the same plan.
    """
    peers = [x for x in groups.get(group, []) if x["impl"] != "crawlq"]
    workload, _, backend = group.partition(" ")
    if workload == "A1":
        w2 = [x for x in groups.get(f"W2 {backend}", []) if x["impl"] != "crawlq"]
        peers += [{**x, "label": f"{x['label']} (W2, one process)"} for x in w2]
    return peers


def chart_path(report: Path) -> Path:
    """benchmarks/results.png beside RESULTS.md; NAME.png beside any other NAME.md."""
    return (
        report.with_name("results.png")
        if report.name == "RESULTS.md"
        else report.with_suffix(".png")
    )


def _absolute_targets(s: Summary, groups: dict[str, list[Result]]) -> list[list[str]]:
    rows: list[list[str]] = []
    workloads = {group.split()[0] for group in groups}

    def target(name: str, value: float | None, goal: float, shown: str, at_most: bool) -> None:
        ok = value is not None and (value <= goal if at_most else value >= goal)
        if name.split()[0] in workloads:
            rows.append(["n/a" if value is None else "PASS" if ok else "MISS", name, shown])

    w3 = s.median(s.crawlq_key("W3 memory", {}), "bytes_per_seen")
    target(
        "W3 crawlq bytes per seen request <= 40", w3, 40, "-" if w3 is None else f"{w3:.1f} B", True
    )
    steps = s.median(s.crawlq_key("W2 sqlite", {"children": "add_many"}), "steps_rate")
    target("W2 sqlite crawlq >= 10,000 steps/s", steps, 10_000, _FORMATS["rate"](steps or 0), False)
    big = next((x for x in groups.get("W4 sqlite", []) if x["params"].get("drain")), {})
    name, big = big.get("label", "crawlq, big job"), big.get("key")
    first = s.median(big, "first_s")
    target(f"W4 {name}: first request <= 0.5 s", first, 0.5, _FORMATS["s"](first or 0), True)
    peak = (
        max(s.values(big, "rss_drained") + s.values(big, "rss_reopen"), default=None)
        if big
        else None
    )
    target(f"W4 {name}: RSS < 150 MB", peak, 150 * MB, _FORMATS["MB"](peak or 0), True)
    lost = [
        v
        for x in groups.get("W4K sqlite", [])
        if x["impl"] == "crawlq"
        for v in s.values(x["key"], "lost")
    ]
    target(
        "W4K crawlq loses nothing to kill -9 (every run)",
        max(lost, default=None),
        0,
        f"max lost {max(lost, default=0)} over {len(lost)} runs",
        True,
    )
    w5 = [g for g in groups if g.startswith("W5")]
    if len(w5) > 1:
        last, first_ = (
            s.median(s.crawlq_key(g, {"dequeue": "pop+ack"}), "dequeue_rate")
            for g in (w5[-1], w5[0])
        )
        value = last / first_ if last and first_ else None
        target(
            f"W5 crawlq pop + ack, {w5[-1].split(', ')[1]} >= 0.5x {w5[0].split(', ')[1]}",
            value,
            0.5,
            _x(value),
            False,
        )
    one, two = (
        s.median(s.crawlq_key(f"W6 redis, {n}", {}), "dequeue_rate")
        for n in ("1 worker", "2 workers")
    )
    value = two / one if one and two else None
    target("W6 crawlq 2 workers >= 1.5x 1 worker", value, 1.5, _x(value), False)
    return rows


def chart(bars: list[tuple[str, float]], path: Path, document: Result) -> None:
    """A horizontal bar per crawlq / peer ratio (log scale), 1x marked."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not bars:
        return
    fig, ax = plt.subplots(figsize=(10, 0.8 + 0.24 * len(bars)))
    names, values = zip(*reversed(bars), strict=True)
    colors = ["#2a7" if v >= 1 else "#d54" for v in values]
    ax.barh(range(len(values)), values, color=colors)
    ax.set_yticks(range(len(values)), names, fontsize=7)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.axvline(1.0, color="black", linewidth=0.8)
    for i, v in enumerate(values):
        ax.text(v, i, f" {_x(v)}", va="center", fontsize=6)
    ax.set_xlabel("crawlq / peer (log scale; above 1: crawlq better)")
    quick = ", QUICK sizes" if document["quick"] else ""
    ax.set_title(f"crawlq / peer, medians of {document['repeat']} fresh processes{quick}")
    ax.margins(y=0.005)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
