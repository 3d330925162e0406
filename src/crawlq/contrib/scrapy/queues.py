"""Disk queues for Scrapy's own scheduler, backed by crawlq's SQLite store.

``SCHEDULER_DISK_QUEUE = "crawlq.contrib.scrapy.LifoDiskQueue"`` (or
``FifoDiskQueue``) with ``JOBDIR`` keeps Scrapy's stock scheduler and its
priority queue, and replaces the pickle files under ``requests.queue/`` with
one crawlq SQLite job per queue key (a directory holding ``crawlq.db``).

What they guarantee
    - No pickle: requests are stored as crawlq's msgpack Scrapy payloads.
    - ``push`` is durable when it returns: a ``kill -9`` cannot undo it, and
      never damages what was pushed before (Scrapy's pickle queues write
      their size and offsets only at a clean close).
    - ``from_crawler`` opens (or creates) the job and raises at once if it
      cannot (locked by another crawl, not a crawlq job, not writable): the
      queue is never handed out half-working.
    - While the crawl runs, ``requests.queue/active.json`` (the list of
      queues the stock scheduler reopens on resume, which it writes only at a
      clean close) is kept listing every queue that holds requests, for
      ``ScrapyPriorityQueue`` and ``DownloaderAwarePriorityQueue``: after a
      ``kill -9`` the stock scheduler finds them again.

What they cannot fix
    - ``pop`` removes the request for good (durably) before returning it: the
      stock scheduler forgets a request once popped and tells no queue when
      it is done, so a request popped and still in the engine at a ``kill -9``
      is lost, as with Scrapy's own queues. crawlq's `Scheduler` acknowledges
      only finished requests; use it for at-least-once delivery.
    - Scrapy's dupefilter (``requests.seen``) buffers its writes: after a
      ``kill -9`` some pages may be fetched twice.
    - Each queue is a SQLite job of its own: 4 file descriptors, and (with
      this crawlq's SQLite store) about 2 MB for a Bloom filter the queue
      does not use. Scrapy 2.19's default ``DownloaderAwarePriorityQueue``
      keeps one queue per download slot and priority: with many hosts,
      prefer ``SCHEDULER_PRIORITY_QUEUE = "scrapy.pqueues.ScrapyPriorityQueue"``
      (one queue per priority), or crawlq's `Scheduler`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self
from urllib.parse import quote

from ..._errors import CrawlqError, InvalidRequest, StoreError
from ..._frontier import Frontier
from ..._open import open_frontier
from ..._request import Request
from .codec import RequestCodec

if TYPE_CHECKING:
    import scrapy
    from scrapy.crawler import Crawler

__all__ = ["FifoDiskQueue", "LifoDiskQueue"]

logger = logging.getLogger("crawlq.contrib.scrapy")

_SLOT: Final = "download_slot"
_PAYLOAD: Final = "scrapy"
_QUEUE_SLOT: Final = "queue"  # one slot: the store's order is the queue's order
_PLACEHOLDER_URL: Final = "http://crawlq.invalid/"
_NO_FINGERPRINT: Final = (bytes(16),)
_JOB_FILES: Final = ("crawlq.db", "crawlq.db-wal", "crawlq.db-shm", "crawlq.db.lock")


class _DiskQueue:
    """A Scrapy external disk queue on one crawlq SQLite job (see the module docstring)."""

    lifo: ClassVar[bool] = False

    def __init__(
        self, frontier: Frontier, codec: RequestCodec, path: Path, active: _ActiveFile | None
    ) -> None:
        self._frontier = frontier
        self._codec = codec
        self._path = path
        self._active = active
        self._listed = False
        self._head: Request | None = None  # popped by peek(), returned by the next pop()

    @classmethod
    def from_crawler(cls, crawler: Crawler, key: str, *args: Any, **kwargs: Any) -> Self:
        """Open the queue stored at directory ``key``; raise if it cannot be opened.

        Raises `crawlq.StoreError` (and its children, e.g. `JobLocked`,
        `IncompatibleStore`) naming the directory and ``SCHEDULER_DISK_QUEUE``.
        """
        path = Path(key)
        try:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the directory: {exc.strerror}") from None
            # An absolute, quoted sqlite URL: no key can read as another scheme.
            url = f"sqlite:///{quote(str((path / 'crawlq.db').absolute()))}"
            # A popped request is acked at once (Scrapy's queues have no ack):
            # durable then, so a kill never hands it out again.
            frontier = open_frontier(url, lifo=cls.lifo, lease_timeout=86400.0, ack_delay=0.0)
        except CrawlqError as exc:
            raise type(exc)(
                f"SCHEDULER_DISK_QUEUE={cls.__module__}.{cls.__name__} cannot open the "
                f"queue at {path}: {exc}"
            ) from None
        return cls(frontier, RequestCodec(crawler.spider), path, _ActiveFile.find(crawler, path))

    def push(self, request: scrapy.Request) -> None:
        """Store ``request``; durable when this returns.

        Raises `crawlq.SerializationError` (a ``ValueError``: the stock
        scheduler then keeps the request in its memory queue) for a request
        that cannot be stored, `crawlq.StoreError` if the store fails.
        """
        url = request.url
        meta: dict[str, Any] = {_SLOT: _QUEUE_SLOT}
        try:
            creq = Request(url, meta=meta, dont_filter=True)
        except InvalidRequest:
            creq = Request(_PLACEHOLDER_URL, meta=meta, dont_filter=True)
        meta[_PAYLOAD] = self._codec.encode(request, with_url=creq.url != url)
        if not self._listed and self._active is not None:
            # Listed before stored: after a kill the list may name an empty
            # queue (harmless), never miss a full one.
            self._active.add(self._path, request)
            self._listed = True
        self._frontier.add_many((creq,), fingerprints=_NO_FINGERPRINT)

    def pop(self) -> scrapy.Request | None:
        """Remove and return the next request (durably removed); None when empty."""
        while True:
            creq = self._head
            self._head = None
            if creq is None:
                creq = self._frontier.pop()
                if creq is None:
                    return None
            try:
                request = self._codec.decode(creq.meta[_PAYLOAD], creq.url)
            except Exception as exc:
                logger.error(
                    "crawlq dropped stored request %s: it cannot be rebuilt (%s)", creq.url, exc
                )
                self._frontier.ack(creq)
                continue
            self._frontier.ack(creq)
            return request

    def peek(self) -> scrapy.Request | None:
        """Return the request `pop` returns next, without removing it."""
        if self._head is None:
            self._head = self._frontier.pop()
            if self._head is None:
                return None
        return self._codec.decode(self._head.meta[_PAYLOAD], self._head.url)

    def close(self) -> None:
        """Close the store; an empty queue also removes its files, as Scrapy's queues do."""
        if self._frontier.closed:
            return
        if self._head is not None:
            with contextlib.suppress(StoreError):
                self._frontier.release(self._head)
            self._head = None
        empty = len(self._frontier) == 0
        self._frontier.close()
        if empty:
            for name in _JOB_FILES:
                with contextlib.suppress(FileNotFoundError):
                    (self._path / name).unlink()
            with contextlib.suppress(OSError):
                self._path.rmdir()
            if self._active is not None:
                self._active.discard(self._path)

    def __len__(self) -> int:
        """Requests in the queue (a peeked one included)."""
        if self._frontier.closed:
            return 0
        return len(self._frontier)


