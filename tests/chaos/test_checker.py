"""The chaos checker catches what it is meant to: synthetic logs, no servers."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from crawlq import Counters
from tests.chaos.checker import Findings, Process, check
from tests.chaos.tree import Tree

TREE = Tree(size=4, roots=4, fanout=3, hosts=2, run="t")  # four seeds, no links
HOST_A = [n for n in range(4) if TREE.host(n) == TREE.host(0)]


def stats(acked: int = 4, queued: int = 0) -> SimpleNamespace:
    counters = Counters(accepted=4, popped=acked, acked=acked)
    return SimpleNamespace(queued=queued, leased=0, seen=4, counters=counters)


def judge(tmp_path: Path, lines: list[str], **kw: object) -> Findings:
    log = tmp_path / "w0-0.log"
    log.write_text("".join(line + "\n" for line in lines))
    proc = Process(0, log, 0.0, died_at=1000.0, code=0)
    return check(
        [proc],
        TREE,
        backend="sqlite",
        lease_timeout=3.0,
        host_delay=0.05,
        stats=kw.get("stats", stats()),
    )


def crawl(order: list[int], gap: float = 0.1, fetch: float = 0.01) -> list[str]:
    """Seeds added, then each node popped at 100 + i*gap, fetched, acked."""
    lines = ["O 99.0 1", "s 99.0 0 4", "S 99.1 0 4 1111"]
    for i, node in enumerate(order):
        t = 100.0 + i * gap
        url = TREE.url(node)
        lines += [
            f"P {t:.6f} {t + 0.0001:.6f} {url} -",
            f"F {t + fetch:.6f} {url}",
            f"a {t + fetch:.6f} {url}",
            f"K {t + fetch + 0.001:.6f} {url} -",
        ]
    return lines


def test_a_clean_log_passes(tmp_path: Path) -> None:
    found = judge(tmp_path, crawl([0, 1, 2, 3]))
    assert found.ok, found.samples
    assert found.delay_pairs > 0 and found.acked_urls == 4


def test_a_lost_url_an_undercut_an_overlap_and_a_foreign_exception_are_caught(
    tmp_path: Path,
) -> None:
    lost = judge(tmp_path, crawl([0, 1, 2]), stats=stats(acked=3, queued=1))
    assert lost.lost == 1 and lost.stats_mismatches and not lost.ok
    a, b = HOST_A[:2]
    close = judge(tmp_path, crawl([a, b, *[n for n in range(4) if n not in (a, b)]], gap=0.02))
    assert close.delay_undercuts >= 1, close.samples
    together = judge(tmp_path, crawl([a, b, *[n for n in range(4) if n not in (a, b)]], 0.1, 0.5))
    assert together.overlaps >= 1, together.samples
    foreign = judge(tmp_path, [*crawl([0, 1, 2, 3]), "FOREIGN 200.0 pop builtins.KeyError 'x'"])
    assert foreign.foreign == 1 and not foreign.ok


def test_an_acked_request_that_comes_back_is_caught(tmp_path: Path) -> None:
    found = judge(tmp_path, crawl([0, 1, 2, 3, 0]), stats=stats(acked=4))
    assert found.violations["an acked request came back"] == 1, found.samples
