"""The SQLite job's operation log (``ops``): its format, its fold, and its flush.

Every ``add``, ``ack`` and release with an update appends one row to the
log and commits it before returning: an append writes a page or two at the
end of a table, so a durable call costs about one page write however its
requests spread over hosts. The
log is the single ordered stream of writes: a parent's ack is never durable
before the children added while it was leased.

A *flush* folds the log and applies it to the tables (``requests``, ``hosts``,
``seen``, ``counters``) in one transaction, then deletes it. `fold` is the
one reading of the log's format: the flush applies it, and ``crawlq inspect``
/ ``export`` read a running job through it without writing.

Scheduled requests (not due yet) go to the ``scheduled`` table, not to
``requests``: an add with a due time, a release with a delay (`DELAY`), a
refetch (`REFETCH`: a new row, the acked one is deleted). Making one due
changes nothing durable by itself (after a kill its time has still passed),
so its `DUE` record rides the next write; it only has to come before every
record about the request since, which it does (`due.Scheduling._log`).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Final, cast

import msgspec

from .file import rollback

__all__ = [
    "ACK",
    "ADD",
    "DELAY",
    "DUE",
    "REFETCH",
    "UPDATE",
    "LogFold",
    "Record",
    "append",
    "apply",
    "commit",
    "decode",
    "encode",
    "fold",
]

#: A log row's kind: requests added (``[row id, host, -priority, seq,
#: fingerprint or None, payload]`` each, then a 7th item ``1`` for a
#: fingerprint recorded before whose ``seen_ttl`` had passed, and for a
#: request added scheduled the 7th (then ``0`` or ``1``) and an 8th item, its
#: due time; the row's third item is the wall-clock time of the add) ...
ADD: Final = 1
#: ... or leases acked (``[row id, host, host's ready_at]`` each: an ack
#: carries its host's pacing time, so a crash keeps it).
ACK: Final = 2
#: ... or requests released with an update (``[row id, host, -priority, seq,
#: payload]`` each: the row's new priority and payload, its seq unchanged).
#: An update of a row added since the last flush replaces its add; one of a
#: row in the tables rewrites that row.
UPDATE: Final = 3
#: ... or acked requests scheduled again (``[new row id, host, -priority,
#: seq, due, payload]`` each: a refetch is a new row, in a new seq; the ack
#: of the old one is in the ACK record before it) ...
REFETCH: Final = 4
#: ... or leased requests put back scheduled (``[row id, host, -priority,
#: seq, due, payload]`` each: a release with a delay, its seq kept) ...
DELAY: Final = 5
#: ... or scheduled requests made due (``[row id, host, -priority, seq,
#: revisit]`` each): they move to ``requests``.
DUE: Final = 6

#: One log row to write: (kind, items, wall-clock time of an add or None).
Record = tuple[int, list[Any], float | None]

encode: Final = msgspec.msgpack.encode
decode: Final = msgspec.msgpack.decode

_Key = tuple[int, int]  # (-priority, seq)


@dataclass(slots=True)
class LogFold:
    """What the log changes in the tables, folded in log order."""

    #: Log rows read.
    entries: int = 0
    #: Requests added and not acked since: row id -> (host, -priority, seq, payload).
    added: dict[int, tuple[str, int, int, bytes]] = field(default_factory=dict)
    #: Rows of the ``requests`` table updated since (and not acked): row id
    #: -> (host, -priority, seq, payload), as the flush writes them.
    updated: dict[int, tuple[str, int, int, bytes]] = field(default_factory=dict)
    #: Rows of the ``requests`` table that left it since (acked, or scheduled again).
    acked: list[int] = field(default_factory=list)
    #: Change of each host's count of stored requests.
    delta: Counter[str] = field(default_factory=Counter)
    #: New fingerprints (16 bytes each), with the time they were recorded.
    fingerprints: list[bytes] = field(default_factory=list)
    seen_at: list[float] = field(default_factory=list)
    #: Fingerprints stored before and recorded again (their TTL had passed): time.
    renewed: dict[bytes, float] = field(default_factory=dict)
    #: Requests accepted per host.
    accepted: Counter[str] = field(default_factory=Counter)
    #: Latest pacing time written with an ack, per host.
    paced: dict[str, float] = field(default_factory=dict)
    #: Highest row id added (0: none).
    last_id: int = 0
    #: Requests to write to the ``scheduled`` table: row id -> (host,
    #: -priority, seq, payload, due, revisit 0 or 1).
    scheduled: dict[int, tuple[str, int, int, bytes, float, int]] = field(default_factory=dict)
    #: Rows of the ``scheduled`` table made due since, to move to
    #: ``requests``: row id -> (host, -priority, seq, revisit).
    made_due: dict[int, tuple[str, int, int, int]] = field(default_factory=dict)
    #: Rows of the ``scheduled`` table made due, then acked or scheduled
    #: again: row id -> revisit. Deleted from it, never moved.
    dropped: dict[int, int] = field(default_factory=dict)
    #: Refetches logged (each one a new row).
    refetched: int = 0

    def scheduled_change(self) -> tuple[int, int]:
        """How many rows (and revisits) the ``scheduled`` table gains; negative: loses."""
        rows = len(self.scheduled) - len(self.made_due) - len(self.dropped)
        revisits = (
            sum(item[5] for item in self.scheduled.values())
            - sum(item[3] for item in self.made_due.values())
            - sum(self.dropped.values())
        )
        return rows, revisits


def append(db: sqlite3.Connection, kind: int, items: list[Any], at: float | None = None) -> None:
    """Append one operation to the log (committed by the caller's transaction, or now).

    ``at`` is the wall-clock time of an add (when its fingerprints were recorded).
    """
    row = [kind, items] if at is None else [kind, items, at]
    db.execute("INSERT INTO ops (data) VALUES (?)", (encode(row),))


def commit(db: sqlite3.Connection, records: Sequence[Record]) -> None:
    """Append ``records`` to the log in one commit (a single one: its own INSERT).

    Raises what SQLite raises; a failed commit is rolled back whole.
    """
    if len(records) == 1:
        append(db, *records[0])
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        for kind, items, at in records:
            append(db, kind, items, at)
        db.execute("COMMIT")
    except BaseException:
        rollback(db)  # not after a COMMIT SQLite rolled back (a full disk)
        raise


def fold(rows: Iterable[tuple[bytes]]) -> LogFold:
    """Fold log rows (``data`` column, in id order) into the changes they make."""
    log = LogFold()
    added = log.added
    updated = log.updated
    delta = log.delta
    paced = log.paced
    accepted = log.accepted
    scheduled = log.scheduled
    made_due = log.made_due
    for (data,) in rows:
        log.entries += 1
        row = decode(data)
        kind, items = row[0], row[1]
        if kind == ADD:
            at = row[2] if len(row) > 2 else 0.0
            fingerprints = log.fingerprints
            for item in items:
                if len(item) == 6:
                    row_id, host, negprio, seq, fingerprint, payload = item
                    if fingerprint:
                        fingerprints.append(fingerprint)
                    added[row_id] = (host, negprio, seq, payload)
                else:  # a renewed fingerprint (seen_ttl), or a due time
                    row_id, host, negprio, seq, fingerprint, payload = item[:6]
                    if item[6]:
                        log.renewed[fingerprint] = at
                    elif fingerprint:
                        fingerprints.append(fingerprint)
                    if len(item) == 8:
                        scheduled[row_id] = (host, negprio, seq, payload, item[7], 0)
                    else:
                        added[row_id] = (host, negprio, seq, payload)
                accepted[host] = accepted.get(host, 0) + 1
                if row_id > log.last_id:
                    log.last_id = row_id
            log.seen_at.extend([at] * (len(fingerprints) - len(log.seen_at)))
        elif kind == UPDATE:
            for row_id, host, negprio, seq, payload in items:
                (added if row_id in added else updated)[row_id] = (host, negprio, seq, payload)
        elif kind == ACK:
            acked = log.acked
            for row_id, host, host_ready_at in items:
                if added.pop(row_id, None) is None:
                    if made_due and row_id in made_due:
                        _leave(log, row_id, host)
                    else:  # _leave, inlined: the common ack of a row in the tables
                        acked.append(row_id)
                        updated.pop(row_id, None)
                        delta[host] -= 1
                paced[host] = max(paced.get(host, 0.0), host_ready_at)
        elif kind == DUE:
            for row_id, host, negprio, seq, revisit in items:
                held = scheduled.pop(row_id, None)
                if held is not None:  # scheduled since the last flush: added as it is
                    added[row_id] = held[:4]
                else:
                    made_due[row_id] = (host, negprio, seq, revisit)
        else:  # REFETCH or DELAY
            revisit = 1 if kind == REFETCH else 0
            for row_id, host, negprio, seq, due, payload in items:
                if revisit:
                    log.refetched += 1
                    log.last_id = max(log.last_id, row_id)
                elif added.pop(row_id, None) is None:
                    _leave(log, row_id, host)
                scheduled[row_id] = (host, negprio, seq, payload, due, revisit)
    for host, _, _, _ in added.values():
        delta[host] += 1
    for host, _, _, _ in made_due.values():
        delta[host] += 1
    return log


def _leave(log: LogFold, row_id: int, host: str) -> None:
    """Fold a stored request that stops being queued (acked, or scheduled again)."""
    moved = log.made_due.pop(row_id, None) if log.made_due else None
    if moved is not None:
        log.dropped[row_id] = moved[3]  # still in the scheduled table: deleted there
    else:
        log.acked.append(row_id)
        log.delta[host] -= 1
    log.updated.pop(row_id, None)


def apply(
    db: sqlite3.Connection,
    known_hosts: Mapping[str, int],
    ready_at: Mapping[str, float],
    totals: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Apply the log to the tables and empty it, in one transaction.

    Returns the ids of the hosts it wrote. ``known_hosts`` maps names to ids
    already known; ``ready_at`` gives pacing times to save for hosts known in
    memory; ``totals`` replaces counters (`crawlq.Counters` figures the
    writing process keeps; not logged: statistics). Sorted bulk writes share
    pages, so the indexed writes cost a fraction of one transaction per
    logged call. If it raises, nothing changed: the log keeps every record.
    """
    rows = db.execute("SELECT id, data FROM ops ORDER BY id").fetchall()
    if not rows and not ready_at and not totals:
        return {}
    log = fold((data,) for _, data in rows)
    paced = dict(ready_at)
    for host, when in log.paced.items():
        paced[host] = max(paced.get(host, 0.0), when)
    best: dict[str, _Key] = {}
    for host, negprio, seq, _ in (
        *log.added.values(),
        *log.updated.values(),
        *log.made_due.values(),
    ):
        key = (negprio, seq)
        if host not in best or key < best[host]:
            best[host] = key
    names = log.delta.keys() | paced.keys() | log.accepted.keys() | best.keys()
    if log.scheduled:
        names |= {item[0] for item in log.scheduled.values()}
    db.execute("BEGIN IMMEDIATE")
    try:
        host_ids = _resolve_hosts(db, known_hosts, names)
        db.executemany(
            "INSERT OR IGNORE INTO seen (fingerprint, at) VALUES (?, ?)",
            # By fingerprint alone: comparing whole pairs cost 1% of an add.
            sorted(zip(log.fingerprints, log.seen_at, strict=True), key=itemgetter(0)),
        )
        db.executemany(
            "UPDATE seen SET at = ? WHERE fingerprint = ?",
            [(at, fingerprint) for fingerprint, at in sorted(log.renewed.items())],
        )
        if totals:
            db.executemany(
                "INSERT OR REPLACE INTO counters (name, value) VALUES (?, ?)", totals.items()
            )
        # Deletes first: a row scheduled again (DELAY) and made due since
        # (DUE) leaves the table and comes back in one flush.
        db.executemany(
            "DELETE FROM requests WHERE id = ?", [(row_id,) for row_id in sorted(log.acked)]
        )
        db.executemany(
            "INSERT INTO requests (id, host, negprio, seq, payload) VALUES (?, ?, ?, ?, ?)",
            sorted(
                (row_id, host_ids[host], negprio, seq, payload)
                for row_id, (host, negprio, seq, payload) in log.added.items()
            ),
        )
        if log.scheduled or log.made_due or log.dropped or log.refetched:
            _apply_scheduled(db, log, host_ids)
        db.executemany(
            "UPDATE requests SET negprio = ?, seq = ?, payload = ? WHERE id = ?",
            sorted(
                (negprio, seq, payload, row_id)
                for row_id, (_, negprio, seq, payload) in log.updated.items()
            ),
        )
        # One statement per host written, in id order: its counts and pacing time, and
        # its head hint where it has a request added (the hint's CASEs cost 4x the rest).
        plain, hinted = _host_rows(log, best, paced, host_ids)
        db.executemany(
            "UPDATE hosts SET queued = queued + ?, accepted = accepted + ?,"
            " ready_at = max(ready_at, coalesce(?, ready_at)) WHERE id = ?",
            plain,
        )
        db.executemany(
            "UPDATE hosts SET queued = queued + ?, accepted = accepted + ?,"
            " ready_at = max(ready_at, coalesce(?, ready_at)),"
            " head_negprio = CASE WHEN head_negprio IS NULL OR queued = 0"
            "   OR (?, ?) < (head_negprio, head_seq) THEN ? ELSE head_negprio END,"
            " head_seq = CASE WHEN head_negprio IS NULL OR queued = 0"
            "   OR (?, ?) < (head_negprio, head_seq) THEN ? ELSE head_seq END"
            " WHERE id = ?",
            hinted,
        )
        if rows:
            next_id = log.last_id + 1  # ids of requests acked before this flush count too
            db.execute(
                "UPDATE counters SET value = CASE name WHEN 'seen' THEN value + ?"
                " ELSE max(value, ?) END WHERE name IN ('seen', 'next_id')",
                (len(log.fingerprints), next_id),
            )
            db.execute("DELETE FROM ops WHERE id <= ?", (rows[-1][0],))
        db.execute("COMMIT")
    except BaseException:
        rollback(db)  # not after a COMMIT that SQLite rolled back (a full disk)
        raise
    return host_ids


def _apply_scheduled(db: sqlite3.Connection, log: LogFold, host_ids: Mapping[str, int]) -> None:
    """Move the rows made due to ``requests``, write the newly scheduled ones, count both.

    Part of `apply`'s transaction, before its updates (an update may be of a
    row made due). Each row is found by id: O(log n) in scheduled requests.
    """
    moved = sorted(log.made_due)
    db.executemany(
        "INSERT INTO requests (id, host, negprio, seq, payload)"
        " SELECT id, host, negprio, seq, payload FROM scheduled WHERE id = ?",
        [(row_id,) for row_id in moved],
    )
    db.executemany(
        "DELETE FROM scheduled WHERE id = ?",
        [(row_id,) for row_id in sorted({*moved, *log.dropped})],
    )
    db.executemany(
        "INSERT INTO scheduled (id, host, negprio, seq, due, revisit, payload)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        sorted(
            (row_id, host_ids[host], negprio, seq, due, revisit, payload)
            for row_id, (host, negprio, seq, payload, due, revisit) in log.scheduled.items()
        ),
    )
    rows, revisits = log.scheduled_change()
    db.executemany(
        "UPDATE counters SET value = value + ? WHERE name = ?",
        [(rows, "scheduled"), (revisits, "revisits"), (log.refetched, "refetched")],
    )


