"""The Redis Cluster benchmark's setups and its report (`benchmarks.cluster` runs them).

Renders ``benchmarks/CLUSTER.md`` from a run's raw results: the issue's
targets as ratios of this run (the 3-primary ones once per shard count), the
figures per setup, ratios to scrapy-redis, where the servers' time goes, and
the capacity from the busiest primary and the shards' real placement. A
cluster setup is one cluster size with one shard count (the crawl's
``shards`` option; ``SHARDS``, crawlq's default, unless ``--shards`` says
otherwise). CPU figures come from the pinned runs (the unpinned ones when the
run had none), steps/s from the unpinned ones. The capacity table and the
method are in ``benchmarks.cluster_capacity``. Raw results of runs made
before ``--shards`` (one shard count, a number) render as they did.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Result = dict[str, Any]
#: crawlq's default shard count for a new cluster crawl, and the benchmark's.
SHARDS = 16


@dataclass(frozen=True)
class Setup:
    """One implementation on one server layout (with a shard count on a cluster)."""

    key: str
    label: str
    impl: str  # "crawlq" or "scrapy-redis"
    primaries: int  # 0: one plain redis-server
    shards: int = 0  # the crawl's shards on a cluster; 0 on a plain redis-server


def plural(count: int, word: str) -> str:
    """The count and the word, in the plural unless the count is 1 ("3 shards")."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def cluster_key(primaries: int, shards: int) -> str:
    return f"crawlq-cluster-{primaries}-primaries-{shards}-shards"


def setups(
    primaries: Sequence[int] = (1, 3, 6), shards: Sequence[int] = (SHARDS,)
) -> tuple[Setup, ...]:
    """crawlq on one server, on a cluster of each size in ``primaries`` with each shard
    count in ``shards``, then scrapy-redis."""
    clusters = (
        Setup(
            cluster_key(n, k),
            f"crawlq, Redis Cluster, {n} primar{'y' if n == 1 else 'ies'} ({plural(k, 'shard')})",
            "crawlq",
            n,
            k,
        )
        for n in primaries
        for k in shards
    )
    return (
        Setup(ONE, "crawlq, one redis-server", "crawlq", 0),
        *clusters,
        Setup(PEER, "scrapy-redis, one redis-server", "scrapy-redis", 0),
    )


ONE, PEER = "crawlq-redis", "scrapy-redis"
SETUPS = setups()
#: The figures taken from the unpinned runs; every other one comes from the pinned runs.
UNPINNED_FIGURES = {"steps_rate"}


# -- reading the runs --------------------------------------------------------------------


def cpu_mode(document: Result) -> str:
    """The runs the CPU figures come from: "pinned", or "unpinned" for a run without."""
    return "pinned" if document.get("pin") else "unpinned"


def runs_of(document: Result, key: str, name: str, mode: str | None = None) -> list[Result]:
    """The runs of setup ``key`` that figure ``name`` is taken from (or those of ``mode``)."""
    mode = mode or ("unpinned" if name in UNPINNED_FIGURES else cpu_mode(document))
    return [r for r in document["runs"].get(key, []) if r.get("mode", "unpinned") == mode]


def median(document: Result, key: str, name: str, mode: str | None = None) -> float | None:
    values = [r[name] for r in runs_of(document, key, name, mode) if name in r]
    return statistics.median(values) if values else None


def figure(document: Result, key: str, name: str, fmt: str, mode: str | None = None) -> str:
    """The median of ``name``, with ± half the min-max range relative to it."""
    values = [r[name] for r in runs_of(document, key, name, mode) if name in r]
    if not values:
        return "-"
    middle = statistics.median(values)
    spread = (max(values) - min(values)) / 2 / middle if middle else 0.0
    return f"{middle:{fmt}} ± {spread:.0%}"


def paired(document: Result, mine: tuple[str, str], peer: tuple[str, str]) -> list[float]:
    """Per repeat, ``mine`` over ``peer`` (setup key, figure), where both runs have it."""
    found: dict[tuple[int, int], float] = {}
    for side, (key, name) in enumerate((mine, peer)):
        for r in runs_of(document, key, name):
            if name in r:
                found[side, r["repeat"]] = r[name]
    repeats = {repeat for side, repeat in found if side == 0}
    return [found[0, k] / found[1, k] for k in sorted(repeats) if found.get((1, k))]


def _checks(runs: list[Result]) -> str:
    """ "ok 3/3", or the distinct problems and errors of the runs."""
    ok = sum(r.get("check") == "ok" for r in runs)
    problems = sorted({r.get("error") or r.get("check", "") for r in runs} - {"ok"})
    return f"ok {ok}/{len(runs)}" + "".join(f"; {p}" for p in problems)


def _ratio(mine: float | None, peer: float | None, cost: bool) -> str:
    if not mine or not peer:
        return "-"
    return f"{(peer / mine if cost else mine / peer):.2f}"


