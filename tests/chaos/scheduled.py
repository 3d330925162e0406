"""A chaos worker that crawls through the asyncio `Scheduler`: many coroutines, one process.

``python -m tests.chaos.worker ... --scheduler N`` runs `crawl` below
instead of the plain loop: N coroutines each ``await scheduler.get()``, log
the delivery as the plain worker does (``P``, then ``F``), wait out the
simulated fetch and finish the page with ``await scheduler.add_many(links,
ack=page)`` (``add_many([], ack=page)`` for a page without links: that
returns once the ack is durable, where ``task_done`` would only queue it).
Every call is retried after a `crawlq.CrawlqError` as the docs' `patiently`
does, with the plain worker's logging and give-up. This is the path of the
asyncio and Scrapy users (a store thread, batched calls, requests leased
ahead, the short-lease answers), which the plain workers never take.

The log is the plain worker's, the coroutines' lines interleaved: its
``O`` line says ``scheduler N``, and every ``P``, ``F``, ``a`` and ``K``
line ends with the coroutine's tag, ``w0`` to ``w<N-1>``, which the checker
matches them by (one URL may be out twice in one process: a lease that
expired and was leased again by another coroutine). And::

    R <t> <url> <tag>   a coroutine cancelled at the end still held <url>
                        and released it: join() had said nothing was in
                        flight (a violation)

The process exits 0 once every ``--until`` file exists and ``join()`` has
said twice, 0.2 s apart, that nothing is queued, scheduled or in flight
anywhere in the crawl; then its coroutines (all waiting in ``get``) are
cancelled and the scheduler and the frontier closed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import crawlq
from tests.chaos.tree import Tree
from tests.chaos.worker import GiveUp, LeaseLookup, Log, Steps, one_line

T = TypeVar("T")


class AsyncSteps(Steps):
    """`Steps` for coroutines: the same retries and logging, sleeping with asyncio."""

    async def run(
        self,
        step: str,
        call: Callable[[], Awaitable[T]],
        before: Callable[[], None] | None = None,
    ) -> T:
        started = time.monotonic()
        pauses = self.pauses()
        while True:
            if before is not None:
                before()
            try:
                return await call()
            except crawlq.LeaseError:
                raise
            except Exception as exc:
                self.failed(step, exc, started)
            await asyncio.sleep(next(pauses))


async def _page(
    scheduler: crawlq.Scheduler,
    request: crawlq.Request,
    tree: Tree,
    log: Log,
    steps: AsyncSteps,
    tag: str,
) -> None:
    """Finish one fetched page: its links and its ack in one durable call."""
    url = request.url
    links = [crawlq.Request(tree.url(c)) for c in tree.children(tree.node(url))]
    try:
        added = await steps.run(
            "ack", lambda: scheduler.add_many(links, ack=request), lambda: log("a", url, tag)
        )
    except crawlq.LeaseError as exc:
        log("L", url, one_line(exc))
        return
    log.unsent(scheduler.frontier)
    log("K", url, "".join("1" if ok else "0" for ok in added) if links else "-", tag)


async def _work(
    number: int,
    scheduler: crawlq.Scheduler,
    tree: Tree,
    fetch: tuple[float, float],
    rng: random.Random,
    log: Log,
    steps: AsyncSteps,
    deadline: Callable[[crawlq.Request], Awaitable[str]],
) -> None:
    tag = f"w{number}"
    while True:
        called = time.time()
        request = await steps.run("pop", scheduler.get)
        back = time.time()
        try:
            lease_end = await deadline(request)
            log.raw(f"P {called:.6f} {back:.6f} {request.url} {lease_end} {tag}")
            await asyncio.sleep(rng.uniform(*fetch))
        except asyncio.CancelledError:
            scheduler.release(request)
            log("R", request.url, tag)
            raise
        log("F", request.url, tag)
        await _page(scheduler, request, tree, log, steps, tag)


async def _idle(scheduler: crawlq.Scheduler, until: list[Path], steps: AsyncSteps) -> None:
    """Return once every ``until`` file exists and ``join`` said idle twice, 0.2 s apart."""
    while True:
        await asyncio.sleep(0.2)
        if not all(path.exists() for path in until):
            continue
        await steps.run("join", scheduler.join)
        await asyncio.sleep(0.2)
        started = time.monotonic()
        await steps.run("join", scheduler.join)
        if time.monotonic() - started < 0.05:  # nothing came in between
            return


async def _crawl(
    args: argparse.Namespace,
    tree: Tree,
    options: dict[str, Any],
    rng: random.Random,
    log: Log,
    steps: AsyncSteps,
    lookup: LeaseLookup | None,
) -> int:
    loop = asyncio.get_running_loop()

    def open_frontier() -> crawlq.Frontier:
        return crawlq.open_frontier(args.url, **options)

    frontier = await steps.run("open", lambda: loop.run_in_executor(None, open_frontier))
    log("O", os.getpid(), "scheduler", args.scheduler)
    # The lease lookups are instrumentation with blocking sockets: one thread
    # of their own, so a slow one (a fault) never holds up the event loop.
    lookups = ThreadPoolExecutor(1)

    async def deadline(request: crawlq.Request) -> str:
        if lookup is None:
            return "-"
        return await loop.run_in_executor(lookups, lookup.deadline, request)

    async with crawlq.Scheduler(frontier) as scheduler:
        workers = [
            asyncio.create_task(
                _work(n, scheduler, tree, tuple(args.fetch), rng, log, steps, deadline)
            )
            for n in range(args.scheduler)
        ]
        idle = asyncio.create_task(_idle(scheduler, [Path(p) for p in args.until], steps))
        done, _ = await asyncio.wait([idle, *workers], return_when=asyncio.FIRST_COMPLETED)
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        for task in done:
            if task is not idle:
                error = task.exception()
                if isinstance(error, GiveUp):
                    return 3
                steps.foreign("worker", error or RuntimeError("a worker coroutine returned"))
    lookups.shutdown()
    return steps.close(frontier)


def crawl(
    args: argparse.Namespace,
    tree: Tree,
    options: dict[str, Any],
    rng: random.Random,
    log: Log,
    lookup: LeaseLookup | None,
) -> int:
    """The Scheduler worker's whole run; its exit code (see the module docstring)."""
    steps = AsyncSteps(log, args.give_up, rng)
    return asyncio.run(_crawl(args, tree, options, rng, log, steps, lookup))
