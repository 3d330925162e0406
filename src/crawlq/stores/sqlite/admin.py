"""The SQLite store's admin interface (`crawlq.stores.base.StoreAdmin`).

How the CLI, the metrics and watching read or change a job from outside:
``crawlq inspect`` / ``export`` / ``check``, `snapshot` and `hosts` for
``crawlq top`` and the metrics, and `change_host` for ``crawlq hosts``.

Everything here opens the database read-only (``mode=ro``) and never takes the
job lock, so it works while a crawl has the job open: SQLite's WAL lets a
reader see the last committed state while the writer goes on. Each call reads
inside one transaction, so its figures come from one consistent snapshot.

The store commits every ``add`` and ``ack`` to its log (the ``ops`` table)
and applies the log to the tables now and then; a reader therefore applies
the logged operations on top of the tables it reads (in memory, writing
nothing), to see what the crawl has committed, not what it last flushed.

Leases are not on disk (the store writes nothing on pop): a leased request is
a stored row like a queued one, and comes back when the job is reopened.
"""

from __future__ import annotations

import datetime
import json
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from ..._errors import JobLocked, StoreError
from ..._exchange import HostReport, JobReport
from ..._fingerprint import Fingerprinter
from ..._policy import Policy
from ..._request import Request, decode_request
from ..._version import __version__
from ..base import Counters, HostList, StoreCounts, host_details
from .check import check
from .controls import apply_change, leave_change
from .file import DATABASE_NAME, SCHEMA_VERSION, JobLock, connect, job_path, translate
from .log import LogFold
from .reading import Scheduled, read_log, read_scheduled, reading
from .store import open_store

__all__ = [
    "change_host",
    "check",
    "crawl_label",
    "crawl_settings",
    "export",
    "hosts",
    "inspect",
    "job_settings",
    "snapshot",
]

_PRIORITIES_SHOWN: Final = 20


def job_settings(url: str) -> dict[str, Any] | None:
    """Return the job's recorded settings (``meta``), or None if there is no job yet.

    Values are decoded: ``fingerprint`` is the `Fingerprinter.describe` dict,
    ``lifo`` a bool, ``crawlq_version`` a str. Raises what `inspect` raises
    for a file that is not a readable crawlq job.
    """
    if not job_path(url).is_file():
        return None
    with reading(url) as (db, _):
        rows = db.execute("SELECT key, value FROM meta").fetchall()
    return {key: value if key == "crawlq_version" else json.loads(value) for key, value in rows}


def export(url: str) -> Iterator[Request]:
    """Yield every stored request (queued, leased or scheduled), in acceptance order by kind.

    Queued and leased ones first, then the scheduled ones, each with its
    ``not_before`` set to when it is due (a delayed release's or a
    refetch's due time, not the one it was added with), so an import keeps
    it scheduled. Reads one snapshot, so it can run while a crawl writes the
    job. Close the generator (or exhaust it) to close the database. Raises
    `StoreError` if there is no job at ``url``, `IncompatibleStore` or
    `CorruptStore` for a file that is not a readable crawlq job.
    """
    with reading(url) as (db, _):
        log = read_log(db)
        acked = set(log.acked)
        updated = log.updated  # released with an update since the last flush
        for row_id, payload in db.execute("SELECT id, payload FROM requests ORDER BY id"):
            if row_id not in acked:
                yield decode_request(updated[row_id][3] if row_id in updated else payload)
        # Logged rows are newer than every row of the table (ids only grow).
        for row_id in sorted(log.added):
            yield decode_request(log.added[row_id][3])
        if db.execute("PRAGMA user_version").fetchone()[0] < 3:
            return  # no due times before schema 3
        waiting = []
        for row_id, due, payload in db.execute(
            "SELECT id, due, payload FROM scheduled ORDER BY id"
        ):
            if row_id in log.made_due:  # queued since the last flush
                yield decode_request(updated[row_id][3] if row_id in updated else payload)
            elif row_id not in log.dropped:
                waiting.append(_due_request(payload, due))
                if len(waiting) >= 1024:  # in order, without holding them all
                    yield from waiting
                    waiting = []
        yield from waiting
        for row_id in sorted(log.scheduled):
            _, _, _, payload, due, _ = log.scheduled[row_id]
            yield _due_request(payload, due)


