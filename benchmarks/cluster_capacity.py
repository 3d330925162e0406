"""The Redis Cluster report's capacity section and its method (`benchmarks.cluster_report`).

The capacity of a layout is what its busiest server can take: Redis runs
commands on one thread, so a cluster saturates when its busiest primary does,
whatever the others still have. The table gives, per measured layout (a
cluster size with a shard count), the shards per primary as placed, the
busiest primary's server CPU per step and the pages/s ceiling 1e6 / that;
larger clusters are derived, per shard count, from where ``redis-cli
--cluster create`` would place the same crawl's shards (computed by
`benchmarks.redis_servers.placement`) times the cost per shard measured on
the largest cluster with that shard count. A crawl's shards cap its useful
primaries at their count.
"""

from __future__ import annotations

import math
import statistics
from itertools import groupby
from typing import Any

from benchmarks.cluster_report import (
    ONE,
    PEER,
    SHARDS,
    Setup,
    cluster_of,
    cpu_mode,
    load_setups,
    median,
    plural,
    runs_of,
    several,
    shard_counts,
)

Result = dict[str, Any]
#: Cluster sizes the capacity table derives (those larger than the largest measured one).
DERIVED = (10, 16, 30)


def _pages(rate: float) -> str:
    """``rate`` rounded to 3 significant figures, with thousands separators."""
    return f"{round(rate, 2 - math.floor(math.log10(rate))):,.0f}"


def _spread(counts: list[int]) -> str:
    """Shards per primary, busiest first: "6/5/5", or "6 x 2, 4 x 1" for many primaries."""
    counts = sorted(counts, reverse=True)
    if len(counts) <= 6:
        return "/".join(map(str, counts))
    return ", ".join(f"{len(list(g))} x {k}" for k, g in groupby(counts))


def _row(name: str, held: str, spread: str, busiest: float | None, shard: str) -> str:
    ceiling = _pages(1e6 / busiest) if busiest else "-"
    cost = f"{busiest:.1f}" if busiest else "-"
    return f"| {name} | {held} | {spread} | {cost} | {shard} | {ceiling} |"


def placements_of(document: Result) -> dict[int, dict[int, list[int]]]:
    """Per shard count, per cluster size N, the shards per primary (busiest first) where
    ``redis-cli --cluster create`` would put them; a run made before ``--shards`` kept
    one shard count's, by size."""
    raw = document.get("placements", {})
    if isinstance(document.get("shards", SHARDS), int):
        return {document.get("shards", SHARDS): {int(n): c for n, c in raw.items()}}
    return {int(k): {int(n): c for n, c in sizes.items()} for k, sizes in raw.items()}


def per_shard(document: Result, key: str) -> float | None:
    """A cluster's server CPU per step per shard: for each run, the highest over its
    primaries of the primary's us/step over the shards it holds; the median of the runs."""
    values = [
        max(us / k for us, k in zip(r["primary_us"], r["shards_per_node"], strict=True) if k)
        for r in runs_of(document, key, "primary_us")
        if "primary_us" in r and "shards_per_node" in r
    ]
    return statistics.median(values) if values else None


def capacity_section(document: Result) -> list[str]:
    """The capacity table (per shard count, measured then derived rows) and what it
    rests on."""
    d = document
    cpu = cpu_mode(d)
    lines = [
        "## Capacity: pages/s from the busiest primary",
        "",
        "| frontier | primaries (holding a shard) | shards per primary, as placed "
        f"| busiest primary us/step ({cpu}) | us/step per shard | pages/s ceiling |",
        "| --- | ---: | --- | ---: | ---: | ---: |",
    ]
    for key, name in ((ONE, "crawlq, one redis-server"), (PEER, "scrapy-redis, one redis-server")):
        lines.append(_row(name, "1 (plain server)", "-", median(d, key, "server_us"), "-"))
    notes = [
        "The pages/s ceiling is 1e6 / the busiest primary's server CPU us per step (on one "
        "server, its us per step): Redis runs commands on one thread, so a cluster saturates "
        "when its busiest primary does. The shards per primary are as measured, busiest "
        'first; "us/step per shard" is, per run, the highest over the cluster\'s primaries of '
        "a primary's us/step over the shards it holds (so a primary's fixed work, cron and "
        "cluster bus, weighs on those holding few shards), median of the runs.",
    ]
    for shards in shard_counts(d):
        clusters = [s for s in load_setups(d) if s.primaries and s.shards == shards]
        rows, more = _shard_count(d, shards, clusters)
        lines += rows
        notes += more
    if several(d):
        notes += ["", _choice(d)]
    return [*lines, "", *notes]


