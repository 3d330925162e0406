"""A worker with due times for the kill test, run as its own process.

    python -m tests.redis._due_worker URL LOG COUNT

Adds COUNT requests over 40 hosts, a third of them with a ``not_before`` a
second or two ahead, then pops forever: each request popped is released
with a delay or acked with a refetch (in turns), so every request stays in
the crawl and keeps coming back. Writes to LOG (line-buffered, so a SIGKILL
loses at most a partial line):

    START <time>                   the adds' not_before are START + 1.0 + (i % 7) * 0.2
    ADDED                          every add returned
    P <url> <time> <delay> <kind>  before the call (kind: release or refetch)
    D <url>                        after it returned

Times are wall-clock seconds (time.time): the clock of Redis TIME on this
machine.
"""

from __future__ import annotations

import sys
import time

import crawlq
from crawlq import Request

#: The worker's lease time: what a request it popped and was killed holding waits.
LEASE = 3.0


def urls(count: int) -> list[str]:
    """The requests the worker adds (the parent checks them all)."""
    return [f"https://h{i % 40}.example/{i}" for i in range(count)]


def not_before(start: float, i: int) -> float | None:
    """The due time the worker gives request ``i`` (a third are scheduled)."""
    return start + 1.0 + (i % 7) * 0.2 if i % 3 == 0 else None


def main() -> None:
    url, log_path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    frontier = crawlq.open_frontier(url, ack_delay=0, lease_timeout=LEASE, prefetch=8)
    with open(log_path, "a", buffering=1) as log:
        start = time.time()
        log.write(f"START {start!r}\n")
        batch = []
        for i, link in enumerate(urls(count)):
            batch.append(Request(link, not_before=not_before(start, i)))
            if len(batch) == 50:
                frontier.add_many(batch)
                batch = []
        frontier.add_many(batch)
        log.write("ADDED\n")
        turn = 0
        while True:
            request = frontier.pop()
            if request is None:
                time.sleep(0.01)
                continue
            turn += 1
            delay = 0.3 + (turn % 5) * 0.1
            kind = "release" if turn % 2 else "refetch"
            log.write(f"P {request.url} {time.time():.6f} {delay} {kind}\n")
            if kind == "release":
                frontier.release(request, delay=delay)
            else:
                frontier.ack(request, refetch_after=delay)
            log.write(f"D {request.url}\n")


if __name__ == "__main__":
    main()
