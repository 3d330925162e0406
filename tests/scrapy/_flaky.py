"""A local site whose pages fail on purpose, for the due-time crawls of ``test_due.py``.

`FlakySite` is a threaded HTTP server on loopback that logs when each request
arrived (``time.time()``, the clock crawlq's due times are in):

- ``/page/NAME``: a page, always 200;
- ``/fail/K/NAME``: 503 for the first K requests of that path, then 200;
- ``/fail/K/NAME/S``: the same, each 503 carrying ``Retry-After: S``.

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
    """Serves ``/page/...`` and ``/fail/...`` on ``address``; `hits` logs (time, path)."""

    def __init__(self, address: str = "127.0.0.1") -> None:
        self.hits: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with site._lock:
                    site.hits.append((time.time(), self.path))
                    seen = sum(1 for _, path in site.hits if path == self.path)
                parts = self.path.strip("/").split("/")
                if parts[0] == "fail" and len(parts) >= 3 and seen <= int(parts[1]):
                    self.send_response(503)
                    if len(parts) >= 4:
                        self.send_header("Retry-After", parts[3])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if parts[0] not in ("page", "fail"):
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = f"<html><body>{self.path}</body></html>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
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
