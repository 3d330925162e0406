"""The table of one run: Ir per call and per item per variant, differences against A.

`report` turns the results of every (shape, variant, replica) into the
printed lines (a row per shape, notes for shapes whose commands differ
between variants) and the rows written by ``--out``.
"""

from __future__ import annotations

from typing import Any

from benchmarks.ir_ab.shapes import ITEM, Shape

Result = dict[str, Any]


def per_call(shape: Shape, result: Result) -> dict[str, float | None]:
    """Ir, Ir per item, GC Ir, FCALLs and other commands: per call (a1, w2: per step)."""
    calls = result.get("design", {}).get("steps") or shape["calls"]
    commands = result["commands"]
    ir = result["ir"] / calls
    k = 1 if shape["shape"] in ("w2", "a1", "a1c") else max(shape["k"], 1)
    return {
        "ir": ir,
        "item": ir / k if shape["shape"] in ITEM else None,
        "gc": result["gc"] / calls,
        "fcalls": commands.get("fcall", 0) / calls,
        "inner": sum(n for name, n in commands.items() if name != "fcall") / calls,
    }


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _diff(a: dict[str, int], b: dict[str, int]) -> str:
    out = [
        f"{k} {b.get(k, 0) - a.get(k, 0):+d}"
        for k in sorted(set(a) | set(b))
        if a.get(k, 0) != b.get(k, 0)
    ]
    return "vs A: " + ", ".join(out)


def _head(names: list[str], replicas: int) -> str:
    head = f"{'shape':13s} {'calls':>5s} {'item':>7s} {'FCALL/c':>7s} {'cmds/c':>6s}"
    for name in names:
        head += f" | {name + ' Ir/call':>12s} {'Ir/item':>9s} {'GC':>4s}"
        if replicas > 1:
            head += f" {'+-':>5s}"
    for name in names[1:]:
        head += f" | {name + ' vs A':>8s} {'-GC':>7s}"
        if replicas > 1:
            head += f" {'range':>15s} {'-GC range':>15s}"
    return head


def report(
    shapes: list[Shape],
    names: list[str],
    results: dict[tuple[int, int, int], Result],
    replicas: int,
) -> tuple[list[str], list[Result]]:
    """The table: per variant Ir per call and per item, the share of Lua's GC in it; per
    variant after the first its difference, all Ir and without the GC's. With replicas
    (warm-ups of different lengths: another heap history), means, the spread (max - min)
    / 2 of Ir/call, and the range of the paired differences."""
    head = _head(names, replicas)
    lines, rows, notes = [head, "-" * len(head)], [], []
    named = any(result.get("gc_named") for result in results.values())
    for s, shape in enumerate(shapes):
        runs = [
            [per_call(shape, results[(s, v, r)]) for r in range(replicas)]
            for v in range(len(names))
        ]
        means = [
            {key: (None if f[0][key] is None else _mean([x[key] for x in f])) for key in f[0]}
            for f in runs
        ]
        first = means[0]
        row = (
            f"{shape['label']:13s} {shape['calls']:5d} {ITEM.get(shape['shape'], ''):>7s} "
            f"{first['fcalls']:7.3f} {first['inner']:6.1f}"
        )
        for f, each in zip(means, runs, strict=True):
            item = "" if f["item"] is None else f"{f['item']:9,.0f}"
            row += f" | {f['ir']:12,.0f} {item:>9s} {100 * f['gc'] / f['ir']:3.0f}%"
            if replicas > 1:
                spread = (max(x["ir"] for x in each) - min(x["ir"] for x in each)) / 2
                row += f" {100 * spread / f['ir']:4.2f}%"
        for v in range(1, len(names)):
            whole = [100 * (runs[v][r]["ir"] / runs[0][r]["ir"] - 1) for r in range(replicas)]
            bare = [
                100
                * (
                    (runs[v][r]["ir"] - runs[v][r]["gc"]) / (runs[0][r]["ir"] - runs[0][r]["gc"])
                    - 1
                )
                for r in range(replicas)
            ]
            row += f" | {_mean(whole):+7.2f}% {_mean(bare):+6.2f}%"
            if replicas > 1:
                row += f" {f'[{min(whole):+.2f},{max(whole):+.2f}]':>15s}"
                row += f" {f'[{min(bare):+.2f},{max(bare):+.2f}]':>15s}"
        commands = [
            [results[(s, v, r)]["commands"] for r in range(replicas)] for v in range(len(names))
        ]
        if any(c != commands[0] for c in commands[1:]):
            row += " *"
            notes.append(
                f"* {shape['label']}: the commands differ: "
                + "; ".join(
                    f"{names[v]} FCALL {means[v]['fcalls']:.3f}/c, others {means[v]['inner']:.2f}/c"
                    + (f" ({_diff(commands[0][0], commands[v][0])})" if v else "")
                    for v in range(len(names))
                )
            )
        lines.append(row)
        rows.append(
            {
                "shape": shape,
                "figures": means,
                "results": [
                    [results[(s, v, r)] for r in range(replicas)] for v in range(len(names))
                ],
            }
        )
    lines.append(
        "GC: the share of Lua's collector (luaC_step; Redis's lua_gc every 50 FCALLs) "
        "and string-table growth in Ir/call; -GC: the difference without them."
    )
    if not named:
        lines.append(
            "GC here is Redis's lua_gc calls only: this redis-server has no symbols inside "
            "Lua; a build with them (REDIS_BIN=/path/to/redis/src/redis-server) adds Lua's "
            "own collector steps."
        )
    return lines + notes, rows
