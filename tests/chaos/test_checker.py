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
        backend=str(kw.get("backend", "sqlite")),
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


def interleave(lines: list[str]) -> list[str]:
    """A Scheduler worker's log of `crawl`'s pages, a coroutine each, their lines mixed.

    Every P first, then every F, every a and every K, each kind last page first.
    """
    head, pages = ["O 99.0 1 scheduler 4", *lines[1:3]], lines[3:]
    tagged = [f"{line} w{i // 4}" for i, line in enumerate(pages)]
    steps = [tagged[i::4] for i in range(4)]  # the P, F, a and K lines, page by page
    return [*head, *steps[0], *(line for step in steps[1:] for line in reversed(step))]


def test_a_scheduler_workers_interleaved_log_passes_and_a_plain_one_may_not_interleave(
    tmp_path: Path,
) -> None:
    lines = crawl([0, 1, 2, 3], gap=0.1)
    scheduled = judge(tmp_path, interleave(lines))
    assert scheduled.ok, scheduled.samples
    assert scheduled.acked_urls == 4
    plain = judge(tmp_path, ["O 99.0 1", *interleave(lines)[1:]])
    assert plain.violations["log out of order"] > 0
    for stray in (f"F 200.0 {TREE.url(0)}", f"F 200.0 {TREE.url(0)} w9"):
        found = judge(tmp_path, [*interleave(lines), stray])
        assert found.violations["log out of order"] == 1, found.samples


def test_a_request_a_scheduler_worker_held_at_its_end_is_caught(tmp_path: Path) -> None:
    found = judge(tmp_path, [*interleave(crawl([0, 1, 2, 3])), f"R 200.0 {TREE.url(0)}"])
    assert found.violations["a request held when join() said idle"] == 1, found.samples


def test_a_url_out_twice_in_one_scheduler_worker_is_told_apart_by_coroutine(
    tmp_path: Path,
) -> None:
    url = TREE.url(0)
    lines = interleave(crawl([1, 2, 3]))
    lines += [
        f"P 110.000000 110.000100 {url} - w7",  # its lease expires at 113
        f"P 113.500000 113.500100 {url} - w8",  # leased again, by another coroutine
        f"F 113.600000 {url} w8",
        f"a 113.600000 {url} w8",
        f"K 113.700000 {url} - w8",
        f"F 113.800000 {url} w7",  # the first, late
        f"a 113.800000 {url} w7",
        f"K 113.900000 {url} - w7",
    ]
    found = judge(tmp_path, lines)
    assert found.ok, found.samples
    assert found.refetched["expiry"] == 1 and found.overlaps_after_expiry == 1


def test_a_scheduler_workers_long_get_is_no_excuse_for_a_lease_handed_out_twice(
    tmp_path: Path,
) -> None:
    # On Redis, with the lease's deadline unread: a plain pop call this long
    # is suspect of the known stale-lease bug; a get() that waited for work
    # is not, so the second lease of an acked URL is a violation.
    url = TREE.url(0)
    lines = [
        "O 99.0 1 scheduler 2",
        f"P 100.000000 103.000000 {url} - w0",  # waited 3 s in get()
        f"F 103.100000 {url} w0",
        f"a 103.100000 {url} w0",
        f"K 103.200000 {url} - w0",
        f"P 103.300000 103.300100 {url} - w1",  # again, before the first could expire
    ]
    found = judge(tmp_path, lines, backend="redis")
    assert found.violations["a lease handed out twice"] == 1, found.samples
    assert not found.known
    # The same by a plain worker whose pop call took 3 s: its lease may be as
    # old as the call, so the second counts as leased after its expiry.
    plain_log = [line.rsplit(" ", 1)[0] for line in lines[1:]]
    plain = judge(tmp_path, ["O 99.0 1", *plain_log], backend="redis")
    assert not plain.violations["a lease handed out twice"], plain.samples
    assert plain.refetched["expiry"] == 1


def test_a_killed_workers_uncounted_refusals_loosen_only_the_duplicates_lower_bound(
    tmp_path: Path,
) -> None:
    # The seeds added twice: the second time all four are duplicates, three of
    # them refused by the worker's recently-seen set and not yet counted by
    # the store (sent once a second) when the worker's log ends.
    lines = crawl([0, 1, 2, 3])
    again = ["s 99.15 0 4", "S 99.2 0 4 0000"]
    counted = Counters(accepted=4, popped=4, acked=4, duplicates=1)
    short = SimpleNamespace(queued=0, leased=0, seen=4, counters=counted)
    plain = judge(tmp_path, [*lines[:3], *again, *lines[3:]], backend="redis", stats=short)
    assert plain.stats_mismatches and "of which 0" in plain.stats_mismatches[0]
    told = [*lines[:3], *again, "u 99.2 3", *lines[3:]]
    assert judge(tmp_path, told, backend="redis", stats=short).ok
    fewer = Counters(accepted=4, popped=4, acked=4, duplicates=0)
    below = SimpleNamespace(queued=0, leased=0, seen=4, counters=fewer)
    assert judge(tmp_path, told, backend="redis", stats=below).stats_mismatches
