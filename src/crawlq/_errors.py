"""The exceptions crawlq raises.

Every exception crawlq raises derives from `CrawlqError`, so one ``except``
clause catches them all. Backend exceptions (``sqlite3``, ``redis``) never
reach the caller: stores translate them into `StoreError` and its children at
their boundary. Each message names what to do about it.

```
CrawlqError
├── ConfigError            bad option, unknown frontier URL, missing extra
├── InvalidRequest         a request that cannot be queued (bad URL, priority...)
│   └── SerializationError meta or headers that msgpack cannot encode
├── LeaseError             ack/release of a request this frontier never handed out
├── FrontierClosed         use of a closed frontier
├── StoreError             the store failed; nothing accepted is lost
│   ├── JobLocked          another process is using the job
│   ├── IncompatibleStore  not a crawlq store, a newer schema, other settings
│   ├── CorruptStore       the store's data is damaged
│   ├── StoreFull          no space left for the store
│   └── StoreUnavailable   the store cannot be reached now (may pass)
├── QueueEmpty             Scheduler.get_nowait found nothing ready
├── QueueFull              Scheduler.add_nowait found the scheduler at maxsize
├── SchedulerClosed        the scheduler was closed while waiting, or before
└── WorkerFailed           Scheduler.join: a task taking requests from it raised
```
"""

from __future__ import annotations

import asyncio
import sys
from types import ModuleType

__all__ = [
    "ConfigError",
    "CorruptStore",
    "CrawlqError",
    "FrontierClosed",
    "IncompatibleStore",
    "InvalidRequest",
    "JobLocked",
    "LeaseError",
    "QueueEmpty",
    "QueueFull",
    "SchedulerClosed",
    "SerializationError",
    "StoreError",
    "StoreFull",
    "StoreUnavailable",
    "WorkerFailed",
]


class CrawlqError(Exception):
    """Base class of every error crawlq raises."""


class ConfigError(CrawlqError, ValueError):
    """A frontier or scheduler was configured wrongly.

    Raised at open time for an unknown option, an option of the wrong type or
    range, an unknown frontier URL scheme, or an optional extra that is not
    installed. Nothing has been opened or written when it is raised.
    """


class InvalidRequest(CrawlqError, ValueError):
    """A request cannot be queued as given.

    Raised when a `Request` is built, before anything is stored: a URL that is
    not http(s) or has no host, a line break (CR, LF) or NUL in the URL or a
    header, a priority that is not an int in range, a method or header of the
    wrong type. Raised by ``add`` for a URL over the frontier's
    ``max_url_length``.
    """


class SerializationError(InvalidRequest):
    """A request holds a value the msgpack codec cannot encode, or not faithfully.

    Raised by ``add`` and ``add_many`` before anything of the batch is stored,
    on every store alike: for a value msgpack cannot store, one it would hand
    back as another type (tuple, set, datetime, Decimal), or lists and dicts
    nested too deep (a list holding itself). The message names the offending
    ``meta`` key or field and the conversion to make.
    """


class LeaseError(CrawlqError):
    """``ack`` or ``release`` was given a request this frontier never handed out.

    Only requests returned by ``pop`` (or ``Scheduler.get``) carry a lease.
    Acking a request twice, or after its lease expired and it was handed out
    again, is not an error: delivery is at-least-once, so a late ack simply
    completes the request.
    """


class FrontierClosed(CrawlqError):
    """The frontier was used after ``close()``.

    A closed frontier stays closed; the message says to open the store again
    with ``crawlq.open_frontier`` (a durable job resumes where it was).
    """

    def __init__(self, message: str = "the frontier is closed") -> None:
        if "open_frontier" not in message:
            message = (
                f"{message}; a closed frontier cannot be used again: call "
                "crawlq.open_frontier() with the same URL for a new one (a durable job "
                "resumes where it was), and close it only when the crawl is done"
            )
        super().__init__(message)


class StoreError(CrawlqError):
    """The store behind a frontier failed.

    The operation that raised did not take effect; everything accepted before
    it is still stored. The message names the store and what to check.
    """