def _resolve_hosts(
    db: sqlite3.Connection, known: Mapping[str, int], names: set[str]
) -> dict[str, int]:
    resolved = {name: known[name] for name in names if name in known}
    for name in names - resolved.keys():
        row = db.execute("SELECT id FROM hosts WHERE name = ?", (name,)).fetchone()
        if row is None:
            cursor = db.execute("INSERT INTO hosts (name) VALUES (?)", (name,))
            resolved[name] = cast(int, cursor.lastrowid)
        else:
            resolved[name] = row[0]
    return resolved


def _host_rows(
    log: LogFold, best: Mapping[str, _Key], paced: Mapping[str, float], host_ids: Mapping[str, int]
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The parameters of the flush's update of each host it writes, sorted by id: those
    without a head hint to write, and those with one (pacing time None: none to write)."""
    plain, hinted = [], []
    for host in log.delta.keys() | log.accepted.keys() | best.keys() | paced.keys():
        counts = (log.delta.get(host, 0), log.accepted.get(host, 0), paced.get(host))
        key = best.get(host)
        if key is None:
            plain.append((*counts, host_ids[host]))
        else:
            hinted.append((*counts, key[0], key[1], key[0], key[0], key[1], key[1], host_ids[host]))
    plain.sort(key=itemgetter(-1))
    hinted.sort(key=itemgetter(-1))
    return plain, hinted
