"""A small local site on two loopback hosts for the crawlee adapter's crawls.

`TwoHostSite` serves ``PAGES`` pages on each of 127.0.0.2 and 127.0.0.3
(one aiohttp server per address, on the test's event loop). Each page links
to the next two pages of its host and to the same page of the other host, so
every page is reachable from the first page of the first host and most are
linked several times. Every fetch is recorded with its server-side arrival
time (`time.monotonic`), for "fetched once" and "never faster than the
host's delay" checks. ``/robots.txt`` answers what ``robots`` holds (404 when
None); ``/limited`` answers 429 with ``Retry-After`` the first time.
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

pytest.importorskip("crawlee", reason="pip install 'crawlq[crawlee]'")

# The real crawls' fixtures (tests/crawlee/_workers.py): the four-host site, the workers.
from ._workers import loopback, workers

__all__ = ["loopback", "workers"]

ADDRESSES = ("127.0.0.2", "127.0.0.3")
PAGES = 6


def _free_port(address: str) -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


class TwoHostSite:
    """The site's URLs and what the servers saw."""

    def __init__(self) -> None:
        self.base_urls: list[str] = []
        #: (host, path, arrival) per request, in arrival order.
        self.arrivals: list[tuple[str, str, float]] = []
        self.robots: str | None = None
        self._limited = 0

    def expected(self) -> set[tuple[str, str]]:
        """Every (host, path) a full crawl fetches."""
        return {(h, f"/page/{i}") for h in ADDRESSES for i in range(PAGES)}

    def fetches(self) -> Counter[tuple[str, str]]:
        return Counter((host, path) for host, path, _ in self.arrivals if path != "/robots.txt")

    def times(self, host: str) -> list[float]:
        return [at for h, path, at in self.arrivals if h == host and path != "/robots.txt"]

    def url(self, host_index: int, path: str) -> str:
        return self.base_urls[host_index] + path

    async def handle(self, request: web.Request) -> web.Response:
        host = request.url.host or ""
        self.arrivals.append((host, request.path, time.monotonic()))
        if request.path == "/robots.txt":
            if self.robots is None:
                return web.Response(status=404)
            return web.Response(text=self.robots, content_type="text/plain")
        if request.path == "/limited":
            self._limited += 1
            if self._limited == 1:
                return web.Response(status=429, headers={"Retry-After": "1"})
            return web.Response(text="<html><body>ok</body></html>", content_type="text/html")
        index = int(request.path.rsplit("/", 1)[-1])
        me = ADDRESSES.index(host)
        other = self.base_urls[1 - me]
        links = [f"/page/{j}" for j in (index + 1, index + 2) if j < PAGES]
        links.append(f"{other}/page/{index}")
        body = "".join(f'<a href="{link}">{link}</a>' for link in links)
        return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")


@pytest.fixture
async def site() -> AsyncIterator[TwoHostSite]:
    """The two-host site, served for the test."""
    served = TwoHostSite()
    app = web.Application()
    app.router.add_get("/{tail:.*}", served.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        for address in ADDRESSES:
            port = _free_port(address)
            await web.TCPSite(runner, address, port).start()
            served.base_urls.append(f"http://{address}:{port}")
        yield served
    finally:
        await runner.cleanup()
