"""A small async crawler: aiohttp workers fed by a crawlq `Scheduler`.

Each worker takes a request with ``Scheduler.get`` (which waits for the next
host that is ready under its delay and concurrency), fetches it, extracts the
``href`` attributes with a regular expression, resolves them with
``Request.from_link`` (which drops ``mailto:`` and other links that are no
page), and adds the page's children at ``depth + 1`` with a priority that
falls with depth (shallow pages first) and the page's ack in one
``add_many(children, ack=request)``: one durable step, so ``join`` cannot
return while its children are still unknown. A request whose crawl does not
complete (the worker is cancelled, or it fails) is released instead, not
acked: it stays in the frontier, and a resumed crawl fetches it again.

Stopping has two speeds: ``stop`` lets the requests in flight finish (workers
waiting for a request are cancelled, the others finish their page, ack it and
exit), so nothing is fetched twice after a resume; ``stop_now`` then cancels
the rest, releasing their requests.

A failed fetch (an HTTP error status, or a network error) is counted and acked
like any other: crawlq only hands requests out and paces them; retrying is the
crawler's business (re-add the request with ``dont_filter=True`` to retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

import aiohttp

from ..._errors import SchedulerClosed
from ..._request import Request
from ...scheduler.scheduler import Scheduler

__all__ = ["Crawler"]

_HREF: Final = re.compile(r"""href\s*=\s*["']([^"'<>\s]+)["']""", re.IGNORECASE)


class Crawler:
    """Crawls the URLs of some hosts with aiohttp workers fed by a `Scheduler`.

    Only links to ``allowed`` netlocs (``host:port``) are followed. With
    ``slots``, each netloc's requests carry ``meta["download_slot"]`` so that
    crawlq paces them apart even when several netlocs share one host name.
    Counters: ``fetched`` (responses received), ``errors`` by kind (an HTTP
    status such as ``"404"``, or an exception name), ``duplicates`` (links
    that ``add_many`` reported as already seen), ``links`` (links added) and
    ``released`` (requests put back unfinished when the crawl stopped).
    """

    def __init__(
        self,
        scheduler: Scheduler,
        session: aiohttp.ClientSession,
        *,
        allowed: Iterable[str],
        slots: Mapping[str, str] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.session = session
        self.allowed = frozenset(allowed)
        self.slots = dict(slots or {})
        self.fetched = 0
        self.errors: Counter[str] = Counter()
        self.duplicates = 0
        self.links = 0
        self.released = 0
        self._stopping = False
        self._busy: set[asyncio.Task[Any]] = set()

    def request(self, url: str, *, depth: int = 0) -> Request:
        """Return the request for ``url`` at ``depth``: priority ``-depth``, slot if any."""
        meta = None
        if self.slots:
            slot = self.slots.get(urlsplit(url).netloc)
            meta = {"download_slot": slot} if slot is not None else None
        return Request(url, priority=-depth, depth=depth, meta=meta)

    async def add(self, requests: Iterable[Request], *, ack: Request | None = None) -> None:
        """Add a batch (and ack ``ack``) with one ``add_many``, counting links and duplicates."""
        added = await self.scheduler.add_many(requests, ack=ack)
        self.links += len(added)
        self.duplicates += added.count(False)

    async def run(
        self,
        seeds: Iterable[str],
        *,
        workers: int,
        stop: asyncio.Event | None = None,
        stop_now: asyncio.Event | None = None,
    ) -> bool:
        """Crawl from ``seeds`` with ``workers`` workers until nothing is left, or ``stop``.

        Returns True when ``join`` does: the scheduler is then closed, so
        workers waiting in ``get`` get `SchedulerClosed` and exit. Returns
        False if ``stop`` is set first: the requests in flight are finished
        (fetched, their links added, acked), unless ``stop_now`` is set too,
        which cancels their workers, each releasing its request; the rest
        stays queued. If a worker fails, the others are stopped and its
        exception (or the `WorkerFailed` of ``join``) is raised.
        """
        await self.add(self.request(url) for url in seeds)
        joiner = asyncio.create_task(self.scheduler.join())
        tasks = [asyncio.create_task(self._work()) for _ in range(workers)]
        stopper = asyncio.create_task(stop.wait()) if stop is not None else None
        hurry = asyncio.create_task(stop_now.wait()) if stop_now is not None else None
        watched: list[asyncio.Task[Any]] = [joiner, *tasks]
        if stopper is not None:
            watched.append(stopper)
        finished = True
        try:
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if stopper is not None and stopper.done() and not joiner.done():
                finished = False
                await self._wind_down(tasks, hurry)
        except BaseException:
            for task in watched:
                task.cancel()
            raise
        finally:
            for waiter in (stopper, hurry):
                if waiter is not None:
                    waiter.cancel()
            await self.scheduler.close()
            outcomes = await asyncio.gather(joiner, *tasks, return_exceptions=True)
        expected: tuple[type[BaseException], ...] = (SchedulerClosed,)
        if not finished:
            expected = (SchedulerClosed, asyncio.CancelledError)
        for outcome in outcomes:
            if isinstance(outcome, BaseException) and not isinstance(outcome, expected):
                raise outcome
        return finished

    async def _wind_down(
        self, tasks: list[asyncio.Task[Any]], hurry: asyncio.Task[Any] | None
    ) -> None:
        """Stop: cancel idle workers, let busy ones finish their page unless ``hurry`` ends."""
        self._stopping = True
        for task in tasks:
            if task not in self._busy:
                task.cancel()  # waiting in get(): nothing is lost
        busy = [task for task in tasks if not task.done()]
        if not busy:
            return
        everyone = asyncio.gather(*busy, return_exceptions=True)
        waiting: list[asyncio.Future[Any]] = [everyone]
        if hurry is not None:
            waiting.append(hurry)
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if not everyone.done():
            for task in busy:
                task.cancel()
            await everyone

    @property
    def busy(self) -> int:
        """Workers in the middle of a page."""
        return len(self._busy)

    async def _work(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        with contextlib.suppress(SchedulerClosed):
            while not self._stopping:
                request = await self.scheduler.get()
                self._busy.add(task)
                try:
                    children = await self._crawl(request)
                    await self.add(children, ack=request)
                except BaseException:
                    # Not done (cancelled, or failed): put it back, never ack it.
                    self.scheduler.release(request)
                    self.released += 1
                    raise
                finally:
                    self._busy.discard(task)

    async def _crawl(self, request: Request) -> list[Request]:
        """Fetch one request and return its children; count an error instead of raising."""
        try:
            async with self.session.get(request.url, allow_redirects=False) as response:
                status = response.status
                body = await response.text() if 200 <= status < 300 else ""
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.errors[type(exc).__name__] += 1
            return []
        self.fetched += 1
        if status >= 400:
            self.errors[str(status)] += 1
            return []
        return [
            self.request(url, depth=request.depth + 1) for url in self.links_of(request.url, body)
        ]

    def links_of(self, base: str, html: str) -> list[str]:
        """Return the http(s) links of ``html`` to allowed netlocs, resolved against ``base``."""
        urls = []
        for href in _HREF.findall(html):
            link = Request.from_link(href, base=base)
            if link is not None and urlsplit(link.url).netloc in self.allowed:
                urls.append(link.url)
        return urls
