"""The invariant checker of a chaos run: reads the workers' logs, judges them.

Input: every worker process's log (format in `tests.chaos.worker`), when
each process died and how, the run's tree and options, and the store's
``stats()`` read once the faults were over and the crawl had drained.

Times: the log's are ``time.time()``; a Redis lease's start is its deadline
(as the server holds it, whole milliseconds rounded down) minus
``lease_timeout``, in the server's ``TIME``: the same clock on this machine.
Each delivery (``P`` line) gets bounds on when its lease began:

* Redis, deadline read: ``[deadline - L, deadline - L + 1 ms]`` (the
  rounding). This is earlier than the pop that served it when the request
  was prefetched.
* Redis, deadline not read (the lookup failed during a fault): ``[t back -
  L/2 - 0.5 s, t back]`` (a prefetched request older than ``L/2`` is given
  back, never served); such a lease is "unjudged" for pacing. When the pop
  call itself took over ``L/2``, from ``t call - L/2 - 0.5 s``: see below.

Known bugs (reproduced in ``tests/chaos/test_found.py``, counted in
``Findings.known``, not failed): a pop whose reply came back late (a retried
call through a failover) may serve a lease that already ended, so the same
URL is then leased by another worker at once. A violation of the rules below
is put down to it when one of its deliveries is such a pop: its lease read
just after the pop was not current ("x"), or could not be read and the pop
call took over ``L/2``. (Fixed since: a pop no longer serves a batch whose
call began more than ``L/2`` ago; the reproduction is a regression test now,
and what the checker still counts here is a lease it could not read in time,
not a proven overlap. Opening a cluster crawl mid-failover, the other bug
found, now waits out the failover and raises StoreUnavailable, which the
workers retry; a StoreError at open is a violation.)
* SQLite: ``[t call, t back]``: the store reads the same wall clock inside
  the pop.

What is checked (a *violation* fails the run; a *count* is reported):

lost
    Every URL of the tree was acked (a ``K`` line) at least once, or had an
    ack under way when its worker was SIGKILLed (no ``K``: it may have been
    applied; then nothing brings it back, and the stats check below, nothing
    queued and ``acked`` equal to the tree, says it was). ``lost`` counts the
    others; ``lost_accepted`` those among them whose add was logged as
    accepted. URLs outside the tree are violations.
duplicates of a fetch
    For two deliveries in a row of one URL, the first must have ended
    without an ack that counted: its process died before the ack returned
    (``killed``; on Redis the second lease must still begin after the
    first's deadline, on SQLite after the process died, since reopening the
    job ends its leases), or its lease expired (``expiry``: the second lease
    began after the first's deadline). An ack that returned before the
    lease's deadline counted (``ack_delay=0``: durable on return); a
    delivery after it is a violation (an acked request came back), and so
    is a second lease that began before the first's deadline.
leases of a host (``host_concurrency=1``)
    A delivery occupies its host from its lease's start to the end of its
    fetch (``F``), or to its process's death. A lease of the host that
    began (upper bound) before such an interval ended (its lower bound
    after the interval) is an overlap: counted as ``overlaps_after_expiry``
    when it began after the earlier lease's deadline, else a violation.
pacing (``host_delay``)
    Consecutive lease starts of a host at least ``host_delay`` apart,
    judged generously: a violation only when even the latest start of the
    second and the earliest of the first are closer than the delay minus
    ``TOLERANCE``. The tolerance is 10 µs: the bounds already include the
    millisecond rounding of Redis deadlines, and both sides read one clock;
    what remains is the log's 1 µs print precision and float error.
stats equal to the logs
    Nothing queued or leased; ``seen`` and ``accepted`` equal to the tree;
    ``acked`` equal to the tree (each URL's one ack that counted); nothing
    released (unless a worker ran the Scheduler, which releases a batch's
    requests leased too long ago to hand out). On Redis also ``popped ==
    acked + released + expired``, ``popped`` at least the deliveries logged,
    ``expired`` at least the re-deliveries, and ``duplicates`` between the
    duplicates logged (less those a worker's frontier refused and had not
    counted yet when its log ends, ``u``: a killed worker loses them) and
    that plus every link of an add whose outcome is unknown (raised, or its
    process killed). A SQLite job saves its other counters once a second (a
    kill loses the last second): only ``duplicates`` at most the upper bound
    is checked there.
errors
    ``FOREIGN`` lines (an exception that is not a CrawlqError): violations.
    Any CrawlqError other than StoreUnavailable (and StoreFull when the disk
    was filled) is an unexpected error: a violation. ``L`` (LeaseError),
    ``R`` (a Scheduler worker held a request after ``join()`` said nothing
    was in flight), exits that are neither 0 nor our SIGKILL, give-ups:
    violations.

A Scheduler worker's log (its ``O`` line says ``scheduler``) interleaves
its coroutines' deliveries: each ``P``, ``F``, ``a`` and ``K`` line ends with
its coroutine's tag, and belongs to that coroutine's last ``P``. Its ``t
call`` is when ``get()`` began waiting for work, so a long wait there is not
a slow pop (never suspect of the known bug).
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.chaos.tree import Tree

TOLERANCE = 1e-5
_SAMPLES = 8

#: Bugs the chaos run found, reproduced in tests/chaos/test_found.py: what
#: the checker puts down to them is counted in `Findings.known`, not failed.
KNOWN_STALE = "stale lease served (test_a_pop_replayed_after_its_lease_ended...)"


@dataclass
class Process:
    """One worker process as the orchestrator saw it."""

    slot: int
    log: Path
    started: float
    died_at: float | None = None
    code: int | None = None
    killed: bool = False  # SIGKILLed by a fault
    stderr: Path | None = None


@dataclass
class Delivery:
    url: str
    proc: int  # index into the processes
    called: float
    back: float
    start_lo: float
    start_hi: float
    deadline_lo: float
    judged: bool  # start known to 1 ms
    stale: bool = False  # the lookup found the lease not current just after the pop
    fetched: float | None = None
    attempts: list[float] = field(default_factory=list)
    acked: float | None = None
    bits: str = ""

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""


@dataclass
class Findings:
    """What the checker found (see the module docstring)."""

    tree_size: int = 0
    deliveries: int = 0
    delivered_urls: int = 0
    acked_urls: int = 0
    #: URLs whose only ack was cut short by a SIGKILL (no ``K``): done, as the
    #: store's empty queue and its ``acked == tree`` say.
    acked_unlogged: int = 0
    refetched: Counter[str] = field(default_factory=Counter)
    lost: int = 0
    lost_accepted: int = 0
    overlaps: int = 0
    overlaps_after_expiry: int = 0
    delay_pairs: int = 0
    delay_unjudged: int = 0
    delay_undercuts: int = 0
    min_gap: float | None = None
    foreign: int = 0
    lease_errors: int = 0
    unexpected_errors: Counter[str] = field(default_factory=Counter)
    transient_errors: Counter[str] = field(default_factory=Counter)
    give_ups: int = 0
    bad_exits: int = 0
    stats_mismatches: list[str] = field(default_factory=list)
    violations: Counter[str] = field(default_factory=Counter)
    samples: list[str] = field(default_factory=list)
    logged_duplicates: int = 0
    #: Worker processes that crawled through the asyncio Scheduler.
    scheduler_workers: int = 0
    #: Duplicates the workers' frontiers refused and their stores had not
    #: counted when the worker's log ends (``u``; a kill loses them).
    uncounted_duplicates: int = 0
    unknown_links: int = 0
    lookups_failed: int = 0
    lookups_stale: int = 0
    #: Pops whose lease could not be read and whose call took over half the
    #: lease: maybe a stale lease served (the known bug); judged as such.
    slow_pops_unread: int = 0
    #: Violations put down to a bug already reproduced in tests/chaos/test_found.py.
    known: Counter[str] = field(default_factory=Counter)

    def violate(self, kind: str, sample: str) -> None:
        self.violations[kind] += 1
        if sum(1 for s in self.samples if s.startswith(kind)) < _SAMPLES:
            self.samples.append(f"{kind}: {sample}")

    @property
    def ok(self) -> bool:
        return not self.violations and not self.stats_mismatches and self.lost == 0


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def check(
    processes: list[Process],
    tree: Tree,
    *,
    backend: str,
    lease_timeout: float,
    host_delay: float,
    stats: Any,
    disk_filled: bool = False,
) -> Findings:
    """Judge a run's logs and final ``stats()`` (None if it could not be read)."""
    found = Findings(tree_size=tree.size)
    redis = backend != "sqlite"
    expected_errors = {"StoreUnavailable"} | ({"StoreFull"} if disk_filled else set())
    deliveries: list[Delivery] = []
    accepted_logged: set[str] = set()
    for index, proc in enumerate(processes):
        current: Delivery | None = None
        # A Scheduler worker's coroutines interleave their lines, each line
        # tagged with its coroutine: each has its own last delivery.
        interleaved = False
        current_of: dict[str, Delivery | None] = {}
        seed_attempt: tuple[int, int] | None = None
        unsent = 0
        text = proc.log.read_text(errors="replace") if proc.log.exists() else ""
        lines = text.splitlines()
        if text and not text.endswith("\n"):
            lines = lines[:-1]  # cut short by a SIGKILL
        for line in lines:
            fields = line.split(" ")
            tag = fields[0]
            worker = ""
            if interleaved and tag in ("P", "F", "a", "K"):
                worker = fields.pop() if fields[-1][:1] == "w" else ""
                current = current_of.get(worker)  # (an untagged line matches none)
                line = " ".join(fields)
            if tag == "O":
                interleaved = fields[3:4] == ["scheduler"]
                found.scheduler_workers += interleaved
            elif tag == "P" and len(fields) == 5:
                called, back = float(fields[1]), float(fields[2])
                deadline = _float(fields[4])
                if redis and deadline is not None and deadline - lease_timeout <= back + 0.002:
                    lo = deadline - lease_timeout
                    d = Delivery(fields[3], index, called, back, lo, lo + 0.001, deadline, True)
                elif redis:
                    if deadline is not None:
                        found.violate("lease began after its pop returned", line)
                    found.lookups_stale += fields[4] == "x"
                    found.lookups_failed += fields[4] == "-"
                    # A long pop call may serve a lease as old as the call
                    # (the known bug): bounds from its start, and suspect.
                    # Not a Scheduler's get(), which waits for work: its
                    # store thread leased the request, and gives back what
                    # it held for half a lease, as the plain rule says.
                    slow = back - called > lease_timeout / 2 and not interleaved
                    lo = (called if slow else back) - lease_timeout / 2 - 0.5
                    d = Delivery(
                        fields[3], index, called, back, lo, back, lo + lease_timeout, False
                    )
                    d.stale = fields[4] == "x" or slow
                    found.slow_pops_unread += slow
                else:
                    d = Delivery(
                        fields[3], index, called, back, called, back, called + lease_timeout, True
                    )
                deliveries.append(d)
                current = d
                if interleaved:
                    current_of[worker] = d
                if not tree.owns(d.url):
                    found.violate("a URL outside the tree", line)
            elif tag in "FaK" and len(tag) == 1 and len(fields) >= 3:
                if current is None or current.url != fields[2]:
                    found.violate("log out of order", f"{proc.log.name}: {line}")
                    continue
                if tag == "F":
                    current.fetched = float(fields[1])
                elif tag == "a":
                    current.attempts.append(float(fields[1]))
                else:
                    current.acked = float(fields[1])
                    current.bits = fields[3] if len(fields) > 3 else ""
                    node = tree.node(current.url)
                    if current.bits != "-":
                        kids = list(tree.children(node))
                        if len(current.bits) != len(kids):
                            found.violate("links logged wrongly", line)
                        for child, bit in zip(kids, current.bits, strict=False):
                            if bit == "1":
                                accepted_logged.add(tree.url(child))
                            else:
                                found.logged_duplicates += 1
            elif tag == "u":
                unsent = int(fields[2])
            elif tag == "s":
                if seed_attempt is not None:
                    found.unknown_links += seed_attempt[1] - seed_attempt[0]
                seed_attempt = (int(fields[2]), int(fields[3]))
            elif tag == "S":
                seed_attempt = None
                first = int(fields[2])
                for offset, bit in enumerate(fields[4]):
                    if bit == "1":
                        accepted_logged.add(tree.url(first + offset))
                    else:
                        found.logged_duplicates += 1
            elif tag == "E":
                kind = f"{fields[2]}:{fields[3]}"
                if fields[3] in expected_errors:
                    found.transient_errors[kind] += 1
                else:
                    found.unexpected_errors[kind] += 1
                    found.violate("unexpected CrawlqError", line)
            elif tag == "FOREIGN":
                found.foreign += 1
                found.violate("FOREIGN exception", line)
            elif tag == "R":
                found.violate("a request held when join() said idle", line)
            elif tag == "L":
                found.lease_errors += 1
                found.violate("LeaseError on an ack", line)
            elif tag == "G":
                found.give_ups += 1
                found.violate("a worker gave up retrying", line)
        if seed_attempt is not None:
            found.unknown_links += seed_attempt[1] - seed_attempt[0]
        found.uncounted_duplicates += unsent
        if proc.code not in (0, None) and not proc.killed:
            found.bad_exits += 1
            err = proc.stderr.read_text(errors="replace")[-300:] if proc.stderr else ""
            found.violate(
                "a worker exited badly", f"{proc.log.name}: exit {proc.code} {err.strip()!r}"
            )

    found.deliveries = len(deliveries)
    # Links of ack attempts whose outcome is unknown: every attempt but the one
    # that returned (raised, or cut short by a SIGKILL).
    for d in deliveries:
        tries = len(d.attempts) - (1 if d.acked is not None else 0)
        if tries > 0 and tree.owns(d.url):
            found.unknown_links += len(tree.children(tree.node(d.url))) * tries
    by_url: dict[str, list[Delivery]] = defaultdict(list)
    by_host: dict[str, list[Delivery]] = defaultdict(list)
    for d in deliveries:
        by_url[d.url].append(d)
        by_host[d.host].append(d)
    found.delivered_urls = len(by_url)
    acked = {d.url for d in deliveries if d.acked is not None}
    found.acked_urls = len(acked & tree.urls)
    tried = {d.url for d in deliveries if d.attempts} - acked
    found.acked_unlogged = len(tried & tree.urls)
    missing = tree.urls - acked - tried
    found.lost = len(missing)
    found.lost_accepted = len(missing & accepted_logged)
    for url in sorted(missing)[:_SAMPLES]:
        found.samples.append(f"lost: {url} (accepted in the logs: {url in accepted_logged})")

    def death(d: Delivery) -> float | None:
        return processes[d.proc].died_at

    # Duplicates of a fetch: deliveries of a URL in the order they were served.
    for url, ds in by_url.items():
        ds.sort(key=lambda d: d.back)
        for first, second in itertools.pairwise(ds):
            died = death(first)
            effective = first.acked is not None and first.acked < first.deadline_lo - 0.001
            restarted = (
                not redis
                and first.acked is None
                and died is not None
                and processes[second.proc].started >= died - 0.05
            )
            early = second.start_hi < first.deadline_lo - TOLERANCE and not restarted
            if early and not (effective and second.start_lo > (first.acked or 0.0)):
                kind = "a lease handed out twice"
                what = (
                    f"{url}: leased from {first.start_lo:.3f} (deadline >= "
                    f"{first.deadline_lo:.3f}, served {first.back:.3f}), again from "
                    f"{second.start_lo:.3f} (served {second.back:.3f})"
                )
            elif effective:
                kind = "an acked request came back"
                what = (
                    f"{url}: acked at {first.acked:.6f} (deadline >= {first.deadline_lo:.3f}), "
                    f"served again at {second.back:.6f}"
                )
            else:
                found.refetched["killed" if first.acked is None and died else "expiry"] += 1
                continue
            if first.stale or second.stale:
                found.known[KNOWN_STALE] += 1
            else:
                found.violate(kind, what)

    # Leases of a host, and pacing.
    gaps: list[float] = []
    for host, ds in by_host.items():
        ds.sort(key=lambda d: d.start_lo)
        ends = [d.fetched if d.fetched is not None else death(d) for d in ds]
        for i, d in enumerate(ds):
            end = ends[i]
            if end is None:
                continue
            for k in range(i + 1, len(ds)):
                later, later_end = ds[k], ends[k]
                if later.start_lo > end:
                    break  # and so do all after it
                if later_end is None:
                    continue
                # Certainly together: the later of the latest starts before the
                # earlier end.
                if max(d.start_hi, later.start_hi) >= min(end, later_end) - TOLERANCE:
                    continue
                second, first = (later, d) if later.start_hi >= d.start_hi else (d, later)
                if second.start_lo >= first.deadline_lo - TOLERANCE:
                    found.overlaps_after_expiry += 1
                elif first.stale or second.stale:
                    found.known[KNOWN_STALE] += 1
                else:
                    found.overlaps += 1
                    found.violate(
                        "two leases of a host at once",
                        f"{host}: {first.url} [{first.start_lo:.6f}, "
                        f"{ends[ds.index(first)]:.6f}] and {second.url} from "
                        f"{second.start_lo:.6f}",
                    )
        for a, b in itertools.pairwise(ds):
            if not (a.judged and b.judged):
                found.delay_unjudged += 1
                continue
            found.delay_pairs += 1
            widest = b.start_hi - a.start_lo
            gaps.append(widest)
            if widest < host_delay - TOLERANCE:
                found.delay_undercuts += 1
                found.violate(
                    "pops of a host closer than its delay",
                    f"{host}: {a.url} at {a.start_lo:.6f}, {b.url} at {b.start_hi:.6f}",
                )
    found.min_gap = min(gaps) if gaps else None

    _check_stats(found, stats, tree, redis)
    return found


