"""A SQLite job's tables as one process keeps them: loaded at open, flushed from the log.

`JobTables` is the part of `SqliteStore` that reads a job's tables at open
(counters, controls, hosts: O(1) in queued requests), keeps the counters this
process adds to, and *flushes*: applies the log (``ops``, see `log`) to the
tables in one transaction, then has each host read its fresh requests from
the index. A flush runs every few thousand logged rows or a quarter second,
and in a pop or an ack that wrote nothing once the rows it would write (acks
waiting for ``ack_delay``, rows made due) fill one: no call pays for an
unbounded flush. After a flush, `checkpoints` copies the WAL into the
database file in a thread of its own.

Releases and acks (`finishing`) and scheduled requests (`due`) keep what
they logged since the last flush in memory too; the flush tells them it ran.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..._errors import StoreFull
from ..._policy import Board, Policy, Slot
from . import log
from .bloom import SeenFilter
from .file import Guard, transaction
from .hosts import Host, Key, load_hosts
from .leases import Leases

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable

    from .checkpoints import Checkpoints
    from .due import Waiting

__all__ = ["JobTables"]

FLUSH_ROWS: Final = 4096  # logged requests (scheduled ones too) and acks held before a flush
# ... or rows taken from the scheduled table (made due: each a move or a delete, in two
# indexes) before a flush in a call that wrote nothing (a pop, an ack waiting for ack_delay).
FLUSH_DUE: Final = 2048
FLUSH_OPS: Final = 4096  # log rows held before a flush
FLUSH_AGE: Final = 0.25  # seconds a log row may wait for a flush
TOTALS_EVERY: Final = 1.0  # seconds a writing crawler's counters may go unsaved
RETRY_AFTER: Final = 1.0  # seconds before a housekeeping write that found the disk full is retried


class JobTables:
    """Loading and flushing of `SqliteStore` (a mixin: the store's ``__init__`` sets the state)."""

    if TYPE_CHECKING:
        path: Path
        _policy: Policy
        _clock: Callable[[], float]
        _db: sqlite3.Connection
        _guard: Guard
        _waiting_acks: list[tuple[int, str, float]]
        _checkpoints: Checkpoints | None

        _due_log: list[Any]
        _pulled_rows: int
        _scheduled: int
        _waiting: list[Waiting]

        def _forget(self, slot: Slot) -> None: ...
        def _load_scheduled(self, counters: dict[str, int]) -> None: ...
        def _log(self, *records: log.Record) -> None: ...
        def _scheduled_flushed(self) -> None: ...

    def _load(self) -> None:
        db = self._db
        counters = dict(db.execute("SELECT name, value FROM counters").fetchall())
        self._seen_count: int = counters["seen"]
        self._next_id: int = counters["next_id"]
        # Counters kept by this process and saved with its writes (`_totals`;
        # accepted and acked come from the ids and rows, exactly: `counts`).
        self._capped: int = counters.get("capped", 0)
        self._duplicates: int = counters.get("duplicates", 0)
        self._popped: int = counters.get("popped", 0)
        self._released: int = counters.get("released", 0)
        self._expiries: int = counters.get("expired", 0)
        # With a cap: what each host it looked at ever had accepted (the
        # table, which the flush at open made current, plus this process's).
        self._accepted_known: dict[str, int] = {}
        self._hosts: dict[str, Host] = {}
        self._board = Board(self._policy, self._forget, self._hosts)
        self._host_ids: dict[str, int] = {}
        self._rows = 0
        self._leases = Leases(self._policy.lease_timeout)
        # Since the last flush: logged rows not yet in the tables (id -> payload),
        # acks of rows that are in the tables, fingerprints, and log rows.
        self._unflushed: dict[int, bytes] = {}
        self._unflushed_acks: dict[int, tuple[Host, Key]] = {}
        # Rows of the tables scheduled again (a delayed release): the key of
        # each one's index entry, hidden until the flush moves it out.
        self._unflushed_delays: dict[int, tuple[Host, Key]] = {}
        # Rows of the tables whose update is logged, not flushed: row id ->
        # (new payload, host, key of the row in the index, hidden till then).
        self._updated: dict[int, tuple[bytes, Host, Key]] = {}
        # Fingerprints logged since the last flush, and when.
        self._unflushed_seen: dict[bytes, float] = {}
        self._log_rows = 0
        self._log_since = 0.0
        now = self._clock()
        board = self._board
        for name, until, pace, delay, concurrency in db.execute(
            "SELECT name, blocked_until, pace, delay, concurrency FROM controls"
        ):
            if delay is not None or concurrency is not None:
                board.overrides[name] = (delay, concurrency)
            if until is not None and until > now:
                board.blocks[name] = (until, pace)
        for host, host_id in load_hosts(db):
            self._hosts[host.name] = host
            self._host_ids[host.name] = host_id
            self._rows += host.count
            board.adopt(host)
            board.place(host, now)
        self._load_scheduled(counters)
        self._seen_filter = SeenFilter(self.path, self._seen_count)
        self._inbox_at = 0.0  # the inbox is read at the first pop
        self._inbox_done = 0  # inbox rows applied whose delete found the disk full: up to it
        # Leases held when the job was last closed or killed came back: they
        # are re-deliveries. (Pops since a killed process's last flush were
        # not saved: count them as made, so popped = acked + released + expired.)
        held = self._popped - self._acked_total() - self._released - self._expiries
        if held > 0:
            self._expiries += held
        else:
            self._popped -= held
        self._saved_totals: dict[str, int] = {}
        self._totals_at = 0.0
        # No housekeeping write (`_housekeep`) before then: the last one found the disk full.
        self._retry_at = 0.0

    def _acked_total(self) -> int:
        """Requests acked since the job was created: those added or refetched, no longer held.

        Every row id was taken by an accepted add or a refetch.
        """
        return self._next_id - 1 - self._rows - self._scheduled

    def _totals(self) -> dict[str, int]:
        """The counters this process keeps, for the flush to save."""
        return {
            "capped": self._capped,
            "duplicates": self._duplicates,
            "popped": self._popped,
            "released": self._released,
            "expired": self._expiries,
        }

    def _save_totals(self, now: float) -> None:
        """Save the counters now if they changed: with a write at least once a second
        (`_after_write`), so ``crawlq top`` sees pops before the next flush."""
        self._totals_at = now
        totals = self._totals()
        if totals == self._saved_totals:
            return
        db = self._db
        with self._guard, transaction(db):
            db.executemany(
                "INSERT OR REPLACE INTO counters (name, value) VALUES (?, ?)", totals.items()
            )
        self._saved_totals = totals

    def _after_write(self, now: float) -> None:
        """After a log record committed: flush, or save the counters, if it is time."""
        if not self._log_rows:
            self._log_since = now
        self._log_rows += 1
        if (
            self._log_rows >= FLUSH_OPS
            or self._held_rows() >= FLUSH_ROWS
            or now - self._log_since >= FLUSH_AGE
        ):
            self._housekeep(self._flush, now)
        elif now - self._totals_at >= TOTALS_EVERY:
            self._housekeep(self._save_totals, now)

    def _held_rows(self) -> int:
        """About the rows the next flush writes: requests logged since the last one (scheduled
        ones too), acks of rows in the tables, and rows of the scheduled table made due."""
        return (
            len(self._unflushed)
            + len(self._unflushed_acks)
            + len(self._waiting)
            + self._pulled_rows
        )

    def _flush_if_full(self, now: float) -> None:
        """In a call that wrote nothing: flush if requests made due, or rows held while some
        are scheduled, filled a flush (`FLUSH_DUE`, `FLUSH_ROWS`).

        An ack waiting for ``ack_delay`` writes nothing, yet the next flush
        deletes its row: a fast pop + ack loop holds tens of thousands for
        the write after ``ack_delay`` to flush in one call, 100 ms or more.
        While requests are scheduled, a request coming due then waits for
        that call: so the flush comes at `FLUSH_ROWS` rows instead (it logs
        the waiting acks first: sooner than ``ack_delay``, never later).
        With nothing scheduled, nothing waits for a time, and the larger
        flush writes each page of scattered deletes once instead of several
        times (15% of a pop + ack loop).
        """
        if self._pulled_rows >= FLUSH_DUE or (self._scheduled and self._held_rows() >= FLUSH_ROWS):
            self._housekeep(self._flush, now)

    def _housekeep(self, write: Callable[[float], None], now: float) -> None:
        """Run a write that no caller waits for: a flush, saving counters, writing waiting acks.

        The call that gets here has done what it was asked (its log record
        committed, or it wrote nothing), so a full disk must not make it
        raise: the write is left for later (its data stays in the durable log
        or in memory) and tried again after `RETRY_AFTER`, by a later call,
        `flush`, close, or the next open. A write that meets the disk full
        changes nothing: it is one transaction, rolled back.
        """
        if now < self._retry_at:
            return
        try:
            write(now)
        except StoreFull:
            self._retry_at = now + RETRY_AFTER

    def _flush(self, now: float) -> None:
        """Apply the log to the tables, then move fresh requests to the index."""
        pace = self._board.pace if self._board.blocks else None
        paced = {
            h.name: at
            for h in self._hosts.values()
            if (at := h.ready_at if pace is None else pace(h)) > now
        }
        if self._waiting_acks or self._due_log:
            # The tables must not get back a row whose ack is in memory; the
            # rows made due go to ``requests`` with the rest.
            waiting = [(log.ACK, self._waiting_acks, None)] if self._waiting_acks else []
            self._log(*waiting)
            self._waiting_acks = []
        with self._guard:
            totals = self._totals()
            host_ids = log.apply(self._db, self._host_ids, paced, totals)
        self._saved_totals, self._totals_at = totals, now
        self._host_ids.update(host_ids)
        key_of = self._leases.key_of
        for host, key in self._unflushed_acks.values():
            host.hidden.discard(key)
        # The index no longer holds these rows under these keys, unless one
        # came back since (due, leased under the same key: moved back in).
        for row_id, (host, key) in self._unflushed_delays.items():
            if key_of(row_id) != key:
                host.hidden.discard(key)
        for row_id, (_, host, key) in self._updated.items():
            if key_of(row_id) != key:  # else leased under it now
                host.hidden.discard(key)
        for host in self._hosts.values():
            if host.id is None:
                host.id = host_ids.get(host.name)
            if host.fresh:
                # The fresh requests are in the index now: read them from there.
                lowest = host.fresh[0]
                host.rewind((lowest[0], lowest[1]))
                host.fresh = []
            # Fresh requests leased before the flush are in the index now too,
            # possibly after the cursor: the next scan must skip them.
            host.rewound = bool(host.hidden)
        self._unflushed.clear()
        self._unflushed_acks.clear()
        self._unflushed_delays.clear()
        self._updated.clear()
        self._unflushed_seen.clear()
        self._scheduled_flushed()
        self._log_rows = 0
        checkpoints = self._checkpoints
        if checkpoints is not None:
            checkpoints.catch_up(self._db)
            checkpoints.poke()