def _due_request(payload: bytes, due: float) -> Request:
    """A scheduled request as exported: ``not_before`` is when it is due."""
    request = decode_request(payload)
    request.not_before = due
    return request


def inspect(url: str, *, top: int = 10) -> JobReport:
    """Return counts, the ``top`` busiest hosts, priorities and settings of a job.

    Read-only and lock-free, from one snapshot. Raises `StoreError` if there
    is no job at ``url``, `IncompatibleStore` or `CorruptStore` for a file
    that is not a readable crawlq job.
    """
    with reading(url) as (db, path):
        log = read_log(db)
        counters = dict(db.execute("SELECT name, value FROM counters").fetchall())
        known = {
            name: (queued, ready_at)
            for name, queued, ready_at in db.execute(
                "SELECT name, queued, ready_at FROM hosts WHERE queued > 0"
            )
        }
        known_hosts = db.execute("SELECT COUNT(*) FROM hosts").fetchone()[0]
        for name in log.delta.keys() - known.keys():
            row = db.execute("SELECT queued, ready_at FROM hosts WHERE name = ?", (name,))
            found = row.fetchone()
            known[name] = found if found else (0, 0.0)
            known_hosts += 0 if found else 1
        state_keys = db.execute("SELECT COUNT(*) FROM state").fetchone()[0]
        by_priority: Counter[int] = Counter()
        for negprio, count in db.execute("SELECT negprio, COUNT(*) FROM requests GROUP BY negprio"):
            by_priority[-negprio] += count
        for row_id in log.acked:
            acked = db.execute("SELECT negprio FROM requests WHERE id = ?", (row_id,)).fetchone()
            if acked:
                by_priority[-acked[0]] -= 1
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        schema = db.execute("PRAGMA user_version").fetchone()[0]
        scheduled = read_scheduled(db, log)
    for _, negprio, _, _ in (*log.added.values(), *log.made_due.values()):
        by_priority[-negprio] += 1
    now = time.time()
    per_host = sorted(
        (
            (queued + log.delta.get(name, 0), name, max(0.0, ready_at - now))
            for name, (queued, ready_at) in known.items()
        ),
        key=lambda host: (-host[0], host[1]),
    )
    per_host = [host for host in per_host if host[0] > 0]
    stored = sum(count for count, _, _ in per_host)
    priorities = sorted(((p, n) for p, n in by_priority.items() if n > 0), reverse=True)
    shown = priorities[:_PRIORITIES_SHOWN]
    rest = priorities[_PRIORITIES_SHOWN:]
    counts = {
        "requests stored (queued + leased)": stored,
        "scheduled": scheduled.count,
        "revisits": scheduled.revisits,
        "seen fingerprints": counters.get("seen", 0) + len(log.fingerprints),
        "hosts with requests": len(per_host),
        "hosts known": known_hosts,
        "crawler state keys": state_keys,
        "log entries not yet applied": log.entries,
    }
    settings = {
        "written by": f"crawlq {meta.get('crawlq_version', '?')} (this is {__version__})",
        "schema version": f"{schema} (this crawlq reads {SCHEMA_VERSION})",
        "fingerprint": _describe_fingerprint(meta.get("fingerprint")),
        "lifo": str(json.loads(meta["lifo"])).lower() if "lifo" in meta else "?",
        "database": f"{path} ({_size(path)} with its WAL)",
        "open by": _holder(path),
    }
    notes = (
        "Leases live only in the memory of the process that has the job open: leased "
        "requests are counted among the stored ones, and come back when the job is reopened.",
        "Pacing times are as last written by the crawl.",
        _next_due(scheduled, now),
    )
    return JobReport(
        store=f"sqlite:///{path}",
        counts=counts,
        hosts=[HostReport(name, count, ready_in) for count, name, ready_in in per_host[:top]],
        host_total=len(per_host),
        priorities=shown,
        priorities_omitted=(len(rest), sum(n for _, n in rest)),
        settings=settings,
        notes=notes,
    )


