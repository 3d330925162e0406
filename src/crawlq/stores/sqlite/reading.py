"""Reading a job read-only, as the CLI and `check` do: one snapshot, the log folded in.

Everything here opens the database read-only (``mode=ro``) and never takes
the job lock, so it works while a crawl has the job open.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..._errors import StoreError
from .file import DATABASE_NAME, connect, job_path, translate
from .log import LogFold, fold

__all__ = ["Scheduled", "read_log", "read_scheduled", "reading"]


@contextlib.contextmanager
def reading(url: str) -> Iterator[tuple[sqlite3.Connection, Path]]:
    """Open the job read-only, in one read transaction; close it after."""
    path = job_path(url).absolute()
    if not path.is_file():
        raise StoreError(
            f"there is no crawlq job at {path}; give a job directory (holding "
            f"{DATABASE_NAME}) or its database file"
        )
    db = connect(path, synchronous="NORMAL", read_only=True)
    try:
        with translate(path):
            db.execute("BEGIN")  # a deferred read: one snapshot for every query
            yield db, path
    finally:
        db.close()


def read_log(db: sqlite3.Connection) -> LogFold:
    """Fold the log as the store's flush applies it (an older job has no log)."""
    has_log = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ops'"
    ).fetchone()
    if not has_log:
        return LogFold()
    return fold(db.execute("SELECT data FROM ops ORDER BY id"))


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A job's scheduled requests as a reader sees them: the tables, the log folded in."""

    #: Requests held but not due yet (revisits included); due ones not yet
    #: made ready by the crawl count here too.
    count: int = 0
    #: The part of ``count`` that refetches pages already done.
    revisits: int = 0
    #: Refetches since the job was created.
    refetched: int = 0
    #: When the first of them is due (POSIX seconds); None: none is scheduled.
    first_due: float | None = None


def read_scheduled(db: sqlite3.Connection, log: LogFold) -> Scheduled:
    """The job's scheduled requests (a job of schema 2 or older has none).

    The first due time comes from the index, skipping the rows the log made
    due since the last flush (at most a flush's worth).
    """
    if db.execute("PRAGMA user_version").fetchone()[0] < 3:
        return Scheduled()
    counters = dict(
        db.execute(
            "SELECT name, value FROM counters WHERE name IN ('scheduled', 'revisits', 'refetched')"
        ).fetchall()
    )
    rows, revisits = log.scheduled_change()
    gone = log.made_due.keys() | log.dropped.keys()
    first: float | None = None
    for row_id, due in db.execute("SELECT id, due FROM scheduled ORDER BY due, id"):
        if row_id not in gone:
            first = due
            break
    logged = [item[4] for item in log.scheduled.values()]
    if logged:
        first = min(logged) if first is None else min(first, *logged)
    return Scheduled(
        counters.get("scheduled", 0) + rows,
        counters.get("revisits", 0) + revisits,
        counters.get("refetched", 0) + log.refetched,
        first,
    )
