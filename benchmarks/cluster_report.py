"""The Redis Cluster benchmark's setups and its report (`benchmarks.cluster` runs them).

Renders ``benchmarks/CLUSTER.md`` from a run's raw results: the figures per
setup, ratios to scrapy-redis, where the servers' time goes, and a capacity
table computed from the server CPU per step.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

Result = dict[str, Any]
SHARDS = 16


@dataclass(frozen=True)
class Setup:
    """One implementation on one server layout."""

    key: str
    label: str
    impl: str  # "crawlq" or "scrapy-redis"
    primaries: int  # 0: one plain redis-server


SETUPS = (
    Setup("crawlq-redis", "crawlq, one redis-server", "crawlq", 0),
    Setup("crawlq-cluster-1", f"crawlq, Redis Cluster, 1 primary ({SHARDS} shards)", "crawlq", 1),
    Setup("crawlq-cluster-3", f"crawlq, Redis Cluster, 3 primaries ({SHARDS} shards)", "crawlq", 3),
    Setup("scrapy-redis", "scrapy-redis, one redis-server", "scrapy-redis", 0),
)
PEER = "scrapy-redis"


# -- the report --------------------------------------------------------------------------


def _median(runs: list[Result], name: str) -> float | None:
    values = [r[name] for r in runs if name in r]
    return statistics.median(values) if values else None


def _figure(runs: list[Result], name: str, fmt: str) -> str:
    """The median of ``name`` over ``runs``, with ± half the min-max range relative to it."""
    values = [r[name] for r in runs if name in r]
    if not values:
        return "-"
    median = statistics.median(values)
    spread = (max(values) - min(values)) / 2 / median if median else 0.0
    return f"{median:{fmt}} ± {spread:.0%}"


def _ratio(mine: float | None, peer: float | None, cost: bool) -> str:
    if not mine or not peer:
        return "-"
    return f"{(peer / mine if cost else mine / peer):.2f}"


def _checks(runs: list[Result]) -> str:
    """ "ok 3/3", or the distinct problems and errors of the runs."""
    ok = sum(r.get("check") == "ok" for r in runs)
    problems = sorted({r.get("error") or r.get("check", "") for r in runs} - {"ok"})
    return f"ok {ok}/{len(runs)}" + "".join(f"; {p}" for p in problems)


def _pages(rate: float) -> str:
    """``rate`` rounded to 3 significant figures, with thousands separators."""
    return f"{round(rate, 2 - math.floor(math.log10(rate))):,.0f}"


def results_table(document: Result) -> list[str]:
    """The per-setup table and the crawlq / scrapy-redis ratios."""
    runs = document["runs"]
    lines = [
        "| implementation | steps/s (all workers) | server CPU us/step (all primaries) "
        "| busiest primary us/step | client CPU us/step | empty pops | check |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for setup in SETUPS:
        r = runs[setup.key]
        empty = _median(r, "empty_pops")
        cells = [
            setup.label,
            _figure(r, "steps_rate", ",.0f"),
            _figure(r, "server_us", ".1f"),
            _figure(r, "busiest_us", ".1f"),
            _figure(r, "client_us", ",.0f"),
            "-" if empty is None else f"{empty:,.0f}",
            _checks(r),
        ]
        lines.append(f"| {' | '.join(cells)} |")
    peer = runs[PEER]
    lines += [
        "",
        "crawlq / scrapy-redis, medians of this run (above 1: crawlq better; for the CPU "
        "costs, scrapy-redis's over crawlq's):",
        "",
        "| crawlq on | steps/s | server CPU per step | busiest primary per step |",
        "| --- | ---: | ---: | ---: |",
    ]
    for setup in SETUPS:
        if setup.impl != "crawlq":
            continue
        r = runs[setup.key]
        cells = [
            _ratio(_median(r, name), _median(peer, name), cost)
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
    for setup in SETUPS:
        runs = [r["commands"] for r in document["runs"][setup.key] if "commands" in r]
        names = {name for commands in runs for name in commands}
        medians = {
            name: [statistics.median(c.get(name, [0.0, 0.0])[i] for c in runs) for i in (0, 1)]
            for name in names
        }
        top = sorted(medians.items(), key=lambda item: -item[1][1])[:5]
        cells = [f"`{name}` {calls:.2f} x, {usec:.1f} us" for name, (calls, usec) in top]
        lines.append(f"| {setup.label} | {'; '.join(cells) or '-'} |")
    return lines


def capacity_table(document: Result) -> list[str]:
    """Pages/s from the server CPU per step: K / c on K primaries, 1 / c on one server."""
    runs = document["runs"]
    c3 = _median(runs["crawlq-cluster-3"], "server_us")
    rows = [
        ("crawlq, one redis-server", 1, _median(runs["crawlq-redis"], "server_us")),
        ("scrapy-redis, one redis-server", 1, _median(runs[PEER], "server_us")),
        ("crawlq, Redis Cluster, 1 primary", 1, _median(runs["crawlq-cluster-1"], "server_us")),
        *((f"crawlq, Redis Cluster, {k} primaries", k, c3) for k in (3, 10, 30)),
    ]
    lines = [
        "| frontier | server cores (primaries) | server CPU us/step | pages/s ceiling |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, cores, cost in rows:
        cells = ("-", "-") if not cost else (f"{cost:.1f}", _pages(cores * 1e6 / cost))
        lines.append(f"| {name} | {cores} | {cells[0]} | {cells[1]} |")
    busiest = _median(runs["crawlq-cluster-3"], "busiest_us")
    spreads = {
        tuple(r["shards_per_primary"])
        for r in runs["crawlq-cluster-3"]
        if "shards_per_primary" in r
    }
    single = _median(runs["crawlq-redis"], "server_us")
    if single and c3:
        lines += [
            "",
            f"A step costs the 3-primary cluster {c3 / single:.1f} times the server CPU it "
            f"costs one redis-server, so a cluster serves more pages than one server from "
            f"about {c3 / single:.1f} primaries on (evenly loaded).",
        ]
    if busiest and c3:
        split = " or ".join("/".join(map(str, s)) for s in sorted(spreads))
        lines += [
            "",
            f"The cluster rows use c = {c3:.1f} us, the 3-primary cluster's total server CPU "
            f"per step. On that cluster the {SHARDS} shards sit {split} on its primaries, so "
            f"its busiest primary spends {busiest:.1f} us per step "
            f"({busiest / c3:.0%} of the total, {1 / 3:.0%} if even): the 3-primary cluster "
            f"as measured saturates its busiest core at about {_pages(1e6 / busiest)} pages/s.",
        ]
    return lines


METHOD = f"""\
## Method