class JobLocked(StoreError):
    """Another process has the job open.

    Raised at open; the message names the pid that holds the job. Nothing was
    read or written. Stop that crawl, or use another job path.
    """


class IncompatibleStore(StoreError):
    """The store exists but this frontier cannot use it as asked.

    Raised at open for a file that is not a crawlq job, a job written by a
    newer crawlq (newer schema), or a job created with settings that must not
    change on resume (the fingerprint rules, LIFO order). Raised for a Redis
    server whose ``maxmemory-policy`` evicts any key, at open and once it has
    evicted keys (unless ``allow_eviction=True``). Nothing is overwritten;
    the message names the setting or the fix. ``setting`` is the name of the
    option that differs (``"lifo"``, ``"fingerprint"``, ``"dedup"``), or
    None when the store is not usable as asked for another reason (not
    crawlq's, a newer format, an evicting server).
    """

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        super().__init__(message)
        self.setting = setting


class CorruptStore(StoreError):
    """The store's data is damaged and cannot be read safely.

    Raised at open or by the operation that met the damage, and at open for
    an empty database file. The message says what was found; ``crawlq check
    JOB`` lists the damage (reading only); restore the job from a copy.
    """


class StoreFull(StoreError):
    """The store has no space left (a full disk, or Redis out of memory).

    The operation that raised did not take effect; everything accepted
    before it is still stored. A Redis out of memory refuses adds only:
    pops, acks and releases go on (and acks free memory). A Redis that
    cannot write its append-only file or snapshot (a full disk) refuses
    every change, pops and acks too, until a write succeeds again (crawlq
    retries for ``retry_timeout`` first). On a full disk a SQLite job
    names the file system and its free space; pops and releases go on, and
    acks left to wait (``ack_delay``) wait until a write finds room; a job
    is opened again once there is room. Free space and retry.
    """


class StoreUnavailable(StoreError):
    """The store cannot be reached now: connection refused, reset or timed out.

    Raised after crawlq's own retries give up. The operation may or may not
    have taken effect (its reply may have been lost); repeating it is safe: a
    repeated add reports duplicates, acks and releases are idempotent, and
    what a pop with a lost reply leased goes back with the frontier's next
    call to the store (or at the latest when its lease expires). Nothing
    accepted before it is lost.
    """


class QueueEmpty(CrawlqError, asyncio.QueueEmpty):
    """``Scheduler.get_nowait`` found no request ready now.

    It subclasses `asyncio.QueueEmpty`, so code written for asyncio queues
    keeps working.
    """


class QueueFull(CrawlqError, asyncio.QueueFull):
    """``Scheduler.add_nowait`` found ``maxsize`` requests already queued.

    The request was not added. Nothing is ever dropped silently: use
    ``await Scheduler.add`` to wait for room instead.
    """


class SchedulerClosed(CrawlqError):
    """The scheduler is closed.

    Raised by ``add`` and ``get`` after ``close()``, and raised into every
    coroutine that was waiting in ``get``, ``add`` or ``join`` when ``close()``
    was called.
    """


class WorkerFailed(CrawlqError):
    """A task that took requests from a `Scheduler` ended with an exception.

    Raised by ``Scheduler.join`` (into the joins waiting then, or the next one
    called), so that a crawl whose workers die does not wait forever. The
    requests the task held (got and not yet finished) were released back to
    the frontier, not lost; the message names them, and ``__cause__`` is the
    task's exception. Catch errors per request inside the worker (log, then
    ``task_done`` or ``release``) so that one bad page cannot stop the crawl.
    """


def import_extra(name: str, hint: str) -> ModuleType:
    """Import module ``name`` of an optional extra; raise `ConfigError` with ``hint`` if absent.

    ``hint`` names the extra to install. A module missing inside the package
    (a broken install of it) is re-raised as it is.
    """
    try:
        __import__(name)  # (the import statement's machinery, hooks included)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] == name.partition(".")[0]:
            raise ConfigError(hint) from None
        raise
    return sys.modules[name]
