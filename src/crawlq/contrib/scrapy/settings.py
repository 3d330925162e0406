"""The Scrapy settings the crawlq scheduler reads, checked once at start-up.

The settings, their defaults and what each does are listed in the docstring
of ``crawlq.contrib.scrapy`` (a table ready for the README). Every value is
checked here, once, so that a bad one stops the crawl at start with a
`ConfigError` naming the setting.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from ..._errors import ConfigError
from ..._open import store_kind

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.settings import BaseSettings

__all__ = ["SchedulerConfig"]

_N = TypeVar("_N", int, float)
_D = TypeVar("_D", float, None)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """What the scheduler reads from the crawler's settings, validated."""

    url: str
    #: The store keeps requests beyond this process (not ``memory://``).
    durable: bool
    #: Other processes may pop from the store (Redis), so it cannot hold
    #: tokens of request objects that live in this process.
    shared: bool
    lifo: bool
    host_delay: float
    host_concurrency: int | None
    lease_timeout: float
    #: Most requests in the engine at once (downloading or being parsed); None: no limit.
    max_in_flight: int | None
    options: dict[str, Any] = field(default_factory=dict)
    start_requests_apart: bool = True
    #: Start requests come out newest first within a priority (a Lifo start queue class).
    start_lifo: bool = False
    jobdir: str | None = None
    #: Seconds a worker with nothing to do stays open (0: never closes); None:
    #: it closes as soon as the crawl has nothing left (Scrapy's own rule).
    idle_close: float | None = None
    #: Seconds after which a finished page is fetched again; None: never.
    refetch_after: float | None = None
    #: Revisits (refetches waiting for their time) keep the spider open.
    wait_for_revisits: bool = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> SchedulerConfig:
        """Read and check the crawler's settings; raise `ConfigError` naming the bad one."""
        return cls.from_settings(crawler.settings)

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> SchedulerConfig:
        """Read and check ``settings``; raise `ConfigError` naming the bad one."""
        jobdir = settings.get("JOBDIR") or None
        url = settings.get("CRAWLQ_URL")
        if url is None or url == "":
            # An absolute sqlite URL, quoted, so that no JOBDIR name can read
            # as another scheme or carry a query.
            url = (
                f"sqlite:///{quote(str(Path(jobdir, 'crawlq.db').absolute()))}"
                if jobdir
                else "memory://"
            )
        elif not isinstance(url, str):
            raise ConfigError(
                f"CRAWLQ_URL must be a str such as 'memory://' or a job directory, not {url!r}"
            )
        try:
            kind = store_kind(url)
        except ConfigError as exc:
            raise ConfigError(f"CRAWLQ_URL={url!r}: {exc}") from None
        durable, shared = kind.durable, kind.shared
        lifo_setting = settings.get("CRAWLQ_LIFO")
        if lifo_setting is None:
            queue = settings.get("SCHEDULER_DISK_QUEUE" if durable else "SCHEDULER_MEMORY_QUEUE")
            lifo = _is_lifo(queue, default=True)
        else:
            lifo = _bool(settings, "CRAWLQ_LIFO")
        start_queue = settings.get(
            "SCHEDULER_START_DISK_QUEUE" if durable else "SCHEDULER_START_MEMORY_QUEUE"
        )
        host_delay = seconds_setting(settings, "CRAWLQ_HOST_DELAY", None)
        if host_delay is None:
            host_delay = seconds_setting(settings, "DOWNLOAD_DELAY", 0.0) or 0.0
        concurrency = _count(settings, "CRAWLQ_HOST_CONCURRENCY")
        if concurrency is None:
            concurrency = _count(settings, "CONCURRENT_REQUESTS_PER_IP") or _count(
                settings, "CONCURRENT_REQUESTS_PER_DOMAIN"
            )
        max_in_flight = _count(settings, "CRAWLQ_MAX_IN_FLIGHT")
        if max_in_flight is None and durable:
            # Bounds the re-fetches after a kill. In memory nothing is
            # fetched again, and Scrapy's engine bounds the downloads itself:
            # no cap, so requests go out when Scrapy's scheduler would send them.
            max_in_flight = _count(settings, "CONCURRENT_REQUESTS")
        lease_timeout = seconds_setting(settings, "CRAWLQ_LEASE_TIMEOUT", 600.0)
        if lease_timeout is None or lease_timeout <= 0:
            raise ConfigError(f"CRAWLQ_LEASE_TIMEOUT must be > 0 seconds, not {lease_timeout!r}")
        idle_close = seconds_setting(settings, "CRAWLQ_IDLE_CLOSE", None)
        refetch_after = seconds_setting(settings, "CRAWLQ_REFETCH_AFTER", None)
        if refetch_after is not None and refetch_after <= 0:
            raise ConfigError(
                f"CRAWLQ_REFETCH_AFTER must be > 0 seconds, not {refetch_after!r}; "
                "leave it unset for pages fetched once"
            )
        options = settings.get("CRAWLQ_OPTIONS") or {}
        if not isinstance(options, dict) and hasattr(options, "copy_to_dict"):
            options = options.copy_to_dict()
        if isinstance(options, str):
            # As Scrapy's own dict settings read from ``-s NAME=VALUE``: JSON text.
            try:
                options = json.loads(options)
            except ValueError as exc:
                raise ConfigError(f"CRAWLQ_OPTIONS is not JSON: {options!r} ({exc})") from None
        if not isinstance(options, dict):
            raise ConfigError(
                f"CRAWLQ_OPTIONS must be a dict of open_frontier options, not {options!r}"
            )
        return cls(
            url=url,
            durable=durable,
            shared=shared,
            lifo=lifo,
            host_delay=host_delay,
            host_concurrency=concurrency or None,
            lease_timeout=lease_timeout,
            max_in_flight=max_in_flight or None,
            options=dict(options),
            start_requests_apart=bool(start_queue),
            start_lifo=bool(start_queue) and _is_lifo(start_queue, default=False),
            jobdir=jobdir,
            idle_close=idle_close,
            refetch_after=refetch_after,
            wait_for_revisits=_bool(settings, "CRAWLQ_WAIT_FOR_REVISITS"),
        )


