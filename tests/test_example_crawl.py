"""examples/crawl.py, the README's asyncio example, against a fake site on 127.0.0.1.

The site serves pages whose links include every kind a real page carries that
is not a page to fetch (``mailto:``, ``javascript:``, ``tel:``, ``data:``,
fragments, malformed and off-site hrefs), pages that fail (500, 404, a cut
connection), and a slow page, so the crawl meets each failure and cancellation.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType

import pytest
from aiohttp import web

import crawlq

EXAMPLE = Path(__file__).parent.parent / "examples" / "crawl.py"

#: Page -> its hrefs; {port} is the site's own port.
PAGES: dict[str, list[str]] = {
    "/": [
        "a.html",
        "/b.html",
        "http://127.0.0.1:{port}/c/",
        "mailto:someone@example.invalid",
        "javascript:void(0)",
        "tel:+1-555-0100",
        "data:text/html,<p>hi</p>",
        "#top",
        "",
        "http://[::1",
        "http://",
        "https://offsite.invalid/x",
        "/fails.html",
    ],
    "/a.html": ["/", "b.html#part", "/missing.html", "/cut.html", "  c/d.html  "],
    "/b.html": ["a.html?", "/slow.html", "c/", "JavaScript:alert(1)"],
    "/c/": ["d.html", "../a.html", "//127.0.0.1:{port}/e.html"],
    "/c/d.html": ["/e.html", "../c/", "ftp://127.0.0.1/x"],
    "/e.html": ["/", "/slow.html"],
    "/slow.html": ["/f.html"],
    "/f.html": [],
}
GOOD = set(PAGES)
FAILING = {"/fails.html": 500, "/missing.html": 404, "/cut.html": 0}


class FakeSite:
    """The site above on 127.0.0.1; ``hits`` counts requests per path."""

    def __init__(self, slow: float = 0.05) -> None:
        self.hits: Counter[str] = Counter()
        self.slow = slow
        self.port = 0
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.hits[path] += 1
        if path in PAGES:
            if path == "/slow.html" or self.slow > 0.05:
                await asyncio.sleep(self.slow)
            links = "".join(
                f'<li><a class="x" href="{href.format(port=self.port)}">{n}</a>'
                for n, href in enumerate(PAGES[path])
            )
            return web.Response(text=f"<html><ul>{links}</ul></html>", content_type="text/html")
        if path == "/cut.html":
            assert request.transport is not None
            request.transport.abort()  # the connection is cut before any answer
            await asyncio.sleep(1)
        return web.Response(status=FAILING.get(path, 404), text="no")


@pytest.fixture
async def site() -> AsyncIterator[FakeSite]:
    fake = FakeSite()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", fake.handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    fake.port = runner.addresses[0][1]
    fake.url = f"http://127.0.0.1:{fake.port}"
    try:
        yield fake
    finally:
        await runner.cleanup()


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crawl_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_fetched_once(site: FakeSite) -> None:
    assert {path: site.hits[path] for path in GOOD} == dict.fromkeys(GOOD, 1)
    # Failed pages were fetched once and not retried by the crawler (aiohttp
    # itself retries a GET once when a kept-alive connection is cut); nothing
    # else was asked for.
    assert site.hits["/fails.html"] == site.hits["/missing.html"] == 1
    assert 1 <= site.hits["/cut.html"] <= 2
    assert set(site.hits) == GOOD | set(FAILING)


async def test_example_crawls_every_good_page_once(site: FakeSite) -> None:
    example = load_example()
    loop = asyncio.get_running_loop()
    complaints: list[str] = []
    loop.set_exception_handler(lambda _, context: complaints.append(context["message"]))
    stats = await asyncio.wait_for(
        example.crawl([site.url + "/", "not a url"], workers=4, delay=0.0), 30
    )
    assert_fetched_once(site)
    assert (stats.queued, stats.leased) == (0, 0)
    assert stats.seen == len(GOOD) + len(FAILING)
    assert stats.skipped == 1  # the seed that is not a URL
    # Every worker task has ended, and the HTTP session was closed.
    workers = [t for t in asyncio.all_tasks() if "worker" in t.get_coro().__qualname__]
    assert workers == []
    gc.collect()
    await asyncio.sleep(0)
    assert complaints == []


async def test_example_is_cancellation_safe_and_resumes(site: FakeSite, tmp_path: Path) -> None:
    example = load_example()
    site.slow = 0.3
    job = str(tmp_path / "job")
    task = asyncio.create_task(example.crawl([site.url + "/"], job=job, workers=4, delay=0.0))
    while sum(site.hits.values()) < 3:
        await asyncio.sleep(0.01)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    fetched_before = sum(site.hits.values())
    # The job was closed (no lock left) and holds what is left, nothing in flight.
    with crawlq.open_frontier(job) as frontier:
        left = frontier.stats()
    assert left.leased == 0 and left.queued > 0
    site.slow = 0.05
    stats = await asyncio.wait_for(example.crawl([site.url + "/"], job=job, workers=4, delay=0), 30)
    assert (stats.queued, stats.leased) == (0, 0)
    assert set(site.hits) >= GOOD
    # Only the pages cancelled in flight may have been fetched twice.
    assert sum(n - 1 for n in site.hits.values()) <= 4
    assert sum(site.hits.values()) > fetched_before


async def test_example_script_runs_and_resumes_after_ctrl_c(site: FakeSite, tmp_path: Path) -> None:
    site.slow = 0.3
    job = tmp_path / "job"
    command = [sys.executable, str(EXAMPLE), site.url + "/", "--job", str(job), "--delay", "0"]
    first = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    while sum(site.hits.values()) < 2:
        assert first.returncode is None
        await asyncio.sleep(0.01)
    first.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(first.communicate(), 30)
    assert first.returncode == 130, (out, err)
    assert b"run the same command to resume" in err
    assert b"Traceback" not in err
    site.slow = 0.05
    second = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(second.communicate(), 60)
    assert second.returncode == 0, (out, err)
    assert b"0 left" in out
    assert set(site.hits) >= GOOD
    assert b"/fails.html failed" in err