def _shard_count(d: Result, shards: int, clusters: list[Setup]) -> tuple[list[str], list[str]]:
    """The capacity rows of the clusters with ``shards`` shards (measured, then derived),
    and their notes."""
    named = f" ({plural(shards, 'shard')})" if several(d) else ""
    rows = []
    placed: dict[int, set[tuple[int, ...]]] = {}
    costs: dict[int, float | None] = {}
    for setup in clusters:
        runs = runs_of(d, setup.key, "busiest_us")
        placed[setup.primaries] = {
            tuple(r["shards_per_node"]) for r in runs if "shards_per_node" in r
        }
        spread = " or ".join(_spread(list(s)) for s in sorted(placed[setup.primaries])) or "-"
        held = max((sum(1 for k in s if k) for s in placed[setup.primaries]), default=0)
        shard = costs[setup.primaries] = per_shard(d, setup.key)
        rows.append(
            _row(
                f"crawlq, Redis Cluster, {setup.primaries} measured{named}",
                f"{setup.primaries} ({held})",
                spread,
                median(d, setup.key, "busiest_us"),
                f"{shard:.1f}" if shard else "-",
            )
        )
    largest = max(clusters, key=lambda s: s.primaries, default=None)
    base = per_shard(d, largest.key) if largest else None
    placements = placements_of(d).get(shards, {})
    derived = [n for n in DERIVED if largest and n > largest.primaries and n in placements]
    for n in derived:
        if not (base and largest):
            break
        counts = placements[n]
        held = sum(1 for k in counts if k)
        rows.append(
            _row(
                f"crawlq, Redis Cluster, {n} **derived**{named}",
                f"{n} ({held})",
                _spread(counts),
                max(counts) * base,
                f"{base:.1f} (of {largest.primaries})",
            )
        )
    return rows, _notes(d, shards, largest, base, placed, placements, derived, costs)


def _notes(
    d: Result,
    shards: int,
    largest: Setup | None,
    base: float | None,
    placed: dict[int, set[tuple[int, ...]]],
    placements: dict[int, list[int]],
    derived: list[int],
    costs: dict[int, float | None],
) -> list[str]:
    """What the capacity rows of one shard count rest on, with this run's figures."""
    notes = []
    agree = [
        n
        for n, seen in placed.items()
        if seen and n in placements and all(sorted(s, reverse=True) == placements[n] for s in seen)
    ]
    if largest and base and derived:
        checked = ", ".join(
            f"{n}: {_spread(placements[n])}" for n in sorted(placed) if n in placements
        )
        same = "the same as measured" if len(agree) == len(placed) else "**not** all as measured"
        # with the default 16, a range catching 3 tags is the case (N from 8 to 15)
        extra = "3 shards' tags" if shards == SHARDS else "an extra shard's tag"
        notes += [
            "",
            f"**Derived rows** (not measured): the shards per primary are where `redis-cli "
            f"--cluster create` puts this crawl's {plural(shards, 'shard')} on N primaries (its "
            "slot split computed for the crawl's hash tags, which sit one per equal range of "
            f"slots; for the measured sizes it gives {checked}: {same}); the busiest primary's "
            f"cost is its shards times the per-shard cost measured on {largest.primaries} "
            f"primaries, {base:.1f} us/step. With {plural(shards, 'shard')} the busiest primary "
            f"holds at least ceil({shards}/N) of them, more when a primary's slot range catches "
            f"{extra}.",
        ]
        measured = sorted((n, c) for n, c in costs.items() if c)
        if len(measured) > 1:
            notes += ["", _trend(d, shards, measured)]
    notes += ["", _cap(d, shards, placements)]
    client = median(d, largest.key, "client_us") if largest else None
    if client and base and derived and largest:
        top = 1e6 / (max(placements[derived[-1]]) * base)
        named = f", {plural(shards, 'shard')}" if several(d) else ""
        notes += [
            "",
            f"The ceilings are the servers'. The workers need about pages/s x client CPU per "
            f"step of CPU: at {_pages(top)} pages/s and {client:,.0f} us/step "
            f"({largest.primaries}-primary cluster{named}), {top * client / 1e6:.1f} cores of "
            "workers, and enough of them to hide the round trips (loopback here).",
        ]
    return notes


