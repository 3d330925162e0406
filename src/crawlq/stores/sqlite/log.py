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
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Final, cast

import msgspec

from .file import rollback

__all__ = ["ACK", "ADD", "UPDATE", "LogFold", "append", "apply", "decode", "encode", "fold"]

#: A log row's kind: requests added (``[row id, host, -priority, seq,
#: fingerprint or None, payload]`` each, then a 7th item ``1`` for a
#: fingerprint recorded before whose ``seen_ttl`` had passed; the row's third
#: item is the wall-clock time of the add) ...
ADD: Final = 1
#: ... or leases acked (``[row id, host, host's ready_at]`` each: an ack
#: carries its host's pacing time, so a crash keeps it).
ACK: Final = 2
#: ... or requests released with an update (``[row id, host, -priority, seq,
#: payload]`` each: the row's new priority and payload, its seq unchanged).
#: An update of a row added since the last flush replaces its add; one of a
#: row in the tables rewrites that row.
UPDATE: Final = 3

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
    #: Rows of the ``requests`` table that were acked since.
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


def append(db: sqlite3.Connection, kind: int, items: list[Any], at: float | None = None) -> None:
    """Append one operation to the log (committed by the caller's transaction, or now).

    ``at`` is the wall-clock time of an add (when its fingerprints were recorded).
    """
    row = [kind, items] if at is None else [kind, items, at]
    db.execute("INSERT INTO ops (data) VALUES (?)", (encode(row),))


def fold(rows: Iterable[tuple[bytes]]) -> LogFold:
    """Fold log rows (``data`` column, in id order) into the changes they make."""
    log = LogFold()
    added = log.added
    updated = log.updated
    delta = log.delta
    paced = log.paced
    accepted = log.accepted
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
                else:  # a renewed fingerprint (seen_ttl)
                    row_id, host, negprio, seq, fingerprint, payload = item[:6]
                    log.renewed[fingerprint] = at
                added[row_id] = (host, negprio, seq, payload)
                accepted[host] = accepted.get(host, 0) + 1
                if row_id > log.last_id:
                    log.last_id = row_id
            log.seen_at.extend([at] * (len(fingerprints) - len(log.seen_at)))
        elif kind == UPDATE:
            for row_id, host, negprio, seq, payload in items:
                (added if row_id in added else updated)[row_id] = (host, negprio, seq, payload)
        else:
            for row_id, host, host_ready_at in items:
                if added.pop(row_id, None) is None:
                    log.acked.append(row_id)
                    updated.pop(row_id, None)
                    delta[host] -= 1
                paced[host] = max(paced.get(host, 0.0), host_ready_at)
    for host, _, _, _ in added.values():
        delta[host] += 1
    return log


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
    for host, negprio, seq, _ in (*log.added.values(), *log.updated.values()):
        key = (negprio, seq)
        if host not in best or key < best[host]:
            best[host] = key
    db.execute("BEGIN IMMEDIATE")
    try:
        host_ids = _resolve_hosts(
            db, known_hosts, log.delta.keys() | paced.keys() | log.accepted.keys() | best.keys()
        )
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
        db.executemany(
            "INSERT INTO requests (id, host, negprio, seq, payload) VALUES (?, ?, ?, ?, ?)",
            sorted(
                (row_id, host_ids[host], negprio, seq, payload)
                for row_id, (host, negprio, seq, payload) in log.added.items()
            ),
        )
        db.executemany(
            "UPDATE requests SET negprio = ?, seq = ?, payload = ? WHERE id = ?",
            sorted(
                (negprio, seq, payload, row_id)
                for row_id, (_, negprio, seq, payload) in log.updated.items()
            ),
        )
        db.executemany("DELETE FROM requests WHERE id = ?", [(row_id,) for row_id in log.acked])
        db.executemany(
            "UPDATE hosts SET queued = queued + ?, accepted = accepted + ?,"
            " head_negprio = CASE WHEN ? IS NOT NULL AND (head_negprio IS NULL OR queued = 0"
            "   OR (?, ?) < (head_negprio, head_seq)) THEN ? ELSE head_negprio END,"
            " head_seq = CASE WHEN ? IS NOT NULL AND (head_negprio IS NULL OR queued = 0"
            "   OR (?, ?) < (head_negprio, head_seq)) THEN ? ELSE head_seq END"
            " WHERE id = ?",
            [
                (
                    log.delta.get(host, 0),
                    log.accepted.get(host, 0),
                    *_hint(best.get(host), 0),
                    *_hint(best.get(host), 1),
                    host_ids[host],
                )
                for host in log.delta.keys() | log.accepted.keys() | best.keys()
            ],
        )
        db.executemany(
            "UPDATE hosts SET ready_at = max(ready_at, ?) WHERE id = ?",
            [(when, host_ids[host]) for host, when in paced.items()],
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


def _hint(key: _Key | None, column: int) -> tuple[int | None, ...]:
    """Parameters of the head-hint CASE for one column: (test, negprio, seq, value)."""
    if key is None:
        return (None, None, None, None)
    return (key[0], key[0], key[1], key[column])
