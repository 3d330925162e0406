"""Redis queues for Scrapy's own scheduler: Scrapy's external queue interface.

``SCHEDULER_DISK_QUEUE = "crawlq.contrib.scrapy.RedisLifoQueue"`` (or
``RedisFifoQueue``) with ``CRAWLQ_URL = "redis://[user:password@]host:port/db"``
and ``JOBDIR`` (the stock scheduler uses disk queues only when ``JOBDIR`` is
set) keeps Scrapy's scheduler and its priority queue, and keeps each queue in
a Redis list.

What they guarantee
    - No pickle: requests are stored as crawlq's msgpack Scrapy payloads.
    - Keys are ``crawlq:{CRAWL}:squeue:<queue key>``: the crawl name is the
      URL's ``?crawl=NAME``, else the spider's name; the queue key is Scrapy's
      (``requests.queue/-5``), relative to ``JOBDIR``.
    - One redis client (and connection) per distinct URL, shared by every
      queue of the process; spiders with other URLs get their own.
    - ``from_crawler`` checks the server once per URL and process: it answers,
      it is Redis 7 or newer, and a probe request pushed and popped on a
      scratch key comes back with the same fingerprint (a queue holding
      requests is never touched). If not it raises `QueueCheckFailed`
      naming the URL (without its password) and the fix.
    - A connection problem, or a server that cannot write to its full
      disk, never stops the crawl: ``push`` raises `TransientError` (a
      ``ValueError``: the stock scheduler keeps that request in memory),
      ``pop`` returns None, ``__len__`` returns the last known length; for
      a second after a failure the server is not asked.
      A push or pop whose reply was lost is undone, or handed out again, on
      the next call that reaches the server. Stats count them:
      ``crawlq/redis_queue/push_unavailable`` and ``.../pop_unavailable``.

What they cannot fix
    - ``pop`` removes the request: the stock scheduler forgets a request once
      popped, so one popped and still in the engine at a kill is lost.
      crawlq's `Scheduler` (``SCHEDULER = "crawlq.contrib.scrapy.Scheduler"``
      with the same ``CRAWLQ_URL``) acknowledges only finished requests.
    - The length is counted in this process (no round trip per ``len``):
      a queue key is meant for one crawl process at a time, as with ``JOBDIR``.

Scrapy 2.13-2.19 have no ``TransientError`` and fall back to memory on a
``ValueError``: `TransientError` is both a crawlq `StoreUnavailable` and a
``ValueError``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self
from urllib.parse import parse_qsl, urlsplit

from ..._errors import CrawlqError, StoreError, StoreFull, StoreUnavailable
from ...stores.redis.client import MIN_SERVER, acquire_client, release_client
from ...stores.redis.config import RedisURL, parse_url
from ...stores.redis.conn import Link, server_version
from .codec import RequestCodec
from .queues import _ActiveFile

if TYPE_CHECKING:
    import scrapy
    from scrapy.crawler import Crawler

__all__ = ["QueueCheckFailed", "RedisFifoQueue", "RedisLifoQueue", "TransientError"]

logger = logging.getLogger("crawlq.contrib.scrapy")

#: Seconds the server is left alone after a connection problem.
_PAUSE: Final = 1.0
_ID: Final = 8  # bytes of the random id in front of every stored request

# KEYS: queue, popped. ARGV: ids of pops whose reply was lost (joined), 'L'/'R',
# this pop's id, undo elements... The popped key holds the id and request of
# the last pop that ran: if that was a lost one, its request is handed out again.
_POP: Final = b"""
for i = 4, #ARGV do redis.call('LREM', KEYS[1], -1, ARGV[i]) end
local v
if ARGV[1] ~= '' then
  local p = redis.call('GET', KEYS[2])
  if p then
    local id = string.sub(p, 1, 8)
    for i = 1, #ARGV[1], 8 do
      if string.sub(ARGV[1], i, i + 7) == id then v = string.sub(p, 9) end
    end
  end
end
if not v then
  if ARGV[2] == 'L' then v = redis.call('LPOP', KEYS[1]) else v = redis.call('RPOP', KEYS[1]) end
end
if v then redis.call('SET', KEYS[2], ARGV[3] .. v) else redis.call('DEL', KEYS[2]) end
return {redis.call('LLEN', KEYS[1]), v}
"""
# KEYS: queue. ARGV: element, undo elements...
_PUSH: Final = b"""
for i = 2, #ARGV do redis.call('LREM', KEYS[1], -1, ARGV[i]) end
redis.call('RPUSH', KEYS[1], ARGV[1])
return redis.call('LLEN', KEYS[1])
"""


class TransientError(StoreUnavailable, ValueError):
    """A queue's Redis could not take this push (unreachable, or its disk full): kept in memory."""


