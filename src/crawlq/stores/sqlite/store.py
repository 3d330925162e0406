"""The SQLite store: a durable crawl job in one database file.

Two layers live in the one database (see ``schema.SCHEMA``):

- the **log** (``ops``, `log`): every ``add`` and ``ack`` appends one
  row and commits it before returning; it is the single ordered stream of
  writes;
- the **tables**: ``requests`` (indexed by ``(host, -priority, seq)``),
  ``scheduled`` (requests not due yet, indexed by due time: see `due`),
  ``hosts`` (row count, pacing time, a lower-bound hint of the best request),
  ``seen`` (fingerprints) and ``counters``. Every few thousand logged
  requests or acks, or a quarter second, a *flush* applies the log to the
  tables and deletes it, in one transaction; a thread copies the WAL into
  the database file (`checkpoints`), so no call waits for that.

After a crash, opening flushes whatever the log holds (one flush window at
most) and then reads only the ``hosts`` rows: O(1) in queued requests. Hosts
in memory (`hosts`) know where their next requests are; leases
(`leases`) live in memory only, so ``pop`` and ``release`` write
nothing (a release with an update or a delay logs it: see `finishing`); a
Bloom filter (`bloom`) keeps most lookups of new URLs off the disk. Every
SQL statement runs under the job's `Guard`.

Durability: ``synchronous=NORMAL`` (default) survives a process kill, not a
power loss; ``synchronous="full"`` also fsyncs every commit.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping, Sequence
from heapq import heappush
from pathlib import Path
from typing import Any, Final, cast

from ..._errors import ConfigError, FrontierClosed, StoreError
from ..._fingerprint import Fingerprinter
from ..._policy import Policy, Slot, order_key
from ..._request import Request, decode_request
from ..base import Counters, Entry, Refetch, StoreCounts
from . import log
from .checkpoints import Checkpoints
from .controls import SqliteControls
from .due import Scheduling
from .file import (
    Guard,
    JobLock,
    check_header,
    check_settings,
    connect,
    job_path,
    os_error,
    transaction,
    translate,
)
from .finishing import Finishing
from .hosts import Host, Row, revive
from .tables import JobTables

__all__ = ["OPTIONS", "SqliteStore", "open_store"]

#: ``synchronous``: "normal" (default; survives a process kill) or "full"
#: (also survives power loss, one fsync per commit).
OPTIONS: Final = ("synchronous",)

_INBOX_EVERY: Final = 1.0  # seconds between two looks at the inbox (see controls)
_APPLYING_AT_OPEN: Final = (
    "opening it: the records in its log (the job was not closed, or its close found the "
    "disk full) must be written to its tables first"
)


def open_store(
    url: str, policy: Policy, fingerprinter: Fingerprinter, options: dict[str, Any]
) -> tuple[SqliteStore, str]:
    """Open or create the job that ``url`` names; see `job_path` for the forms."""
    synchronous = str(options.get("synchronous", "normal")).upper()
    if synchronous not in ("NORMAL", "FULL"):
        raise ConfigError(f"synchronous must be 'normal' or 'full', not {synchronous.lower()!r}")
    try:
        path = job_path(url).absolute()
        if not path.parent.exists():
            if url.startswith("sqlite:"):
                raise ConfigError(f"the directory of job {path} does not exist; create it first")
            path.parent.mkdir(parents=True)
        store = SqliteStore(path, policy, fingerprinter, synchronous=synchronous)
    except OSError as exc:  # a path the user may not read or write
        raise os_error(url, exc) from None
    return store, f"sqlite:///{path}"


class SqliteStore(JobTables, Scheduling, Finishing, SqliteControls):
    """Requests, fingerprints, pacing and state of one job, in one SQLite file."""

    needs_payload = True
    durable = True
    shared = False  # one process per job: the job lock sees to it

    def __init__(
        self, path: Path, policy: Policy, fingerprinter: Fingerprinter, *, synchronous: str
    ) -> None:
        self.path = path
        self.origin = f"sqlite:///{path}"
        self._policy = policy
        # Pacing times outlive the process, so they must be wall-clock times.
        self._clock = time.time if policy.clock is time.monotonic else policy.clock
        self._lifo = policy.lifo
        self._ack_delay = policy.ack_delay
        self._seen_ttl = policy.seen_ttl
        self._cap = policy.max_requests_per_host
        # Acks logged by nothing yet: the log's ack items, and when the first
        # of them was made. They ride the next write (see `_write_acks`).
        self._waiting_acks: list[tuple[int, str, float]] = []
        self._acks_since = 0.0
        self._closed = True
        self._guard = Guard(path)
        check_header(path)  # before the lock: a foreign file gets no lock file
        self._lock = JobLock(path)
        self._lock.acquire()
        try:
            self._db = connect(path, synchronous=synchronous)
            try:
                with translate(path, opening="opening it"):
                    check_settings(
                        self._db,
                        path,
                        {"fingerprint": fingerprinter.describe(), "lifo": policy.lifo},
                        write=True,
                    )
                # A job that was not closed (or whose close found the disk
                # full) has records in its log: they go to the tables first.
                # On a full disk that fails, and the open with it: StoreFull,
                # nothing changed.
                with translate(path, opening=_APPLYING_AT_OPEN):
                    log.apply(self._db, {}, {})
                with translate(path):
                    self._load()
                self._checkpoints = self._start_checkpoints(synchronous)
            except BaseException:
                self._db.close()
                raise
        except BaseException:
            self._lock.release()
            raise
        self._closed = False

    # -- opening --------------------------------------------------------------

    def _start_checkpoints(self, synchronous: str) -> Checkpoints | None:
        """Checkpoint in a thread (see `checkpoints`); if it cannot start, SQLite's own stay."""
        try:
            checkpoints = Checkpoints(self.path, synchronous)
        except sqlite3.Error:
            return None
        try:
            with translate(self.path):
                self._db.execute("PRAGMA wal_autocheckpoint=0")
        except BaseException:
            checkpoints.close()
            raise
        return checkpoints

    def _forget(self, slot: Slot) -> None:
        del self._hosts[slot.name]

    # -- adding ---------------------------------------------------------------

    def add(
        self,
        entries: Sequence[Entry],
        finished: Sequence[object] = (),
        *,
        lifo: bool | None = None,
        refetch: Sequence[Refetch | None] | None = None,
    ) -> list[bool]:
        self._check_open()
        again: list[Any] = []
        if refetch is not None:
            acks, again = self._refetches(finished, refetch)
        else:
            acks = self._current(finished) if finished else []
        waiting = self._waiting_acks
        bloom = self._seen_filter.now()
        seen_before = self._seen_before if self._seen_ttl is None else self._seen_live
        added: list[bool] = []
        batch_fingerprints: set[bytes] = set()
        items: list[tuple[int, str, int, int, bytes | None, bytes]] = []
        # Row ids whose fingerprint was recorded before, its seen_ttl passed.
        renewed: list[int] = []
        # Row ids of requests added scheduled: their due times.
        dues: dict[int, float] = {}
        ttl = self._seen_ttl
        next_id = self._next_id
        store_lifo = self._lifo
        cap = self._cap
        batch_accepted: dict[str, int] = {}
        capped = 0
        at = self._clock()
        # not_before is a time.time(); due times are in the store's clock.
        shift = 0.0 if self._clock is time.time else at - time.time()
        if lifo is None:
            lifo = store_lifo
        with self._guard:
            for fingerprint, host_name, request, payload in entries:
                if cap is not None and (
                    self._accepted_total(host_name) + batch_accepted.get(host_name, 0) >= cap
                ):
                    if request.dont_filter or not (
                        fingerprint in batch_fingerprints or seen_before(fingerprint, bloom)
                    ):
                        capped += 1  # a duplicate is a duplicate, not capped
                    added.append(False)
                    continue
                stored: bytes | None = None
                if not request.dont_filter:
                    stored = fingerprint
                    if stored in batch_fingerprints or seen_before(stored, bloom):
                        added.append(False)
                        continue
                    batch_fingerprints.add(stored)
                assert payload is not None
                row_id = next_id
                next_id += 1
                seq = order_key(row_id, lifo, store_lifo)
                items.append((row_id, host_name, -request.priority, seq, stored, payload))
                if request.not_before is not None and request.not_before + shift > at:
                    dues[row_id] = request.not_before + shift
                if ttl is not None and stored is not None and self._expired(stored):
                    renewed.append(row_id)
                if cap is not None:
                    batch_accepted[host_name] = batch_accepted.get(host_name, 0) + 1
                added.append(True)
            duplicates = len(added) - len(items) - capped
            if not items and not acks:
                self._capped += capped
                self._duplicates += duplicates
                return added
            logged: list[Any] = _logged(items, renewed, dues) if renewed or dues else items
            refetched: list[Any] = []
            if not acks and not waiting and not self._due_log:
                log.append(self._db, log.ADD, logged, at)  # the common add: its own commit
            else:
                refetched = self._refetch_items(again, next_id, at) if again else []
                records: list[log.Record] = []
                if items:
                    records.append((log.ADD, logged, at))
                if acks or waiting:
                    # Children, then the acks waiting and the parent's, commit
                    # together: an ack is never durable before earlier children.
                    ack_records = self._leases.ack_records(acks, self._board)
                    records.append((log.ACK, waiting + ack_records, None))
                if refetched:
                    records.append((log.REFETCH, refetched, None))
                self._log(*records)
                self._waiting_acks = []
            # Logged: now, and only now, change what this process remembers
            # (a write that raised, StoreFull say, leaves no trace in it).
            now = self._clock()
            self._capped += capped
            self._duplicates += duplicates
            self._next_id = next_id
            self._seen_count += len(batch_fingerprints) - len(renewed)
            self._unflushed_seen.update(dict.fromkeys(batch_fingerprints, at))
            self._seen_filter.add(batch_fingerprints, bloom, self._seen_count)
            known = self._accepted_known
            for name, count in batch_accepted.items():
                known[name] += count  # the cap read it: it is there
            touched: set[Host] = set()
            for row_id, host_name, negprio, seq, _, payload in items:
                if dues and row_id in dues:
                    self._schedule((dues[row_id], row_id, host_name, negprio, seq, payload, 0))
                    continue
                host = self._hosts.get(host_name)
                if host is None:
                    host = self._hosts[host_name] = self._revive(host_name)
                host.count += 1
                heappush(host.fresh, (negprio, seq, row_id, payload))
                self._unflushed[row_id] = payload
                host.improve((negprio, seq))
                touched.add(host)
        for host in touched:
            self._board.place(host, now)
        self._rows += len(items) - len(dues)
        if acks:
            self._acked(acks, now)
        if refetched:
            self._refetches_logged(refetched)
        self._after_write(now)
        return added

    def _revive(self, name: str) -> Host:
        host = revive(self._db, name, self._host_ids.get(name))
        if host.id is not None:
            self._host_ids[name] = host.id
        self._board.adopt(host)
        return host

    # -- popping --------------------------------------------------------------

    def _look_at_inbox(self, now: float) -> None:
        """Apply the host changes other processes left in the inbox; next in a second."""
        self._inbox_at = now + _INBOX_EVERY
        self._read_inbox()

    def pop(self) -> Request | None:
        self._check_open()
        now = self._clock()
        if now >= self._inbox_at:
            self._look_at_inbox(now)
        if self._waiting_acks and now - self._acks_since >= self._ack_delay:
            self._housekeep(self._write_acks, now)  # a full disk: they wait on
        leases = self._leases
        if leases.deadlines.items and leases.deadlines.items[0] <= now:
            for row_id in leases.expired(now):
                self._requeue(row_id, now, expired=True)
        if now >= self._next_due:
            self._make_due(now)
        board = self._board
        db = self._db
        with self._guard:
            while True:
                slot = board.take(now)
                if slot is None:
                    return None
                host = cast(Host, slot)
                found = host.next_row(db)
                if found is None:
                    host.head = None
                    host.exact = True
                    board.place(host, now)
                    continue
                row, from_disk = found
                key = (row[1], row[2])
                if key != host.head:
                    # The stored hint was optimistic: file the host by its true head.
                    host.head = key
                    host.exact = True
                    board.place(host, now)
                    continue
                host.take_row(db, key, from_disk)
                board.popped(host, now)
                self._popped += 1
                return self._lease(host, row, now)

    def _lease(self, host: Host, row: Row, now: float) -> Request:
        request = decode_request(row[3])
        request._lease = self._leases.take(self, host, row[0], (row[1], row[2]), now)
        return request

    # -- reading --------------------------------------------------------------

    def counts(self) -> StoreCounts:
        self._check_open()
        now = self._clock()
        if now >= self._next_due:
            self._make_due(now)
        leased = len(self._leases)
        counters = Counters(
            accepted=self._next_id - 1 - self._refetched,
            duplicates=self._duplicates,
            capped=self._capped,
            popped=self._popped,
            acked=self._acked_total(),
            released=self._released,
            expired=self._expiries,
            refetched=self._refetched,
        )
        return StoreCounts(
            self._rows - leased,
            leased,
            self._seen_count,
            counters,
            self._scheduled,
            self._revisits,
            self._next_due_in(now),
        )

    def next_ready_in(self) -> float | None:
        self._check_open()
        now = self._clock()
        if now >= self._inbox_at:
            self._look_at_inbox(now)
        self._acks_due(now)
        if now >= self._next_due:
            self._make_due(now)
        if not self._rows and not self._scheduled:
            return None
        soonest = self._board.next_ready_in(now)
        due = self._next_due_in(now)
        if due is not None:
            soonest = due if soonest is None else min(soonest, due)
        expiry = self._leases.deadlines.next_in(now)
        if expiry is not None:
            soonest = expiry if soonest is None else min(soonest, expiry)
        return soonest

    def extra_stats(self) -> dict[str, float]:
        return self._seen_filter.stats()

    def load_state(self) -> dict[str, Any]:
        self._check_open()
        with self._guard:
            rows = self._db.execute("SELECT key, value FROM state").fetchall()
        return {key: log.decode(value) for key, value in rows}

    def save_state(self, state: Mapping[str, Any]) -> None:
        self._check_open()
        encoded = [(key, log.encode(value)) for key, value in state.items()]
        db = self._db
        with self._guard, transaction(db):
            db.execute("DELETE FROM state")
            db.executemany("INSERT INTO state (key, value) VALUES (?, ?)", encoded)

    # -- closing --------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise FrontierClosed(f"job {self.path} is closed")

    def close(self) -> None:
        """Flush the log, save pacing times, close the database, release the lock."""
        if self._closed:
            return
        self._closed = True
        try:
            if not self._guard.damaged:
                self._flush(self._clock())
                with self._guard:
                    self._db.execute("PRAGMA optimize")
        except StoreError:
            pass  # the log is durable: the next open applies it
        finally:
            self._seen_filter.join(timeout=5)
            if self._checkpoints is not None:
                self._checkpoints.close()  # first: the last connection closed removes the WAL
            self._db.close()
            self._lock.release()


def _logged(items: list[Any], renewed: list[int], dues: dict[int, float]) -> list[Any]:
    """The ADD record's items: a 7th item marks a renewed fingerprint (its time, not a
    new row), an 8th the due time of a request added scheduled (then the 7th is 0 or 1)."""
    again = set(renewed)
    logged = []
    for item in items:
        row_id = item[0]
        due = dues.get(row_id)
        if due is not None:
            logged.append((*item, 1 if row_id in again else 0, due))
        elif row_id in again:
            logged.append((*item, 1))
        else:
            logged.append(item)
    return logged
