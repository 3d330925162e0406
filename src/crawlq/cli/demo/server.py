"""Serving the demo site on loopback, and what the server saw.

Host ``h`` is served on ``127.0.0.<h+2>``, every host on one port when one is
free on all addresses (else one port each). Distinct addresses matter because
crawlq paces per host name. Where 127.0.0.2 and up cannot be bound (some
platforms only route 127.0.0.1), every host gets its own port on 127.0.0.1 and
`SiteServer.single_address` is True: the crawler then keys pacing on the port
too, with ``meta["download_slot"]``.

The server counts fetches per path, and per host the most requests it handled
at once and the arrival time of each request, so a crawl can be checked from
the outside: every page fetched exactly once, per-host concurrency and delay
respected. A resumed crawl serves the site again at the same URLs (its queued
requests carry them), with the earlier fetch counts.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from aiohttp import web

from .site import PageKey, Site

__all__ = ["HostLog", "SiteServer"]

_SHARED_PORT_TRIES = 5
#: Seconds a resumed crawl waits for its ports to be free again.
_REBIND_WAIT = 5.0


@dataclass(slots=True)
class HostLog:
    """What one host's server saw: requests at once and arrival times."""

    active: int = 0
    max_active: int = 0
    arrivals: list[float] = field(default_factory=list)

    def min_gap(self) -> float | None:
        """Least time in seconds between two consecutive arrivals (None: fewer than two)."""
        arrivals = self.arrivals
        if len(arrivals) < 2:
            return None
        return min(b - a for a, b in itertools.pairwise(arrivals))


class SiteServer:
    """Serves a `Site` on loopback, one address (or port) per host, and logs requests.

    Use it as an async context manager: entering binds and starts every host,
    leaving stops them. ``fetches`` counts requests per ``(host, path)``, pages
    and missing paths alike, starting from ``fetches`` if given;
    ``logs[h]`` is host ``h``'s `HostLog`. ``on_fetch`` is called with each
    ``(host, path)`` as its request arrives. With ``base_urls`` (from an
    earlier server of the same site) each host is served exactly there again;
    entering raises OSError if one of them cannot be bound.
    """

    def __init__(
        self,
        site: Site,
        *,
        single_address: bool = False,
        base_urls: Sequence[str] | None = None,
        fetches: Mapping[PageKey, int] | None = None,
        on_fetch: Callable[[PageKey], None] | None = None,
    ) -> None:
        if base_urls is not None and len(base_urls) != site.hosts:
            raise ValueError(f"need {site.hosts} base URLs, got {len(base_urls)}")
        self.site = site
        self.single_address = single_address
        self._rebind = list(base_urls) if base_urls is not None else None
        self.base_urls: list[str] = []
        self.fetches: Counter[PageKey] = Counter(fetches or {})
        self._on_fetch = on_fetch
        self.logs = [HostLog() for _ in range(site.hosts)]
        self._host_by_netloc: dict[str, int] = {}
        self._runner: web.AppRunner | None = None

    @property
    def netlocs(self) -> list[str]:
        """``address:port`` of each host, in host order."""
        return [url.partition("://")[2] for url in self.base_urls]

    async def __aenter__(self) -> SiteServer:
        sockets = await self._bind_again() if self._rebind is not None else self._bind()
        app = web.Application()
        app.router.add_route("GET", "/{path:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        try:
            await runner.setup()
            for sock in sockets:
                await web.SockSite(runner, sock).start()
        except BaseException:
            await runner.cleanup()
            for sock in sockets:
                sock.close()
            raise
        self._runner = runner
        for host, sock in enumerate(sockets):
            address, port = sock.getsockname()[:2]
            self.base_urls.append(f"http://{address}:{port}")
            self._host_by_netloc[f"{address}:{port}"] = host
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _bind_again(self) -> list[socket.socket]:
        """Bind the earlier URLs, waiting a little while the last server's sockets close."""
        assert self._rebind is not None
        deadline = time.monotonic() + _REBIND_WAIT
        while True:
            try:
                return _bind_urls(self._rebind)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.1)

    def _bind(self) -> list[socket.socket]:
        hosts = self.site.hosts
        if not self.single_address:
            try:
                return _bind_addresses([f"127.0.0.{h + 2}" for h in range(hosts)])
            except OSError:
                self.single_address = True
        return _bind_each(["127.0.0.1"] * hosts)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        host = self._host_by_netloc.get(request.host)
        if host is None:
            return web.Response(status=421, text="unknown host")
        log = self.logs[host]
        log.arrivals.append(time.monotonic())
        log.active += 1
        log.max_active = max(log.max_active, log.active)
        try:
            key = (host, request.path)
            self.fetches[key] += 1
            if self._on_fetch is not None:
                self._on_fetch(key)
            page = self.site.pages.get(key)
            if page is None:
                return web.Response(status=404, text="not found")
            if page.latency:
                await asyncio.sleep(page.latency)
            if page.status != 200:
                return web.Response(status=page.status, text="server error")
            html = self.site.render(page, self.base_urls)
            return web.Response(text=html, content_type="text/html")
        finally:
            log.active -= 1


def _listen(address: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # So that a resumed crawl can bind this port again at once, even over
        # connections of this server that linger (never over a listener).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _bind_urls(base_urls: list[str]) -> list[socket.socket]:
    """Bind each ``http://address:port``; OSError names the one that failed."""
    pairs = []
    for url in base_urls:
        address, _, port = url.partition("://")[2].rpartition(":")
        pairs.append((address, int(port)))
    return _bind_all(pairs)


def _bind_each(addresses: list[str]) -> list[socket.socket]:
    """Bind each address on a port of its own; OSError names the one that failed."""
    return _bind_all([(address, 0) for address in addresses])


def _bind_all(pairs: list[tuple[str, int]]) -> list[socket.socket]:
    """Bind each ``(address, port)`` (port 0: any); on a failure close those bound.

    Raises OSError, with the errno of the failure, naming the address.
    """
    sockets: list[socket.socket] = []
    try:
        for address, port in pairs:
            try:
                sockets.append(_listen(address, port))
            except OSError as exc:
                raise OSError(exc.errno, f"{address}:{port}: {exc.strerror}") from None
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _bind_addresses(addresses: list[str]) -> list[socket.socket]:
    """Bind every address on one port free on all of them, else on a port each."""
    for _ in range(_SHARED_PORT_TRIES):
        sockets: list[socket.socket] = []
        try:
            sockets.append(_listen(addresses[0], 0))
            port = sockets[0].getsockname()[1]
            for address in addresses[1:]:
                sockets.append(_listen(address, port))
        except OSError:
            for sock in sockets:
                sock.close()
            if not sockets:
                raise  # the first address itself cannot be bound
            continue
        return sockets
    return _bind_each(addresses)
