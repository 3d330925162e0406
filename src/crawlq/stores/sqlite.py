"""The SQLite store: a durable crawl job in one database file.

Two layers live in the one database (see ``_sqlite_job.SCHEMA``):

- the **log** (``ops``): every ``add`` and ``ack`` appends one row and commits
  it before returning. An append writes a page or two at the end of a table,
  so a durable call costs about one page write, however its requests spread
  over hosts. The log is the single ordered stream of writes: a parent's ack
  is never durable before the children added while it was leased;
- the **tables**: ``requests`` (indexed by ``(host, -priority, seq)``, where
  ``seq`` is the acceptance number, negated for LIFO), ``hosts`` (row count,
  pacing time, a lower-bound hint of the best request), ``seen``
  (fingerprints) and ``counters``. Every few thousand logged requests, or a
  quarter second, a *flush* applies the log to the tables and deletes it, in
  one transaction: sorted bulk writes share pages, so the indexed writes cost
  a fraction of one transaction per call.

After a crash, opening flushes whatever the log holds (one flush window at
most) and then reads only the ``hosts`` rows: O(1) in queued requests.
Requests logged since the last flush are also kept in memory (each host's
``fresh`` heap) so they can be handed out at once.

Leases live in memory only: after a crash every request that was not acked is
queued again, which is what a lease ending means, so ``pop`` and ``release``
write nothing. Each host with requests keeps a `Slot` in memory holding the
key of its best request, a cursor into the index and a small read-ahead; a pop
from disk costs one indexed query per few requests. A Bloom filter, rebuilt
in a background thread after open, keeps most lookups of new URLs off the
disk; until it is ready, lookups go to disk.

Durability: ``synchronous=NORMAL`` (default) survives a process kill, not a
power loss; ``synchronous="full"`` also fsyncs every commit.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from heapq import heappop, heappush
from pathlib import Path
from typing import Any, Final, cast

import msgspec

from .._bloom import BloomFilter
from .._errors import ConfigError, CorruptStore, FrontierClosed, LeaseError, StoreError
from .._fingerprint import Fingerprinter
from .._policy import DELAYED, Board, Policy, Slot
from .._request import Request, decode_request
from ._sqlite_job import (
    JobLock,
    check_header,
    check_settings,
    connect,
    job_path,
    os_error,
    raise_translated,
    translate,
)
from .base import Entry, HostCount, StoreCounts, order_key

__all__ = ["OPTIONS", "SqliteStore", "open_store"]

#: ``synchronous``: "normal" (default; survives a process kill) or "full"
#: (also survives power loss, one fsync per commit).
OPTIONS: Final = ("synchronous",)

_Key = tuple[int, int]  # (-priority, seq)
_Row = tuple[int, int, int, bytes]  # id, -priority, seq, payload
_Fresh = tuple[int, int, int, bytes]  # -priority, seq, id, payload (heap order)

_ADD: Final = 1
_ACK: Final = 2
_FLUSH_ROWS: Final = 4096  # logged requests and acks held before a flush
_FLUSH_OPS: Final = 1024  # log rows held before a flush
_FLUSH_AGE: Final = 0.25  # seconds a log row may wait for a flush
_READ_AHEAD: Final = 4  # requests read from a host's index at once
_BLOOM_MIN_CAPACITY: Final = 1 << 20
_LOWEST_KEY: Final = (-(2**31) - 1, 0)


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


class _Host(Slot):
    """A host of the job: its slot, and where its next requests are."""

    __slots__ = ("ahead", "count", "cursor", "exact", "fresh", "hidden", "id", "rewound")

    def __init__(self, name: str, host_id: int | None) -> None:
        super().__init__(name)
        #: Row id in ``hosts``; None until a flush writes the host.
        self.id = host_id
        #: Requests of this host, leased ones included, acked ones not.
        self.count = 0
        #: Index rows up to this key were handed out (or are hidden); None: none.
        self.cursor: _Key | None = None
        #: The next rows after the cursor, read ahead; None: read at next pop.
        self.ahead: list[_Row] | None = [] if host_id is None else None
        #: Requests logged since the last flush and not leased (a heap).
        self.fresh: list[_Fresh] = []
        #: Keys of rows in the tables that must not be handed out: leased, or
        #: acked and waiting for the flush to delete them.
        self.hidden: set[_Key] = set()
        #: True while some hidden rows may lie after the cursor (it moved back).
        self.rewound = False
        #: False while ``head`` is the stored hint, a lower bound of the truth.
        self.exact = host_id is None


class _Guard:
    """`SqliteStore._guard`: a plain context manager, as it runs several times per request.

    Refuses to start once the job met damage; turns sqlite3 errors into
    crawlq's; marks the job damaged on `CorruptStore`.
    """

    __slots__ = ("_store",)

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def __enter__(self) -> None:
        if self._store._damaged:
            raise CorruptStore(f"job {self._store.path} is damaged; it was not written since")

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: Any
    ) -> None:
        if error is None:
            return
        try:
            if isinstance(error, sqlite3.Error):
                raise_translated(self._store.path, error)
        except CorruptStore:
            self._store._damaged = True
            raise
        if isinstance(error, CorruptStore):
            self._store._damaged = True


class SqliteStore:
    """Requests, fingerprints, pacing and state of one job, in one SQLite file."""

    needs_payload = True
    shared = False  # one process per job: the job lock sees to it

    def __init__(
        self, path: Path, policy: Policy, fingerprinter: Fingerprinter, *, synchronous: str
    ) -> None:
        self.path = path
        self._policy = policy
        # Pacing times outlive the process, so they must be wall-clock times.
        self._clock = time.time if policy.clock is time.monotonic else policy.clock
        self._lifo = policy.lifo
        self._lease_timeout = policy.lease_timeout
        self._closed = True
        self._damaged = False
        self._guard_context = _Guard(self)
        check_header(path)  # before the lock: a foreign file gets no lock file
        self._lock = JobLock(path)
        self._lock.acquire()
        try:
            self._db = connect(path, synchronous=synchronous)
            try:
                with translate(path):
                    check_settings(
                        self._db,
                        path,
                        {"fingerprint": fingerprinter.describe(), "lifo": policy.lifo},
                        write=True,
                    )
                    self._apply_log({})
                    self._load()
            except BaseException:
                self._db.close()
                raise
        except BaseException:
            self._lock.release()
            raise
        self._closed = False

    # -- opening --------------------------------------------------------------

    def _load(self) -> None:
        db = self._db
        counters = dict(db.execute("SELECT name, value FROM counters").fetchall())
        self._seen_count: int = counters["seen"]
        self._next_id: int = counters["next_id"]
        self._board = Board(self._policy, self._forget)
        self._hosts: dict[str, _Host] = {}
        self._host_ids: dict[str, int] = {}
        self._rows = 0
        self._leases: dict[int, tuple[int, int, int, _Host]] = {}  # id -> lease no, key, host
        self._deadlines: deque[tuple[float, int, int]] = deque()
        self._lease_numbers = 0
        # Since the last flush: logged rows not yet in the tables (id -> payload),
        # acks of rows that are in the tables, fingerprints, and log rows.
        self._unflushed: dict[int, bytes] = {}
        self._unflushed_acks: dict[int, tuple[_Host, _Key]] = {}
        self._unflushed_seen: set[bytes] = set()
        self._log_rows = 0
        self._log_since = 0.0
        now = self._clock()
        rows = db.execute(
            "SELECT id, name, queued, ready_at, head_negprio, head_seq FROM hosts WHERE queued > 0"
        )
        for host_id, name, queued, ready_at, head_negprio, head_seq in rows:
            host = _Host(name, host_id)
            host.count = queued
            host.ready_at = ready_at
            # The stored head is never worse than the truth (an add improves
            # it, a pop or an ack does not worsen it), so filing the host by it
            # keeps the order; its first pop corrects it.
            host.head = (head_negprio, head_seq) if head_negprio is not None else _LOWEST_KEY
            self._hosts[name] = host
            self._host_ids[name] = host_id
            self._rows += queued
            self._board.place(host, now)
        self._bloom: BloomFilter | None = None
        self._start_bloom(max(_BLOOM_MIN_CAPACITY, 2 * self._seen_count))

    def _start_bloom(self, capacity: int) -> None:
        """Build the filter from the seen table in a thread; lookups use disk until then."""
        self._bloom = None
        self._bloom_pending: list[bytes] = []
        self._bloom_ready: BloomFilter | None = None
        self._bloom_thread = threading.Thread(
            target=self._build_bloom, args=(capacity,), name="crawlq-bloom", daemon=True
        )
        self._bloom_thread.start()

    def _build_bloom(self, capacity: int) -> None:
        bloom = BloomFilter(capacity)
        try:
            reader = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            try:
                for (fingerprint,) in reader.execute("SELECT fingerprint FROM seen"):
                    bloom.add(fingerprint)
            finally:
                reader.close()
        except sqlite3.Error:
            return  # lookups simply stay on disk
        self._bloom_ready = bloom

    def _bloom_now(self) -> BloomFilter | None:
        """The filter if it is ready, adopting a freshly built one."""
        if self._bloom is None and self._bloom_ready is not None:
            bloom = self._bloom_ready
            bloom.update(self._bloom_pending)
            self._bloom_pending = []
            self._bloom = bloom
        return self._bloom

    def _forget(self, slot: Slot) -> None:
        del self._hosts[slot.name]

    def _guard(self) -> _Guard:
        """Translate sqlite3 errors; after meeting damage, write nothing more."""
        return self._guard_context

    # -- the log and the flush --------------------------------------------------

    def _log(self, kind: int, items: list[Any]) -> None:
        """Append one operation to the log; durable when this returns."""
        self._db.execute("INSERT INTO ops (data) VALUES (?)", (_encode([kind, items]),))

    def _after_write(self, now: float) -> None:
        if not self._log_rows:
            self._log_since = now
        self._log_rows += 1
        if (
            self._log_rows >= _FLUSH_OPS
            or len(self._unflushed) + len(self._unflushed_acks) >= _FLUSH_ROWS
            or now - self._log_since >= _FLUSH_AGE
        ):
            self._flush(now)

    def _apply_log(self, ready_at: Mapping[str, float]) -> dict[str, int]:
        """Apply the log to the tables and empty it, in one transaction.

        Returns the ids of the hosts it wrote. ``ready_at`` gives pacing times
        to save for hosts known in memory.
        """
        db = self._db
        log = db.execute("SELECT id, data FROM ops ORDER BY id").fetchall()
        if not log and not ready_at:
            return {}
        paced = dict(ready_at)
        added: dict[int, tuple[str, int, int, bytes]] = {}
        fingerprints: list[tuple[bytes]] = []
        acked: list[tuple[int]] = []
        delta: Counter[str] = Counter()
        last_id = 0
        for _, data in log:
            kind, items = _decode(data)
            if kind == _ADD:
                for row_id, host, negprio, seq, fingerprint, payload in items:
                    added[row_id] = (host, negprio, seq, payload)
                    last_id = max(last_id, row_id)
                    if fingerprint:
                        fingerprints.append((fingerprint,))
            else:
                for row_id, host, host_ready_at in items:
                    if added.pop(row_id, None) is None:
                        acked.append((row_id,))
                        delta[host] -= 1
                    paced[host] = max(paced.get(host, 0.0), host_ready_at)
        best: dict[str, _Key] = {}
        for host, negprio, seq, _ in added.values():
            delta[host] += 1
            key = (negprio, seq)
            if host not in best or key < best[host]:
                best[host] = key
        db.execute("BEGIN IMMEDIATE")
        try:
            host_ids = self._resolve_hosts(delta.keys() | paced.keys())
            fingerprints.sort()
            db.executemany("INSERT OR IGNORE INTO seen (fingerprint) VALUES (?)", fingerprints)
            db.executemany(
                "INSERT INTO requests (id, host, negprio, seq, payload) VALUES (?, ?, ?, ?, ?)",
                sorted(
                    (row_id, host_ids[host], negprio, seq, payload)
                    for row_id, (host, negprio, seq, payload) in added.items()
                ),
            )
            db.executemany("DELETE FROM requests WHERE id = ?", acked)
            db.executemany(
                "UPDATE hosts SET queued = queued + ?,"
                " head_negprio = CASE WHEN ? IS NOT NULL AND (head_negprio IS NULL OR queued = 0"
                "   OR (?, ?) < (head_negprio, head_seq)) THEN ? ELSE head_negprio END,"
                " head_seq = CASE WHEN ? IS NOT NULL AND (head_negprio IS NULL OR queued = 0"
                "   OR (?, ?) < (head_negprio, head_seq)) THEN ? ELSE head_seq END"
                " WHERE id = ?",
                [
                    (change, *_hint(best.get(host), 0), *_hint(best.get(host), 1), host_ids[host])
                    for host, change in delta.items()
                ],
            )
            db.executemany(
                "UPDATE hosts SET ready_at = max(ready_at, ?) WHERE id = ?",
                [(when, host_ids[host]) for host, when in paced.items()],
            )
            if log:
                next_id = last_id + 1  # ids of requests acked before this flush count too
                db.execute(
                    "UPDATE counters SET value = CASE name WHEN 'seen' THEN value + ?"
                    " ELSE max(value, ?) END WHERE name IN ('seen', 'next_id')",
                    (len(fingerprints), next_id),
                )
                db.execute("DELETE FROM ops WHERE id <= ?", (log[-1][0],))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return host_ids

    def _flush(self, now: float) -> None:
        """Apply the log to the tables, then move fresh requests to the index."""
        paced = {h.name: h.ready_at for h in self._hosts.values() if h.ready_at > now}
        with self._guard():
            host_ids = self._apply_log(paced)
        self._host_ids.update(host_ids)
        for host, key in self._unflushed_acks.values():
            host.hidden.discard(key)
        for host in self._hosts.values():
            if host.id is None:
                host.id = host_ids.get(host.name)
            if host.fresh:
                # The fresh requests are in the index now: read them from there.
                lowest = host.fresh[0]
                self._rewind(host, (lowest[0], lowest[1]))
                host.fresh = []
            # Fresh requests leased before the flush are in the index now too,
            # possibly after the cursor: the next scan must skip them.
            host.rewound = bool(host.hidden)
        self._unflushed.clear()
        self._unflushed_acks.clear()
        self._unflushed_seen.clear()
        self._log_rows = 0

    def _resolve_hosts(self, names: set[str]) -> dict[str, int]:
        known = self._host_ids if hasattr(self, "_host_ids") else {}
        resolved = {name: known[name] for name in names if name in known}
        db = self._db
        for name in names - resolved.keys():
            row = db.execute("SELECT id FROM hosts WHERE name = ?", (name,)).fetchone()
            if row is None:
                cursor = db.execute("INSERT INTO hosts (name) VALUES (?)", (name,))
                resolved[name] = cast(int, cursor.lastrowid)
            else:
                resolved[name] = row[0]
        return resolved

    # -- adding ---------------------------------------------------------------

    def add(
        self, entries: Sequence[Entry], finished: Sequence[object] = (), *, lifo: bool | None = None
    ) -> list[bool]:
        self._check_open()
        acks = self._current(finished) if finished else []
        db = self._db
        bloom = self._bloom_now()
        unflushed_seen = self._unflushed_seen
        seen_before = self._seen_before
        added: list[bool] = []
        batch_fingerprints: set[bytes] = set()
        items: list[tuple[int, str, int, int, bytes | None, bytes]] = []
        next_id = self._next_id
        store_lifo = self._lifo
        if lifo is None:
            lifo = store_lifo
        with self._guard():
            for fingerprint, host_name, request, payload in entries:
                stored: bytes | None = None
                if not request.dont_filter:
                    stored = fingerprint[:16]
                    if stored in batch_fingerprints or seen_before(stored, bloom):
                        added.append(False)
                        continue
                    batch_fingerprints.add(stored)
                assert payload is not None
                row_id = next_id
                next_id += 1
                seq = order_key(row_id, lifo, store_lifo)
                items.append((row_id, host_name, -request.priority, seq, stored, payload))
                added.append(True)
            if not items and not acks:
                return added
            if not acks:
                self._log(_ADD, items)
            else:
                # Children and the parent's ack commit together, children first.
                db.execute("BEGIN IMMEDIATE")
                try:
                    if items:
                        self._log(_ADD, items)
                    self._log(_ACK, self._ack_records(acks))
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
        # Logged: now, and only now, change what this process remembers.
        now = self._clock()
        self._next_id = next_id
        self._seen_count += len(batch_fingerprints)
        unflushed_seen |= batch_fingerprints
        if bloom is not None:
            bloom.update(batch_fingerprints)
            if len(bloom) > 2 * bloom.capacity:
                self._start_bloom(2 * self._seen_count)
        else:
            self._bloom_pending.extend(batch_fingerprints)
        touched: set[_Host] = set()
        for row_id, host_name, negprio, seq, _, payload in items:
            host = self._hosts.get(host_name)
            if host is None:
                host = self._hosts[host_name] = self._revive(host_name)
            host.count += 1
            heappush(host.fresh, (negprio, seq, row_id, payload))
            self._unflushed[row_id] = payload
            self._improve(host, (negprio, seq))
            touched.add(host)
        for host in touched:
            if host.state != DELAYED:
                self._board.place(host, now)
        self._rows += len(items)
        if acks:
            self._acked(acks, now)
        self._after_write(now)
        return added

    def _seen_before(self, stored: bytes, bloom: BloomFilter | None) -> bool:
        """Whether a 16-byte fingerprint is recorded (committed, flushed or not)."""
        return stored in self._unflushed_seen or (
            (bloom is None or stored in bloom)
            and self._db.execute("SELECT 1 FROM seen WHERE fingerprint = ?", (stored,)).fetchone()
            is not None
        )

    def _revive(self, name: str) -> _Host:
        """Make the in-memory host for a name that has no requests now.

        Its pacing time comes from its row, if it has one: a host that was
        idle when the job was opened still waits out its delay.
        """
        host_id = self._host_ids.get(name)
        if host_id is None:
            row = self._db.execute(
                "SELECT id, ready_at FROM hosts WHERE name = ?", (name,)
            ).fetchone()
        else:
            row = self._db.execute(
                "SELECT id, ready_at FROM hosts WHERE id = ?", (host_id,)
            ).fetchone()
        if row is not None:
            host_id = self._host_ids[name] = row[0]
        host = _Host(name, host_id)
        host.ahead = []  # no rows of it in the index: it had no requests
        host.exact = True
        host.ready_at = row[1] if row is not None else 0.0
        return host

    def _improve(self, host: _Host, key: _Key) -> None:
        """Record that a request with ``key`` is available on this host."""
        head = host.head
        if head is None or key < head:
            # Better than the best known (exact or a lower bound): exact now.
            host.head = key
            host.exact = True

    def _rewind(self, host: _Host, key: _Key) -> None:
        """A row with ``key`` is in the index and available: read from it again."""
        cursor = host.cursor
        if cursor is not None and key <= cursor:
            host.cursor = (key[0], key[1] - 1)
            host.rewound = bool(host.hidden)
        host.ahead = None

    # -- popping --------------------------------------------------------------

    def pop(self) -> Request | None:
        self._check_open()
        now = self._clock()
        if self._deadlines and self._deadlines[0][0] <= now:
            self._expire(now)
        board = self._board
        with self._guard():
            while True:
                slot = board.take(now)
                if slot is None:
                    return None
                host = cast(_Host, slot)
                if host.ahead is None:
                    host.ahead = self._scan(host)
                ahead = host.ahead
                fresh = host.fresh
                from_disk = bool(ahead) and (not fresh or (ahead[0][1], ahead[0][2]) < fresh[0][:2])
                if from_disk:
                    row = ahead[0]
                elif fresh:
                    negprio, seq, row_id, payload = fresh[0]
                    row = (row_id, negprio, seq, payload)
                else:
                    host.head = None
                    host.exact = True
                    board.place(host, now)
                    continue
                key = (row[1], row[2])
                if key != host.head:
                    # The stored hint was optimistic: file the host by its true head.
                    host.head = key
                    host.exact = True
                    board.place(host, now)
                    continue
                if from_disk:
                    del ahead[0]
                    host.cursor = key
                    if not ahead:
                        host.ahead = self._scan(host)
                else:
                    heappop(fresh)
                host.head = self._head(host)
                host.exact = True
                board.popped(host, now)
                return self._lease(host, row, now)

    @staticmethod
    def _head(host: _Host) -> _Key | None:
        ahead = host.ahead
        fresh = host.fresh
        disk = (ahead[0][1], ahead[0][2]) if ahead else None
        new = (fresh[0][0], fresh[0][1]) if fresh else None
        if disk is None or (new is not None and new < disk):
            return new
        return disk

    def _scan(self, host: _Host) -> list[_Row]:
        """Read the host's next requests after its cursor from the index.

        Rows are handed out in key order, so hidden rows lie at or before the
        cursor unless it moved back; then reading as many more rows as are
        hidden after it is enough.
        """
        if host.id is None:
            return []
        after = 0
        if host.rewound:
            cursor = host.cursor
            after = sum(1 for key in host.hidden if cursor is None or key > cursor)
            host.rewound = after > 0
        wanted = _READ_AHEAD + after
        if host.cursor is None:
            rows = self._db.execute(
                "SELECT id, negprio, seq, payload FROM requests WHERE host = ?"
                " ORDER BY negprio, seq LIMIT ?",
                (host.id, wanted),
            ).fetchall()
        else:
            rows = self._db.execute(
                "SELECT id, negprio, seq, payload FROM requests WHERE host = ?"
                " AND (negprio, seq) > (?, ?) ORDER BY negprio, seq LIMIT ?",
                (host.id, *host.cursor, wanted),
            ).fetchall()
        if after:
            hidden = host.hidden
            rows = [row for row in rows if (row[1], row[2]) not in hidden]
        return rows[:_READ_AHEAD]

    def _lease(self, host: _Host, row: _Row, now: float) -> Request:
        request = decode_request(row[3])
        self._lease_numbers += 1
        number = self._lease_numbers
        self._leases[row[0]] = (number, row[1], row[2], host)
        host.hidden.add((row[1], row[2]))
        self._deadlines.append((now + self._lease_timeout, row[0], number))
        request._lease = (self, row[0], number)
        return request

    def _expire(self, now: float) -> None:
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            _, row_id, number = deadlines.popleft()
            lease = self._leases.get(row_id)
            if lease is not None and lease[0] == number:
                self._requeue(row_id, now)

    def _requeue(self, row_id: int, now: float) -> None:
        _, negprio, seq, host = self._leases.pop(row_id)
        host.leased -= 1
        key = (negprio, seq)
        host.hidden.discard(key)
        payload = self._unflushed.get(row_id)
        if payload is not None:
            heappush(host.fresh, (negprio, seq, row_id, payload))
        else:
            self._rewind(host, key)
        self._improve(host, key)
        if host.state != DELAYED:
            self._board.place(host, now)

    # -- finishing ------------------------------------------------------------

    def _current(self, leases: Sequence[object]) -> list[int]:
        """Row ids of the handles that still name their lease; stale ones are dropped."""
        current = []
        for lease in leases:
            if type(lease) is not tuple or len(lease) != 3 or lease[0] is not self:
                if isinstance(lease, tuple) and lease and _same_job(lease[0], self):
                    continue  # handed out before the job was reopened: that lease ended
                raise LeaseError(
                    f"{lease!r} is not a lease of this frontier; only requests returned "
                    "by this frontier's pop() can be acked or released"
                )
            entry = self._leases.get(lease[1])
            if entry is not None and entry[0] == lease[2]:
                current.append(lease[1])
        return current

    def ack(self, leases: Sequence[object]) -> None:
        self._check_open()
        row_ids = self._current(leases)
        if not row_ids:
            return
        with self._guard():
            self._log(_ACK, self._ack_records(row_ids))
        self._acked(row_ids, self._clock())
        self._after_write(self._clock())

    def _ack_records(self, row_ids: list[int]) -> list[tuple[int, str, float]]:
        # Each ack carries its host's pacing time, so a crash keeps it.
        leases = self._leases
        return [
            (row_id, host.name, host.ready_at)
            for row_id in row_ids
            for host in (leases[row_id][3],)
        ]

    def _acked(self, row_ids: list[int], now: float) -> None:
        """Update memory after the acks of ``row_ids`` were logged."""
        touched: set[_Host] = set()
        for row_id in row_ids:
            _, negprio, seq, host = self._leases.pop(row_id)
            host.leased -= 1
            host.count -= 1
            if self._unflushed.pop(row_id, None) is not None:
                host.hidden.discard((negprio, seq))  # never reached the tables
            else:
                self._unflushed_acks[row_id] = (host, (negprio, seq))
            touched.add(host)
        self._rows -= len(row_ids)
        for host in touched:
            if host.state != DELAYED:
                self._board.place(host, now)
        self._trim_deadlines()

    def release(self, leases: Sequence[object]) -> None:
        self._check_open()
        now = self._clock()
        for row_id in self._current(leases):
            self._requeue(row_id, now)
        self._trim_deadlines()

    def _trim_deadlines(self) -> None:
        deadlines = self._deadlines
        leases = self._leases
        while deadlines and (
            (lease := leases.get(deadlines[0][1])) is None or lease[0] != deadlines[0][2]
        ):
            deadlines.popleft()
        if len(deadlines) > 2 * len(leases) + 1024:
            self._deadlines = deque(
                d for d in deadlines if (lease := leases.get(d[1])) is not None and lease[0] == d[2]
            )

    # -- reading --------------------------------------------------------------

    def seen(self, fingerprints: Sequence[bytes]) -> list[bool]:
        self._check_open()
        bloom = self._bloom_now()
        seen_before = self._seen_before
        with self._guard():
            return [seen_before(fingerprint[:16], bloom) for fingerprint in fingerprints]

    def counts(self) -> StoreCounts:
        self._check_open()
        leased = len(self._leases)
        return StoreCounts(self._rows - leased, leased, self._seen_count)

    def host_counts(self, limit: int) -> list[HostCount]:
        self._check_open()
        hosts = sorted(
            (h for h in self._hosts.values() if h.count),
            key=lambda h: (-(h.count - h.leased), -h.leased, h.name),
        )
        return [HostCount(h.name, h.count - h.leased, h.leased) for h in hosts[:limit]]

    def next_ready_in(self) -> float | None:
        self._check_open()
        if not self._rows:
            return None
        now = self._clock()
        soonest = self._board.next_ready_in(now)
        self._trim_deadlines()
        if self._deadlines:
            expiry = max(0.0, self._deadlines[0][0] - now)
            soonest = expiry if soonest is None else min(soonest, expiry)
        return soonest

    def extra_stats(self) -> dict[str, float]:
        bloom = self._bloom_now()
        if bloom is None:
            return {"bloom_ready": 0.0}
        return {
            "bloom_ready": 1.0,
            "bloom_capacity": float(bloom.capacity),
            "bloom_estimated_error_rate": bloom.estimated_error_rate(),
        }

    def load_state(self) -> dict[str, Any]:
        self._check_open()
        with self._guard():
            rows = self._db.execute("SELECT key, value FROM state").fetchall()
        return {key: _decode(value) for key, value in rows}

    def save_state(self, state: Mapping[str, Any]) -> None:
        self._check_open()
        encoded = [(key, _encode(value)) for key, value in state.items()]
        db = self._db
        with self._guard():
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM state")
                db.executemany("INSERT INTO state (key, value) VALUES (?, ?)", encoded)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

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
            if not self._damaged:
                self._flush(self._clock())
                with self._guard():
                    self._db.execute("PRAGMA optimize")
        except StoreError:
            pass  # the log is durable: the next open applies it
        finally:
            self._bloom_thread.join(timeout=5)
            self._db.close()
            self._lock.release()


_encode: Final = msgspec.msgpack.encode
_decode: Final = msgspec.msgpack.decode


def _hint(key: _Key | None, column: int) -> tuple[int | None, ...]:
    """Parameters of the head-hint CASE for one column: (test, negprio, seq, value)."""
    if key is None:
        return (None, None, None, None)
    return (key[0], key[0], key[1], key[column])


def _same_job(owner: object, store: SqliteStore) -> bool:
    return isinstance(owner, SqliteStore) and owner.path == store.path
