"""The README's asyncio crawl (examples/crawl.py) rides out a Redis outage.

The example's own `crawl()` and `worker()` run with 32 workers against a
local site of 16 hosts on a real redis-server (127.0.0.1), which
stops answering for twice the frontier's ``retry_timeout``: SIGSTOP (calls
time out and are retried until `StoreUnavailable`), or ``kill -9`` and a
restart on its append-only file (connections refused); or whose disk is
full for as long (every write refused with MISCONF, retried until
`StoreFull`; root only, on a small tmpfs). The crawl must end by itself
with every page fetched exactly once and nothing left queued or leased, no
`WorkerFailed`, the store's error really raised to the workers (so the
test cannot pass without an outage), and the event loop neither stalled
nor spinning meanwhile.

A first test checks the rule the example's pattern rests on, at the
scheduler: after ``add_many(links, ack=request)`` raised `StoreUnavailable`,
the same call again stores the links once and ends the lease once, without
`LeaseError`, whether or not the first attempt reached the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp import web

import crawlq
from crawlq import Request, Scheduler
from tests.redis_server import RedisServer, StartServer
from tests.small_disk import Disk, mounted_disk
from tests.test_example_crawl import load_example

HOSTS = 16
PAGES = 60  # per host, besides "/"
WORKERS = 32
LATENCY = 0.05  # seconds the site takes per page
RETRY = 1.0  # the frontier's retry_timeout
OUTAGE = 2 * RETRY
EVERYSEC = ("--appendfsync", "everysec")
SOCKET = "socket_timeout=0.25"  # a paused server's calls time out (and are retried) quickly
TICK = 0.01
STALL = 0.1  # the loop may be late by this much, at most, during and after the outage


@dataclass
class Site:
    """``/`` links to ``/p0``, ``/pI`` to I+1, 2I+1, 2I+2 and to other hosts' ``/pI``.

    Host ``h`` is ``127.0.0.<h+2>`` (loopback, like crawlq's demo site):
    crawlq paces per host name, so 16 names let 32 workers (2 per host) work
    at once.
    """

    netlocs: list[str] = field(default_factory=list)
    hits: Counter[tuple[str, str]] = field(default_factory=Counter)

    @property
    def seeds(self) -> list[str]:
        return [f"http://{netloc}/" for netloc in self.netlocs]

    def expected(self) -> set[tuple[str, str]]:
        paths = ["/", *(f"/p{i}" for i in range(PAGES))]
        return {(netloc, path) for netloc in self.netlocs for path in paths}

    async def handle(self, request: web.Request) -> web.Response:
        self.hits[request.host, request.path] += 1
        await asyncio.sleep(LATENCY)
        i = -1 if request.path == "/" else int(request.path[2:])
        links = [f"/p{j}" for j in (i + 1, 2 * i + 1, 2 * i + 2) if 0 <= j < PAGES]
        # Links to other hosts (duplicates, mostly), and one off-site.
        links += [f"http://{other}/p{max(i, 0)}" for other in self.netlocs[:3]]
        links.append("http://127.0.0.1:1/elsewhere")
        body = "".join(f'<a href="{link}">{n}</a>' for n, link in enumerate(links))
        return web.Response(text=f"<html>{body}</html>", content_type="text/html")


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    served = Site()
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", served.handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
    await runner.setup()
    for host in range(HOSTS):
        await web.TCPSite(runner, f"127.0.0.{host + 2}", 0).start()
    served.netlocs = [f"{address[0]}:{address[1]}" for address in runner.addresses]
    try:
        yield served
    finally:
        await runner.cleanup()


@pytest.fixture
def short_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Frontiers opened by the example give up after RETRY seconds (its own call, unchanged)."""
    monkeypatch.setattr(
        crawlq, "open_frontier", functools.partial(crawlq.open_frontier, retry_timeout=RETRY)
    )


def sigstop(server: RedisServer) -> Callable[[], Awaitable[None]]:
    async def outage() -> None:
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(OUTAGE)
        finally:
            os.kill(server.pid, signal.SIGCONT)

    return outage


def kill_and_restart(server: RedisServer) -> Callable[[], Awaitable[None]]:
    async def outage() -> None:
        await asyncio.to_thread(server.kill)
        await asyncio.sleep(OUTAGE)
        await asyncio.to_thread(server.start)  # the same port, its append-only file

    return outage


def full_disk(disk: Disk) -> Callable[[], Awaitable[None]]:
    async def outage() -> None:
        await asyncio.to_thread(disk.fill)
        try:
            await asyncio.sleep(OUTAGE)
        finally:
            disk.free()

    return outage


@dataclass
class Run:
    stats: crawlq.FrontierStats
    gaps: list[float]  # how late each heartbeat was, from the outage on
    cpu: float  # CPU seconds this process used during the outage
    crawl_seconds: float


async def crawl_through(site: Site, url: str, outage: Callable[[], Awaitable[None]]) -> Run:
    """The example's crawl; ``outage`` runs once a quarter of the site is fetched."""
    example = load_example()
    gaps: list[float] = []
    watching = False
    cpu = 0.0

    async def heartbeat() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(TICK)
            now = time.monotonic()
            if watching:
                gaps.append(now - last - TICK)
            last = now

    async def cause_outage() -> None:
        nonlocal watching, cpu
        while sum(site.hits.values()) < len(site.expected()) // 4:
            await asyncio.sleep(0.005)
        watching = True
        before = time.process_time()
        await outage()
        cpu = time.process_time() - before

    started = time.monotonic()
    beat = asyncio.create_task(heartbeat())
    chaos = asyncio.create_task(cause_outage())
    try:
        stats = await asyncio.wait_for(
            example.crawl(site.seeds, job=url, workers=WORKERS, delay=0.0), 60
        )
        elapsed = time.monotonic() - started
        await asyncio.wait_for(chaos, 10)
    finally:
        for task in (beat, chaos):
            task.cancel()
        await asyncio.gather(beat, chaos, return_exceptions=True)
    return Run(stats, gaps, cpu, elapsed)


def store_errors_raised(
    caplog: pytest.LogCaptureFixture, kind: type[crawlq.StoreError]
) -> Counter[str]:
    """How often the example's workers caught ``kind``, by what they were doing."""
    doing: Counter[str] = Counter()
    for record in caplog.records:
        if record.name == "crawl" and isinstance(record.args, tuple) and record.args:
            error = record.args[0]
            if isinstance(error, kind):
                doing[str(error).partition(" while ")[2].partition(" ")[0].rstrip(",")] += 1
    return doing


@pytest.mark.parametrize("kind", ["sigstop", "kill-9", "full-disk"])
async def test_the_example_crawl_survives_a_redis_outage_of_twice_retry_timeout(
    redis_servers: StartServer,
    site: Site,
    short_retries: None,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    kind: str,
) -> None:
    caplog.set_level(logging.WARNING)
    with contextlib.ExitStack() as stack:
        if kind == "full-disk":  # the AOF written once a second: MISCONF, not a crash
            disk = stack.enter_context(mounted_disk(tmp_path / "disk"))
            server = RedisServer(disk.path / "redis", appendonly=True, extra=EVERYSEC)
            stack.callback(server.stop)
            server.start()
            outage, raising = full_disk(disk), crawlq.StoreFull
        else:
            server = redis_servers(appendonly=kind == "kill-9")
            outage = sigstop(server) if kind == "sigstop" else kill_and_restart(server)
            raising = crawlq.StoreUnavailable
        await crawl_through_outage(server, site, outage, raising, caplog, kind)


async def crawl_through_outage(
    server: RedisServer,
    site: Site,
    outage: Callable[[], Awaitable[None]],
    raising: type[crawlq.StoreError],
    caplog: pytest.LogCaptureFixture,
    kind: str,
) -> None:
    url = f"{server.url}?crawl=outage&{SOCKET}"

    # Objects left by the tests before this one are frozen: a full collection
    # of a whole test session's heap (150-250 ms) is not the scheduler stalling.
    gc.collect()
    gc.freeze()
    try:
        run = await crawl_through(site, url, outage)  # WorkerFailed would raise here
    finally:
        gc.unfreeze()

    raised = store_errors_raised(caplog, raising)
    assert sum(raised.values()) >= 1, f"no {raising.__name__} reached a worker: no outage tested"
    assert not [r for r in caplog.records if r.name == "crawlq" and "died" in r.getMessage()]
    # Every page fetched, exactly once (no lease expired); nothing lost or left.
    assert set(site.hits) == site.expected()
    assert max(site.hits.values()) == 1, [key for key, n in site.hits.items() if n > 1]
    pages = len(site.expected())
    assert (run.stats.queued, run.stats.leased, run.stats.seen) == (0, 0, pages)
    with crawlq.open_frontier(url) as frontier:  # as the server holds it, after the crawl
        after = frontier.stats()
    assert (after.queued, after.leased, after.seen) == (0, 0, pages)
    assert after.counters.acked == pages
    # The loop never stalled, and did not spin while the store was away.
    assert len(run.gaps) >= OUTAGE / TICK / 2, "the heartbeat did not run during the outage"
    assert max(run.gaps) < STALL, f"the event loop stalled {max(run.gaps) * 1000:.0f} ms"
    assert run.cpu < OUTAGE / 2, f"{run.cpu:.2f} s of CPU in a {OUTAGE:g} s outage: spinning"
    print(
        f"{kind}: {run.crawl_seconds:.1f} s, {raising.__name__} raised {dict(raised)}, "
        f"loop late at most {max(run.gaps) * 1000:.0f} ms, CPU {run.cpu:.2f} s during the outage"
    )


async def test_add_many_again_after_store_unavailable_stores_once_and_acks_once(
    redis_servers: StartServer,
) -> None:
    """The rule the example's `patiently` rests on, one worker, one page."""
    server = redis_servers()
    assert server.pid is not None
    url = f"{server.url}?crawl=again&{SOCKET}"
    links = [Request(f"https://a.example/{n}", depth=1) for n in range(5)]
    with crawlq.open_frontier(url, retry_timeout=0.5) as frontier:
        async with Scheduler(frontier) as scheduler:
            await scheduler.add_many(["https://a.example/", "https://b.example/"])
            page = await scheduler.get()
            os.kill(server.pid, signal.SIGSTOP)
            try:
                with pytest.raises(crawlq.StoreUnavailable):
                    await scheduler.add_many(links, ack=page)
            finally:
                os.kill(server.pid, signal.SIGCONT)
            # The same call again: no LeaseError; the links are added, or are
            # duplicates of the first attempt's (its reply was lost).
            again = await scheduler.add_many(links, ack=page)
            assert len(again) == len(links)
            stats = scheduler.stats()
            assert (stats.queued, stats.in_flight, stats.seen) == (6, 0, 7)
            got: list[Any] = []
            while scheduler.stats().queued:
                request = await asyncio.wait_for(scheduler.get(), 5)
                got.append(request.url)
                scheduler.task_done(request)
            await asyncio.wait_for(scheduler.join(), 5)
    assert sorted(got) == sorted(["https://b.example/", *(link.url for link in links)])
    with crawlq.open_frontier(url) as frontier:
        final = frontier.stats()
    assert (final.queued, final.leased, final.seen) == (0, 0, 7)
    assert final.counters.acked == 7


async def test_the_example_crawl_ends_with_an_error_when_its_crawl_vanishes(
    redis_servers: StartServer, site: Site, short_retries: None
) -> None:
    """A FLUSHALL mid-crawl: the crawl raises (CorruptStore inside), never hangs or ends 'done'."""
    server = redis_servers()
    url = f"{server.url}?crawl=vanished&{SOCKET}"

    async def flush() -> None:
        client = redis.Redis(port=server.port)
        try:
            client.flushall()
        finally:
            client.close()

    started = time.monotonic()
    with pytest.raises(crawlq.CrawlqError) as raised:
        await crawl_through(site, url, flush)
    assert time.monotonic() - started < 30
    error: BaseException | None = raised.value
    chain = []
    while error is not None:
        chain.append(error)
        error = error.__cause__ or error.__context__
    assert any(isinstance(e, crawlq.CorruptStore) for e in chain), chain
    assert sum(site.hits.values()) < len(site.expected())  # it did not go on as if empty
