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
├── QueueEmpty             Scheduler.get_nowait found nothing ready
├── QueueFull              Scheduler.add_nowait found the scheduler at maxsize
└── SchedulerClosed        the scheduler was closed while waiting, or before
```
"""

from __future__ import annotations

import asyncio

__all__ = [
    "ConfigError",
    "CrawlqError",
    "FrontierClosed",
    "InvalidRequest",
    "LeaseError",
    "QueueEmpty",
    "QueueFull",
    "SchedulerClosed",
    "SerializationError",
    "StoreError",
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
    not http(s) or has no host, a priority that is not an int in range, a
    method or header of the wrong type.
    """


class SerializationError(InvalidRequest):
    """A request holds a value the msgpack codec cannot encode.

    Raised by ``add`` and ``add_many`` before anything of the batch is stored;
    the message names the offending ``meta`` key or field.
    """


class LeaseError(CrawlqError):
    """``ack`` or ``release`` was given a request this frontier never handed out.

    Only requests returned by ``pop`` (or ``Scheduler.get``) carry a lease.
    Acking a request twice, or after its lease expired and it was handed out
    again, is not an error: delivery is at-least-once, so a late ack simply
    completes the request.
    """


class FrontierClosed(CrawlqError):
    """The frontier was used after ``close()``."""


class StoreError(CrawlqError):
    """The store behind a frontier failed.

    The operation that raised did not take effect; everything accepted before
    it is still stored. The message names the store and what to check.
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
