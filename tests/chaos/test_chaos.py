"""The short chaos run: every backend under its faults for a few seconds, every invariant.

``tests.chaos.run.run`` on one redis-server (AOF), a Redis Cluster of 3
primaries with replicas, and a SQLite job on a tmpfs, with a fixed seed
each; about 60-90 s in all. What is checked and tolerated is in
`tests.chaos.checker`; the 10-minute version is ``python -m tests.chaos``
(it writes benchmarks/CHAOS.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.run import Report, run

#: backend -> (seed, seconds of faults, URLs in the tree)
SHORT = {
    "redis": (11, 7.0, 1200),
    "redis-cluster": (12, 9.0, 1200),
    "sqlite": (13, 5.0, 450),
}


def assert_clean(report: Report) -> None:
    f = report.findings
    print(report.summary())
    assert not report.errors, report.errors
    assert report.drained, "the crawl did not drain after the faults"
    never = set(report.kinds) - set(report.fault_counts) - set(report.skipped)
    assert not never, f"fault kinds never injected: {sorted(never)}"
    assert report.fault_counts["worker-sigkill"] >= 1
    assert f.lost == 0, f.samples
    assert f.overlaps == 0, f.samples
    assert f.delay_undercuts == 0, f.samples
    assert f.delay_pairs > f.tree_size // 2, "pacing was hardly judged"
    assert f.foreign == 0, f.samples
    assert not f.unexpected_errors, f.samples
    assert not f.stats_mismatches, f.stats_mismatches
    assert not f.violations, f.samples
    assert f.acked_urls + f.acked_unlogged == f.tree_size


#: Backends whose short run has no Scheduler workers, and why (none now:
#: the cluster's, plain until the Scheduler's two failover defects were
#: fixed and long runs held, has them since; see benchmarks/CHAOS.md).
PLAIN_ONLY: dict[str, str] = {}


@pytest.mark.parametrize("backend", list(SHORT))
def test_a_short_chaos_run_keeps_every_invariant(backend: str, tmp_path: Path) -> None:
    seed, seconds, size = SHORT[backend]
    report = run(
        backend,
        seed,
        seconds,
        directory=tmp_path,
        size=size,
        gap=(0.3, 1.2),
        scheduler=backend not in PLAIN_ONLY,
    )
    assert_clean(report)
    if backend not in PLAIN_ONLY:
        assert report.scheduler_workers or report.scheduler_processes, "no Scheduler worker ran"