class _Down(StoreUnavailable):
    """The server failed less than `_PAUSE` seconds ago: nothing was sent."""


class QueueCheckFailed(StoreError):
    """The start-up self-check of a Redis queue failed: the crawl cannot use that server."""


class _Server:
    """The shared client and connection of one URL, and whether it is down."""

    servers: ClassVar[dict[str, _Server]] = {}

    def __init__(self, location: RedisURL) -> None:
        self.location = location
        self.link = Link(location, acquire_client(location), retry_timeout=0.0)
        self.checked = False
        self.down_until = 0.0

    @classmethod
    def get(cls, location: RedisURL) -> _Server:
        server = cls.servers.get(location.raw)
        if server is None:
            server = cls.servers[location.raw] = cls(location)
        return server

    def drop(self) -> None:
        if self.servers.get(self.location.raw) is self:
            del self.servers[self.location.raw]
        self.link.close()
        release_client(self.location)

    def eval(self, script: bytes, keys: tuple[bytes, ...], *args: bytes, doing: str) -> Any:
        """Run ``script``; raise `StoreUnavailable` at once while the server is down.

        A server that refuses writes on a full disk (`StoreFull`) counts as
        down too.
        """
        if time.monotonic() < self.down_until:
            raise _Down(f"Redis at {self.location.display} is not answering")
        try:
            return self.link.command(b"EVAL", script, len(keys), *keys, *args, doing=doing)
        except (StoreUnavailable, StoreFull):
            self.down_until = time.monotonic() + _PAUSE
            raise


class _RedisQueue:
    """A Scrapy external queue in one Redis list (see the module docstring)."""

    lifo: ClassVar[bool] = False

    def __init__(
        self, server: _Server, codec: RequestCodec, key: str, length: int, active: Any
    ) -> None:
        self._server = server
        self._codec = codec
        prefix = server.location.prefix.encode()
        self._key = prefix + b"squeue:" + key.encode()
        self._popped = prefix + b"spopped:" + key.encode()
        self._path = Path(key)
        self._active = active
        self._listed = False
        self._length = length
        self._undo: list[bytes] = []  # pushes whose reply was lost
        self._lost_pops = b""  # ids of pops sent whose reply was lost
        self._closed = False
        self.stats: Any = None  # the crawler's stats, set by from_crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler, key: str, *args: Any, **kwargs: Any) -> Self:
        """Open the queue ``key`` on ``CRAWLQ_URL``; check the server on first use.

        Raises `crawlq.ConfigError` for a missing or malformed ``CRAWLQ_URL``,
        `QueueCheckFailed` naming the URL (without password) and the fix
        when the server cannot be used.
        """
        name = f"SCHEDULER_DISK_QUEUE=crawlq.contrib.scrapy.{cls.__name__}"
        location = _location(crawler, name)
        server = _Server.get(location)
        codec = RequestCodec(crawler.spider)
        qkey = _queue_key(crawler, key)
        if not server.checked:
            try:
                _self_check(crawler, server, codec)
            except CrawlqError as exc:
                server.drop()
                text = str(exc)
                if location.display not in text:
                    text = f"Redis at {location.display}: {text}"
                raise QueueCheckFailed(f"{name} failed its start-up self-check: {text}") from None
            server.checked = True
        try:
            length = int(
                server.link.command(
                    b"LLEN", location.prefix + "squeue:" + qkey, doing="opening a queue"
                )
            )
        except StoreUnavailable:
            length = 0  # down mid-crawl: its pushes raise TransientError until it is back
        queue = cls(server, codec, qkey, length, _ActiveFile.find(crawler, Path(key)))
        queue.stats = crawler.stats
        return queue

    def push(self, request: scrapy.Request) -> None:
        """Store ``request`` at the tail.

        Raises `crawlq.SerializationError` (``Unserializable``) for a request
        that cannot be stored and `TransientError` when Redis cannot be
        reached: both ``ValueError``, so the scheduler keeps it in memory.
        """
        element = os.urandom(_ID) + self._codec.encode(request)
        if not self._listed and self._active is not None:
            self._active.add(self._path, request)
            self._listed = True
        try:
            reply = self._server.eval(
                _PUSH, (self._key,), element, *self._undo, doing="pushing a request"
            )
        except (StoreUnavailable, StoreFull) as exc:
            if isinstance(exc, StoreUnavailable) and not isinstance(exc, _Down):
                self._undo.append(element)  # it may have been stored
            self._count("crawlq/redis_queue/push_unavailable")
            raise TransientError(str(exc)) from None
        self._undo.clear()
        self._length = int(reply)

    def pop(self) -> scrapy.Request | None:
        """Remove and return the next request; None when empty or Redis cannot be reached."""
        while True:
            pop_id = os.urandom(_ID)
            try:
                reply = self._server.eval(
                    _POP,
                    (self._key, self._popped),
                    self._lost_pops,
                    b"R" if self.lifo else b"L",
                    pop_id,
                    *self._undo,
                    doing="popping a request",
                )
            except (StoreUnavailable, StoreFull) as exc:
                if isinstance(exc, StoreUnavailable) and not isinstance(exc, _Down):
                    self._lost_pops += pop_id  # it may have run
                self._count("crawlq/redis_queue/pop_unavailable")
                return None
            except StoreError as exc:
                logger.error("crawlq could not pop from %s: %s", self._key.decode(), exc)
                return None
            self._lost_pops = b""
            self._undo.clear()
            self._length = int(reply[0])
            if len(reply) < 2 or reply[1] is None:
                return None
            data = bytes(reply[1])[_ID:]
            try:
                return self._codec.decode(data, "")
            except Exception as exc:
                logger.error("crawlq dropped a stored request: it cannot be rebuilt (%s)", exc)

    def _count(self, name: str) -> None:
        if self.stats is not None:
            self.stats.inc_value(name)

    def close(self) -> None:
        """Stop using the queue; what it holds stays in Redis for the next run.

        The record of the last pop is deleted unless its reply was lost.
        """
        if self._closed:
            return
        self._closed = True
        if not self._lost_pops:
            with contextlib.suppress(CrawlqError):
                self._server.eval(
                    b"return redis.call('DEL', KEYS[1])", (self._popped,), doing="closing a queue"
                )

    def __len__(self) -> int:
        """Requests in the queue, counted by this process (the last known length)."""
        return 0 if self._closed else self._length


