"""The long chaos run, by hand: ``python -m tests.chaos --minutes 10 --seed N``.

Runs every backend (redis, redis-cluster, sqlite) under its faults, one after
the other, and writes ``benchmarks/CHAOS.md``: per backend the faults
injected by kind, the figures, the seed, the durations and a machine note.
``--minutes`` is the whole run's fault time, shared equally by the backends
(``--each``: that long for each). Exits 1 if any invariant failed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tests.chaos.checker import TOLERANCE
from tests.chaos.run import OPTIONS, ROOT, SCHEDULER_COROUTINES, Report, machine_note, run

#: URLs per second of faults in each backend's tree (about what 4 workers,
#: or SQLite's one, crawl on 2 shared cores under faults).
RATE = {"redis": 150.0, "redis-cluster": 100.0, "sqlite": 70.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--each", action="store_true", help="--minutes for each backend")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backends", default="redis,redis-cluster,sqlite")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "CHAOS.md")
    parser.add_argument("--keep", type=Path, default=None, help="directory for logs (kept)")
    args = parser.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    seconds = args.minutes * 60 / (1 if args.each else len(backends))
    top = args.keep or Path(tempfile.mkdtemp(prefix="crawlq-chaos-"))
    reports = []
    began = time.time()
    for n, backend in enumerate(backends):
        seed = args.seed * 10 + n
        reports.append(
            run(
                backend,
                seed,
                seconds,
                directory=top / backend,
                size=int(RATE[backend] * seconds),
                say=lambda text: print(text, flush=True),
            )
        )
    args.out.write_text(render(reports, args, time.time() - began, top))
    print(f"wrote {args.out}")
    return 0 if all(r.ok for r in reports) else 1


def render(reports: list[Report], args: argparse.Namespace, total: float, top: Path) -> str:
    lines = [
        "# Chaos run",
        "",
        f"`python -m tests.chaos --minutes {args.minutes:g}"
        + (" --each" if args.each else "")
        + f" --seed {args.seed}` ({total / 60:.1f} minutes in all). Worker processes crawl "
        "a tree of known URLs (`tests/chaos/tree.py`) while faults are injected at random "
        "intervals from the seed; `tests/chaos/checker.py` then judges the workers' logs "
        "and the store's final `stats()`. The short version (a few seconds per backend) "
        "runs in the test suite: `tests/chaos/test_chaos.py`.",
        "",
        f"Options: {', '.join(f'`{k}={v}`' for k, v in OPTIONS.items())} (acks durable on "
        "return); Redis workers in odd slots `retry_timeout=1` (faults reach them as "
        "StoreUnavailable), even slots the default 10 s; Redis with `appendonly yes`, "
        f"`appendfsync always`; the cluster crawl with `replicas=1`. Pacing tolerance "
        f"{TOLERANCE * 1e6:g} µs (Redis lease starts are read from the server to 1 ms, "
        "which the bounds already include).",
        "",
        f"Machine: {machine_note()}.",
        "",
    ]
    for r in reports:
        f, stats = r.findings, r.stats
        c = stats.counters if stats is not None else None
        faults = ", ".join(f"{k} × {n}" for k, n in sorted(r.fault_counts.items()))
        skipped = "; ".join(f"{k} skipped: {why}" for k, why in r.skipped.items())
        refetched = f.deliveries - f.delivered_urls
        workers = f"{r.workers} at a time ({len(r.processes)} processes in all)"
        if r.scheduler_workers:
            workers += (
                f"; {r.scheduler_workers} of them through the asyncio Scheduler, "
                f"{SCHEDULER_COROUTINES} coroutines each"
            )
        elif r.scheduler_processes:
            workers += (
                f"; every other process ({r.scheduler_processes}) through the asyncio "
                f"Scheduler, {SCHEDULER_COROUTINES} coroutines each"
            )
        rows = [
            ("verdict", "**all invariants hold**" if r.ok else "**FAILED**"),
            ("seed", str(r.seed)),
            ("workers", workers),
            ("faults injected", faults + (f" ({skipped})" if skipped else "")),
            ("URLs in the tree", str(r.tree.size)),
            ("accepted (store)", str(c.accepted) if c else "?"),
            ("acked (store)", str(c.acked) if c else "?"),
            (
                "acked (logs)",
                f"{f.acked_urls} + {f.acked_unlogged} whose ack was cut short by a SIGKILL",
            ),
            ("pops logged", str(f.deliveries)),
            (
                "re-fetched",
                f"{refetched} ({', '.join(f'{k} {n}' for k, n in f.refetched.items()) or '-'})",
            ),
            ("lost", str(f.lost)),
            (
                "overlapping leases of a host",
                f"{f.overlaps} (+{f.overlaps_after_expiry} after a lease expiry)",
            ),
            (
                "delay undercuts",
                f"{f.delay_undercuts} of {f.delay_pairs} pairs judged (closest "
                f"{(f.min_gap or 0) * 1000:.1f} ms for 50 ms; {f.delay_unjudged} unjudged)",
            ),
            ("foreign exceptions", str(f.foreign)),
            ("unexpected CrawlqErrors", str(sum(f.unexpected_errors.values()))),
            (
                "transient errors seen by workers",
                ", ".join(f"{k} {n}" for k, n in sorted(f.transient_errors.items())) or "0",
            ),
            ("lease expiries (store)", str(c.expired) if c else "?"),
            ("popped / duplicates (store)", f"{c.popped} / {c.duplicates}" if c else "?"),
            (
                "stats equal to the logs",
                "yes" if not f.stats_mismatches else "; ".join(f.stats_mismatches),
            ),
            (
                "known bugs (tests/chaos/test_found.py)",
                ", ".join(f"{k}: {n}" for k, n in f.known.items()) or "none seen",
            ),
            ("served leases not current at lookup", str(f.lookups_stale)),
            (
                "durations",
                f"setup {r.setup_seconds:.1f} s, faults {r.fault_window:.0f} s, drain "
                f"{r.drain_seconds:.1f} s, total {r.duration:.0f} s",
            ),
        ]
        lines += [f"## {r.backend}", "", "| | |", "| --- | --- |"]
        lines += [f"| {k} | {v} |" for k, v in rows]
        if r.errors or f.violations:
            lines += ["", "Problems: " + "; ".join(r.errors + f.samples[:8])]
        lines.append("")
    lines += [f"Logs: `{top}` (not kept in the repository).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