def load_setups(document: Result) -> list[Setup]:
    """The run's setups; a cluster setup of a run made before ``--shards`` had the
    document's one shard count."""
    old = document.get("shards") if isinstance(document.get("shards"), int) else SHARDS
    return [Setup(**{"shards": old if s["primaries"] else 0, **s}) for s in document["setups"]]


def shard_counts(document: Result) -> list[int]:
    """The shard counts the run measured the clusters with, in the order given."""
    counts = document.get("shards", SHARDS)
    return [counts] if isinstance(counts, int) else list(counts)


def several(document: Result) -> bool:
    """Whether the run's text must name the shard count (not the default alone)."""
    return shard_counts(document) != [SHARDS]


def cluster_of(document: Result, primaries: int, shards: int) -> str:
    """The key of the cluster setup of that size and shard count (a new key if none)."""
    found = (s.key for s in load_setups(document) if (s.primaries, s.shards) == (primaries, shards))
    return next(found, cluster_key(primaries, shards))


# -- the tables --------------------------------------------------------------------------


def targets_table(document: Result) -> list[str]:
    """The issue's four targets, each a ratio of this run's medians, with the per-repeat
    range; the two on the 3-primary cluster once per shard count."""
    d, workers = document, document["workers"]
    rows: list[tuple[str, tuple[str, str], tuple[str, str], str, float]] = []
    for shards in shard_counts(d):
        three = cluster_of(d, 3, shards)
        named = f" with {plural(shards, 'shard')}" if several(d) else ""
        busiest = f"busiest primary's of the 3-primary cluster{named}"
        rows += [
            (
                f"3-primary cluster{named} W2: all primaries' server CPU per step / one server's",
                (three, "server_us"),
                (ONE, "server_us"),
                "<=",
                1.3,
            ),
            (
                "one server's server CPU per step / the "
                + (busiest if named else "3-primary cluster's busiest primary's"),
                (ONE, "server_us"),
                (three, "busiest_us"),
                ">=",
                2.3,
            ),
        ]
    rows += [
        (
            f"W2 steps/s per worker process (of {workers}), one server: crawlq / scrapy-redis,"
            " unpinned",
            (ONE, "steps_rate"),
            (PEER, "steps_rate"),
            ">=",
            4.0,
        ),
        (
            "W2 one server: server CPU per step, crawlq / scrapy-redis",
            (ONE, "server_us"),
            (PEER, "server_us"),
            "<=",
            0.33,
        ),
    ]
    lines = [
        "| target | this run | per repeat | wanted | met |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for text, mine, peer, sense, wanted in rows:
        top, bottom = median(d, *mine), median(d, *peer)
        each = paired(d, mine, peer)
        if not top or not bottom:
            lines.append(f"| {text} | not measured | - | {sense} {wanted} | - |")
            continue
        ratio = top / bottom
        met = ratio <= wanted if sense == "<=" else ratio >= wanted
        span = f"{min(each):.2f}-{max(each):.2f}" if each else "-"
        verdict = "yes" if met else "**no**"
        lines.append(f"| {text} | {ratio:.2f}x | {span} | {sense} {wanted} | {verdict} |")
    return lines


def results_table(document: Result) -> list[str]:
    """The per-setup table and the crawlq / scrapy-redis ratios."""
    d = document
    cpu, workers = cpu_mode(d), d["workers"]
    lines = [
        "| implementation | steps/s, all workers (unpinned) | steps/s per worker (unpinned) "
        f"| server CPU us/step, all primaries ({cpu}) | busiest primary us/step ({cpu}) "
        f"| client CPU us/step ({cpu}) | server CPU us/step (unpinned) | empty pops (most) "
        "| check |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for setup in load_setups(d):
        rate = median(d, setup.key, "steps_rate")
        empty = [r.get("empty_pops", 0) for r in d["runs"][setup.key] if "empty_pops" in r]
        cells = [
            setup.label,
            figure(d, setup.key, "steps_rate", ",.0f"),
            "-" if rate is None else f"{rate / workers:,.0f}",
            figure(d, setup.key, "server_us", ".1f"),
            figure(d, setup.key, "busiest_us", ".1f"),
            figure(d, setup.key, "client_us", ",.0f"),
            figure(d, setup.key, "server_us", ".1f", "unpinned") if cpu == "pinned" else "-",
            f"{max(empty):,}" if empty else "-",
            _checks(d["runs"][setup.key]),
        ]
        lines.append(f"| {' | '.join(cells)} |")
    lines += [
        "",
        "crawlq / scrapy-redis, medians of this run (above 1: crawlq better; for the CPU "
        f"costs, scrapy-redis's over crawlq's; CPU from the {cpu} runs, steps/s unpinned):",
        "",
        "| crawlq on | steps/s | server CPU per step | busiest primary per step |",
        "| --- | ---: | ---: | ---: |",
    ]
    for setup in load_setups(d):
        if setup.impl != "crawlq":
            continue
        cells = [
            _ratio(median(d, setup.key, name), median(d, PEER, name), cost)
            for name, cost in (("steps_rate", False), ("server_us", True), ("busiest_us", True))
        ]
        lines.append(f"| {setup.label.removeprefix('crawlq, ')} | {' | '.join(cells)} |")
    return lines


def commands_table(document: Result) -> list[str]:
    """Per setup, the 5 commands that took most of the servers' command time, per step."""
    lines = [
        "| implementation | commands per step: calls x, and us inside the command |",
        "| --- | --- |",
    ]
    for setup in load_setups(document):
        runs = [r["commands"] for r in runs_of(document, setup.key, "commands") if "commands" in r]
        names = {name for commands in runs for name in commands}
        medians = {
            name: [statistics.median(c.get(name, [0.0, 0.0])[i] for c in runs) for i in (0, 1)]
            for name in names
        }
        top = sorted(medians.items(), key=lambda item: -item[1][1])[:5]
        cells = [f"`{name}` {calls:.2f} x, {usec:.1f} us" for name, (calls, usec) in top]
        lines.append(f"| {setup.label} | {'; '.join(cells) or '-'} |")
    return lines


def pinning(document: Result) -> str:
    """Where the processes ran, and whether every run's affinity says so."""
    d = document
    if not d.get("pin"):
        return (
            "Nothing was pinned (`--pin off`): the CPU figures come from the same unpinned "
            "runs as the steps/s, with workers and servers free to use every core."
        )
    cpus = ",".join(map(str, d["pin"]))
    wrong = []
    for key, runs in d["runs"].items():
        for r in runs:
            if "worker_cpus" not in r:
                continue
            allowed = (r["worker_cpus"], r["server_cpus"])
            if r.get("mode") == "pinned" and allowed != (d["pin"], d["pin"]):
                wrong.append(f"{key} pinned run {r.get('repeat')}: {allowed}")
            if r.get("mode") == "unpinned" and d["pin"] in allowed:
                wrong.append(f"{key} unpinned run {r.get('repeat')}: {allowed}")
    checked = (
        "read back from /proc after every run: as intended"
        if not wrong
        else "read back from /proc after every run, **not as intended**: " + "; ".join(wrong)
    )
    return (
        "**Pinning.** The CPU figures (server and client CPU per step, the capacity table, the "
        f"CPU targets) come from runs with the {d['workers']} workers and every redis-server "
        f"pinned to CPU {cpus}: `taskset -c {cpus}` for the servers (all their threads), "
        f"`sched_setaffinity` to CPU {cpus} for each worker process. On this machine a round "
        "trip costs a server more CPU when its client sits on another core, so unpinned CPU "
        "figures shift with where the scheduler puts the processes. The steps/s come from "
        "separate unpinned runs of the same setups (fresh processes, free to use every core); "
        f"the table also shows their server CPU for comparison. Affinity {checked}."
    )


def render(document: Result) -> str:
    """The markdown report."""
    from benchmarks.cluster_capacity import capacity_section, method

    d = document
    loads = [r["load1"] for runs in d["runs"].values() for r in runs if "load1" in r]
    command = " ".join(["python -m benchmarks.cluster", *d["argv"]])
    started, quick = d["started"][:16].replace("T", " "), " (QUICK size)" if d["quick"] else ""
    modes = "a pinned and an unpinned run" if d.get("pin") else "one unpinned run"
    lines = [
        "# Redis Cluster benchmark",
        "",
        f"`{command}`, started {started} UTC, ran {d['seconds'] / 60:.1f} minutes{quick}. "
        f"The W2 crawl step: {d['steps']:,} steps after {d['seeds']:,} seeds, by "
        f"{d['workers']} worker processes started together. Per setup and repeat, {modes}; "
        f"medians of {d['repeat']} fresh runs each, interleaved; ± is half the min-max range, "
        "relative to the median. 1-minute load average: "
        f"{d['load_start']:.1f} at the start, median "
        f"{statistics.median(loads) if loads else 0:.1f} and max {max(loads, default=0):.1f} "
        "after each measurement.",
        "",
        d["environment"],
        "",
        pinning(d),
        "",
        "## Targets",
        "",
        "Each a ratio of this run's medians (CPU from the "
        f'{cpu_mode(d)} runs, steps/s unpinned); "per repeat" is the range of the same ratio '
        "within each repeat.",
        "",
        *targets_table(d),
        "",
        "## Results",
        "",
        *results_table(d),
        "",
        "Where the servers' time goes: `INFO commandstats`, reset before and read after the "
        f"timed section, all primaries summed, medians of the {cpu_mode(d)} runs; the 5 "
        "commands with the most time. The commands crawlq's functions run count on their own "
        "lines and inside `fcall`'s time; a command's time excludes reading, parsing and "
        "replying.",
        "",
        *commands_table(d),
        "",
        *capacity_section(d),
        "",
        method(d),
    ]
    return "\n".join(lines)