class RedisFifoQueue(_RedisQueue):
    """Oldest request first.

    ``SCHEDULER_DISK_QUEUE = "crawlq.contrib.scrapy.RedisFifoQueue"``.
    """

    lifo = False


class RedisLifoQueue(_RedisQueue):
    """Newest request first, Scrapy's default order.

    ``SCHEDULER_DISK_QUEUE = "crawlq.contrib.scrapy.RedisLifoQueue"``.
    """

    lifo = True


def _location(crawler: Crawler, name: str) -> RedisURL:
    """The parsed ``CRAWLQ_URL``; the crawl name defaults to the spider's name."""
    from ..._errors import ConfigError

    url = crawler.settings.get("CRAWLQ_URL")
    if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f'{name} needs CRAWLQ_URL = "redis://[user:password@]host:port/db"')
    query = dict(parse_qsl(urlsplit(url).query))
    spider_name = getattr(crawler.spider, "name", None)
    if "crawl" not in query and spider_name:
        url += ("&" if "?" in url else "?") + "crawl=" + str(spider_name)
    return parse_url(url)


def _queue_key(crawler: Crawler, key: str) -> str:
    """Scrapy's queue key, relative to ``JOBDIR`` when it lies under it."""
    jobdir = crawler.settings.get("JOBDIR")
    if jobdir:
        try:
            return Path(key).absolute().relative_to(Path(jobdir).absolute()).as_posix()
        except ValueError:
            pass
    return key


def _self_check(crawler: Crawler, server: _Server, codec: RequestCodec) -> None:
    """Push a probe request to a scratch key, pop it, compare fingerprints."""
    import scrapy

    link = server.link
    link.command(b"PING", doing="connecting", retry=False)
    version = server_version(link)
    if version < MIN_SERVER:
        raise StoreError(
            f"the server is Redis {'.'.join(map(str, version))}; crawlq needs Redis "
            f"{'.'.join(map(str, MIN_SERVER))} or newer: upgrade it or point CRAWLQ_URL at another"
        )
    probe = scrapy.Request("http://crawlq.invalid/probe", meta={"probe": os.urandom(4).hex()})
    scratch = _RedisQueue(server, codec, "self-check/" + os.urandom(8).hex(), 0, None)
    try:
        scratch.push(probe)
        back = scratch.pop()
        if back is None and server.down_until:
            raise StoreUnavailable("the server stopped answering during the self-check")
    except TransientError as exc:
        raise StoreUnavailable(str(exc)) from None
    finally:
        with contextlib.suppress(CrawlqError):
            link.command(b"DEL", scratch._key, scratch._popped, doing="cleaning up the self-check")
    fingerprint = crawler.request_fingerprinter.fingerprint
    if back is None or fingerprint(back) != fingerprint(probe) or back.meta != probe.meta:
        raise StoreError(
            "a probe request pushed and popped did not come back intact; check that no other "
            "client writes crawlq's keys and that the server keeps what it is sent"
        )