- **The step** is W2's (`benchmarks/workloads.py`, `w2_plan`): dequeue one
  request, offer its 5 children (half already offered earlier), ack it. crawlq:
  `frontier.pop()` then `frontier.add_many(children, ack=request)`, one call;
  scrapy-redis: `next_request()` then `enqueue_request` for each child (it has
  no ack). A step is a page of a crawl without the fetch.
- **Workers**: N processes (multiprocessing spawn) open their frontier, build
  their requests, then wait on one event; the timed section runs from that
  "go" to the last worker's end. Worker `i` takes steps `i, i + N, i + 2N...`
  of the plan. 1,000 seeds go in first, untimed. crawlq runs with
  `host_delay=0`, no host concurrency limit (the defaults).
- **Servers**: every measurement starts fresh redis-servers on free 127.0.0.1
  ports (no RDB, no AOF), stopped by their pids at its end. The clusters have
  no replicas; 3 primaries are joined by `redis-cli --cluster create`;
  `redis-cli` refuses fewer than 3, so the 1-primary cluster gets every slot
  with `CLUSTER ADDSLOTSRANGE 0 16383`. The crawl has {SHARDS} shards (`shards`
  option, the default).
- **Server CPU** is utime + stime of each redis-server from `/proc/PID/stat`
  (10 ms ticks) read before "go" and after the last worker's end: the total
  over all primaries per step, and the busiest primary's per step. It includes
  the servers' background work (cron, cluster bus), a small share over
  sections of seconds. **Client CPU** is the workers' own CPU time over
  their steps, summed, per step. The **commands** table comes from
  `INFO commandstats` (after `CONFIG RESETSTAT`), outside the CPU readings.
