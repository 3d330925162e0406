"""The SQLite job's checkpoints, run in a thread of their own instead of inside a commit.

In WAL mode a commit appends pages to the ``-wal`` file; a *checkpoint*
copies them into the database file and fsyncs both. SQLite's own
(``wal_autocheckpoint``) runs in the commit that crosses its threshold, so
one call in every 40 MB of writes stalled for the copy and the fsyncs (40-60
ms: a request due then was handed out that much later). `Checkpoints` runs
them on a connection of its own, in a thread, after a flush asks for one
(`Checkpoints.poke`) and at most once per `EVERY` seconds. SQLite releases
the GIL while it copies and syncs, so the crawl goes on meanwhile.

A checkpoint copies only what was committed when it began, and SQLite starts
the WAL over from its beginning (which keeps its size bounded) only if a
commit finds everything in it copied. Under steady writes the crawl commits
while the thread copies, so that never happens; once the WAL has reached
`RESTART_FRAMES` pages, the store runs one checkpoint itself after a flush
(`Checkpoints.catch_up`): it copies what was committed since the thread's
last one began, a fraction of what SQLite's own would copy, and the next
commit starts the WAL over. The WAL stays about as large as it was with
SQLite's own checkpoints.

Checkpoints change nothing that is committed: a ``kill -9`` during one
leaves the WAL, which the next open reads. One that fails (a full disk)
leaves the pages in the WAL, and a later one copies them.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Final

__all__ = ["EVERY", "RESTART_FRAMES", "Checkpoints"]

#: Least seconds between two checkpoints of the thread.
EVERY: Final = 1.0
#: Pages (4 KiB) in the WAL from which the store copies the rest itself, so that it starts over.
RESTART_FRAMES: Final = 10_000

_CHECKPOINT: Final = "PRAGMA wal_checkpoint(PASSIVE)"


class Checkpoints:
    """The thread that checkpoints one open job's WAL, and its connection."""

    __slots__ = ("_closing", "_db", "_thread", "_wake", "frames")

    def __init__(self, path: Path, synchronous: str) -> None:
        """Open the thread's connection and start the thread.

        Raises `sqlite3.Error` if the connection cannot be opened (the store
        then keeps SQLite's own checkpoints).
        """
        db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            # The checkpoint syncs the files as the job's commits do.
            db.execute(f"PRAGMA synchronous={synchronous}")
        except BaseException:
            db.close()
            raise
        self._db = db
        self._wake = threading.Event()
        self._closing = threading.Event()
        #: Pages in the WAL when the thread's last checkpoint began (0: none, or started over).
        self.frames = 0
        self._thread = threading.Thread(target=self._run, name="crawlq-checkpoints", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Ask for a checkpoint: the thread runs one now, or `EVERY` s after its last."""
        self._wake.set()

    def catch_up(self, db: sqlite3.Connection) -> None:
        """Copy the rest of a WAL that reached `RESTART_FRAMES` on ``db``, so that it starts over.

        The writing connection's own checkpoint, after a flush: what the
        thread's last one could not copy. If it fails or finds the thread
        checkpointing, the next flush tries again (the WAL keeps the pages).
        """
        if self.frames < RESTART_FRAMES:
            return
        try:
            busy, frames, copied = db.execute(_CHECKPOINT).fetchall()[0]
        except sqlite3.Error:
            return
        if not busy and copied == frames:  # the next commit starts the WAL over
            self.frames = 0

    def _run(self) -> None:
        db, wake, closing = self._db, self._wake, self._closing
        try:
            while True:
                wake.wait()
                if closing.is_set():
                    return
                wake.clear()
                try:
                    busy, frames, _ = db.execute(_CHECKPOINT).fetchall()[0]
                except sqlite3.Error:
                    pass  # a full disk, say: the pages stay in the WAL for the next one
                else:
                    self.frames = 0 if busy else frames  # busy: the store's own ran
                if closing.wait(EVERY):
                    return
        finally:
            db.close()

    def close(self) -> None:
        """Stop the thread and close its connection (before the store closes its own:
        the last connection to close copies the WAL and deletes it)."""
        self._closing.set()
        self._wake.set()
        self._thread.join(timeout=10)
