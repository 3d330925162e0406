"""Bytes per URL in Redis: a seen fingerprint and a queued request, crawlq and scrapy-redis.

``python -m benchmarks.memory_per_url [--requests N] [--hosts H ...] [--priorities K]
[--output FILE]``

Memory, not CPU, is what a broad crawl runs out of first. For each
implementation, on fresh servers (127.0.0.1, no persistence, stopped by pid):
read ``used_memory`` of every primary (``INFO memory``), add N requests with
100-character URLs over H hosts (1,000 by default; each ``--hosts`` gives a
table: N of them is the long tail of a broad crawl, one request per host),
with one priority (or K, scattered), read it again, then dequeue (and for
crawlq ack) every request and read it a third time. What is left after the
drain is the seen set: its bytes over N are the cost of a seen URL; the
difference between the full and the drained server, over N, is the cost of
a queued request (the seen set stays). crawlq runs on one redis-server and on
a Redis Cluster of 3 primaries (16 shards; the primaries summed);
scrapy-redis (its PriorityQueue, RFPDupeFilter and pickle) on one server.
Writes ``benchmarks/MEMORY.md`` (also printed). Deterministic enough that one
run is the figure (allocator rounding moves it by about a byte).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.cluster import environment
from benchmarks.redis_servers import Node, servers

HERE = Path(__file__).resolve().parent
#: Hosts the URLs spread over (``--hosts``).
HOSTS = 1_000
#: Distinct priorities, spread evenly (``--priorities``; 1: all 0).
PRIORITIES = 1
URL_LENGTH = 100
BATCH = 1_000

#: (label, primaries, implementation)
SETUPS = (
    ("crawlq, one redis-server", 0, "crawlq"),
    ("crawlq, Redis Cluster, 3 primaries (16 shards)", 3, "crawlq"),
    ("scrapy-redis, one redis-server", 0, "scrapy-redis"),
)


def url(i: int) -> str:
    """The i-th URL: 100 characters, on one of HOSTS hosts."""
    base = f"https://h{i % HOSTS}.example.com/{i:08d}/"
    return base + "x" * (URL_LENGTH - len(base) - 8) + f"{i:08d}"


def priority(i: int) -> int:
    """The i-th URL's priority: one of PRIORITIES values around 0, scattered."""
    return (i * 2654435761 >> 8) % PRIORITIES - PRIORITIES // 2


def used(nodes: Sequence[Node]) -> int:
    """``used_memory`` of every node, summed, once the server settled."""
    time.sleep(0.3)
    total = 0
    for node in nodes:
        assert node.client is not None
        total += int(node.client.info("memory")["used_memory"])
    return total


def crawlq_run(nodes: Sequence[Node], count: int) -> tuple[Callable[[], None], Callable[[], int]]:
    """Fill and drain functions for crawlq on ``nodes`` (a cluster when they are several)."""
    import crawlq

    if len(nodes) > 1:
        seeds = ",".join(f"127.0.0.1:{node.port}" for node in nodes)
        frontier = crawlq.open_frontier(f"redis+cluster://{seeds}/?crawl=mem", prefetch=64)
    else:
        frontier = crawlq.open_frontier(f"redis://127.0.0.1:{nodes[0].port}/0?crawl=mem")

    def fill() -> None:
        for start in range(0, count, BATCH):
            batch = range(start, min(count, start + BATCH))
            frontier.add_many([crawlq.Request(url(i), priority=priority(i)) for i in batch])

    def drain() -> int:
        done = 0
        while (request := frontier.pop()) is not None:
            frontier.ack(request)
            done += 1
        frontier.close()
        return done

    return fill, drain


def scrapy_redis_run(
    nodes: Sequence[Node], count: int
) -> tuple[Callable[[], None], Callable[[], int]]:
    """Fill and drain functions for scrapy-redis's scheduler on one server."""
    import redis
    from scrapy import Request, Spider
    from scrapy_redis.dupefilter import RFPDupeFilter
    from scrapy_redis.scheduler import Scheduler

    server = redis.Redis(host="127.0.0.1", port=nodes[0].port)
    scheduler = Scheduler(
        server,
        persist=True,
        queue_key="%(spider)s:requests",
        queue_cls="scrapy_redis.queue.PriorityQueue",
        dupefilter=RFPDupeFilter(server, "bench:dupefilter"),
    )
    scheduler.open(Spider(name="bench"))

    def fill() -> None:
        for i in range(count):
            scheduler.enqueue_request(Request(url(i), priority=priority(i)))

    def drain() -> int:
        done = 0
        while scheduler.next_request() is not None:
            done += 1
        return done

    return fill, drain


