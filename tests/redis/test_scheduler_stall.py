"""An asyncio crawl on Redis never stalls its event loop, even while the server is paused.

The Scheduler calls the store on a thread of its own; a server that stops
answering (SIGSTOP) holds up that thread (its calls wait, or time out and are
retried there), never the loop. A heartbeat task sampling every 10 ms proves
it, and the crawl then finishes with every request processed and none lost.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

import crawlq
from crawlq import Request, Scheduler
from tests.redis_server import StartServer

HOSTS = 20
SEEDS = 400  # pages added up front; each adds 5 links
WORKERS = 32
PAUSE = 5.0
TICK = 0.01


def _expected() -> set[str]:
    urls = set()
    for i in range(SEEDS):
        page = f"https://h{i % HOSTS}.example/p{i}"
        urls.add(page)
        urls.update(f"{page}/l{k}" for k in range(5))
    return urls


async def _crawl(url: str, pid: int, host_delay: float) -> tuple[list[float], dict[str, int]]:
    """Crawl everything, pausing the server part way; return the loop's gaps during the pause."""
    processed: dict[str, int] = {}
    gaps: list[float] = []
    pausing = False
    paused = asyncio.Event()
    with crawlq.open_frontier(url, lease_timeout=20, host_delay=host_delay) as frontier:
        async with Scheduler(frontier) as scheduler:
            await scheduler.add_many(
                [Request(f"https://h{i % HOSTS}.example/p{i}") for i in range(SEEDS)]
            )

            async def worker() -> None:
                while True:
                    request = await scheduler.get()
                    await asyncio.sleep(0)
                    processed[request.url] = processed.get(request.url, 0) + 1
                    if request.depth == 0:
                        links = [Request(f"{request.url}/l{k}", depth=1) for k in range(5)]
                        await scheduler.add_many(links, ack=request)
                    else:
                        scheduler.task_done(request)
                    if len(processed) >= len(_expected()) // 4 and not paused.is_set():
                        paused.set()

            async def heartbeat() -> None:
                last = time.monotonic()
                while True:
                    await asyncio.sleep(TICK)
                    now = time.monotonic()
                    if pausing:
                        gaps.append(now - last - TICK)
                    last = now

            async def pause_server() -> None:
                nonlocal pausing
                await paused.wait()
                os.kill(pid, signal.SIGSTOP)
                pausing = True
                try:
                    await asyncio.sleep(PAUSE)
                finally:
                    pausing = False
                    os.kill(pid, signal.SIGCONT)

            tasks = [asyncio.create_task(worker()) for _ in range(WORKERS)]
            beat = asyncio.create_task(heartbeat())
            pauser = asyncio.create_task(pause_server())
            try:
                await asyncio.wait_for(scheduler.join(), 120)
                await asyncio.wait_for(pauser, 10)
            finally:
                os.kill(pid, signal.SIGCONT)
                for task in (*tasks, beat, pauser):
                    task.cancel()
                await asyncio.gather(*tasks, beat, pauser, return_exceptions=True)
    return gaps, processed


@pytest.mark.parametrize(
    ("options", "host_delay"),
    [
        ("", 0.0),  # calls wait for the server (socket_timeout 10 s)
        ("&socket_timeout=0.5", 0.0),  # calls time out and are retried on the store thread
        # Hosts waiting out their delay: most writes lease fewer than the
        # workers waiting, whose pops and waits their replies answer.
        ("&socket_timeout=0.5", 0.02),
    ],
)
def test_a_paused_server_never_stalls_the_event_loop(
    redis_servers: StartServer, options: str, host_delay: float
) -> None:
    server = redis_servers()
    assert server.pid is not None
    url = f"{server.url}?crawl=stall{options}"
    gaps, processed = asyncio.run(_crawl(url, server.pid, host_delay))
    assert len(gaps) >= PAUSE / TICK / 2, "the heartbeat did not run during the pause"
    assert max(gaps) < 0.05, f"the event loop stalled {max(gaps) * 1000:.0f} ms"
    assert set(processed) == _expected()  # every request processed, none lost
    with crawlq.open_frontier(url) as frontier:
        stats = frontier.stats()
        assert (stats.queued, stats.leased) == (0, 0)


def _server(redis_servers: StartServer, crawl: str) -> tuple[int, str]:
    """A server of the test's own: its pid, and a crawl URL with a short socket timeout."""
    server = redis_servers()
    assert server.pid is not None
    return server.pid, f"{server.url}?crawl={crawl}&socket_timeout=0.3"


def test_a_scheduler_made_while_the_server_is_paused_waits_on_its_thread_not_the_loop(
    redis_servers: StartServer,
) -> None:
    # The docs' `async with Scheduler(frontier)` during an outage: it must
    # neither block the event loop nor fail; the crawl goes on once the
    # server is back. (It read the counts on the loop, and raised
    # StoreUnavailable after retry_timeout.)
    pid, url = _server(redis_servers, "made-paused")
    with crawlq.open_frontier(url, retry_timeout=2, host_delay=0.0) as frontier:
        frontier.add(Request("https://a.example/1"))

        async def main() -> tuple[float, Request]:
            os.kill(pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                scheduler = Scheduler(frontier)
                made_in = time.monotonic() - started
                getter = asyncio.create_task(scheduler.get())
                await asyncio.sleep(1.0)
                assert not getter.done()
            finally:
                os.kill(pid, signal.SIGCONT)
            request = await asyncio.wait_for(getter, 30)
            scheduler.task_done(request)
            await asyncio.wait_for(scheduler.join(), 30)
            await scheduler.close()
            return made_in, request

        made_in, request = asyncio.run(main())
        assert made_in < 0.05, f"Scheduler() took {made_in:.2f} s on the event loop"
        assert request.url == "https://a.example/1"
        assert frontier.stats().counters.acked == 1


def test_a_bounded_scheduler_waits_for_its_first_counts_and_an_outage_raises_not_hangs(
    redis_servers: StartServer,
) -> None:
    pid, url = _server(redis_servers, "bounded-paused")
    with crawlq.open_frontier(url, retry_timeout=1, host_delay=0.0) as frontier:
        frontier.add_many([Request(f"https://a.example/{n}") for n in range(3)])

        async def main() -> None:
            scheduler = Scheduler(frontier, maxsize=3)
            os.kill(pid, signal.SIGSTOP)
            try:
                # The counts cannot be read: the add raises the store's error.
                with pytest.raises(crawlq.StoreUnavailable):
                    await asyncio.wait_for(scheduler.add("https://b.example/0"), 20)
            finally:
                os.kill(pid, signal.SIGCONT)
            # Three queued, maxsize 3: the add waits for room, a get makes it.
            adding = asyncio.create_task(scheduler.add("https://b.example/1"))
            await asyncio.sleep(0.5)
            assert not adding.done()
            request = await asyncio.wait_for(scheduler.get(), 10)
            assert await asyncio.wait_for(adding, 10) is True
            scheduler.task_done(request)
            await scheduler.close()

        asyncio.run(main())
        assert frontier.stats().queued == 3  # two of the first three and b/1