def _next_due(scheduled: Scheduled, now: float) -> str:
    """The note on scheduled requests: when the first is due."""
    if scheduled.first_due is None:
        return "No request is scheduled (held until a due time)."
    when = datetime.datetime.fromtimestamp(scheduled.first_due, datetime.UTC)
    wait = scheduled.first_due - now
    due = "is due now" if wait <= 0 else f"is due in {wait:,.1f}s"
    return (
        "Scheduled requests are held until their due time, apart from the stored "
        f"(queued + leased) ones; the first {due} ({when:%Y-%m-%d %H:%M:%S} UTC)."
    )


def _describe_fingerprint(stored: str | None) -> str:
    if stored is None:
        return "?"
    try:
        value = json.loads(stored)
        parts = [f"mode {value['mode']}"]
        parts.append("fragments kept" if value["keep_fragments"] else "fragments dropped")
        if value.get("keep_query_params") is not None:
            parts.append(f"keeps only query params {', '.join(value['keep_query_params'])}")
        elif value.get("ignore_query_params"):
            parts.append(f"ignores query params {', '.join(value['ignore_query_params'])}")
        if value.get("include_headers"):
            parts.append(f"headers {', '.join(value['include_headers'])}")
    except (ValueError, KeyError, TypeError):
        return stored
    return "; ".join(parts)


def _size(path: Path) -> str:
    total: float = sum(
        candidate.stat().st_size
        for candidate in (path, path.with_name(path.name + "-wal"))
        if candidate.exists()
    )
    for unit in ("B", "KiB", "MiB", "GiB"):
        if total < 1024 or unit == "GiB":
            return f"{total:,.0f} {unit}" if unit == "B" else f"{total:,.1f} {unit}"
        total /= 1024
    raise AssertionError("unreachable")


def _holder(path: Path) -> str:
    """Who has the job open, from the lock file's pid (read, never locked)."""
    lock = path.with_name(path.name + ".lock")
    try:
        text = lock.read_text("ascii", "replace").strip()
    except OSError:
        return "no process"
    if not text.isdigit():
        return "no process"
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:
        return "no process (the last one exited without closing it)"
    except PermissionError:
        pass
    return f"pid {text}"


def hosts(url: str, *, top: int = 20) -> HostList:
    """Per-host figures of a job, read without locking it (``crawlq hosts``).

    Queued counts include leased requests (leases are not on disk: see the
    module docstring), so ``leased`` is 0. Blocks, policies and accepted
    counts are the job's own; a job of schema 1 has none of them.
    """
    with reading(url) as (db, _):
        return _hosts(db, read_log(db), top)


def snapshot(url: str, *, top: int = 20) -> tuple[StoreCounts, HostList]:
    """The job's `StoreCounts` and its ``top`` busiest hosts, lock-free.

    For ``crawlq top`` and metrics read from outside the crawler. Leases are
    not on disk: ``leased`` is what the counters the crawler saved with its
    last flush (a fraction of a second old while it writes) say are out,
    and per host it is 0 (queued counts them). Scheduled requests whose time
    has come count as scheduled until the crawl's next call makes them ready.
    Raises what `inspect` raises.
    """
    with reading(url) as (db, _):
        log = read_log(db)
        saved = dict(db.execute("SELECT name, value FROM counters").fetchall())
        stored = db.execute("SELECT COALESCE(SUM(queued), 0) FROM hosts").fetchone()[0]
        busiest = _hosts(db, log, top)
        scheduled = read_scheduled(db, log)
    stored += sum(log.delta.values())
    # Row ids go to accepted adds and to refetches.
    entered = max(saved.get("next_id", 1), log.last_id + 1) - 1
    counters = Counters(
        accepted=entered - scheduled.refetched,
        duplicates=saved.get("duplicates", 0),
        capped=saved.get("capped", 0),
        popped=saved.get("popped", 0),
        acked=entered - stored - scheduled.count,
        released=saved.get("released", 0),
        expired=saved.get("expired", 0),
        refetched=scheduled.refetched,
    )
    out = counters.popped - counters.acked - counters.released - counters.expired
    leased = min(stored, max(0, out))
    seen = saved.get("seen", 0) + len(log.fingerprints)
    due_in = None
    if scheduled.first_due is not None:
        due_in = max(0.0, scheduled.first_due - time.time())
    counts = StoreCounts(
        stored - leased,
        leased,
        seen,
        counters,
        scheduled=scheduled.count,
        revisits=scheduled.revisits,
        next_due_in=due_in,
    )
    return counts, busiest