def _cap(d: Result, shards: int, placements: dict[int, list[int]]) -> str:
    """The cap a shard count puts on the useful primaries."""
    most = max(DERIVED)
    caps = "caps" if shards == 1 else "cap"
    useful = f"{shards} useful primar{'y' if shards == 1 else 'ies'}"
    head = f"**{plural(shards, 'shard')} {caps} a crawl at {useful}**"
    if shards >= most:
        return f"{head}: more than the largest cluster derived here."
    idle = placements[most].count(0) if most in placements else most - shards
    text = (
        f"{head}: a primary holding no shard does nothing for the crawl, so on {most} "
        f"primaries {idle} hold none and the ceiling is the {shards}-primary one."
    )
    if several(d):
        return text
    return text + (
        " A crawl created with the `shards` option "
        "(`open_frontier(url, shards=64)`, from 1 to 1,024, fixed when the crawl is created) "
        "raises the cap; other shard counts are not measured here. A step's children go to "
        "their hosts' shards whatever the count, so a step's calls stay about one per child "
        "host plus the ack."
    )


def _calls(d: Result, key: str) -> float | None:
    """The median ``fcall`` calls per step of setup ``key`` (all primaries)."""
    runs = runs_of(d, key, "commands")
    values = [r["commands"]["fcall"][0] for r in runs if "fcall" in r.get("commands", {})]
    return statistics.median(values) if values else None


def _choice(d: Result) -> str:
    """What the shard count trades, with this run's calls per step for each."""
    counts = shard_counts(d)
    calls = []
    for shards in counts:
        clusters = [s for s in load_setups(d) if s.primaries and s.shards == shards]
        largest = max(clusters, key=lambda s: s.primaries, default=None)
        found = _calls(d, largest.key) if largest else None
        calls.append(f"{found:.2f} with {shards}" if found else f"- with {shards}")
    return (
        "**The shard count** is the crawl's `shards` option (`open_frontier(url, shards=N)`, "
        f"from 1 to 1,024, fixed when the crawl is created; {SHARDS} by default); this run "
        f"measured {' and '.join(map(str, counts))}. A step's `add_many` makes one function "
        "call per shard its children and its ack touch, so fewer shards mean fewer calls per "
        "step (`fcall` per step, the pops' included, on the largest cluster measured: "
        f"{', '.join(calls)} shards) and less server "
        "CPU, but cap the useful primaries lower; more shards spread the crawl over more "
        "primaries at the cost of more calls per step, up to about one per child host plus "
        "the ack."
    )


