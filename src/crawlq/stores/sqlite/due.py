"""The SQLite job's scheduled requests: held until their due time, then queued in their place.

A scheduled request (an add with a ``not_before`` to come, a release with a
delay, a refetch) is logged like any write, then kept out of its host: it is
in no host's count, read-ahead or ``fresh`` heap, so its host's pacing,
concurrency and queued count ignore it. It waits either in ``_waiting`` (a
heap by due time of those logged since the last flush, payload included) or
in the ``scheduled`` table (after a flush), whose index ``scheduled_by_due``
gives them by due time.

Making due requests ready (`Scheduling._make_due`) runs in the calls that
already run (pop, next_ready_in, counts) once ``_next_due``, the first due
time, has come: a pop with nothing due pays one comparison. Each call takes
at most `DUE_BATCH` requests: from the index in (due, id) order past
``_pulled`` (the last one taken: one indexed range query per batch, O(log n)
per row), then from the heap (O(log n) each), and files each one in its host's
``fresh`` heap, as an add logged since the flush is. Its `log.DUE` record
rides the next write (nothing is lost if it never gets written: after a kill
its due time has still passed); the flush moves it to ``requests``. Rows
taken from the table stay in it until that flush, which is why the range
query starts past ``_pulled``; the table changes only at flushes, and each
flush moves every taken row out of it, so ``_pulled`` then starts again.
"""

from __future__ import annotations

import math
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Final

from ..._errors import CorruptStore
from . import log
from .hosts import Host, Key

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable
    from pathlib import Path

    from ..._policy import Board
    from .file import Guard

__all__ = ["DUE_BATCH", "Scheduling"]

#: Most scheduled requests one call makes ready (the rest: the next calls).
DUE_BATCH: Final = 1024

# A scheduled request logged since the last flush: (due, row id, host,
# -priority, seq, payload, revisit 0 or 1), a heap by due time.
Waiting = tuple[float, int, str, int, int, bytes, int]
# A request made due, as its DUE record item: (row id, host, -priority, seq, revisit).
Due = tuple[int, str, int, int, int]

_FROM_START: Final = (
    "SELECT s.id, h.name, s.negprio, s.seq, s.due, s.revisit, s.payload, s.host"
    " FROM scheduled s JOIN hosts h ON h.id = s.host WHERE s.due <= ?"
    " ORDER BY s.due, s.id LIMIT ?"
)
_PAST_PULLED: Final = (
    "SELECT s.id, h.name, s.negprio, s.seq, s.due, s.revisit, s.payload, s.host"
    " FROM scheduled s JOIN hosts h ON h.id = s.host WHERE (s.due, s.id) > (?, ?)"
    " AND s.due <= ? ORDER BY s.due, s.id LIMIT ?"
)