def _hosts(db: sqlite3.Connection, log: LogFold, top: int) -> HostList:
    schema = db.execute("PRAGMA user_version").fetchone()[0]
    if schema >= 2:
        rows = db.execute("SELECT name, queued, accepted, ready_at FROM hosts").fetchall()
        controls = db.execute(
            "SELECT name, blocked_until, delay, concurrency FROM controls"
        ).fetchall()
    else:
        rows = [
            (name, queued, 0, ready_at)
            for name, queued, ready_at in db.execute("SELECT name, queued, ready_at FROM hosts")
        ]
        controls = []
    now = time.time()
    queued = Counter({name: count for name, count, _, _ in rows})
    queued.update(log.delta)
    accepted = Counter({name: count for name, _, count, _ in rows})
    accepted.update(log.accepted)
    # Pacing times as the crawl last wrote them (with its acks and flushes).
    ready_at = {name: at for name, _, _, at in rows}
    for name, at in log.paced.items():
        ready_at[name] = max(ready_at.get(name, 0.0), at)
    blocked = {name: until for name, until, _, _ in controls if until is not None and until > now}
    overrides = {
        name: (delay, concurrency)
        for name, _, delay, concurrency in controls
        if delay is not None or concurrency is not None
    }
    busy = {name: (count, 0) for name, count in queued.items() if count > 0}
    return host_details(
        busy,
        blocked,
        overrides,
        lambda name: accepted[name],
        top,
        now,
        lambda name: (max(0.0, ready_at.get(name, 0.0) - now), False),
    )


def crawl_settings(url: str) -> dict[str, Any] | None:
    """The job's ``lifo`` and ``fingerprint`` (a `Fingerprinter.describe`); None: no job."""
    settings = job_settings(url)
    if settings is None:
        return None
    return {"lifo": bool(settings.get("lifo")), "fingerprint": settings.get("fingerprint")}


def crawl_label(url: str) -> str:
    """The job's name, a metrics label: its directory's name, or the file's stem."""
    path = job_path(url)
    return (path.parent if path.name == DATABASE_NAME else Path(path.stem)).name or "job"


def change_host(url: str, what: str, host: str, seconds: float | None = None) -> str:
    """Change one host of a job (``crawlq hosts --block``...); return what happened.

    A job no crawler has open is opened and changed as a crawler would (the
    store itself, with the job's own settings). A job a crawler has open is
    left the change in its inbox; the crawler applies it within a second, and
    this waits up to 3 seconds to say so. Raises `StoreError` when there is
    no job, `ConfigError` for a bad change.
    """
    path = job_path(url).absolute()
    settings = job_settings(str(path))
    if settings is None:
        raise StoreError(f"there is no crawlq job at {path}")
    lock = JobLock(path)
    try:
        lock.acquire()
    except JobLocked as exc:
        holder = str(exc)
    else:
        lock.release()
        fingerprint = settings.get("fingerprint")
        fingerprinter = (
            Fingerprinter.from_description(fingerprint) if fingerprint else Fingerprinter()
        )
        store, _ = open_store(str(path), Policy(lifo=bool(settings.get("lifo"))), fingerprinter, {})
        try:
            apply_change(store, what, host, [seconds])
        finally:
            store.close()
        return f"changed {host} in job {path}"
    db = connect(path, synchronous="NORMAL")
    try:
        with translate(path):
            row = leave_change(db, what, host, [seconds] if what != "unblock" else [])
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                if db.execute("SELECT 1 FROM inbox WHERE id = ?", (row,)).fetchone() is None:
                    return f"changed {host}: the running crawl applied it ({holder})"
                time.sleep(0.05)
    finally:
        db.close()
    return f"left the change of {host} for the running crawl, applied at its next pop ({holder})"