def _check_stats(found: Findings, stats: Any, tree: Tree, redis: bool) -> None:
    bad = found.stats_mismatches
    if stats is None:
        bad.append("stats() could not be read after the run")
        return
    counters = stats.counters
    expect = {
        "queued": (stats.queued, 0),
        "leased": (stats.leased, 0),
        "seen": (stats.seen, tree.size),
        "counters.accepted": (counters.accepted, tree.size),
        "counters.acked": (counters.acked, tree.size),
    }
    if not found.scheduler_workers:
        # A Scheduler releases what it popped but cannot hand out (a batch
        # that came back after half a lease: see Scheduler._settle), unseen
        # by the log; plain workers never release.
        expect["counters.released"] = (counters.released, 0)
    for name, (got, want) in expect.items():
        if got != want:
            bad.append(f"{name} is {got}, the logs say {want}")
    upper = found.logged_duplicates + found.unknown_links
    if counters.duplicates > upper:
        bad.append(f"counters.duplicates is {counters.duplicates}, the logs allow at most {upper}")
    if not redis:
        return
    lower = found.logged_duplicates - found.uncounted_duplicates
    if counters.duplicates < lower:
        bad.append(
            f"counters.duplicates is {counters.duplicates}, the logs show {found.logged_duplicates}"
            f" of which {found.uncounted_duplicates} were not counted yet when their worker died"
        )
    if counters.popped != counters.acked + counters.released + counters.expired:
        bad.append(f"popped != acked + released + expired: {counters}")
    if counters.popped < found.deliveries:
        bad.append(f"counters.popped is {counters.popped}, the logs show {found.deliveries} pops")
    refetches = found.deliveries - found.delivered_urls
    if counters.expired < refetches:
        bad.append(f"counters.expired is {counters.expired}, the logs show {refetches} re-fetches")
