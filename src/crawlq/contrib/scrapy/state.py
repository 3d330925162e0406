"""A pickle-free replacement for Scrapy's ``SpiderState`` extension.

In ``settings.py``::

    EXTENSIONS = {
        "scrapy.extensions.spiderstate.SpiderState": None,
        "crawlq.contrib.scrapy.SpiderState": 0,
    }

``spider.state`` is loaded when the spider opens and saved when it closes,
msgpack-encoded, in the crawl's store:

- with crawlq's `Scheduler`, in its frontier (`Frontier.save_state`): the
  SQLite job ``JOBDIR/crawlq.db``, or Redis;
- else with ``CRAWLQ_URL = "redis://..."`` (crawlq's Redis queues), in the
  key ``crawlq:{CRAWL}:spider-state``;
- else in ``JOBDIR/crawlq-spider.state`` (msgpack, replaced atomically).

Values must be msgpack-able (str keys; None, bool, int, float, str, bytes,
lists and dicts of them): a value that is not raises `SerializationError`
naming its key when the spider closes, and the state saved before is kept.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Self

import msgspec

from ..._batch import check_state
from ..._errors import ConfigError, CorruptStore, CrawlqError, SerializationError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["SpiderState"]

_FILE: Final = "crawlq-spider.state"


def _encode(state: Any) -> bytes:
    if not isinstance(state, dict):
        raise SerializationError(f"spider.state must be a dict, not {type(state).__name__}")
    check_state(state, "spider.state")
    return msgspec.msgpack.encode(state)


class SpiderState:
    """Keeps ``spider.state`` in the crawl's store, without pickle (see the module docstring).

    Raises Scrapy's ``NotConfigured`` without ``JOBDIR`` and ``CRAWLQ_URL``
    (as Scrapy's extension does without ``JOBDIR``).
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.jobdir: str | None = crawler.settings.get("JOBDIR") or None
        url = crawler.settings.get("CRAWLQ_URL")
        self.url: str | None = url if isinstance(url, str) and url else None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Make the extension for ``crawler`` (Scrapy calls this).

        Raises Scrapy's ``NotConfigured`` (the extension stays off) when the
        crawl has neither a ``JOBDIR`` nor a ``CRAWLQ_URL``.
        """
        from scrapy import signals
        from scrapy.exceptions import NotConfigured

        state = cls(crawler)
        if not state.jobdir and not state.url:
            raise NotConfigured
        crawler.signals.connect(state.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(state.spider_closed, signal=signals.spider_closed)
        return state

    def _scheduler(self) -> Any:
        engine = getattr(self.crawler, "engine", None)
        scheduler = getattr(engine, "scheduler", None)
        if scheduler is None:  # Scrapy before the engine's `scheduler` property
            slot = getattr(engine, "_slot", None) or getattr(engine, "slot", None)
            scheduler = getattr(slot, "scheduler", None)
        return scheduler

    def _frontier(self) -> Any:
        scheduler = self._scheduler()
        from .scheduler import Scheduler

        # Not isinstance: Scrapy's scheduler metaclass answers it by duck typing.
        if Scheduler in type(scheduler).__mro__:
            return scheduler.frontier
        return None

    def _redis(self) -> tuple[Any, bytes] | None:
        if self.url is None or not self.url.startswith(("redis://", "rediss://", "unix://")):
            return None
        from .redis_queues import _location, _Server

        location = _location(self.crawler, "crawlq.contrib.scrapy.SpiderState")
        return _Server.get(location), (location.prefix + "spider-state").encode()

    def _file(self) -> Path:
        if self.jobdir is None:
            raise ConfigError(
                "crawlq.contrib.scrapy.SpiderState needs JOBDIR, crawlq's Scheduler or a "
                "redis:// CRAWLQ_URL to keep spider.state"
            )
        return Path(self.jobdir, _FILE)

    def _save_before_close(self, spider: Any) -> None:
        """Save the state in the scheduler's frontier just before the scheduler closes it.

        Scrapy closes the scheduler before it sends ``spider_closed``.
        """
        scheduler = self._scheduler()
        close = scheduler.close

        def save_then_close(reason: str) -> Any:
            try:
                state = getattr(spider, "state", None)
                if state is not None:
                    _encode(state)
                    scheduler.frontier.save_state(state)
            finally:
                result = close(reason)
            return result

        scheduler.close = save_then_close

    def spider_opened(self, spider: Any) -> None:
        """Load ``spider.state`` (an empty dict for a new crawl)."""
        frontier = self._frontier()
        if frontier is not None:
            spider.state = dict(frontier.load_state())
            self._save_before_close(spider)
            return
        redis = self._redis()
        if redis is not None:
            server, key = redis
            data = server.link.command(b"GET", key, doing="loading spider.state")
        else:
            path = self._file()
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                data = None
        if data is None:
            spider.state = {}
            return
        try:
            state = msgspec.msgpack.decode(data)
        except msgspec.DecodeError as exc:
            raise CorruptStore(f"the saved spider.state is unreadable ({exc})") from None
        spider.state = state if isinstance(state, dict) else {}

    def spider_closed(self, spider: Any) -> None:
        """Save ``spider.state``; raise `SerializationError` naming a value it cannot store."""
        state = getattr(spider, "state", None)
        if state is None:
            return
        data = _encode(state)
        if self._frontier() is not None:
            return  # saved as the scheduler closed (its frontier is closed by now)
        redis = self._redis()
        if redis is not None:
            server, key = redis
            server.link.command(b"SET", key, data, doing="saving spider.state")
            return
        path = self._file()
        temporary = path.with_name(path.name + ".tmp")
        try:
            with temporary.open("wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise CrawlqError(f"cannot save spider.state to {path}: {exc.strerror}") from None