def _is_lifo(queue: Any, *, default: bool) -> bool:
    """Whether a queue class (or its path) names a LIFO queue; ``default`` if neither.

    Scrapy's queue classes are made by factories (``PickleFifoDiskQueue`` is
    a class named ``ScrapyRequestQueue``): the first class of its MRO whose
    name says "fifo" or "lifo" decides (queuelib's ``LifoMemoryQueue``
    subclasses its ``FifoMemoryQueue``).
    """
    classes = queue.__mro__ if isinstance(queue, type) else (queue,)
    for cls in classes:
        name = cls.__qualname__ if isinstance(cls, type) else str(cls)
        name = name.rsplit(".", 1)[-1].lower()
        if "lifo" in name:
            return True
        if "fifo" in name:
            return False
    return default


def _bool(settings: BaseSettings, name: str) -> bool:
    try:
        return settings.getbool(name)
    except ValueError:
        raise ConfigError(f"{name} must be True or False, not {settings.get(name)!r}") from None


def seconds_setting(
    settings: BaseSettings, name: str, default: _D, *, positive: bool = False
) -> float | _D:
    """The setting ``name`` in seconds, ``default`` if unset.

    Raises `ConfigError` naming the setting unless it is a finite number
    >= 0 (> 0 when ``positive``).
    """
    seconds = _number(settings, name, float, "a number of seconds")
    if seconds is None:
        return default
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        bound = "> 0" if positive else ">= 0"
        raise ConfigError(
            f"{name} must be a finite number of seconds {bound}, not {settings.get(name)!r}"
        )
    return seconds


def _count(settings: BaseSettings, name: str) -> int | None:
    count = _number(settings, name, int, "an int")
    if count is not None and count < 0:
        raise ConfigError(f"{name} must be >= 0, not {settings.get(name)!r}")
    return count


def _number(settings: BaseSettings, name: str, kind: type[_N], what: str) -> _N | None:
    """The setting ``name`` as a ``kind`` (None if unset); `ConfigError` naming ``what``."""
    value = settings.get(name)
    if value is None:
        return None
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be {what}, not {value!r}") from None