class FifoDiskQueue(_DiskQueue):
    """Oldest request first.

    ``SCHEDULER_DISK_QUEUE = "crawlq.contrib.scrapy.FifoDiskQueue"``.
    """

    lifo = False


class LifoDiskQueue(_DiskQueue):
    """Newest request first, Scrapy's default order.

    ``SCHEDULER_DISK_QUEUE = "crawlq.contrib.scrapy.LifoDiskQueue"``.
    """

    lifo = True


class _ActiveFile:
    """Keeps ``requests.queue/active.json`` listing the queues that hold requests.

    The stock scheduler reads the file at open and writes it at a clean close;
    in between, only these queues touch it: a queue is listed before its first
    request is stored and unlisted when it closes empty (and its start-queue
    twin, ``<priority>s``, or plain twin, has no files either).
    """

    _by_crawler: ClassVar[weakref.WeakKeyDictionary[Any, dict[Path, _ActiveFile]]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, crawler: Crawler, directory: Path, per_slot: bool) -> None:
        self._crawler = crawler
        self._file = directory / "active.json"
        self._per_slot = per_slot
        self._slots: dict[str, str] = {}  # slot directory name -> slot
        try:
            self._state: Any = json.loads(self._file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self._state = {} if per_slot else []

    @classmethod
    def find(cls, crawler: Crawler, path: Path) -> _ActiveFile | None:
        """The active file for a queue at ``path`` under the crawl's JOBDIR, if any."""
        jobdir = crawler.settings.get("JOBDIR")
        if not jobdir or _priority(path) is None:
            return None
        directory = Path(jobdir, "requests.queue").absolute()
        absolute = path.absolute()
        if absolute.parent == directory:
            per_slot = False
        elif absolute.parent.parent == directory:
            per_slot = True
        else:
            return None
        files = cls._by_crawler.setdefault(crawler, {})
        active = files.get(directory)
        if active is None:
            active = files[directory] = cls(crawler, directory, per_slot)
        return active

    def add(self, path: Path, request: scrapy.Request) -> None:
        priority = _priority(path)
        assert priority is not None
        if not self._per_slot:
            if not isinstance(self._state, list):
                self._state = []
            if priority not in self._state:
                self._state.append(priority)
                self._write()
            return
        from scrapy.pqueues import _path_safe

        slot_dir = path.absolute().parent.name
        slot = self._slots.get(slot_dir)
        if slot is None:
            slot = self._crawler.engine.downloader.get_slot_key(request)
            if _path_safe(slot) != slot_dir:
                return  # not the slot this queue is filed under: leave the file alone
            self._slots[slot_dir] = slot
        if not isinstance(self._state, dict):
            self._state = {}
        priorities = self._state.setdefault(slot, [])
        if priority not in priorities:
            priorities.append(priority)
            self._write()

    def discard(self, path: Path) -> None:
        priority = _priority(path)
        name = path.name
        twin = path.with_name(name[:-1] if name.endswith("s") else name + "s")
        if priority is None or twin.exists():
            return
        if not self._per_slot:
            if isinstance(self._state, list) and priority in self._state:
                self._state.remove(priority)
                self._write()
            return
        slot = self._slots.get(path.absolute().parent.name)
        if slot is None or not isinstance(self._state, dict):
            return
        priorities = self._state.get(slot)
        if priorities and priority in priorities:
            priorities.remove(priority)
            if not priorities:
                del self._state[slot]
            self._write()

    def _write(self) -> None:
        temporary = self._file.with_name(self._file.name + ".crawlq-tmp")
        temporary.write_text(json.dumps(self._state), encoding="utf-8")
        os.replace(temporary, self._file)  # atomic: a kill leaves the old or the new list


def _priority(path: Path) -> int | None:
    """The priority a queue key names (``-5``, or ``-5s`` for a start queue)."""
    name = path.name
    if name.endswith("s"):
        name = name[:-1]
    try:
        return int(name)
    except ValueError:
        return None
