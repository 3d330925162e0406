"""The orchestrator of a chaos run: start a store, workers and faults; drain; check.

`run` starts the backend (`tests.chaos.faults`), starts its worker processes
(`tests.chaos.worker`, slot 0 also adds the tree's seeds over the first
part of the run; with 4 or more, the upper half crawl through the asyncio
Scheduler), then injects faults at random intervals from
``random.Random(seed)`` for ``seconds``: rounds in which every kind of the
backend plus ``worker-sigkill`` comes once, in a shuffled order, each after
a random gap (at least one whole round, however short ``seconds``). A
supervisor thread restarts every worker that dies (a SIGKILLed one at once;
with the SQLite job one process at a time, so after the old one is reaped).
Once the faults are over the crawl drains: workers exit when nothing is
left; then ``stats()`` is read, everything started is stopped by pid, and
`tests.chaos.checker.check` judges the logs. The `Report` holds it all.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import random
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crawlq
from tests.chaos.checker import Findings, Process, check
from tests.chaos.faults import BACKENDS, Backend, Fault, SqliteBackend
from tests.chaos.tree import Tree

ROOT = Path(__file__).resolve().parents[2]

#: Coroutines of each worker process that crawls through the asyncio
#: Scheduler (`tests.chaos.scheduled`): the upper half of the slots when a
#: backend runs 4 or more, so both the plain loop and the Scheduler's store
#: thread, batches and leases ahead meet every fault (odd slots of each kind
#: with the short retry_timeout); with fewer, every other process of a slot.
SCHEDULER_COROUTINES = 8

OPTIONS: dict[str, Any] = {
    "host_delay": 0.05,
    "host_concurrency": 1,
    "lease_timeout": 3.0,
    "ack_delay": 0,
}


@dataclass
class Report:
    """What a chaos run did and what the checker found."""

    backend: str
    seed: int
    seconds: float
    tree: Tree
    workers: int
    options: dict[str, Any]
    #: Of ``workers``, how many crawl through the asyncio Scheduler (4 or more).
    scheduler_workers: int = 0
    #: Processes started that crawled through the Scheduler (every other one
    #: of a slot, with fewer than 4 workers).
    scheduler_processes: int = 0
    faults: list[Fault] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)
    findings: Findings = field(default_factory=Findings)
    stats: Any = None
    drained: bool = False
    respawns: int = 0
    fault_window: float = 0.0
    drain_seconds: float = 0.0
    duration: float = 0.0
    setup_seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    directory: Path | None = None

    @property
    def fault_counts(self) -> Counter[str]:
        return Counter(f.kind for f in self.faults)

    @property
    def kinds(self) -> tuple[str, ...]:
        """Every fault kind the run was meant to inject (skipped ones excluded)."""
        return ("worker-sigkill", *BACKENDS[self.backend](Path()).kinds)

    @property
    def ok(self) -> bool:
        return self.findings.ok and self.drained and not self.errors

    def summary(self) -> str:
        f = self.findings
        faults = ", ".join(f"{k} {n}" for k, n in sorted(self.fault_counts.items()))
        stats = self.stats
        return (
            f"{self.backend} seed {self.seed}: {self.tree.size} URLs, "
            f"{stats.counters.accepted if stats else '?'} accepted, "
            f"{stats.counters.acked if stats else '?'} acked, {f.lost} lost, "
            f"{f.deliveries - f.delivered_urls} re-fetched {dict(f.refetched)}, "
            f"overlaps {f.overlaps} (+{f.overlaps_after_expiry} after expiry), "
            f"delay undercuts {f.delay_undercuts}/{f.delay_pairs} (closest "
            f"{(f.min_gap or 0) * 1000:.1f} ms, unjudged {f.delay_unjudged}), foreign {f.foreign}, "
            f"unexpected {sum(f.unexpected_errors.values())}, "
            f"transient {sum(f.transient_errors.values())}, "
            f"expired {stats.counters.expired if stats else '?'}, "
            f"lease lookups stale {f.lookups_stale} / failed {f.lookups_failed} "
            f"(slow pops among them {f.slow_pops_unread}), "
            f"known bugs {dict(f.known)}; faults: {faults}; "
            f"stats mismatches {f.stats_mismatches}; drained {self.drained} "
            f"in {self.drain_seconds:.1f} s; {self.duration:.1f} s in all"
            + (f"; errors {self.errors}" if self.errors else "")
            + (f"; samples {f.samples}" if f.samples else "")
        )


class Workers:
    """The worker processes of a run, restarted when they die, each with its own log."""

    def __init__(
        self,
        backend: Backend,
        tree: Tree,
        directory: Path,
        feed: tuple[float, float],
        fetch: tuple[float, float],
        seed: int,
    ) -> None:
        self.backend = backend
        self.tree = tree
        self.logs = directory / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.flag = directory / "fed"
        #: Created once the faults are over: workers do not exit before.
        self.over = directory / "faults-over"
        self.feed = feed
        self.fetch = fetch
        self.seed = seed
        self.with_scheduler = True  # (see run's ``scheduler``)
        self.scheduler_processes = 0  # processes started with --scheduler
        self.options = {**OPTIONS, **backend.options()}
        # Odd slots give up on the store after 1 s of crawlq's own retries, so
        # the faults reach them as StoreUnavailable (the worker's retries, of
        # calls whose outcome is unknown); even slots keep the default 10 s.
        self.quick = {"retry_timeout": 1.0} if backend.name != "sqlite" else {}
        self.processes: list[Process] = []
        self.running: dict[int, tuple[subprocess.Popen[bytes], Process]] = {}
        self.done: set[int] = set()  # slots that exited 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self._supervise, daemon=True)

    def start(self) -> None:
        for slot in range(self.backend.workers):
            self._spawn(slot)
        self._thread.start()

    def _spawn(self, slot: int) -> None:
        n = len(self.processes)
        log = self.logs / f"w{slot}-{n}.log"
        stderr = self.logs / f"w{slot}-{n}.err"
        args = [
            sys.executable,
            "-m",
            "tests.chaos.worker",
            self.backend.url,
            str(log),
            "--tree",
            *self.tree.args(),
            "--options",
            json.dumps({**self.options, **(self.quick if slot % 2 else {})}),
            "--fetch",
            *map(str, self.fetch),
            "--seed",
            str(self.seed * 1000 + n),
            "--until",
            str(self.flag),
            "--until",
            str(self.over),
        ]
        if self.scheduled(slot, sum(1 for p in self.processes if p.slot == slot)):
            args += ["--scheduler", str(SCHEDULER_COROUTINES)]
            self.scheduler_processes += 1
        if slot == 0:
            args += ["--feed", f"{self.feed[0]:.6f}", f"{self.feed[1]:.6f}", str(self.flag)]
        with open(stderr, "wb") as err:
            popen = subprocess.Popen(
                args,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        proc = Process(slot, log, time.time(), stderr=stderr)
        self.processes.append(proc)
        self.running[slot] = (popen, proc)

    def scheduled(self, slot: int, before: int = 0) -> bool:
        """Whether a process in ``slot`` crawls through the asyncio Scheduler.

        With 4 slots or more, those of the upper half do. With fewer (a
        SQLite job has one worker), every other process of a slot does:
        ``before`` is how many the slot had already (its first is plain).
        """
        workers = self.backend.workers
        if not self.with_scheduler:
            return False
        return slot >= workers // 2 if workers >= 4 else before % 2 == 1

    def _supervise(self) -> None:
        while not self.stopping.is_set():
            with self.lock:
                self._reap()
            time.sleep(0.02)

    def _reap(self) -> None:
        for slot, (popen, proc) in list(self.running.items()):
            code = popen.poll()
            if code is None:
                continue
            proc.died_at = time.time()
            proc.code = code
            del self.running[slot]
            if code == 0:
                self.done.add(slot)
            elif not self.stopping.is_set():
                self._spawn(slot)

    def kill_one(self, rng: random.Random) -> str:
        """SIGKILL a running worker (the supervisor restarts it)."""
        with self.lock:
            self._reap()
            if not self.running:
                return "no worker running"
            slot = rng.choice(sorted(self.running))
            popen, proc = self.running[slot]
            proc.killed = True
            os.kill(popen.pid, signal.SIGKILL)
            popen.wait()
            self._reap()
            return f"worker {slot} (pid {popen.pid}) after {time.time() - proc.started:.1f} s"

    def respawn(self) -> None:
        """Start again the slots that exited 0 (the crawl was not over after all)."""
        with self.lock:
            for slot in sorted(self.done):
                self._spawn(slot)
            self.done.clear()

    def all_done(self) -> bool:
        with self.lock:
            self._reap()
            return not self.running

    def stop(self) -> None:
        """Stop the supervisor; SIGKILL and reap every worker still running."""
        self.stopping.set()
        with self.lock:
            for popen, proc in self.running.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(popen.pid, signal.SIGKILL)
                popen.wait()
                proc.died_at = time.time()
                proc.code = popen.returncode
            self.running.clear()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


def _read_stats(url: str, options: dict[str, Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with crawlq.open_frontier(url, **options) as frontier:
                stats = frontier.stats()
                length = len(frontier)
            assert length == stats.queued + stats.leased
            return stats
        except crawlq.StoreUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def run(
    backend: str,
    seed: int,
    seconds: float,
    *,
    directory: Path,
    size: int | None = None,
    rate: float = 150.0,
    workers: int | None = None,
    gap: tuple[float, float] = (0.5, 2.0),
    fetch: tuple[float, float] = (0.002, 0.010),
    drain_timeout: float | None = None,
    say: Any = None,
    scheduler: bool = True,
) -> Report:
    """One chaos run of ``backend`` for ``seconds`` of faults; see the module docstring.

    ``size`` is the tree's URL count (default ``rate`` per second of faults);
    a tenth of them are seeds, fed over the first 90 % of the fault window,
    so the crawl has work all through it. ``scheduler=False`` runs plain
    workers only.
    """
    began = time.time()
    say = say or (lambda text: None)
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    store = BACKENDS[backend](directory)
    if workers is not None:
        store.workers = workers
    if isinstance(store, SqliteBackend) and size:
        store.disk_size = f"{max(64, size // 200)}m"
    size = size or int(rate * seconds)
    tree = Tree(size, max(1, size // 10), run=f"{backend}-{seed}")
    report = Report(backend, seed, seconds, tree, store.workers, {**OPTIONS}, directory=directory)
    crew: Workers | None = None
    try:
        store.start()
        report.skipped = dict(store.skipped)
        report.options.update(store.options())
        report.setup_seconds = time.time() - began
        say(f"{backend}: store up in {report.setup_seconds:.1f} s, {size} URLs, seed {seed}")
        start = time.time()
        crew = Workers(store, tree, directory, (start + 0.5, start + 0.9 * seconds), fetch, seed)
        crew.with_scheduler = scheduler
        crew.start()
        if store.workers >= 4:
            report.scheduler_workers = sum(map(crew.scheduled, range(store.workers)))
        _inject_faults(report, store, crew, rng, start, seconds, gap, say)
        report.fault_window = time.time() - start
        crew.over.write_text("over\n")
        drain_began = time.time()
        limit = drain_timeout if drain_timeout is not None else max(60.0, seconds)
        report.drained = _drain(report, crew, store, limit)
        report.drain_seconds = time.time() - drain_began
        crew.stop()
        report.stats = _read_stats(store.url, report.options)
    except Exception as exc:
        report.errors.append("".join(traceback.format_exception_only(exc)).strip())
        say(traceback.format_exc())
    finally:
        if crew is not None:
            crew.stop()
            report.processes = crew.processes
            report.scheduler_processes = crew.scheduler_processes
        store.stop()
    with contextlib.suppress(OSError):  # for checking the logs again by hand
        (directory / "processes.json").write_text(
            json.dumps(
                [{**vars(p), "log": str(p.log), "stderr": str(p.stderr)} for p in report.processes]
            )
        )
    report.findings = check(
        report.processes,
        tree,
        backend=backend,
        lease_timeout=OPTIONS["lease_timeout"],
        host_delay=OPTIONS["host_delay"],
        stats=report.stats,
        disk_filled=report.fault_counts["disk-full"] + report.fault_counts["server-disk-full"] > 0,
    )
    report.duration = time.time() - began
    say(report.summary())
    return report


def _inject_faults(
    report: Report,
    store: Backend,
    crew: Workers,
    rng: random.Random,
    start: float,
    seconds: float,
    gap: tuple[float, float],
    say: Any,
) -> None:
    kinds = ["worker-sigkill", *store.kinds]
    while True:
        order = list(kinds)
        rng.shuffle(order)
        for kind in order:
            time.sleep(rng.uniform(*gap))
            fault = Fault(kind, time.time())
            if kind == "worker-sigkill":
                fault.detail = crew.kill_one(rng)
            else:
                fault.detail = store.inject(kind, rng)
            fault.end = time.time()
            report.faults.append(fault)
            say(f"  {fault.start - start:6.1f} s {kind}: {fault.detail}")
        if time.time() - start >= seconds:
            return


def _drain(report: Report, crew: Workers, store: Backend, limit: float) -> bool:
    """Wait until every worker exited 0 with nothing left; False after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if crew.all_done():
            stats = _read_stats(store.url, report.options)
            if stats.queued == 0 and stats.leased == 0:
                return True
            report.respawns += 1  # a worker saw an empty frontier too soon
            crew.respawn()
        time.sleep(0.1)
    return False


def machine_note() -> str:
    cores = os.cpu_count()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
    return (
        f"{platform.system()} {platform.release()}, {cores} cores (shared), load average "
        f"{load} at the end, Python {platform.python_version()}, "
        f"{version.stdout.split()[2]}"
    )