def _trend(d: Result, shards: int, measured: list[tuple[int, float]]) -> str:
    """How the per-shard cost moved with the primaries, and the time inside `fcall`."""
    sizes = "/".join(str(n) for n, _ in measured)
    trend = "/".join(f"{c:.1f}" for _, c in measured)
    inside = []
    for n, _ in measured:
        runs = runs_of(d, cluster_of(d, n, shards), "commands")
        values = [r["commands"]["fcall"][1] for r in runs if "fcall" in r.get("commands", {})]
        inside.append(f"{statistics.median(values):.0f}" if values else "-")
    named = f" with {plural(shards, 'shard')}" if several(d) else ""
    if measured[-1][1] <= measured[0][1] * 1.05:
        return f"The per-shard cost{named} on {sizes} primaries was {trend} us/step: about flat."
    return (
        f"The per-shard cost{named} on {sizes} primaries was {trend} us/step: it grows with the "
        f"primaries, and so does the time spent inside `fcall` per step ({'/'.join(inside)} "
        "us, all primaries), so it is not only that an `add_many`'s calls to shards on one "
        "primary share a read and a reply less often as the shards spread. More server "
        "processes taking turns on the same cores (and their caches) is a likely part, which a "
        "core per primary would not have; this run cannot separate the two. The derived rows "
        f"use the {measured[-1][0]}-primary cost: if the growth goes on past "
        f"{measured[-1][0]} primaries their ceilings are too high, if it comes from sharing "
        "this machine's cores, too low."
    )


def method(document: Result) -> str:
    """The method section, naming the run's shard counts."""
    counts = shard_counts(document)
    if not several(document):
        return METHOD.format(shards=f"{SHARDS} shards (`shards` option, the default)", fewer="")
    listed = " or ".join(map(str, counts))
    return METHOD.format(
        shards=f"{listed} shards (`shards` option, a setup per count; {SHARDS} is the default)",
        fewer=(
            "\n  With fewer shards a step's children share shards more often: fewer calls\n"
            "  per step (`fcall` in the commands table), on fewer primaries."
        ),
    )


METHOD = """\
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
  no replicas; 3 primaries or more are joined by `redis-cli --cluster create`
  (equal runs of slots); `redis-cli` refuses fewer than 3, so the 1-primary
  cluster gets every slot with `CLUSTER ADDSLOTSRANGE 0 16383`. The crawl has
  {shards}, whose hash tags crawlq puts one
  per equal range of slots; the shards each primary holds are read from
  `CLUSTER SLOTS` after every run.
- **Pinning** (`--pin`, default CPU 1): per repeat, every setup runs once
  with its workers and servers pinned to one CPU (`taskset -c` for the
  servers, `sched_setaffinity` for the worker processes before they start
  any thread), for the CPU figures, and once unpinned, for the steps/s. The
  affinity of every worker and every server thread is read back after each
  run. On one core the workers and the servers take turns, so the pinned
  runs' steps/s are not the ones to read; on two cores, where a client and
  its server sit on different cores, a round trip costs the server more CPU
  (wake-ups across cores, cache lines moving), by an amount that depends on
  where the scheduler put each process in that run.
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
  whose links stay mostly on the page's host touches fewer shards per page.{fewer}
- **Figures** are medians of the repeats, each on fresh servers with fresh
  worker processes; repeats are interleaved (every setup once pinned, once
  unpinned, then again), so noise spreads over all setups. ± is half the
  min-max range relative to the median. A ratio is of two medians of this
  run; its "per repeat" range pairs the runs of one repeat. `src/crawlq` is
  copied at start, so the whole run measures the same code.
- **Correctness**, untimed, after each run (pinned and unpinned): the rest of
  the queue is drained (crawlq: `pop` + `ack`); every seed and every distinct
  child must come out exactly once over the workers and the drain; for
  crawlq, its counters must agree: accepted = distinct URLs = acked = popped,
  duplicates = offers - accepted, nothing queued, leased, released or
  expired. "empty pops" (the most in one run) counts pops that found nothing
  ready and were retried after 1 ms (none expected: the queue only grows).

## Why CPU per step

This machine has 2 cores for N workers and up to 6 redis-servers, so the
wall-clock steps/s measures how they share 2 cores, not how a cluster scales:
adding primaries here only adds processes to the same 2 cores. What scales is
the server CPU per step of the busiest primary: Redis runs commands on one
thread, so a primary tops out at 1 / c steps/s when a step costs it c
seconds of CPU, and a cluster at the rate of its busiest primary. The
ceilings assume a core per primary, enough client cores and workers (see the
capacity notes) and no replicas (`replicas=N` adds the replicas' work and a
WAIT per write). Ratios within one run are the figures to compare.
"""
