"""A linked site over four loopback hosts, served from a thread, for real crawlee crawls.

`LoopbackSite` serves ``pages`` pages per host on 127.0.0.2 to 127.0.0.5
(one aiohttp server per address, on an asyncio loop in a background thread),
so crawls in subprocesses fetch it while the test reads what the servers
saw. Page ``i`` of host ``h`` links to page ``i + 1`` of its host, to page
``i`` of the next host and to three pages picked at random over every host:
the whole site is reachable from page 0 of the first host, and most pages are
linked several times, across hosts. Each page answers after a latency picked
per page (up to longer than the crawl's host delay, so requests sent together
to one host would overlap at the server).

Every request is recorded with its server-side start and end
(`time.monotonic`, the same clock in every process on Linux), for "fetched
once", "never two at once per host" and "no fetch while blocked" checks.
`limit` makes one host answer one 429 with ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aiohttp import web

__all__ = ["ADDRESSES", "Fetch", "LoopbackSite"]

ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")


@dataclass(frozen=True, slots=True)
class Fetch:
    """One request as the server saw it."""

    host: str
    path: str
    start: float
    end: float
    status: int


def _free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


class LoopbackSite:
    """The site, its servers on a thread of their own, and what they saw."""

    def __init__(
        self, pages: int = 75, *, latency: tuple[float, float] = (0.002, 0.1), seed: int = 5
    ) -> None:
        self.pages = pages
        rng = random.Random(seed)
        hosts = len(ADDRESSES)
        self._latency = {(h, i): rng.uniform(*latency) for h in range(hosts) for i in range(pages)}
        self._links: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for h in range(hosts):
            for i in range(pages):
                links = [((h + 1) % hosts, i)]
                if i + 1 < pages:
                    links.append((h, i + 1))
                links += [(rng.randrange(hosts), rng.randrange(pages)) for _ in range(3)]
                self._links[(h, i)] = links
        self.base_urls: list[str] = []
        self.records: list[Fetch] = []
        self._limits: dict[str, tuple[int, float]] = {}
        self._requests: Counter[str] = Counter()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    # -- serving --------------------------------------------------------------

    def __enter__(self) -> LoopbackSite:
        self._thread.start()
        self._call(self._start())
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        for address in ADDRESSES:
            port = _free_port(address)
            await web.TCPSite(self._runner, address, port).start()
            self.base_urls.append(f"http://{address}:{port}")

    def close(self) -> None:
        if self._runner is not None:
            self._call(self._runner.cleanup())
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _handle(self, request: web.Request) -> web.Response:
        start = time.monotonic()
        host = request.url.host or ""
        self._requests[host] += 1
        limit = self._limits.get(host)
        if limit is not None and self._requests[host] == limit[0]:
            await asyncio.sleep(0.01)
            self.records.append(Fetch(host, request.path, start, time.monotonic(), 429))
            return web.Response(status=429, headers={"Retry-After": f"{limit[1]:g}"})
        try:
            key = (ADDRESSES.index(host), int(request.path.removeprefix("/page/")))
        except ValueError:
            key = None
        if key not in self._latency:
            self.records.append(Fetch(host, request.path, start, time.monotonic(), 404))
            return web.Response(status=404)
        assert key is not None
        await asyncio.sleep(self._latency[key])
        body = "".join(f'<a href="{self.url(h, i)}">{h}/{i}</a>\n' for h, i in self._links[key])
        self.records.append(Fetch(host, request.path, start, time.monotonic(), 200))
        return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")

    # -- controls and what the servers saw ------------------------------------

    def url(self, host_index: int, page: int) -> str:
        return f"{self.base_urls[host_index]}/page/{page}"

    def limit(self, host_index: int, *, at: int, retry_after: float) -> None:
        """The ``at``-th request to the host (counting from 1) answers 429 with ``Retry-After``."""
        self._limits[ADDRESSES[host_index]] = (at, retry_after)

    def expected(self) -> set[tuple[str, str]]:
        """Every (host, path) a full crawl fetches."""
        return {(host, f"/page/{i}") for host in ADDRESSES for i in range(self.pages)}

    def fetched(self) -> list[Fetch]:
        """Every request answered so far (a copy)."""
        return list(self.records)

    def counts(self) -> Counter[tuple[str, str]]:
        """Pages answered with 200, per (host, path)."""
        return Counter((f.host, f.path) for f in self.fetched() if f.status == 200)

    def total(self) -> int:
        """Requests answered so far (cheap enough to poll)."""
        return len(self.records)