class Scheduling:
    """Scheduled requests of `SqliteStore` (a mixin: the store's ``__init__`` sets the state)."""

    if TYPE_CHECKING:
        path: Path
        _board: Board
        _db: sqlite3.Connection
        _guard: Guard
        _hosts: dict[str, Host]
        _host_ids: dict[str, int]
        _rows: int
        _unflushed: dict[int, bytes]
        _updated: dict[int, tuple[bytes, Host, Key]]

        def _revive(self, name: str) -> Host: ...
        def _housekeep(self, write: Callable[[float], None], now: float) -> None: ...
        def _flush(self, now: float) -> None: ...
        def _flush_if_full(self, now: float) -> None: ...

    def _load_scheduled(self, counters: dict[str, int]) -> None:
        """Read what the job holds scheduled: its counters and the first due time (O(log n))."""
        #: Scheduled requests (revisits included), and the revisits among them.
        self._scheduled: int = counters.get("scheduled", 0)
        self._revisits: int = counters.get("revisits", 0)
        #: Refetches since the job was created (row ids that were not accepted adds).
        self._refetched: int = counters.get("refetched", 0)
        self._waiting: list[Waiting] = []
        #: Made due, their DUE record not written yet (it rides the next write).
        self._due_log: list[Due] = []
        #: (due, id) of the last row taken from the table since the last flush.
        self._pulled: tuple[float, int] | None = None
        #: Rows taken from the table since the last flush (it moves or deletes each).
        self._pulled_rows = 0
        row = self._db.execute("SELECT due FROM scheduled ORDER BY due, id LIMIT 1").fetchone()
        #: No row of the table past ``_pulled`` is due before this (a lower bound).
        self._table_due: float = math.inf if row is None else row[0]
        #: No scheduled request is due before this: inf when none is scheduled.
        self._next_due: float = self._table_due

    def _log(self, *records: log.Record) -> None:
        """Commit ``records`` to the log, after the DUE records not written yet, in one commit.

        The one way into the log: a request made due has its DUE record
        before any record about it since. Raises `StoreError` (`StoreFull`):
        nothing was written then, and the DUE records still wait.
        """
        due = self._due_log
        with self._guard:
            log.commit(self._db, ((log.DUE, due, None), *records) if due else records)
        if due:
            self._due_log = []

    def _schedule(self, waiting: Waiting) -> None:
        """Hold a logged request until its due time (made ready by `_make_due`)."""
        heappush(self._waiting, waiting)
        self._scheduled += 1
        self._revisits += waiting[6]
        if waiting[0] < self._next_due:
            self._next_due = waiting[0]

    def _make_due(self, now: float) -> None:
        """Queue the scheduled requests due by ``now`` in their hosts, at most `DUE_BATCH`.

        Raises `StoreError` if reading the table fails: nothing changed then
        (a host's row that cannot be read stops it midway: a damaged job).
        """
        ready: list[tuple[int, str, int, int, bytes, int]] = []
        # The table first: if reading it raises, nothing has changed.
        if self._table_due <= now:
            with self._guard:
                ready = self._pull(now, DUE_BATCH)
        waiting = self._waiting
        while waiting and waiting[0][0] <= now and len(ready) < DUE_BATCH:
            _, row_id, name, negprio, seq, payload, revisit = heappop(waiting)
            ready.append((row_id, name, negprio, seq, payload, revisit))
        touched: set[Host] = set()
        hosts = self._hosts
        due_log = self._due_log
        unflushed = self._unflushed
        for row_id, name, negprio, seq, payload, revisit in ready:
            host = hosts.get(name)
            if host is None:
                with self._guard:
                    host = hosts[name] = self._revive(name)
            host.count += 1
            heappush(host.fresh, (negprio, seq, row_id, payload))
            unflushed[row_id] = payload
            host.improve((negprio, seq))
            touched.add(host)
            due_log.append((row_id, name, negprio, seq, revisit))
            self._revisits -= revisit
        self._scheduled -= len(ready)
        self._rows += len(ready)
        for host in touched:
            self._board.place(host, now)
        self._next_due = min(waiting[0][0] if waiting else math.inf, self._table_due)
        # Rows taken from the table wait in memory until a flush: bound them.
        self._flush_if_full(now)

    def _pull(self, now: float, limit: int) -> list[tuple[int, str, int, int, bytes, int]]:
        """Take up to ``limit`` rows of the table due by ``now``, in (due, id) order.

        Moves ``_pulled`` past them and sets ``_table_due``: one indexed range
        query, and one more for the next due time when fewer came.
        """
        db = self._db
        pulled = self._pulled
        if pulled is None:
            rows = db.execute(_FROM_START, (now, limit)).fetchall()
        else:
            rows = db.execute(_PAST_PULLED, (*pulled, now, limit)).fetchall()
        if rows:
            pulled = self._pulled = (rows[-1][4], rows[-1][0])
            self._pulled_rows += len(rows)
        if len(rows) == limit:
            self._table_due = rows[-1][4]  # more may be due: the next call looks
        else:
            if pulled is None:
                row = db.execute("SELECT due FROM scheduled ORDER BY due, id LIMIT 1").fetchone()
            else:
                row = db.execute(
                    "SELECT due FROM scheduled WHERE (due, id) > (?, ?) ORDER BY due, id LIMIT 1",
                    pulled,
                ).fetchone()
            self._table_due = math.inf if row is None else row[0]
        host_ids = self._host_ids
        for row in rows:
            host_ids.setdefault(row[1], row[7])  # `_revive` then finds the host by id
        return [(row[0], row[1], row[2], row[3], row[6], row[5]) for row in rows]

    def _scheduled_flushed(self) -> None:
        """After a flush: the waiting requests are in the table, the taken rows out of it."""
        waiting = self._waiting
        if waiting:
            self._table_due = min(self._table_due, waiting[0][0])
            waiting.clear()
        self._pulled = None
        self._pulled_rows = 0
        self._next_due = self._table_due

    def _stored_payload(self, row_id: int) -> bytes:
        """The payload stored for a leased row (logged, updated, or in the table).

        Raises `StoreError` if reading the table fails, `CorruptStore` if the
        row is not there.
        """
        payload = self._unflushed.get(row_id)
        if payload is not None:
            return payload
        updated = self._updated.get(row_id)
        if updated is not None:
            return updated[0]
        with self._guard:
            found = self._db.execute(
                "SELECT payload FROM requests WHERE id = ?", (row_id,)
            ).fetchone()
        if found is None:
            raise CorruptStore(f"job {self.path}: leased request {row_id} is not in its table")
        return bytes(found[0])

    def _next_due_in(self, now: float) -> float | None:
        """Seconds until the first scheduled request is due (0.0: now); None if none is."""
        if not self._scheduled:
            return None
        return max(0.0, self._next_due - now)
