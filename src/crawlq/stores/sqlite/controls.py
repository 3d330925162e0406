"""The SQLite job's host controls, per-host counts, and its seen lookups (with times).

Blocks and per-host policies live in the `Board` and in the ``controls``
table (written at once: they are rare, and independent of the log's order).
Another process (``crawlq hosts --block``) cannot write a job a crawler has
open: it leaves each change in the ``inbox`` table, and the crawler applies
it within a second (`SqliteControls._read_inbox`), through its own write path.
Per-host accepted counts are in ``hosts.accepted``, brought up to date by each
flush; `SqliteControls` adds what happened since. Fingerprints carry the time
they were recorded (``seen.at``), for ``seen_ttl``.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

import msgspec

from ..._bloom import BloomFilter
from ..._errors import ConfigError, CrawlqError, StoreFull
from ..._policy import Board
from ..base import HostList, host_details
from .bloom import SeenFilter
from .file import Guard, transaction
from .hosts import Host
from .log import fold

__all__ = ["SqliteControls", "apply_change", "leave_change"]

log = logging.getLogger("crawlq.sqlite")

#: The changes `leave_change` accepts, with their arguments.
CHANGES: Final = {"block": 1, "unblock": 0, "delay": 1}


def apply_change(store: Any, what: str, host: str, args: list[Any]) -> None:
    """Apply one host change (an inbox row, or the CLI's own) to an open store.

    ``block`` (seconds), ``unblock``, ``delay`` (seconds, or None: the
    frontier's; the host's own concurrency stays). Raises `ConfigError` for
    an unknown change.
    """
    if what == "block":
        store.block_host(host, float(args[0]))
    elif what == "unblock":
        store.block_host(host, None)
    elif what == "delay":
        _, concurrency = store.host_policy(host)
        delay = None if args[0] is None else float(args[0])
        store.set_host_policy(host, delay, concurrency)
    else:
        raise ConfigError(f"unknown host change {what!r}; known: {', '.join(CHANGES)}")


def leave_change(db: sqlite3.Connection, what: str, host: str, args: list[Any]) -> int:
    """Leave a change in a job's inbox for the crawler that has it open; return its id."""
    if what not in CHANGES:
        raise ConfigError(f"unknown host change {what!r}; known: {', '.join(CHANGES)}")
    cursor = db.execute(
        "INSERT INTO inbox (data) VALUES (?)", (msgspec.msgpack.encode([what, host, *args]),)
    )
    return cast(int, cursor.lastrowid)


class SqliteControls:
    """The host-control part of `crawlq.stores.sqlite.SqliteStore` (a mixin)."""

    if TYPE_CHECKING:
        _accepted_known: dict[str, int]
        _board: Board
        _db: sqlite3.Connection
        _guard: Guard
        _hosts: dict[str, Host]
        _inbox_done: int
        _seen_count: int
        _seen_ttl: float | None
        path: Path
        _unflushed_seen: dict[bytes, float]

        _clock: Callable[[], float]
        _seen_filter: SeenFilter

        def _check_open(self) -> None: ...
        def _flush(self, now: float) -> None: ...

    # -- seen times and per-host counts, for add ---------------------------------

    def _recorded_at(self, stored: bytes, bloom: BloomFilter | None) -> float | None:
        """When a fingerprint was recorded (committed, flushed or not); None if it is not."""
        at = self._unflushed_seen.get(stored)
        if at is not None or (bloom is not None and stored not in bloom):
            return at
        row = self._db.execute("SELECT at FROM seen WHERE fingerprint = ?", (stored,)).fetchone()
        return None if row is None else float(row[0])

    def _seen_live(self, stored: bytes, bloom: BloomFilter | None) -> bool:
        """`_seen_before` with ``seen_ttl``: recorded, and less than the TTL ago."""
        at = self._recorded_at(stored, bloom)
        return at is not None and self._clock() - at < cast(float, self._seen_ttl)

    def _expired(self, stored: bytes) -> bool:
        """Whether a fingerprint `_seen_live` refused is recorded (with its TTL passed)."""
        return self._recorded_at(stored, None) is not None

    def _accepted_total(self, name: str) -> int:
        """Requests host ``name`` ever had accepted, for the cap (read once per host)."""
        total = self._accepted_known.get(name)
        if total is None:
            row = self._db.execute("SELECT accepted FROM hosts WHERE name = ?", (name,)).fetchone()
            total = row[0] if row is not None else 0
            self._accepted_known[name] = total
        return total

    def _seen_before(self, stored: bytes, bloom: BloomFilter | None) -> bool:
        """Whether a 16-byte fingerprint is recorded (committed, flushed or not)."""
        return stored in self._unflushed_seen or (
            (bloom is None or stored in bloom)
            and self._db.execute("SELECT 1 FROM seen WHERE fingerprint = ?", (stored,)).fetchone()
            is not None
        )

    def seen(self, fingerprints: Sequence[bytes]) -> list[bool]:
        self._check_open()
        bloom = self._seen_filter.now()
        seen_before = self._seen_before if self._seen_ttl is None else self._seen_live
        with self._guard:
            return [seen_before(fingerprint, bloom) for fingerprint in fingerprints]

    # -- changes left by other processes ---------------------------------------------

    def _read_inbox(self) -> int:
        """Apply the changes other processes left in the ``inbox`` table; return how many."""
        with self._guard:
            rows = self._db.execute(
                "SELECT id, data FROM inbox WHERE id > ? ORDER BY id", (self._inbox_done,)
            ).fetchall()
        for _, data in rows:
            try:
                what, host, *args = msgspec.msgpack.decode(data)
                apply_change(cast(Any, self), what, host, args)
            except (ValueError, TypeError, msgspec.DecodeError, CrawlqError) as exc:
                log.warning("job %s: a change in its inbox was not applied: %s", self.path, exc)
        if rows:
            try:
                with self._guard:
                    self._db.execute("DELETE FROM inbox WHERE id <= ?", (rows[-1][0],))
                self._inbox_done = 0
            except StoreFull:
                # Applied all the same: skip them until a delete goes through
                # (ids only restart from 1 in an empty table).
                self._inbox_done = rows[-1][0]
        return len(rows)

    # -- reading and changing host controls ----------------------------------------

    def host_counts(self, limit: int) -> HostList:
        self._check_open()
        now = self._clock()
        board = self._board
        hosts = {h.name: (h.count - h.leased, h.leased) for h in self._hosts.values() if h.count}

        with self._guard:  # what the log holds is not in the table yet
            since = fold(self._db.execute("SELECT data FROM ops ORDER BY id")).accepted

        def accepted(name: str) -> int:
            with self._guard:
                row = self._db.execute(
                    "SELECT accepted FROM hosts WHERE name = ?", (name,)
                ).fetchone()
            return (row[0] if row is not None else 0) + since.get(name, 0)

        blocked = board.blocked(now)
        return host_details(
            hosts, blocked, board.overrides, accepted, limit, now, lambda n: board.timing(n, now)
        )

    # -- host controls ----------------------------------------------------------

    def block_host(self, host: str, seconds: float | None) -> None:
        self._check_open()
        now = self._clock()
        if seconds is None:
            changed = self._board.unblock(host, now)
        else:
            changed = self._board.block(host, now + seconds, now)
        if changed or seconds is None:
            self._save_control(host)

    def set_host_policy(self, host: str, delay: float | None, concurrency: int | None) -> None:
        self._check_open()
        self._board.set_policy(host, delay, concurrency, self._clock())
        self._save_control(host)

    def host_policy(self, host: str) -> tuple[float | None, int | None]:
        self._check_open()
        return self._board.overrides.get(host, (None, None))

    def _save_control(self, name: str) -> None:
        """Write host ``name``'s block and policy to the job (its row goes when it has none)."""
        block = self._board.blocks.get(name)
        delay, concurrency = self._board.overrides.get(name, (None, None))
        try:
            with self._guard:
                if block is None and delay is None and concurrency is None:
                    self._db.execute("DELETE FROM controls WHERE name = ?", (name,))
                else:
                    until, pace = block if block is not None else (None, 0.0)
                    self._db.execute(
                        "INSERT OR REPLACE INTO controls (name, blocked_until, pace, delay,"
                        " concurrency) VALUES (?, ?, ?, ?, ?)",
                        (name, until, pace, delay, concurrency),
                    )
        except StoreFull as exc:
            raise StoreFull(
                f"{exc} (host {name}'s block and policy as changed are in effect in this "
                "process, not saved in the job: set them again once there is room)"
            ) from None

    def forget(self, fingerprints: Sequence[bytes]) -> int:
        self._check_open()
        self._flush(self._clock())  # every logged fingerprint is in the table now
        db = self._db
        with self._guard, transaction(db):
            removed = sum(
                db.execute("DELETE FROM seen WHERE fingerprint = ?", (fp,)).rowcount
                for fp in dict.fromkeys(fingerprints)
            )
            db.execute("UPDATE counters SET value = value - ? WHERE name = 'seen'", (removed,))
        self._seen_count -= removed
        return removed