- **Hosts and shards**: W2's children are on hosts drawn at random among
  1,000, so the 5 children of a step mostly fall in different shards; on a
  cluster a step is then one function call per shard it touches (children
  first, the parent's ack last), where one server takes one call. A crawl
  whose links stay mostly on the page's host touches fewer shards per page.
- **Figures** are medians of the repeats, each on fresh servers with fresh
  worker processes; repeats are interleaved (every setup once, then again), so
  noise spreads over all setups. ± is half the min-max range relative to the
  median. `src/crawlq` is copied at start, so the whole run measures the same
  code.
- **Correctness**, untimed, after each run: the rest of the queue is drained
  (crawlq: `pop` + `ack`); every seed and every distinct child must come out
  exactly once over the workers and the drain; for crawlq, its counters must
  agree: accepted = distinct URLs = acked = popped, duplicates = offers -
  accepted, nothing queued, leased, released or expired. "empty pops" counts
  pops that found nothing ready and were retried after 1 ms (none expected:
  the queue only grows).

## Why CPU per step, and the capacity estimate

This machine has 2 cores for N workers and up to 3 redis-servers, so the
wall-clock steps/s measures how they share 2 cores, not how a cluster scales:
adding primaries here only adds processes to the same 2 cores. What scales is
the server CPU per step: Redis runs commands on one thread, so one server
tops out at 1 / c steps/s when a step costs it c seconds of CPU, and a
cluster of K primaries, with the steps spread evenly over them, at K / c.

The estimate assumes: (1) the steps spread evenly over the primaries, which
needs hosts spread over many shards and shards spread evenly over the
primaries: a crawl's `shards` must be at least K, and a multiple of K or much
larger than K (with {SHARDS} shards at most {SHARDS} primaries hold any, and 3
primaries hold them unevenly, see the busiest primary); (2) the per-step
server cost measured at 3 primaries holds at K primaries (a step touches one
shard for the children of one host, more for children over several hosts;
a worker's peeks over the shards grow with the shard count, not with K);
(3) enough client cores: N workers need about pages/s x client CPU per step
of CPU (see the client column), and enough workers to hide the network
round trips, which loopback here makes small; (4) no replicas (`replicas=N`
adds the replicas' work and a WAIT per write). On this loaded machine (see
the load average) a server shares its core with the workers, and context
switches and shared caches make its CPU per step higher than on a core of its
own: the ceilings are on the low side, and ratios within one run are the
figures to compare.
"""


def render(document: Result) -> str:
    """The markdown report."""
    d = document
    loads = [r["load1"] for runs in d["runs"].values() for r in runs if "load1" in r]
    command = " ".join(["python -m benchmarks.cluster", *d["argv"]])
    started, quick = d["started"][:16].replace("T", " "), " (QUICK size)" if d["quick"] else ""
    lines = [
        "# Redis Cluster benchmark",
        "",
        f"`{command}`, started {started} UTC, ran {d['seconds'] / 60:.1f} minutes{quick}. "
        f"The W2 crawl step: {d['steps']:,} steps after {d['seeds']:,} seeds, by "
        f"{d['workers']} worker processes started together. Medians of {d['repeat']} fresh "
        "runs, interleaved; ± is half the min-max range, relative to the median. 1-minute "
        f"load average: {d['load_start']:.1f} at the start, median "
        f"{statistics.median(loads) if loads else 0:.1f} and max {max(loads, default=0):.1f} "
        "after each measurement.",
        "",
        d["environment"],
        "",
        "## Results",
        "",
        *results_table(d),
        "",
        "Where the servers' time goes: `INFO commandstats`, reset before and read after the "
        "timed section, all primaries summed, medians; the 5 commands with the most time. "
        "The commands crawlq's functions run count on their own lines and inside `fcall`'s "
        "time; a command's time excludes reading, parsing and replying.",
        "",
        *commands_table(d),
        "",
        "## Capacity: pages/s from the server CPU per step",
        "",
        *capacity_table(d),
        "",
        METHOD,
    ]
    return "\n".join(lines)
