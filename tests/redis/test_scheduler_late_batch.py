"""The Scheduler never hands out a request its batch popped before waiting out an outage.

Found by the chaos run on a cluster (4 minutes, seed 14): a batch of the
Scheduler's store thread popped requests for its waiting getters, then its
next pop waited out a failover (3.4 s, then StoreUnavailable); the batch
handed the requests it had popped before to its getters at its end, their
leases expired meanwhile (lease_timeout 3 s), and another worker had
leased, fetched and acked them in between.

Now a batch stamps each pop, and a request popped more than half its
lease before the batch ends goes back (released, leased afresh) instead of
out. The batch's result is handed to a real Scheduler over a real Redis
frontier, with a real lease, as the store thread hands it.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import crawlq
from crawlq.scheduler.store_thread import Batch, Outcome

LEASE = 2.0
_names = itertools.count()


async def settle_one(redis_url: str, popped_ago: float) -> tuple[crawlq.Request, crawlq.Request]:
    """A request leased as a batch pops it, settled ``popped_ago`` s later: (it, what get() got)."""
    url = f"{redis_url}?crawl=late-batch-{next(_names)}-{time.monotonic_ns()}"
    with crawlq.open_frontier(url, lease_timeout=LEASE, host_delay=0.0) as frontier:
        async with crawlq.Scheduler(frontier) as scheduler:
            await scheduler.add_many(["https://a.example/1"])
            with frontier._lock:  # as the store thread pops, under the frontier's lock
                popped = frontier.pop()
            assert popped is not None
            getter = asyncio.create_task(scheduler.get())
            await asyncio.sleep(0.2)  # it asked, and found nothing: it waits
            assert not getter.done()
            out = Outcome(popped=[popped], popped_at=[time.monotonic() - popped_ago])
            scheduler._settle(Batch(), out)
            got = await asyncio.wait_for(getter, 10)
            scheduler.task_done(got)
            await asyncio.wait_for(scheduler.join(), 10)
        stats = frontier.stats()
    assert (stats.queued, stats.leased, stats.counters.acked) == (0, 0, 1)
    return popped, got


async def test_a_request_popped_late_in_its_batch_goes_back_and_is_leased_afresh(
    redis_url: str,
) -> None:
    popped, got = await settle_one(redis_url, popped_ago=LEASE / 2 + 0.5)
    assert got.url == popped.url
    assert got._lease[1] != popped._lease[1], "handed out with the lease of the late batch"  # type: ignore[attr-defined]


async def test_a_request_popped_just_now_goes_to_its_getter_as_it_is(redis_url: str) -> None:
    popped, got = await settle_one(redis_url, popped_ago=0.0)
    assert got is popped
