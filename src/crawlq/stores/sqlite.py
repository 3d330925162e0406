"""The SQLite store: a durable crawl job in one database file.

Layout (see ``_sqlite_job.SCHEMA``): ``requests`` holds every queued or leased
request, indexed by ``(host, -priority, seq)`` where ``seq`` is the acceptance
number (negated for LIFO); ``hosts`` holds each host's count of requests, its
pacing time and a hint of its best request; ``seen`` holds fingerprints;
``meta``, ``counters`` and ``state`` hold settings, counts and the crawler's
key/value state.

Durability: every ``add`` and ``ack`` is one transaction, committed to the WAL
before it returns (``synchronous=NORMAL``: safe against a process kill, not
against power loss; ``synchronous="full"`` adds an fsync per commit). Leases
live in memory only: they are not worth a write per pop, because after a crash
every request that was not acked is queued again, which is what a lease
ending means. ``release`` therefore writes nothing either.

Memory: requests stay on disk. Each host with queued requests keeps a `Slot`
in memory with the key of its best request and a cursor into the index; a pop
reads that host's next two requests with one indexed query. A Bloom filter,
rebuilt in a background thread after open, answers most "seen before?"
questions for new URLs without a disk lookup; until it is ready, every lookup
goes to disk.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, cast

import msgspec

from .._bloom import BloomFilter
from .._errors import ConfigError, FrontierClosed, LeaseError, StoreError
from .._fingerprint import Fingerprinter
from .._policy import DELAYED, Board, Policy, Slot
from .._request import Request, decode_request
from ._sqlite_job import JobLock, check_settings, connect, job_path, translate
from .base import Entry, HostCount, StoreCounts

__all__ = ["OPTIONS", "SqliteStore", "open_store"]

#: ``synchronous``: "normal" (default; survives a process kill) or "full"
#: (also survives power loss, one fsync per commit).
OPTIONS: Final = ("synchronous",)

_Key = tuple[int, int]  # (-priority, seq)
_BLOOM_MIN_CAPACITY: Final = 1 << 20


def open_store(
    url: str, policy: Policy, fingerprinter: Fingerprinter, options: dict[str, Any]
) -> tuple[SqliteStore, str]:
    """Open or create the job that ``url`` names; see `job_path` for the forms."""
    synchronous = str(options.get("synchronous", "normal")).upper()
    if synchronous not in ("NORMAL", "FULL"):
        raise ConfigError(f"synchronous must be 'normal' or 'full', not {synchronous.lower()!r}")
    path = job_path(url).absolute()
    if not path.parent.exists():
        if url.startswith("sqlite:"):
            raise ConfigError(f"the directory of job {path} does not exist; create it first")
        path.parent.mkdir(parents=True)
    store = SqliteStore(path, policy, fingerprinter, synchronous=synchronous)
    return store, f"sqlite:///{path}"


class _Host(Slot):
    """A host with requests on disk: its slot, row id, count and index cursor."""

    __slots__ = ("count", "cursor", "exact", "id")

    def __init__(self, name: str, host_id: int) -> None:
        super().__init__(name)
        self.id = host_id
        #: Rows of this host in ``requests``, leased ones included.
        self.count = 0
        #: Rows up to this key have been handed out (or deleted); None: none.
        self.cursor: _Key | None = None
        #: False while ``head`` is the stored hint, a lower bound of the truth.
        self.exact = False


class SqliteStore:
    """Requests, fingerprints, pacing and state of one job, in one SQLite file."""

    needs_payload = True

    def __init__(
        self, path: Path, policy: Policy, fingerprinter: Fingerprinter, *, synchronous: str
    ) -> None:
        self.path = path
        self._policy = policy
        # Pacing times outlive the process, so they must be wall-clock times.
        self._clock = time.time if policy.clock is time.monotonic else policy.clock
        self._lifo = policy.lifo
        self._lease_timeout = policy.lease_timeout
        self._lock = JobLock(path)
        self._lock.acquire()
        try:
            self._db = connect(path, synchronous=synchronous)
            with translate(path):
                check_settings(
                    self._db,
                    path,
                    {"fingerprint": fingerprinter.describe(), "lifo": policy.lifo},
                    write=True,
                )
                self._load()
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
        self._leases: dict[int, tuple[int, int, int, _Host]] = {}  # id -> lease no, key
        self._deadlines: deque[tuple[float, int, int]] = deque()
        self._lease_numbers = 0
        now = self._clock()
        rows = db.execute(
            "SELECT id, name, queued, ready_at, head_negprio, head_seq FROM hosts WHERE queued > 0"
        )
        for host_id, name, queued, ready_at, head_negprio, head_seq in rows:
            host = _Host(name, host_id)
            host.count = queued
            host.ready_at = ready_at
            # The stored head is never worse than the truth (it is updated
            # when an add improves it, not when a pop or ack worsens it), so
            # filing by it keeps the order; the pop corrects it.
            host.head = (head_negprio, head_seq) if head_negprio is not None else (-(2**31), 0)
            self._hosts[name] = host
            self._host_ids[name] = host_id
            self._rows += queued
            self._board.place(host, now)
        self._bloom: BloomFilter | None = None
        self._bloom_pending: list[bytes] = []
        self._start_bloom(max(_BLOOM_MIN_CAPACITY, 2 * self._seen_count))

    def _start_bloom(self, capacity: int) -> None:
        """Build the filter from the seen table in a thread; lookups use disk until then."""
        self._bloom = None
        self._bloom_pending = []
        self._bloom_ready: BloomFilter | None = None
        self._bloom_error: BaseException | None = None
        thread = threading.Thread(
            target=self._build_bloom, args=(capacity,), name="crawlq-bloom", daemon=True
        )
        self._bloom_thread = thread
        thread.start()

    def _build_bloom(self, capacity: int) -> None:
        bloom = BloomFilter(capacity)
        try:
            reader = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            try:
                for (fingerprint,) in reader.execute("SELECT fingerprint FROM seen"):
                    bloom.add(fingerprint)
            finally:
                reader.close()
        except BaseException as exc:  # reported, then lookups simply stay on disk
            self._bloom_error = exc
            return
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

    # -- adding ---------------------------------------------------------------

    def add(self, entries: Sequence[Entry]) -> list[bool]:
        self._check_open()
        db = self._db
        bloom = self._bloom_now()
        added: list[bool] = []
        new_fingerprints: list[tuple[bytes]] = []
        batch_fingerprints: set[bytes] = set()
        rows: list[tuple[int, str, int, int, bytes]] = []
        next_id = self._next_id
        lifo = self._lifo
        with translate(self.path):
            for fingerprint, host_name, request, payload in entries:
                if not request.dont_filter:
                    fingerprint = fingerprint[:16]
                    if fingerprint in batch_fingerprints or (
                        (bloom is None or fingerprint in bloom)
                        and db.execute(
                            "SELECT 1 FROM seen WHERE fingerprint = ?", (fingerprint,)
                        ).fetchone()
                    ):
                        added.append(False)
                        continue
                    batch_fingerprints.add(fingerprint)
                    new_fingerprints.append((fingerprint,))
                assert payload is not None
                row_id = next_id
                next_id += 1
                rows.append(
                    (row_id, host_name, -request.priority, -row_id if lifo else row_id, payload)
                )
                added.append(True)
            if not rows and not new_fingerprints:
                return added
            db.execute("BEGIN IMMEDIATE")
            try:
                host_ids = self._resolve_hosts({row[1] for row in rows})
                db.executemany("INSERT INTO seen (fingerprint) VALUES (?)", new_fingerprints)
                db.executemany(
                    "INSERT INTO requests (id, host, negprio, seq, payload) VALUES (?, ?, ?, ?, ?)",
                    [(r[0], host_ids[r[1]], r[2], r[3], r[4]) for r in rows],
                )
                per_host: dict[str, tuple[int, _Key]] = {}
                for _, name, negprio, seq, _ in rows:
                    count, best = per_host.get(name, (0, (negprio, seq)))
                    per_host[name] = (count + 1, min(best, (negprio, seq)))
                db.executemany(
                    "UPDATE hosts SET queued = queued + ?,"
                    " head_negprio = CASE WHEN head_negprio IS NULL OR queued = 0"
                    "   OR (?, ?) < (head_negprio, head_seq) THEN ? ELSE head_negprio END,"
                    " head_seq = CASE WHEN head_negprio IS NULL OR queued = 0"
                    "   OR (?, ?) < (head_negprio, head_seq) THEN ? ELSE head_seq END"
                    " WHERE id = ?",
                    [
                        (count, *best, best[0], *best, best[1], host_ids[name])
                        for name, (count, best) in per_host.items()
                    ],
                )
                db.execute(
                    "UPDATE counters SET value = CASE name WHEN 'seen' THEN value + ?"
                    " ELSE ? END WHERE name IN ('seen', 'next_id')",
                    (len(new_fingerprints), next_id),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        # Committed: now, and only now, change what this process remembers.
        self._next_id = next_id
        self._seen_count += len(new_fingerprints)
        self._host_ids.update(host_ids)
        if bloom is not None:
            for (fingerprint,) in new_fingerprints:
                bloom.add(fingerprint)
            if len(bloom) > 2 * bloom.capacity:
                self._start_bloom(2 * self._seen_count)
        else:
            self._bloom_pending.extend(f for (f,) in new_fingerprints)
        now = self._clock()
        for name, (count, best) in per_host.items():
            self._queued_more(name, host_ids[name], count, best, now)
        self._rows += len(rows)
        return added

    def _resolve_hosts(self, names: set[str]) -> dict[str, int]:
        known = self._host_ids
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

    def _queued_more(self, name: str, host_id: int, count: int, best: _Key, now: float) -> None:
        host = self._hosts.get(name)
        if host is None:
            host = self._hosts[name] = _Host(name, host_id)
            host.exact = True
            row = self._db.execute("SELECT ready_at FROM hosts WHERE id = ?", (host_id,)).fetchone()
            host.ready_at = row[0] if row else 0.0
        host.count += count
        self._improve(host, best)
        if host.state != DELAYED:
            self._board.place(host, now)

    def _improve(self, host: _Host, key: _Key) -> None:
        """A request with ``key`` became available on this host again."""
        head = host.head
        if head is None or key < head:
            # Better than the best known (exact or a lower bound): exact now.
            host.head = key
            host.exact = True
        cursor = host.cursor
        if cursor is not None and key <= cursor:
            host.cursor = (key[0], key[1] - 1)

    # -- popping --------------------------------------------------------------

    def pop(self) -> Request | None:
        self._check_open()
        now = self._clock()
        if self._deadlines and self._deadlines[0][0] <= now:
            self._expire(now)
        board = self._board
        with translate(self.path):
            while True:
                slot = board.take(now)
                if slot is None:
                    return None
                host = cast(_Host, slot)
                rows = self._scan(host, 2)
                if not rows:
                    host.head = None
                    board.place(host, now)
                    continue
                first = rows[0]
                key = (first[1], first[2])
                if key != host.head:
                    # The stored hint was optimistic: file the host by its true head.
                    host.head = key
                    host.exact = True
                    board.place(host, now)
                    continue
                host.cursor = key
                host.head = (rows[1][1], rows[1][2]) if len(rows) > 1 else None
                host.exact = True
                board.popped(host, now)
                return self._lease(host, first, now)

    def _scan(self, host: _Host, limit: int) -> list[tuple[int, int, int, bytes]]:
        """Return the host's next ``limit`` requests after its cursor that are not leased.

        At most ``host.leased`` of the rows after the cursor can be leased, so
        reading that many more is always enough.
        """
        wanted = limit + host.leased
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
        if host.leased:
            leases = self._leases
            rows = [row for row in rows if row[0] not in leases]
        return rows[:limit]

    def _lease(self, host: _Host, row: tuple[int, int, int, bytes], now: float) -> Request:
        request = decode_request(row[3])
        self._lease_numbers += 1
        number = self._lease_numbers
        self._leases[row[0]] = (number, row[1], row[2], host)
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
        self._improve(host, (negprio, seq))
        if host.state != DELAYED:
            self._board.place(host, now)

    # -- finishing ------------------------------------------------------------

    def _current(self, leases: Sequence[object]) -> list[int]:
        """Row ids of the handles that still name their lease; stale ones are dropped."""
        current = []
        for lease in leases:
            if type(lease) is not tuple or len(lease) != 3 or lease[0] is not self:
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
        now = self._clock()
        hosts: dict[int, tuple[_Host, int]] = {}
        for row_id in row_ids:
            host = self._leases[row_id][3]
            hosts[host.id] = (host, hosts.get(host.id, (host, 0))[1] + 1)
        db = self._db
        with translate(self.path):
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("DELETE FROM requests WHERE id = ?", [(r,) for r in row_ids])
                db.executemany(
                    "UPDATE hosts SET queued = queued - ?, ready_at = ? WHERE id = ?",
                    [(count, host.ready_at, host.id) for host, count in hosts.values()],
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        for row_id in row_ids:
            host = self._leases.pop(row_id)[3]
            host.leased -= 1
            host.count -= 1
        self._rows -= len(row_ids)
        for host, _ in hosts.values():
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
        with translate(self.path):
            rows = self._db.execute("SELECT key, value FROM state").fetchall()
        return {key: msgspec.msgpack.decode(value) for key, value in rows}

    def save_state(self, state: Mapping[str, Any]) -> None:
        self._check_open()
        encoded = [(key, msgspec.msgpack.encode(value)) for key, value in state.items()]
        db = self._db
        with translate(self.path):
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
        """Save pacing times, close the database and release the job lock."""
        if self._closed:
            return
        self._closed = True
        try:
            with translate(self.path):
                paced = [(h.ready_at, h.id) for h in self._hosts.values() if h.ready_at]
                if paced:
                    self._db.execute("BEGIN IMMEDIATE")
                    self._db.executemany("UPDATE hosts SET ready_at = ? WHERE id = ?", paced)
                    self._db.execute("COMMIT")
                self._db.execute("PRAGMA optimize")
        except StoreError:
            pass  # pacing times are a courtesy; the requests are safe already
        finally:
            self._bloom_thread.join(timeout=5)
            self._db.close()
            self._lock.release()
