"""Crash safety of the SQLite store, tested by killing real processes.

A child process (``_child.py loop``) adds, pops, acks and releases at random
and logs every call after it returns. The parent SIGKILLs it at random moments,
reopens the job, checks it against the log (popping everything the reopened
job holds), and lets a new child go on from the reopened job. The log tells
what was accepted ("A") and acked ("K"); the one add or ack that was in flight
at the kill ("I" / "k" lines without their results) may have committed or
not, but only as a whole.

Set CRAWLQ_CRASH_SEED to replay a run; the seed is in every failure message.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import time
from pathlib import Path

import pytest

import crawlq

from ._helpers import close_pipes, job_url, read_line, sigkill, spawn

_URL = re.compile(r"http://(h\d+)\.test/(\d+)/(\d+)")


class Log:
    """The child's log, replayed into what must be stored."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        #: URLs whose add committed: logged "A", or resolved after a kill.
        self.accepted: set[str] = set()
        #: URLs whose ack committed.
        self.acked: set[str] = set()
        #: URLs handed out by a pop at least once.
        self.popped: set[str] = set()
        #: Leased by the running child (cleared when a new child starts).
        self.leased: set[str] = set()
        #: The add in flight: its URLs, and those not yet logged "A".
        self.adding: list[str] | None = None
        self.awaiting_add: set[str] = set()
        #: The ack in flight: URLs not yet logged "K".
        self.awaiting_ack: set[str] = set()
        #: Accepted since the last check.
        self.fresh: list[str] = []
        self.runs = 0
        #: When each ack returned, and when the latest completed call (and
        #: add) of the running child began: with ``ack_delay``, what an
        #: acked request coming back after a kill is checked against.
        self.acked_at: dict[str, float] = {}
        self.last_call = self.last_add = 0.0

    def append(self, lines: list[str]) -> None:
        """Write lines as the parent (the child is dead), then replay them."""
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            for line in lines:
                os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
        self.replay()

    def replay(self) -> None:
        """Replay lines written since the last call."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()[self.offset :]
        end = data.rfind(b"\n") + 1
        if self.offset + end < self.path.stat().st_size:
            # The kill cut a line short: its call had not happened yet (an
            # intent line) or is resolved below like any call in flight.
            os.truncate(self.path, self.offset + end)
        self.offset += end
        for line in data[:end].decode().splitlines():
            self._line(line)

    def _line(self, line: str) -> None:
        tag, _, rest = line.partition(" ")
        words = [word for word in rest.split() if not word.startswith("@")]
        times = [float(word[1:]) for word in rest.split() if word.startswith("@")]
        if times:
            start, end = times
            self.last_call = max(self.last_call, start)
            if tag == "A":
                self.last_add = max(self.last_add, start)
            elif tag == "K":
                self.acked_at[words[0]] = end
        if tag == "O":
            assert self.adding is None and not self.awaiting_ack, "unresolved call before a run"
            self.leased.clear()
            self.last_call = self.last_add = 0.0
            self.runs += 1
        elif tag == "I":
            assert self.adding is None, f"a new add began before the last returned: {line}"
            self.adding = words
            self.awaiting_add = set(words)
        elif tag == "A":
            (url,) = words
            assert url in self.awaiting_add, f"accepted a URL that was not being added: {url}"
            self.awaiting_add.discard(url)
            self.accepted.add(url)
            self.fresh.append(url)
            if not self.awaiting_add:
                self.adding = None
        elif tag == "D":
            raise AssertionError(f"a new URL was called a duplicate: {words[0]}")
        elif tag == "N":  # parent: the add in flight did not commit
            self.adding = None
            self.awaiting_add = set()
        elif tag == "P":
            (url,) = words
            assert url in self.accepted, f"pop returned a request never accepted: {url}"
            assert url not in self.acked, f"pop returned an acked request: {url}"
            assert url not in self.leased, f"pop handed out a leased request again: {url}"
            self.popped.add(url)
            self.leased.add(url)
        elif tag == "k":
            assert not self.awaiting_ack, f"a new ack began before the last returned: {line}"
            assert set(words) <= self.leased, f"acking requests not leased: {line}"
            self.awaiting_ack = set(words)
        elif tag == "K":
            (url,) = words
            assert url in self.awaiting_ack, f"acked a URL that was not being acked: {url}"
            self.awaiting_ack.discard(url)
            self.acked.add(url)
            self.leased.discard(url)
        elif tag == "n":  # parent: the ack in flight did not commit
            self.awaiting_ack = set()
        elif tag == "R":
            (url,) = words
            self.leased.discard(url)
        else:
            raise AssertionError(f"unknown log line {line!r}")


def _order_key(url: str) -> tuple[str, int, int]:
    match = _URL.fullmatch(url)
    assert match, url
    return match[1], int(match[2]), int(match[3])


def check_after_kill(
    db: Path, log: Log, rng: random.Random, options: dict[str, object], ack_delay: float = 0
) -> tuple[int, int]:
    """Check the killed job against the log; return how many popped (and acked) came back.

    What is stored is what the reopened job hands out: the parent pops
    everything (holding every lease, so the order check sees priorities
    across hosts), checks it, and releases it all before the next child runs.
    With ``ack_delay``, an acked request may come back only if its ack was
    still waiting: no add began after it returned, and no call began
    ``ack_delay`` seconds or more after it (either would have written it).
    """
    log.replay()
    frontier = crawlq.open_frontier(job_url(db), lease_timeout=3600, **options)
    try:
        stats = frontier.stats()
        drained = []
        while (request := frontier.pop()) is not None:
            drained.append(request)
        urls = [request.url for request in drained]
        assert len(urls) == len(set(urls)), "a request was handed out twice (or stored twice)"
        present = set(urls)

        # The add in flight at the kill committed whole or not at all.
        if log.adding is not None:
            batch = log.adding
            inside = [url in present for url in batch]
            if len(log.awaiting_add) < len(batch):
                assert all(inside), "add_many returned, but part of its batch is missing"
            else:
                assert all(inside) or not any(inside), f"half an add_many committed: {inside}"
            if all(inside):
                log.append([f"A {url}" for url in batch if url in log.awaiting_add])
            else:
                log.append(["N"])
        # So did the ack in flight.
        if log.awaiting_ack:
            pending = sorted(log.awaiting_ack)
            gone = [url not in present for url in pending]
            assert all(gone) or not any(gone), f"half an ack_many committed: {gone}"
            log.append([f"K {url}" for url in pending] if all(gone) else ["n"])

        # (a) every accepted request is acked or still there.
        lost = (log.accepted - log.acked) - present
        assert not lost, f"{len(lost)} accepted requests lost, e.g. {sorted(lost)[:3]}"
        # (b) an acked request never comes back, unless its ack was still waiting.
        back_from_done = present & log.acked
        for url in sorted(back_from_done):
            acked_at = log.acked_at.get(url, 0.0)
            assert ack_delay > 0, f"acked requests came back: {sorted(back_from_done)[:3]}"
            assert log.last_add < acked_at, f"{url}: an add after its ack did not write it"
            assert log.last_call < acked_at + ack_delay, (
                f"{url}: a call {log.last_call - acked_at:.3f} s after its ack (ack_delay "
                f"{ack_delay}) did not write it"
            )
        log.acked -= back_from_done  # queued again: handed out again
        phantoms = present - log.accepted
        assert not phantoms, f"requests stored that were never accepted: {sorted(phantoms)[:3]}"
        # (c) what comes back after a pop was popped and not acked at the kill.
        came_back = present & log.popped
        assert not came_back & log.acked
        # (e) counts.
        assert (stats.queued, stats.leased) == (len(present), 0)
        assert stats.seen == len(log.accepted), "the seen count does not match what was accepted"
        counters = stats.counters
        assert (counters.accepted, counters.acked) == (len(log.accepted), len(log.acked))
        # The killed process's leases came back: counted as expired, so the
        # counters add up however many of its pops were saved.
        assert counters.popped == counters.acked + counters.released + counters.expired

        # Order survives the kill: priority first, FIFO within a host and priority.
        for before, after in itertools.pairwise(drained):
            assert before.priority >= after.priority, (before.url, after.url)
        last: dict[tuple[str, int], tuple[int, int]] = {}
        for request in drained:
            host, run, counter = _order_key(request.url)
            key = (host, request.priority)
            assert last.get(key, (-1, -1)) < (run, counter), f"out of FIFO order: {request.url}"
            last[key] = (run, counter)
        frontier.release_many(drained)

        # (d) the seen set lost nothing.
        sample = rng.sample(sorted(log.accepted), min(1000, len(log.accepted)))
        again = [crawlq.Request(url) for url in log.fresh + sample]
        assert not any(frontier.add_many(again)), "a URL accepted before the kill was re-added"
        log.fresh.clear()
        stats = frontier.stats()
        assert (stats.queued, stats.leased, stats.seen) == (len(present), 0, len(log.accepted))
    finally:
        frontier.close()
    return len(came_back), len(back_from_done)


def crash_loop(
    tmp_path: Path, kills: int, synchronous: str, seed: int, ack_delay: float = 0
) -> dict[str, int]:
    rng = random.Random(seed)
    db = tmp_path / "job.db"
    options: dict[str, object] = {"synchronous": synchronous}
    # Create the job first: a kill during the very first open is its own test.
    crawlq.open_frontier(job_url(db), **options).close()
    log = Log(tmp_path / "ops.log")
    came_back = acked_came_back = 0
    in_flight = 0
    for run in range(kills):
        child = spawn(
            "loop",
            job_url(db),
            str(log.path),
            str(run),
            str(rng.getrandbits(32)),
            synchronous,
            str(ack_delay),
        )
        try:
            strategy = rng.random()
            if strategy < 0.2:  # very early: before, during or just after the open
                time.sleep(rng.uniform(0.0, 0.35))
            elif strategy < 0.6:
                time.sleep(rng.uniform(0.35, 0.9))
            else:  # right after the log grows past a mark: mid-stream, often mid-batch
                size = log.path.stat().st_size if log.path.exists() else 0
                mark = size + rng.randint(1_000, 150_000)
                deadline = time.monotonic() + 2.0
                while time.monotonic() < deadline and child.poll() is None:
                    if log.path.exists() and log.path.stat().st_size >= mark:
                        break
                    time.sleep(0.0002)
        finally:
            sigkill(child)
        try:
            log.replay()
            in_flight += log.adding is not None or bool(log.awaiting_ack)
            back, acked_back = check_after_kill(db, log, rng, options, ack_delay)
            came_back += back
            acked_came_back += acked_back
        except AssertionError as exc:
            raise AssertionError(f"after kill {run + 1} (seed {seed}): {exc}") from exc

    # Finally, finish everything: the job ends empty, with every URL seen.
    frontier = crawlq.open_frontier(job_url(db), **options)
    try:
        while (request := frontier.pop()) is not None:
            frontier.ack(request)
        stats = frontier.stats()
        assert (stats.queued, stats.leased, stats.seen) == (0, 0, len(log.accepted))
        assert stats.counters.accepted == stats.counters.acked == len(log.accepted)
    finally:
        frontier.close()
    return {
        "runs": log.runs,
        "accepted": len(log.accepted),
        "acked": len(log.acked),
        "came_back": came_back,
        "acked_came_back": acked_came_back,
        "in_flight": in_flight,
    }


def _seed() -> int:
    return int(os.environ.get("CRAWLQ_CRASH_SEED", random.randrange(1 << 32)))


def test_random_kills_lose_nothing(tmp_path: Path) -> None:
    seed = _seed()
    summary = crash_loop(tmp_path, kills=22, synchronous="normal", seed=seed)
    print(f"seed {seed}: {summary}")
    # The kills did hit a working crawl, not only children still starting.
    assert summary["runs"] >= 8, summary
    assert summary["accepted"] >= 1000, summary
    assert summary["acked"] >= 100, summary
    assert summary["came_back"] >= 1, summary


def test_random_kills_with_waiting_acks_lose_nothing(tmp_path: Path) -> None:
    """With the default ack_delay, an acked request comes back only if its ack was
    still waiting at the kill (see check_after_kill)."""
    seed = _seed()
    summary = crash_loop(tmp_path, kills=14, synchronous="normal", seed=seed, ack_delay=0.5)
    print(f"seed {seed}: {summary}")
    assert summary["runs"] >= 5, summary
    assert summary["accepted"] >= 500, summary
    assert summary["acked"] >= 50, summary


def test_random_kills_lose_nothing_with_synchronous_full(tmp_path: Path) -> None:
    seed = _seed()
    summary = crash_loop(tmp_path, kills=6, synchronous="full", seed=seed)
    print(f"seed {seed}: {summary}")
    assert summary["accepted"] >= 50, summary


def test_synchronous_full_is_applied(tmp_path: Path) -> None:
    with crawlq.open_frontier(job_url(tmp_path / "job.db"), synchronous="full") as frontier:
        db = frontier._store._db  # type: ignore[attr-defined]
        assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# -- the durability contract, point by point --------------------------------


@pytest.mark.parametrize("mode", ["add", "add_many"])
def test_kill_right_after_add_returns_keeps_the_request(tmp_path: Path, mode: str) -> None:
    db = tmp_path / "job.db"
    child = spawn(mode, job_url(db))
    try:
        assert read_line(child) == "added"
    finally:
        sigkill(child)
    with crawlq.open_frontier(job_url(db)) as frontier:
        if mode == "add":
            assert frontier.stats().queued == 1
            request = frontier.pop()
            assert request is not None
            assert (request.url, request.priority) == ("http://a.test/added", 3)
            assert frontier.add(crawlq.Request("http://a.test/added")) is False
        else:
            assert (frontier.stats().queued, frontier.stats().seen) == (100, 100)
            urls = {f"http://h{i % 7}.test/{i}" for i in range(100)}
            popped = []
            while (request := frontier.pop()) is not None:
                popped.append(request.url)
            assert sorted(popped) == sorted(urls)
            assert not any(frontier.add_many(crawlq.Request(url) for url in urls))


def test_kill_right_after_ack_returns_keeps_it_acked(tmp_path: Path) -> None:
    db = tmp_path / "job.db"
    child = spawn("ack", job_url(db))
    try:
        line = read_line(child)
    finally:
        sigkill(child)
    assert line == "acked http://a.test/1"
    with crawlq.open_frontier(job_url(db)) as frontier:
        stats = frontier.stats()
        assert (stats.queued, stats.leased, stats.seen) == (1, 0, 2)
        request = frontier.pop()
        # Only the request leased but not acked at the kill comes back.
        assert request is not None and request.url == "http://a.test/2"
        assert frontier.pop() is None
        assert frontier.add(crawlq.Request("http://a.test/1")) is False


@pytest.mark.parametrize(
    ("then", "back"),
    [
        ("wait", ["http://a.test/1", "http://a.test/2"]),
        ("flush", ["http://a.test/2"]),
        ("add", ["http://a.test/2", "http://b.test/1"]),
        ("delay", ["http://a.test/2"]),
    ],
)
def test_a_waiting_ack_is_durable_only_once_written(
    tmp_path: Path, then: str, back: list[str]
) -> None:
    """With ack_delay, an ack rides the next write, a flush, or the first call after
    its delay; killed before any of them, its request comes back (at-least-once)."""
    db = tmp_path / "job.db"
    child = spawn("ack", job_url(db), then)
    try:
        line = read_line(child)
    finally:
        sigkill(child)
    assert line == "acked http://a.test/1"
    with crawlq.open_frontier(job_url(db)) as frontier:
        came_back = sorted(request.url for request in iter(frontier.pop, None))
        assert came_back == back
        assert frontier.stats().seen == (3 if then == "add" else 2)


def test_kill_right_after_release_keeps_the_request(tmp_path: Path) -> None:
    db = tmp_path / "job.db"
    child = spawn("release", job_url(db))
    try:
        assert read_line(child) == "released"
    finally:
        sigkill(child)
    with crawlq.open_frontier(job_url(db)) as frontier:
        assert frontier.stats().queued == 1
        request = frontier.pop()
        assert request is not None and request.url == "http://a.test/released"


def test_kill_while_creating_a_job_leaves_a_job_that_opens(tmp_path: Path) -> None:
    """STORE BUG: a kill during a new job's first open bricks the job path.

    The child is SIGKILLed inside the schema script of its first open. Nothing
    was accepted, so the same command run again must simply work. Today the
    database file already exists (``PRAGMA journal_mode=WAL`` wrote its first
    page) without a schema, and every later open raises IncompatibleStore
    ("a SQLite database but not a crawlq job").
    """
    job = tmp_path / "job"
    child = spawn("die-creating", str(job))
    child.wait()
    assert child.stderr is not None
    assert child.returncode == -9, child.stderr.read()
    close_pipes(child)
    with crawlq.open_frontier(str(job)) as frontier:
        assert frontier.add(crawlq.Request("http://a.test/"))
        assert frontier.stats().queued == 1
    with crawlq.open_frontier(str(job)) as frontier:
        assert frontier.stats().queued == 1
