"""crawlq for Scrapy: a drop-in ``SCHEDULER``, and disk queues for the stock one.

In ``settings.py``::

    SCHEDULER = "crawlq.contrib.scrapy.Scheduler"

and nothing else. Without ``JOBDIR`` requests are kept in memory
(``memory://``); with ``JOBDIR`` they are kept in the SQLite job
``JOBDIR/crawlq.db``, and Ctrl-C or ``kill -9`` followed by the same command
resumes the crawl with nothing lost. ``CRAWLQ_URL`` picks another store
(a job path, ``sqlite:///...``, ``redis://...``).

Settings (all optional; `Scheduler` describes the behaviour and the stats):

| setting | default | meaning |
| --- | --- | --- |
| `CRAWLQ_URL` | `JOBDIR/crawlq.db` if `JOBDIR` is set, else `memory://` | where requests are kept |
| `CRAWLQ_LIFO` | `True` (Scrapy's DFO), `False` if `SCHEDULER_DISK_QUEUE` (durable \
store) or `SCHEDULER_MEMORY_QUEUE` (memory) is a Fifo class | newest first within a priority |
| `CRAWLQ_HOST_DELAY` | `DOWNLOAD_DELAY` | least seconds between two requests of one slot |
| `CRAWLQ_HOST_CONCURRENCY` | `CONCURRENT_REQUESTS_PER_IP`, else `..._PER_DOMAIN` | most \
requests of one download slot in the engine at once; 0: no limit |
| `CRAWLQ_MAX_IN_FLIGHT` | `CONCURRENT_REQUESTS` with a durable store, else 0 | most \
requests in the engine at once, downloading or being parsed (the re-fetches after a \
`kill -9`); 0: no limit |
| `CRAWLQ_LEASE_TIMEOUT` | `600` | seconds before an unfinished request is handed out again |
| `CRAWLQ_IDLE_CLOSE` | unset: close when the crawl has nothing left | seconds a worker with \
nothing to do stays open, looking for requests fed from outside (`crawlq add`); 0: never close |
| `CRAWLQ_OPTIONS` | `{}` | more `crawlq.open_frontier` options, e.g. \
`{"synchronous": "full"}`; on the command line as JSON text: `-s CRAWLQ_OPTIONS='{"shards": 6}'` |
| `CRAWLQ_RETRY_AFTER_DEFAULT` | `60` | seconds `RetryAfterMiddleware` blocks a slot that \
answered 429 or 503 without a `Retry-After` |
| `CRAWLQ_RETRY_AFTER_MAX` | `3600` | the longest block (and robots.txt `Crawl-delay`) \
`RetryAfterMiddleware` sets, in seconds |
| `CRAWLQ_RETRY_BACKOFF_BASE` | `1` | seconds `BackoffRetryMiddleware` delays a request's first \
retry; each later retry waits twice as long as the one before |
| `CRAWLQ_RETRY_BACKOFF_MAX` | `300` | the longest retry delay of `BackoffRetryMiddleware`, \
in seconds |
| `CRAWLQ_REFETCH_AFTER` | unset: never | seconds after which a finished page is fetched again \
(`meta["crawlq_refetch_after"]` overrides it per request) |
| `CRAWLQ_WAIT_FOR_REVISITS` | `False` | keep the spider open while pages wait to be fetched \
again (a continuous crawl); requests delayed by `crawlq_not_before`, `crawlq_delay` or a \
backoff keep it open anyway |
| `CRAWLQ_METRICS_PORT` | unset | the port `MetricsExtension` serves Prometheus metrics on |
| `CRAWLQ_METRICS_ADDR` | `127.0.0.1` | the address `MetricsExtension` listens on |
| `CRAWLQ_METRICS_HOSTS` | `10` | busiest hosts with metric series of their own |

(A trailing backslash continues a row on the next line.) Scrapy settings it
honours: `JOBDIR`; `SCHEDULER_DEBUG` (log every request kept in memory, not
only the first); `DUPEFILTER_DEBUG` (log every duplicate);
`DUPEFILTER_CLASS` (built as ``scheduler.df``; Scrapy's default
`RFPDupeFilter` becomes crawlq's `DupeFilter`, answering from the frontier's
seen set; another class decides duplicates itself, as in Scrapy's scheduler,
and `scrapy.dupefilters.BaseDupeFilter` turns deduplication off);
`SCHEDULER_START_DISK_QUEUE` / `SCHEDULER_START_MEMORY_QUEUE` (a Lifo class
sends start requests newest first; `None` orders them like the others);
`DOWNLOAD_DELAY`, `CONCURRENT_REQUESTS_PER_DOMAIN`,
`CONCURRENT_REQUESTS_PER_IP`.

Requests fed into the crawl from outside (``crawlq add CRAWL URL...``,
``crawlq import``, `crawlq.Frontier.add_many`) carry no Scrapy fields: each
becomes a ``scrapy.Request`` for the spider's default callback (``parse``,
or the callback the crawlq request names), or what the spider's
``make_request_from_crawlq(self, request: crawlq.Request) -> scrapy.Request |
None`` returns (None: skip it), as scrapy-redis's ``make_request_from_data``
does. A stored request that cannot be rebuilt is logged, counted in
``crawlq/unrebuildable`` and left in the store, never acked (see `Scheduler`).

Due times: ``meta["crawlq_not_before"]`` (POSIX seconds or an aware
datetime) and ``meta["crawlq_delay"]`` (seconds from enqueueing) store a
request at once and hand it out only from then on (a bad value raises
`crawlq.InvalidRequest` from ``enqueue_request``, counted in
``crawlq/invalid``); `BackoffRetryMiddleware` (in place of Scrapy's
``RetryMiddleware``) retries that way, with exponential backoff;
``CRAWLQ_REFETCH_AFTER`` (or ``meta["crawlq_refetch_after"]``) fetches a
page again that long after it was finished. The spider stays open while
requests wait for their due time, but not for pages waiting to be
refetched (revisits) unless ``CRAWLQ_WAIT_FOR_REVISITS`` is set; see
``due`` and `Scheduler.has_pending_requests`.

`RetryAfterMiddleware` (in ``DOWNLOADER_MIDDLEWARES``) blocks a download
slot in the frontier when it answers 429 or 503 (for its ``Retry-After``),
and with ``ROBOTSTXT_OBEY`` gives a host its robots.txt ``Crawl-delay``:
every process of a shared crawl obeys both.

`MetricsExtension` (in ``EXTENSIONS``, with ``CRAWLQ_METRICS_PORT``) serves
the crawl's Prometheus metrics (`crawlq.metrics`) while the spider runs.

For Scrapy's stock scheduler with ``JOBDIR``, `FifoDiskQueue` and
`LifoDiskQueue` replace its pickle disk queues (``SCHEDULER_DISK_QUEUE``).

Tested with Scrapy 2.13.4 and 2.19 (``crawlq[scrapy]`` pins
``scrapy>=2.13.4,<2.20``), against Scrapy's own scheduler, dupefilter and
engine tests too (``tests/scrapy/test_scrapy_suite.py``).
Importing this module without Scrapy raises `crawlq.ConfigError` naming the
extra to install.
"""

from __future__ import annotations

from ..._errors import ConfigError

try:
    import scrapy  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ConfigError(
        f"crawlq.contrib.scrapy needs Scrapy ({exc}): pip install 'crawlq[scrapy]'"
    ) from exc

from .backoff import BackoffRetryMiddleware, backoff_delay
from .codec import Unserializable
from .dupefilter import DupeFilter
from .frontiers import crawlq_priority
from .metrics import MetricsExtension
from .queues import FifoDiskQueue, LifoDiskQueue
from .redis_queues import QueueCheckFailed, RedisFifoQueue, RedisLifoQueue, TransientError
from .retry_after import RetryAfterMiddleware, retry_after_seconds
from .scheduler import Scheduler
from .state import SpiderState

__all__ = [
    "BackoffRetryMiddleware",
    "DupeFilter",
    "FifoDiskQueue",
    "LifoDiskQueue",
    "MetricsExtension",
    "QueueCheckFailed",
    "RedisFifoQueue",
    "RedisLifoQueue",
    "RetryAfterMiddleware",
    "Scheduler",
    "SpiderState",
    "TransientError",
    "Unserializable",
    "backoff_delay",
    "crawlq_priority",
    "retry_after_seconds",
]
