"""crawlq: a crawl frontier for Python.

It stores the requests still to fetch, drops the ones already seen, and hands
out the next one in priority order at the right pace for each host.

    >>> import crawlq
    >>> frontier = crawlq.open_frontier("memory://", host_delay=1.0)
    >>> frontier.add(crawlq.Request("https://example.com/"))
    True
    >>> request = frontier.pop()
    >>> frontier.ack(request)
"""

from ._controls import HostPolicy
from ._due import Revisit
from ._errors import (
    ConfigError,
    CorruptStore,
    CrawlqError,
    FrontierClosed,
    IncompatibleStore,
    InvalidRequest,
    JobLocked,
    LeaseError,
    QueueEmpty,
    QueueFull,
    SchedulerClosed,
    SerializationError,
    StoreError,
    StoreFull,
    StoreUnavailable,
    WorkerFailed,
)
from ._fingerprint import Fingerprinter
from ._frontier import Frontier, FrontierStats
from ._open import StoreKind, open_frontier, store_kind
from ._policy import Policy
from ._request import MAX_URL_LENGTH, Request
from ._version import __version__
from .scheduler.scheduler import Scheduler, SchedulerStats
from .stores.base import Counters, HostCount

__all__ = [
    "MAX_URL_LENGTH",
    "ConfigError",
    "CorruptStore",
    "Counters",
    "CrawlqError",
    "Fingerprinter",
    "Frontier",
    "FrontierClosed",
    "FrontierStats",
    "HostCount",
    "HostPolicy",
    "IncompatibleStore",
    "InvalidRequest",
    "JobLocked",
    "LeaseError",
    "Policy",
    "QueueEmpty",
    "QueueFull",
    "Request",
    "Revisit",
    "Scheduler",
    "SchedulerClosed",
    "SchedulerStats",
    "SerializationError",
    "StoreError",
    "StoreFull",
    "StoreKind",
    "StoreUnavailable",
    "WorkerFailed",
    "__version__",
    "open_frontier",
    "store_kind",
]
