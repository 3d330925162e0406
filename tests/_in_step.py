"""Workers that move in step: the asyncio benchmark's loop, for the Scheduler's batching tests."""

from __future__ import annotations

import asyncio

from crawlq import Request, Scheduler

#: Workers per crawl: the A1 benchmark's.
WORKERS = 32


async def crawl_in_step(scheduler: Scheduler, pages: int, *, ack_with_links: bool) -> int:
    """Run `WORKERS` workers until ``pages`` pages are done; return how many were.

    Each loops: ``get()``, ``sleep(0)``, ``add_many`` of 5 links (priorities
    -2 to 2) and the page's ack, riding the add (``ack_with_links``) or by
    ``task_done`` after it.
    """
    done = 0

    async def worker() -> None:
        nonlocal done
        while done < pages:
            request = await scheduler.get()
            await asyncio.sleep(0)
            n = done = done + 1
            links = [
                Request(f"https://h{(n * 5 + k) % 97}.example/{n}/{k}", priority=k - 2)
                for k in range(5)
            ]
            if ack_with_links:
                await scheduler.add_many(links, ack=request)
            else:
                await scheduler.add_many(links)
                scheduler.task_done(request)

    await asyncio.gather(*(worker() for _ in range(WORKERS)))
    return done
