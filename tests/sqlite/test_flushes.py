"""SQLite jobs: what a flush may hold, and checkpoints outside the crawl's calls.

A pop + ack loop writes nothing until ``ack_delay`` is up, yet each ack is a
row the next flush deletes: while requests are scheduled, the flush must come
once `FLUSH_ROWS` rows are held, not after tens of thousands. Checkpoints run
in a thread of their own, and the WAL still starts over under steady writes.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from pathlib import Path

import pytest

import crawlq
from crawlq.stores.sqlite import checkpoints as sqlite_checkpoints
from crawlq.stores.sqlite.tables import FLUSH_ROWS

from ._helpers import job_url


def _queued_in_tables(db: Path) -> int:
    """Rows of the ``requests`` table, read by another connection (the log not applied)."""
    reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(reader.execute("SELECT count(*) FROM requests").fetchone()[0])
    finally:
        reader.close()


def _later() -> crawlq.Request:
    """A request scheduled an hour from now."""
    return crawlq.Request("http://later.test/", not_before=time.time() + 3600)


def test_acks_waiting_for_ack_delay_are_flushed_once_they_fill_a_flush(tmp_path: Path) -> None:
    db = tmp_path / "job.db"
    total = FLUSH_ROWS + 500
    with crawlq.open_frontier(job_url(db), host_delay=0.0) as frontier:
        frontier.add_many([crawlq.Request(f"http://h{i % 7}.test/{i}") for i in range(total)])
        frontier.add(_later())
    assert _queued_in_tables(db) == total
    # No ack is written by its delay (an hour): only the flush bound writes them.
    with crawlq.open_frontier(job_url(db), host_delay=0.0, ack_delay=3600.0) as frontier:
        for _ in range(FLUSH_ROWS - 1):
            request = frontier.pop()
            assert request is not None
            frontier.ack(request)
        assert _queued_in_tables(db) == total  # nothing written yet
        request = frontier.pop()
        assert request is not None
        frontier.ack(request)
        # The flush logged the acks and deleted their rows, in this ack call.
        assert _queued_in_tables(db) == total - FLUSH_ROWS
        assert frontier.stats().queued == total - FLUSH_ROWS


def test_acks_flushed_early_survive_a_reopen(tmp_path: Path) -> None:
    db = tmp_path / "job.db"
    total = FLUSH_ROWS + 10
    urls = [f"http://h{i % 5}.test/{i}" for i in range(total)]
    with crawlq.open_frontier(job_url(db), host_delay=0.0) as frontier:
        frontier.add_many([crawlq.Request(url) for url in urls])
        frontier.add(_later())
    acked = set()
    with crawlq.open_frontier(job_url(db), host_delay=0.0, ack_delay=3600.0) as frontier:
        for _ in range(FLUSH_ROWS):
            request = frontier.pop()
            assert request is not None
            acked.add(request.url)
            frontier.ack(request)
    with crawlq.open_frontier(job_url(db), host_delay=0.0) as frontier:
        left = []
        while (request := frontier.pop()) is not None:
            left.append(request.url)
            frontier.ack(request)
    assert sorted(left) == sorted(set(urls) - acked)


def _checkpointed_rows(db: Path, copy: Path) -> int:
    """Requests in the database file alone, as if its WAL were lost: what checkpoints copied."""
    shutil.copyfile(db, copy)
    reader = sqlite3.connect(copy)
    try:
        return int(reader.execute("SELECT count(*) FROM requests").fetchone()[0])
    finally:
        reader.close()
        copy.unlink()


def test_a_thread_checkpoints_the_wal_while_the_job_is_open(tmp_path: Path) -> None:
    db = tmp_path / "job.db"
    crawlq.open_frontier(job_url(db)).close()  # the tables, in the database file
    with crawlq.open_frontier(job_url(db), host_delay=0.0) as frontier:
        assert _checkpointed_rows(db, tmp_path / "copy.db") == 0
        # More than FLUSH_ROWS in one add: the add flushes, the flush asks for a checkpoint.
        frontier.add_many([crawlq.Request(f"http://h{i % 7}.test/{i}") for i in range(5000)])
        deadline = time.monotonic() + 10
        while _checkpointed_rows(db, tmp_path / "copy.db") != 5000:
            assert time.monotonic() < deadline, "no checkpoint copied the flush to the database"
            time.sleep(0.05)
        store = frontier._store  # type: ignore[attr-defined]
        # None in the crawl's commits:
        assert store._db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    assert not db.with_name(db.name + "-wal").exists()  # closed: the WAL copied and removed


def test_the_wal_starts_over_once_it_reached_restart_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store copies what the thread's checkpoint could not, so the next commit starts
    the WAL over: under steady writes the thread's alone never see it all copied."""
    monkeypatch.setattr(sqlite_checkpoints, "RESTART_FRAMES", 64)
    db = tmp_path / "job.db"
    with crawlq.open_frontier(job_url(db), host_delay=0.0) as frontier:
        checkpoints = frontier._store._checkpoints  # type: ignore[attr-defined]
        # More than FLUSH_ROWS in one add: it flushes, and the flush wakes the thread.
        frontier.add_many([crawlq.Request(f"http://h{i % 7}.test/a/{i}") for i in range(5000)])
        deadline = time.monotonic() + 10
        while checkpoints.frames < 64:
            assert time.monotonic() < deadline, "the thread made no checkpoint"
            time.sleep(0.01)
        # The next flush copies the rest itself.
        frontier.add_many([crawlq.Request(f"http://h{i % 7}.test/b/{i}") for i in range(5000)])
        assert checkpoints.frames == 0
        frontier.add(crawlq.Request("http://h0.test/c"))  # a commit: the WAL starts over
        reader = sqlite3.connect(db)
        try:
            _, frames, _ = reader.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()[0]
        finally:
            reader.close()
        assert 0 < frames < 64
