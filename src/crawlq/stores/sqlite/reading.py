"""Reading a job read-only, as the CLI and `check` do: one snapshot, the log folded in.

Everything here opens the database read-only (``mode=ro``) and never takes
the job lock, so it works while a crawl has the job open.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from ..._errors import StoreError
from .file import DATABASE_NAME, connect, job_path, translate
from .log import LogFold, fold

__all__ = ["read_log", "reading"]


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
