"""A local site that fails or slows down on purpose, for the Scrapy crawls of the tests.

`FlakySite` is a threaded HTTP server on a loopback address that logs when
each request arrived (``time.time()``, the clock crawlq's due times are in):

- ``/fail/K/NAME``: 503 for the first K requests of that path, then 200;
- ``/fail/K/NAME/S``: the same, each 503 carrying ``Retry-After: S``;
- ``throttle`` (a path given to the constructor): 429 with ``Retry-After: 2``
  the first time, then 200;
- ``/robots.txt``: the ``robots`` text given, or 404 without one;
- any other path: a page, always 200.

It keeps running across the crawls of one test (a resumed crawl finds it at
the same URL) and is shut down by the fixture.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FlakySite"]


class FlakySite:
    """Serves the paths of the module docstring on ``address``; `hits` logs (time, path)."""

    def __init__(
        self, address: str = "127.0.0.1", *, throttle: str | None = None, robots: str = ""
    ) -> None:
        self.hits: list[tuple[float, str]] = []
        self.throttle = throttle
        self.robots = robots
        self._lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with site._lock:
                    site.hits.append((time.time(), self.path))
                    seen = sum(1 for _, path in site.hits if path == self.path)
                parts = self.path.strip("/").split("/")
                if parts[0] == "fail" and len(parts) >= 3 and seen <= int(parts[1]):
                    self._refuse(503, parts[3] if len(parts) >= 4 else None)
                elif self.path == site.throttle and seen == 1:
                    self._refuse(429, "2")
                elif self.path == "/robots.txt":
                    self._answer(200 if site.robots else 404, site.robots, "text/plain")
                else:
                    self._answer(200, f"<html><body>{self.path}</body></html>", "text/html")

            def _refuse(self, status: int, retry_after: str | None) -> None:
                self.send_response(status)
                if retry_after is not None:
                    self.send_header("Retry-After", retry_after)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _answer(self, status: int, text: str, kind: str) -> None:
                body = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer((address, 0), Handler)
        self.base = f"http://{address}:{self.http.server_address[1]}"
        self._thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return self.base + path

    def pages(self) -> list[tuple[float, str]]:
        """(time, path) of every request but those of robots.txt, in order."""
        with self._lock:
            return [(at, path) for at, path in self.hits if path != "/robots.txt"]

    def times(self, path: str) -> list[float]:
        """When each request of ``path`` arrived, in order."""
        with self._lock:
            return [at for at, hit in self.hits if hit == path]

    def counts(self) -> Counter[str]:
        with self._lock:
            return Counter(path for _, path in self.hits)

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