def measure(primaries: int, impl: str, count: int, root: Path) -> dict[str, float]:
    """Bytes per seen URL and per queued request for one setup, on fresh servers."""
    with servers(primaries, root / f"{impl}-{primaries}") as nodes:
        run = crawlq_run if impl == "crawlq" else scrapy_redis_run
        fill, drain = run(nodes, count)
        empty = used(nodes)
        fill()
        full = used(nodes)
        drained = drain()
        seen_only = used(nodes)
    if drained != count:
        raise RuntimeError(f"{impl}: drained {drained} of {count} requests")
    return {"seen": (seen_only - empty) / count, "queued": (full - seen_only) / count}


#: ``maxmemory`` per primary assumed by the capacity table, in GB (10^9 bytes).
PRIMARY_GB = 16


def capacity(figures: dict[str, float]) -> list[str]:
    """How many seen URLs or queued requests 3, 10 or 30 primaries hold, from ``figures``."""
    lines = [
        f"Capacity by memory, from the cluster's figures above ({PRIMARY_GB} GB of `maxmemory` "
        "per primary, all of it for the crawl; a crawl's seen set only grows, its queue "
        "comes and goes): primaries x GB / bytes per URL.",
        "",
        "| primaries | seen URLs | or queued requests |",
        "| ---: | ---: | ---: |",
    ]
    for primaries in (3, 10, 30):
        budget = primaries * PRIMARY_GB * 1e9
        lines.append(
            f"| {primaries} | {budget / figures['seen'] / 1e9:.1f} billion | "
            f"{budget / figures['queued'] / 1e6:,.0f} million |"
        )
    return lines


def table(count: int, hosts: int) -> tuple[list[str], dict[str, dict[str, float]]]:
    """The Markdown table of every setup for ``count`` URLs over ``hosts`` hosts; its figures."""
    global HOSTS
    HOSTS = hosts
    rows: dict[str, dict[str, float]] = {}
    lines = [
        "| implementation | bytes per seen URL | bytes per queued request | queued - URL length |",
        "| --- | ---: | ---: | ---: |",
    ]
    with tempfile.TemporaryDirectory(prefix="crawlq-bench-memory-") as tmp:
        for label, primaries, impl in SETUPS:
            figures = measure(primaries, impl, count, Path(tmp))
            print(f"{hosts} hosts, {label}: {figures}", file=sys.stderr, flush=True)
            rows[label] = figures
            lines.append(
                f"| {label} | {figures['seen']:.1f} | {figures['queued']:.1f} | "
                f"{figures['queued'] - URL_LENGTH:+.1f} |"
            )
    return lines, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.memory_per_url", description=__doc__
    )
    parser.add_argument("--requests", type=int, default=100_000, help="URLs (default 100,000)")
    parser.add_argument(
        "--hosts",
        type=int,
        action="append",
        help="hosts the URLs spread over, one table each (default 1,000)",
    )
    parser.add_argument(
        "--priorities", type=int, default=1, help="distinct priorities (default 1: all 0)"
    )
    parser.add_argument("--output", type=Path, default=HERE / "MEMORY.md")
    args = parser.parse_args(argv)
    global PRIORITIES
    PRIORITIES = args.priorities
    spreads = args.hosts or [HOSTS]
    started = dt.datetime.now(dt.UTC)
    command = f"python -m benchmarks.memory_per_url --requests {args.requests}"
    command += "".join(f" --hosts {hosts}" for hosts in args.hosts or [])
    if args.priorities > 1:
        command += f" --priorities {args.priorities}"
    lines = [
        "# Bytes per URL in Redis",
        "",
        f"`{command}`, run {started:%Y-%m-%d %H:%M} UTC: {args.requests:,} requests with "
        f"{URL_LENGTH}-character URLs of {args.priorities} priorit"
        f"{'ies' if args.priorities > 1 else 'y'}, `used_memory` (all primaries summed) "
        "before, full and after every request was dequeued (crawlq: and acked). A seen URL "
        "is what the drained server keeps per URL; a queued request is what the full server "
        "holds more per request.",
        "",
        environment().replace(", copied at the start", ""),
    ]
    first = None
    for hosts in spreads:
        rows, figures = table(args.requests, hosts)
        lines += ["", f"Over {hosts:,} hosts:", "", *rows]
        first = first or figures[SETUPS[1][0]]
    assert first is not None
    lines += ["", *capacity(first)]
    lines += [
        "",
        "Targets (issue 15): a seen URL at most 24 bytes with exact dedup; a queued request "
        f"at most its URL length + 80 bytes ({URL_LENGTH + 80} here).",
        "",
    ]
    text = "\n".join(lines)
    args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
