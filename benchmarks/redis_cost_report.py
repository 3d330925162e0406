"""The Redis cost model's fit and ``REDIS_COST.md`` (``benchmarks.redis_cost``'s report).

``summarize`` turns each shape's runs into medians per FCALL (server CPU,
FCALL time, the commands run inside, the items of the call); ``fit`` is
least squares over a call kind's shapes (normal equations solved by hand:
four unknowns at most); ``render`` writes the tables.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

Result = dict[str, Any]
ITEMS = ("offered", "accepted", "pops", "acks")
#: Call kind -> the shapes (name, k) its fit is made over, one server.
KINDS = {
    "add": ["add0", "add_new", "add_dup", "add_ack", "add_pop", "w2"],
    "pop": ["pop", "pop_empty"],
    "ack_or_release": ["ack", "popack"],
}
LABELS = {
    "ping": "PING (a round trip, no function)",
    "nop_ro": "FCALL of an empty read-only function",
    "nop_w": "FCALL of an empty write function",
    "trivial": "crawlq `read` with nothing to read (key names only)",
    "pop0": "crawlq `pop` leasing 0 (begin + conclude)",
    "add0": "crawlq `add` of 0 links, no ack (begin + conclude + seq)",
    "pop_empty": "crawlq `pop` of 1 with nothing queued",
    "add_new": "add_many(k new links)",
    "add_dup": "add_many(k seen links)",
    "add_ack": "add_many(k new links, ack=1 request)",
    "add_pop": "add_many(k new links) leasing 1 after them",
    "w2": "W2 step: pop + add_many(5 links, half seen, ack=it)",
    "pop": "pop leasing n (prefetch n)",
    "ack": "ack_many(n), no refill",
    "popack": "pop n + ack n (acks wait): one call",
    "sr_new": "scrapy-redis enqueue_request, new (SADD + ZADD)",
    "sr_dup": "scrapy-redis enqueue_request, seen (SADD)",
    "sr_pop": "scrapy-redis next_request (MULTI ZRANGE ZREMRANGEBYRANK EXEC)",
    "sr_w2": "scrapy-redis W2 step: next_request + 5 enqueue_request",
}
#: What issues each command inside crawlq's functions (from the Lua sources).
SOURCES = {
    "hincrby": "meta counters: seq (ids, add.lua), accepted / popped / released (save); "
    "also the workers' per-host accepted counts, once a second, outside functions",
    "hmget": "seen_state (meta sl sp ns sw, add); lease records of acked ids (end_leases)",
    "hsetnx": "exact dedup: one per link (seen_add)",
    "hset": "host records (save), replay record '@owner' and lease records (conclude), "
    "payloads in p, meta sl/sp/ns (seen_save)",
    "hget": "host record per host touched (host()); a host's lone request in p",
    "hdel": "p entries and lease records of ended leases (drop_ended); moved lone requests",
    "rpush": "a link queued in its host's list (enqueue)",
    "lpop": "the leased request off its host's list (dequeue)",
    "lindex": "the next head of a host's list (dequeue)",
    "zadd": "ready hosts re-filed (place / take's round), lease deadlines (take)",
    "zrem": "a host's old ready member (place), ended leases (drop_ended)",
    "zpopmin": "ready hosts of a round (take); next lane of a host (dequeue)",
    "zrangebyscore": "expiry and delay scans (reap, wake), when their bound is due",
    "zrange": "earliest lease / delay (bounds of reap, wake)",
    "time": "server time (now(), once per call that needs it)",
    "hkeys": "a dedup bucket split (seen_split)",
    "hgetall": "per-host policies (once per library load)",
}


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float]) -> float:
    """Half the min-max range, relative to the median."""
    mid = median(values)
    return (max(values) - min(values)) / 2 / mid if values and mid else 0.0


def summarize(runs: list[Result]) -> Result | None:
    """Medians per FCALL (per call for scrapy-redis and PING) over a shape's good runs."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return None
    per: dict[str, list[float]] = {"sched": [], "stat": [], "fcall": [], "fcalls": []}
    per |= {f"x_{item}": [] for item in ITEMS}
    primaries: list[list[float]] = []
    fcalls_by_node: list[list[float]] = []
    inner: dict[str, list[tuple[float, float]]] = {}
    for r in good:
        calls = r["calls"]
        node_calls = [c.get("fcall", [0, 0])[0] for c in r["commands"]]
        n = sum(node_calls) or calls  # per FCALL; per call without functions
        per["fcalls"].append(sum(node_calls) / calls)
        per["sched"].append(1e6 * sum(r["sched_s"]) / n)
        per["stat"].append(1e6 * sum(r["stat_s"]) / n)
        per["fcall"].append(sum(c.get("fcall", [0, 0])[1] for c in r["commands"]) / n)
        for item in ITEMS:
            per[f"x_{item}"].append(r["design"][item] / n)
        primaries.append([1e6 * s / calls for s in r["sched_s"]])
        fcalls_by_node.append([c / calls for c in node_calls])
        names = {name for c in r["commands"] for name in c}
        for name in names - {"fcall"}:
            count = sum(c.get(name, [0, 0])[0] for c in r["commands"]) / n
            usec = sum(c.get(name, [0, 0])[1] for c in r["commands"]) / n
            inner.setdefault(name, []).append((count, usec))
    out: Result = {k: median(v) for k, v in per.items()}
    out["spread"] = spread(per["sched"])
    out["runs"] = len(good)
    out["errors"] = [r["error"] for r in runs if "error" in r]
    out["calls"] = good[0]["calls"]
    # Per primary (sorted busiest first in each run, then the median): CPU per call.
    out["primary_us"] = [
        median(v) for v in zip(*(sorted(p, reverse=True) for p in primaries), strict=False)
    ]
    out["primary_fcalls"] = [
        median(v) for v in zip(*(sorted(p, reverse=True) for p in fcalls_by_node), strict=False)
    ]
    out["per_call_us"] = median([sum(p) for p in primaries])
    out["busiest_us"] = median([max(p) for p in primaries])
    out["inner"] = {
        name: (median([c for c, _ in v]), median([u for _, u in v])) for name, v in inner.items()
    }
    return out


def solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Solve a small square system by Gaussian elimination with partial pivoting."""
    size = len(vector)
    a = [[*row, vector[i]] for i, row in enumerate(matrix)]
    for col in range(size):
        pivot = max(range(col, size), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12:
            raise ValueError("singular system: the shapes do not separate these terms")
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(size):
            if r != col:
                factor = a[r][col] / a[col][col]
                a[r] = [x - factor * y for x, y in zip(a[r], a[col], strict=True)]
    return [a[i][size] / a[i][i] for i in range(size)]


def fit(
    points: list[tuple[dict[str, float], float]], items: Sequence[str] = ITEMS
) -> tuple[dict[str, float], list[float]]:
    """Least squares y = fixed + sum(coef * x) over the ``items`` that vary; (coefs, residuals).

    Weighted by 1 / y^2: it minimises relative residuals, so a call of one
    link counts as much as a call of a hundred (the fixed part is the point).
    """
    terms = ["fixed"] + [i for i in items if any(abs(x[i]) > 1e-9 for x, _ in points)]
    rows = [[1.0] + [x[t] for t in terms[1:]] for x, _ in points]
    ys = [y for _, y in points]
    w = [1 / y**2 for y in ys]
    size = range(len(terms))
    normal = [
        [sum(r[i] * r[j] * v for r, v in zip(rows, w, strict=True)) for j in size] for i in size
    ]
    right = [sum(r[i] * y * v for r, y, v in zip(rows, ys, w, strict=True)) for i in size]
    coefs = solve(normal, right)
    residuals = [
        y - sum(c * v for c, v in zip(coefs, r, strict=True)) for r, y in zip(rows, ys, strict=True)
    ]
    return dict(zip(terms, coefs, strict=True)), residuals


def _predict(coefs: dict[str, float], s: Result) -> float:
    return sum(c * (1.0 if t == "fixed" else s[f"x_{t}"]) for t, c in coefs.items())


def _x(s: Result) -> dict[str, float]:
    return {item: s[f"x_{item}"] for item in ITEMS}


def _items(s: Result) -> str:
    return " / ".join(f"{s[f'x_{i}']:.2f}".rstrip("0").rstrip(".") for i in ITEMS)


def _shape(key: str) -> str:
    shape, k, _ = key.split(":")
    bare = shape in ("w2", "sr_w2", "pop_empty", "add0") or shape.startswith("sr_")
    return shape if bare else f"{shape} k={k}"


def model_section(sums: dict[str, Result], primaries: int, title: str) -> tuple[list[str], Result]:
    """The fit per call kind and each shape's residuals."""
    lines = [f"## {title}", ""]
    fits: Result = {}
    head = "| call kind | measure | fixed | per link offered | per accepted | per pop | per ack |"
    table = [head, "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    detail = [
        "| shape | calls | FCALLs / call | items per FCALL: offered / accepted / pops / acks "
        "| server CPU us / FCALL | ± | fit | residual | FCALL us | fit | residual |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind, shapes in KINDS.items():
        keys = [k for k in sums if k.split(":")[0] in shapes and k.endswith(f":{primaries}")]
        if len(keys) < 2:
            continue
        items = ITEMS if not primaries else ITEMS[:2]  # the cluster runs adds (and W2)
        fitted = [k for k in keys if not primaries or not k.startswith("w2:")]
        try:
            cpu, _ = fit([(_x(sums[k]), sums[k]["sched"]) for k in fitted], items)
            inside, _ = fit([(_x(sums[k]), sums[k]["fcall"]) for k in fitted], items)
        except ValueError as exc:
            lines.append(f"{kind}: {exc}")
            continue
        cpu_res = [sums[k]["sched"] - _predict(cpu, sums[k]) for k in keys]
        in_res = [sums[k]["fcall"] - _predict(inside, sums[k]) for k in keys]
        fits[kind] = {"cpu": cpu, "fcall": inside}
        for name, coefs in (("server CPU", cpu), ("FCALL (commandstats)", inside)):
            cells = [f"{coefs[t]:.1f}" if t in coefs else "" for t in ("fixed", *ITEMS)]
            table.append(f"| {kind} | {name} | " + " | ".join(cells) + " |")
        for k, r1, r2 in zip(keys, cpu_res, in_res, strict=True):
            s = sums[k]
            detail.append(
                f"| {kind}: {_shape(k)} | {s['calls']} | {s['fcalls']:.2f} | {_items(s)} | "
                f"{s['sched']:.1f} | {100 * s['spread']:.0f}% | {s['sched'] - r1:.1f} | "
                f"{100 * r1 / s['sched']:+.0f}% | {s['fcall']:.1f} | {s['fcall'] - r2:.1f} | "
                f"{100 * r2 / s['fcall']:+.0f}% |"
            )
    lines += [*table, "", "Each shape (medians of the runs; ± is half the min-max range):", ""]
    return lines + detail + [""], fits


def breakdown(sums: dict[str, Result], keys: list[str]) -> list[str]:
    """Per shape: server CPU, the FCALL, the commands inside it, the Lua remainder."""
    lines = [
        "| shape | server CPU us | outside the FCALL | FCALL us | inner commands (count: us) "
        "| inner us | Lua (FCALL - inner) |",
        "| --- | ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for key in keys:
        s = sums.get(key)
        if s is None:
            continue
        inner = sorted(s["inner"].items(), key=lambda kv: -kv[1][1])
        listed = ", ".join(f"{n} {c:.2g}: {u:.1f}" for n, (c, u) in inner if c >= 0.005)
        used = sum(u for _, u in s["inner"].values())
        label = LABELS.get(key.split(":")[0], key)
        size = _shape(key)[len(key.split(":")[0]) :]
        if "fcall" not in s["inner"] and s["fcall"] == 0:  # no function: top-level commands
            lines.append(
                f"| {label}{size} | {s['sched']:.1f} | {s['sched'] - used:.1f} | - | "
                f"{listed or '(PING)'} | {used:.1f} | - |"
            )
            continue
        lines.append(
            f"| {label}{size}"
            f" | {s['sched']:.1f} | {s['sched'] - s['fcall']:.1f} | {s['fcall']:.1f} | "
            f"{listed} | {used:.1f} | {s['fcall'] - used:.1f} |"
        )
    return [*lines, ""]


def ladder(sums: dict[str, Result], fits: Result) -> list[str]:
    """The fixed part of a call, step by step from the floors (server CPU, us per call)."""
    need = ("ping", "nop_w", "pop0", "add0", "pop_empty")
    if any(f"{k}:0:0" not in sums for k in need):
        return []
    ping, nop, pop0, add0, empty = (sums[f"{k}:0:0"] for k in need)
    steps = [
        ("a round trip: read, parse, reply, loopback delivery (PING)", ping["sched"]),
        ("Redis's FCALL of an empty write function, beyond that", nop["sched"] - ping["sched"]),
        (
            "crawlq's frame, begin + conclude with nothing to do (pop0)",
            pop0["sched"] - nop["sched"],
        ),
        (
            "add's own part with 0 links: seq HINCRBY, its arguments (add0)",
            add0["sched"] - pop0["sched"],
        ),
        ("pop's take() finding nothing: TIME, ZPOPMIN (pop_empty)", empty["sched"] - pop0["sched"]),
    ]
    out = ["The fixed part, step by step (server CPU per call, medians):", ""]
    out += [f"- {text}: {value:.1f} us" for text, value in steps]
    for kind, coefs in fits.items():
        out.append(
            f"- fitted fixed part of `{kind}`: {coefs['cpu']['fixed']:.1f} us of server CPU, "
            f"{coefs['fcall']['fixed']:.1f} us inside the FCALL"
        )
    return [*out, ""]


def peer_section(sums: dict[str, Result], fits: Result) -> list[str]:
    """scrapy-redis's operations beside crawlq's, per operation and per W2 step."""
    lines = ["## scrapy-redis beside crawlq (one server)", ""]
    if "sr_new:1:0" not in sums:
        return [*lines, "scrapy-redis was not measured (no Python with scrapy_redis).", ""]
    lines += [
        "| operation | scrapy-redis server CPU us | crawlq server CPU us | crawlq / scrapy-redis |",
        "| --- | ---: | ---: | ---: |",
    ]
    new, dup, pop = (sums[f"sr_{n}:1:0"]["sched"] for n in ("new", "dup", "pop"))
    add = fits.get("add", {}).get("cpu", {})

    def crawlq_add(k: int, accepted: int) -> float:
        return add.get("fixed", 0) + k * add.get("offered", 0) + accepted * add.get("accepted", 0)

    for k in (1, 5, 20, 100):
        ours = sums.get(f"add_new:{k}:0", {}).get("sched", crawlq_add(k, k))
        lines.append(f"| push {k} new | {k * new:.1f} | {ours:.1f} | {ours / (k * new):.2f} |")
    for k in (1, 5, 20, 100):
        ours = sums.get(f"add_dup:{k}:0", {}).get("sched", crawlq_add(k, 0))
        lines.append(f"| push {k} seen | {k * dup:.1f} | {ours:.1f} | {ours / (k * dup):.2f} |")
    if "popack:1:0" in sums:
        ours = sums["popack:1:0"]["sched"]
        lines.append(
            f"| pop 1 (crawlq: pop + ack, one call) | {pop:.1f} | {ours:.1f} | {ours / pop:.2f} |"
        )
    if "sr_w2:5:0" in sums and "w2:5:0" in sums:
        theirs, ours = sums["sr_w2:5:0"]["per_call_us"], sums["w2:5:0"]["per_call_us"]
        model = pop + 2.5 * new + 2.5 * dup
        lines.append(
            f"| W2 step, measured (scrapy-redis model: pop + 2.5 new + 2.5 seen = {model:.1f}) "
            f"| {theirs:.1f} | {ours:.1f} | **{ours / theirs:.2f}** (target <= 0.33) |"
        )
    lines += ["", "scrapy-redis's operations per call:", ""]
    lines += breakdown(sums, [k for k in sums if k.startswith("sr_")])
    return lines


def cluster_section(sums: dict[str, Result]) -> list[str]:
    keys = [k for k in sums if k.endswith(":3")]
    if not keys:
        return []
    lines, _ = model_section(sums, 3, "Cluster of 3 primaries (16 shards): the add fit per FCALL")
    lines += [
        "The cluster fit is over the add shapes (fixed, per link offered, per accepted); the "
        "W2 row is its prediction, so its residual is what the step's pop and ack cost there.",
        "",
        "Per call (one `add_many`, or one W2 step): FCALLs and server CPU on each primary, "
        "busiest first (medians):",
        "",
        "| shape | FCALLs per call, per primary | all primaries us | per primary us | busiest us |",
        "| --- | --- | ---: | --- | ---: |",
    ]
    for k in keys:
        s = sums[k]
        fc = " / ".join(f"{v:.2f}" for v in s["primary_fcalls"])
        pp = " / ".join(f"{v:.1f}" for v in s["primary_us"])
        lines.append(
            f"| {_shape(k)} | {fc} | {s['per_call_us']:.1f} | {pp} | {s['busiest_us']:.1f} |"
        )
    one = sums.get("w2:5:0")
    if one and "w2:5:3" in sums:
        c = sums["w2:5:3"]
        lines += [
            "",
            f"W2 step: {c['fcalls']:.2f} FCALLs per step on the cluster (one server: "
            f"{one['fcalls']:.2f}); {c['per_call_us']:.1f} us of server CPU per step over all "
            f"primaries, {c['busiest_us']:.1f} on the busiest (one server: "
            f"{one['per_call_us']:.1f}).",
        ]
    return [*lines, ""]


def render(document: Result) -> str:
    sums = {k: s for k, runs in document["runs"].items() if (s := summarize(runs)) is not None}
    env = document["environment"]
    loads = [load[0] for load in document["loads"]]
    lines = [
        "# Redis cost model: server CPU per function call",
        "",
        f"`python -m benchmarks.redis_cost {' '.join(document['argv'])}`, started "
        f"{document['started'][:16]} UTC, {document['seconds'] / 60:.0f} minutes. crawlq "
        f"commit `{env['commit']}`{' with uncommitted changes in src/' if env['src_dirty'] else ''}"
        f" (src/crawlq copied at the start); redis-server {env['redis_server']}; Python "
        f"{env['python']}. Machine: {env['cpus']} cores, shared with other work: 1-minute "
        f"load average {min(loads):.2f} to {max(loads):.2f} (median {median(loads):.2f}) during "
        f"the run. Every server and worker pinned to core {env['core']}.",
        "",
        f"Each shape: {document['repeat']} fresh processes on fresh servers (no persistence, "
        "127.0.0.1), a warm-up, then the timed calls; figures are medians. **Server CPU** is the "
        "redis-server main thread's run time (`/proc/PID/schedstat`, ns) per FCALL: reading and "
        "parsing the request, the function, writing the reply (which on loopback includes the "
        "kernel's delivery to the client). **FCALL us** is `cmdstat_fcall` usec from `INFO "
        "commandstats` (the function alone, the commands it runs included). Inner commands are "
        "the commandstats of the commands run inside the functions: their counts are exact, "
        "their usec the difference of two microsecond clock readings per command (right on "
        "average). Commandstats time is wall time: on a shared core a function preempted "
        'midway reads longer than the CPU it used (then "outside the FCALL" goes negative). '
        'In `add`, "per pop" includes the fixed part of take() (reap, wake, TIME, ZPOPMIN, '
        "the lease deadline and record writes), which a `pop` call has in its fixed part.",
        "",
        "Rerun: `python -m benchmarks.redis_cost [--repeat N] [--calls N] [--peer-python "
        "PYTHON_WITH_SCRAPY_REDIS] [--output FILE]` (raw results in "
        "`benchmarks/results/redis-cost-*.json`; `--report RAW.json` rewrites this file).",
        "",
    ]
    model, fits = model_section(sums, 0, "The model, one server (us of server CPU per call)")
    lines += model
    floors = [
        k
        for k in ("ping", "nop_ro", "nop_w", "trivial", "pop0", "add0", "pop_empty")
        if f"{k}:0:0" in sums
    ]
    lines += [
        "## What the fixed part is spent on",
        "",
        'The floors under a call, then the smallest call of each kind. "Outside the FCALL" '
        "is server CPU that commandstats does not see: the round trip (compare PING) and "
        "Redis's work around a function call.",
        "",
    ]
    small = ["add_new:1:0", "add_dup:1:0", "add_ack:0:0", "add_ack:1:0", "add_pop:1:0"]
    small += ["w2:5:0", "pop:1:0"]
    small += ["ack:1:0", "popack:1:0", "add_new:100:0", "pop:100:0", "ack:100:0"]
    lines += breakdown(sums, [f"{k}:0:0" for k in floors] + small)
    lines += ladder(sums, fits)
    lines += ["Where the inner commands come from (the Lua sources):", ""]
    lines += [f"- `{name}`: {text}" for name, text in SOURCES.items()] + [""]
    lines += peer_section(sums, fits)
    lines += cluster_section(sums)
    lines += noise_section(sums)
    errors = [(k, e) for k, s in sums.items() for e in s["errors"]]
    errors += [(k, "every run failed") for k in document["runs"] if k not in sums]
    if errors:
        lines += ["## Errors", ""] + [f"- {k}: {e}" for k, e in errors] + [""]
    return "\n".join(lines)


def noise_section(sums: dict[str, Result]) -> list[str]:
    spreads = sorted((100 * s["spread"], k) for k, s in sums.items())
    stat = sum(s["stat"] * s["fcalls"] * s["calls"] for s in sums.values())
    sched = sum(s["sched"] * s["fcalls"] * s["calls"] for s in sums.values())
    mid = median([p for p, _ in spreads])
    worst = ", ".join(
        f"{_shape(k)}{' (cluster)' if k.endswith(':3') else ''} {p:.0f}%" for p, k in spreads[-4:]
    )
    return [
        "## Noise",
        "",
        f"Spread of the server CPU per call over the runs (half the min-max range): median "
        f"{mid:.0f}%, widest {worst}. The whole process's utime + stime (`/proc/PID/stat`, "
        f"10 ms ticks, all threads) summed over every window is {stat / sched:.2f} x the main "
        "thread's schedstat time, so the other threads and the tick rounding add little.",
        "",
    ]
