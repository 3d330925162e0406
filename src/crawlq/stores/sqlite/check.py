"""``crawlq check``: look for damage in a SQLite job, reading it only.

Damage in the middle of a job is otherwise found only when a pop reaches it,
thousands of requests later. `check` runs SQLite's ``integrity_check`` (every
page, index and constraint) and then crawlq's own invariants, on one
read-only snapshot, without the job lock (so it works while a crawl runs, and
never writes):

- every stored request decodes (the tables' and the log's);
- every request belongs to a known host, and each host's count of stored
  requests is the number of its rows;
- the ``seen`` counter is the number of stored fingerprints;
- the next request id is above every stored one;
- scheduled requests (schema 3) decode and belong to known hosts, and the
  ``scheduled`` and ``revisits`` counters are the rows of their table.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..._errors import CrawlqError
from ..._request import decode_request
from .log import LogFold
from .reading import read_log, reading

__all__ = ["CheckReport", "check"]

#: Problems of one kind listed before the rest are summed up.
_LISTED: Final = 10


@dataclass(slots=True)
class CheckReport:
    """What `check` found in a job."""

    #: The job's database file.
    path: Path
    #: One line per problem found; empty for a job without damage.
    problems: list[str] = field(default_factory=list)
    #: Stored requests (queued or leased), counted from the tables and the log.
    requests: int = 0
    #: Hosts with stored requests.
    hosts: int = 0
    #: Log entries not yet applied to the tables.
    log_entries: int = 0
    #: Scheduled requests (not due yet, or due and not yet queued by the crawl).
    scheduled: int = 0


def check(url: str) -> CheckReport:
    """Check the job at ``url`` for damage; return what was found.

    Problems found in the data are listed in the report, not raised. Raises
    `StoreError` when there is no job at ``url``, `IncompatibleStore` for a
    file that is not a crawlq job, `CorruptStore` when the file cannot even be
    opened as one (an empty file, a damaged header).
    """
    with reading(url) as (db, path):
        report = CheckReport(path)
        problems = report.problems
        _step(problems, "integrity_check", lambda: _integrity(db, problems))
        _step(problems, "reading the log", lambda: _invariants(db, report))
    return report


def _step(problems: list[str], what: str, step: Callable[[], Any]) -> None:
    """Run one check; a damaged page stops it with a problem, not an exception."""
    try:
        step()
    except (sqlite3.Error, CrawlqError, ValueError) as exc:
        problems.append(f"{what} stopped at damage: {exc}")


def _integrity(db: sqlite3.Connection, problems: list[str]) -> None:
    rows = [row[0] for row in db.execute("PRAGMA integrity_check(100)")]
    if rows != ["ok"]:
        problems.extend(f"integrity_check: {row}" for row in rows)


def _invariants(db: sqlite3.Connection, report: CheckReport) -> None:
    problems = report.problems
    log = read_log(db)
    report.log_entries = log.entries
    bad: list[str] = []
    stored = 0
    acked = set(log.acked)
    for row_id, payload in db.execute("SELECT id, payload FROM requests ORDER BY id"):
        stored += 0 if row_id in acked else 1
        _decodes(payload, f"request {row_id}", bad)
    for row_id, (_, _, _, payload) in sorted({**log.updated, **log.added}.items()):
        _decodes(payload, f"logged request {row_id}", bad)
    _listed(problems, bad, "requests do not decode")
    report.requests = stored + len(log.added) + len(log.made_due)
    schema = db.execute("PRAGMA user_version").fetchone()[0]
    if schema >= 3:
        _scheduled(db, report, log)

    orphans = db.execute(
        "SELECT count(*), min(id) FROM requests WHERE host NOT IN (SELECT id FROM hosts)"
    ).fetchone()
    if orphans[0]:
        problems.append(f"{orphans[0]:,} requests belong to no host (the first: id {orphans[1]})")
    counts = [
        f"host {name!r} counts {queued:,} stored requests but has {rows:,}"
        for name, queued, rows in db.execute(
            "SELECT h.name, h.queued, count(r.id) FROM hosts h LEFT JOIN requests r"
            " ON r.host = h.id GROUP BY h.id HAVING h.queued != count(r.id)"
        )
    ]
    _listed(problems, counts, "hosts count their requests wrongly")
    per_host: Counter[str] = Counter(
        dict(db.execute("SELECT name, queued FROM hosts WHERE queued > 0").fetchall())
    )
    per_host.update(log.delta)
    report.hosts = sum(1 for count in per_host.values() if count > 0)

    counters = dict(db.execute("SELECT name, value FROM counters").fetchall())
    seen = db.execute("SELECT count(*) FROM seen").fetchone()[0]
    if counters.get("seen") != seen:
        problems.append(f"the seen counter is {counters.get('seen')} but {seen:,} are stored")
    # The counter moves at each flush, past every id the flush wrote.
    next_id = counters.get("next_id")
    table_max = db.execute("SELECT coalesce(max(id), 0) FROM requests").fetchone()[0]
    if schema >= 3:
        table_max = max(
            table_max, db.execute("SELECT coalesce(max(id), 0) FROM scheduled").fetchone()[0]
        )
    if not isinstance(next_id, int) or next_id <= table_max:
        problems.append(f"the next request id ({next_id}) is not above every stored one")


def _scheduled(db: sqlite3.Connection, report: CheckReport, log: LogFold) -> None:
    """Check the scheduled table: rows decode, have hosts, match their counters."""
    problems = report.problems
    bad: list[str] = []
    rows = revisits = 0
    for row_id, revisit, payload in db.execute(
        "SELECT id, revisit, payload FROM scheduled ORDER BY id"
    ):
        rows += 1
        revisits += 1 if revisit else 0
        _decodes(payload, f"scheduled request {row_id}", bad)
    for row_id, item in sorted(log.scheduled.items()):
        _decodes(item[3], f"logged scheduled request {row_id}", bad)
    _listed(problems, bad, "scheduled requests do not decode")
    orphans = db.execute(
        "SELECT count(*), min(id) FROM scheduled WHERE host NOT IN (SELECT id FROM hosts)"
    ).fetchone()
    if orphans[0]:
        problems.append(
            f"{orphans[0]:,} scheduled requests belong to no host (the first: id {orphans[1]})"
        )
    counters = dict(db.execute("SELECT name, value FROM counters").fetchall())
    # The counters move with the rows, at each flush: equal to the table's.
    for name, count in (("scheduled", rows), ("revisits", revisits)):
        if counters.get(name) != count:
            problems.append(f"the {name} counter is {counters.get(name)} but {count:,} are stored")
    change, _ = log.scheduled_change()
    report.scheduled = rows + change


def _decodes(payload: bytes, what: str, bad: list[str]) -> None:
    try:
        decode_request(payload)
    except CrawlqError as exc:
        bad.append(f"{what}: {exc}")


def _listed(problems: list[str], found: list[str], summary: str) -> None:
    problems.extend(found[:_LISTED])
    if len(found) > _LISTED:
        problems.append(f"... {len(found) - _LISTED:,} more {summary}")
