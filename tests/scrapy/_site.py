"""The local site the Scrapy tests crawl: crawlq's demo site, served from a thread.

`ServedSite` runs `crawlq.cli.demo.server.SiteServer` on its own asyncio loop
in a background thread, so a Scrapy crawl in a subprocess can fetch it while
the test reads the server-side fetch counts. The demo site's tracking-query
links are dropped (Scrapy's fingerprints keep ``utm_*`` parameters, and the
server counts fetches by path), so "every page exactly once" is exact.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections import Counter
from concurrent.futures import Future
from typing import Any

from crawlq.cli.demo.server import SiteServer
from crawlq.cli.demo.site import Link, Site, generate_site

__all__ = ["ServedSite", "test_site"]


def test_site(pages: int = 2000, hosts: int = 20, *, seed: int = 7, latency: float = 0.0) -> Site:
    """The demo site without ``?utm_*`` links: each URL a crawler sees is one path."""
    site = generate_site(pages, hosts, seed=seed, latency=latency)
    kept = {
        key: dataclasses.replace(
            page,
            links=tuple(link for link in page.links if not link.suffix.startswith("?")),
        )
        for key, page in site.pages.items()
    }
    # Every page must stay reachable: the spanning-tree links never carry a suffix.
    assert all(isinstance(link, Link) for page in kept.values() for link in page.links)
    return dataclasses.replace(site, pages=kept)


test_site.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


class ServedSite:
    """A `SiteServer` running in a thread; `fetches` is read from the test thread."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = SiteServer(site)
        self._call(self._server.__aenter__())

    def _call(self, coroutine: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(timeout=30)

    @property
    def base_urls(self) -> list[str]:
        return self._server.base_urls

    def fetches(self) -> Counter[tuple[int, str]]:
        """A copy of the server's fetch counts per (host, path)."""

        async def copy() -> Counter[tuple[int, str]]:
            return Counter(self._server.fetches)

        result: Counter[tuple[int, str]] = self._call(copy())
        return result

    def total(self) -> int:
        """Fetches so far (cheap enough to poll)."""
        return sum(self._server.fetches.values())

    def reset(self) -> None:
        """Forget the counts, for the next crawl."""

        async def clear() -> None:
            self._server.fetches.clear()
            for log in self._server.logs:
                log.arrivals.clear()
                log.max_active = 0

        self._call(clear())

    def max_active(self) -> list[int]:
        return [log.max_active for log in self._server.logs]

    def expected(self) -> set[tuple[int, str]]:
        """Every URL a correct crawl fetches: the pages and the broken links."""
        return set(self.site.pages) | set(self.site.broken)

    def close(self) -> None:
        self._call(self._server.__aexit__(None, None, None))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
