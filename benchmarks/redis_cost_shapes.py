"""One measurement of the Redis cost model, in this (fresh) process: one call shape.

``python -m benchmarks.redis_cost_shapes SPEC`` (the runner, ``benchmarks.redis_cost``,
starts it pinned to the server's core) builds the shape's state untimed, runs
a warm-up, then the timed window: ``CONFIG RESETSTAT`` on every server, their
CPU read from ``/proc`` (``stat``: utime + stime in clock ticks, the whole
process; ``schedstat``: the main thread's run time in ns), the calls, the CPU
again, then ``INFO commandstats`` (the FCALLs and every command run inside
them). It prints one JSON line after ``@@RESULT@@``.

Shapes (crawlq through ``open_frontier``; ``k`` links per call, ``n`` requests):

- ``add_new k``: ``add_many`` of k new links, no ack (never popped: nothing leased).
- ``add_dup k``: ``add_many`` of k links all offered before, by another
  worker (links this worker met itself cost no call: ``crawlq._recent``).
- ``add_ack k``: ``add_many`` of k new links with ``ack=`` one popped request.
- ``add_pop k``: ``add_many`` of k new links that leases one request after
  them (``_expect_pops(1)``), then the pop that serves it from the prefetch.
- ``w2``: the W2 step, ``pop()`` then ``add_many(5 children, ack=request)``
  (half the children seen): the add leases the next request (the pop).
- ``pop n``: one pop call leasing n (``_expect_pops(n)``, what the asyncio
  Scheduler says), then n pops served from the prefetch; ``pop_empty``:
  a pop with nothing queued.
- ``ack n``: ``ack_many`` of n popped requests (``ack_delay=0``), no refill.
- ``popack n``: pop n, ack each (acks wait): one call acks n and leases n.
- the floors the fixed part is named by: ``ping``; ``nop_ro`` and ``nop_w``
  (FCALL of an empty read-only and write function, a library of their own);
  ``trivial`` (crawlq's ``read`` with an empty ``seen`` list: key names
  only); ``pop0`` and ``add0`` (raw FCALLs of ``pop`` and ``add`` with
  nothing to do: no entries, no ack, no refill: begin and conclude alone).
- ``sr_new``, ``sr_dup``, ``sr_pop``, ``sr_w2``: scrapy-redis's Scheduler (its
  PriorityQueue and RFPDupeFilter): enqueue one new request (SADD + ZADD),
  one seen (SADD), one ``next_request`` (MULTI ZRANGE ZREMRANGEBYRANK EXEC),
  and its W2 step (one pop, five enqueues).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

import redis

from benchmarks import workloads

RESULT_MARKER = "@@RESULT@@ "
#: The floors, cheapest first (see `floor_shape`).
FLOORS = ("ping", "nop_ro", "nop_w", "trivial", "pop0", "add0")
Result = dict[str, Any]
HOSTS = 1_000
PREFIX = "crawlq:{bench}:"
_TICK = os.sysconf("SC_CLK_TCK")


def cpu(pid: int) -> tuple[float, float]:
    """(utime + stime of the process, run time of its main thread), in seconds."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    with open(f"/proc/{pid}/schedstat") as sched:
        ns = int(sched.read().split()[0])
    return (int(fields[11]) + int(fields[12])) / _TICK, ns / 1e9


def urls(start: int, count: int) -> list[tuple[str, int]]:
    """``count`` distinct URLs over HOSTS hosts (numbered from ``start``), priority 0."""
    out = []
    for n in range(start, start + count):
        h = (n * 7919) % HOSTS
        out.append((f"https://site{h}.example{h % 7}.org/c/{n}/page.html?ref={n % 13}", 0))
    return out


class Window:
    """The servers of one measurement: their CPU and command statistics around the calls."""

    def __init__(self, ports: list[int], pids: list[int]) -> None:
        self.clients = [redis.Redis(host="127.0.0.1", port=p) for p in ports]
        self.pids = pids

    def run(self, calls: Callable[[], Any]) -> Result:
        for client in self.clients:
            client.execute_command("CONFIG", "RESETSTAT")
        gc.collect()
        before = [cpu(pid) for pid in self.pids]
        out = calls()
        after = [cpu(pid) for pid in self.pids]
        stats = []
        for client in self.clients:
            found = {}
            for name, value in client.info("commandstats").items():
                name = name.removeprefix("cmdstat_")
                if name not in ("config|resetstat", "info"):
                    found[name] = [int(value["calls"]), int(value["usec"])]
            stats.append(found)
        return {
            "stat_s": [b[0] - a[0] for a, b in zip(before, after, strict=True)],
            "sched_s": [b[1] - a[1] for a, b in zip(before, after, strict=True)],
            "commands": stats,
            "out": out,
        }


def _frontier(spec: Result, **options: Any) -> Any:
    import crawlq

    options = {"host_delay": 0.0, "host_concurrency": None, "lease_timeout": 3600, **options}
    if spec["cluster"]:
        options["shards"] = 16
    return crawlq.open_frontier(spec["url"], **options)


def _requests(items: list[tuple[str, int]]) -> list[Any]:
    import crawlq

    return [crawlq.Request(url, priority=p) for url, p in items]


def _fill(frontier: Any, items: list[tuple[str, int]]) -> None:
    for i in range(0, len(items), 100):
        frontier.add_many(_requests(items[i : i + 100]))


def _pop_all(frontier: Any, count: int) -> list[Any]:
    got = []
    while len(got) < count:
        request = frontier.pop()
        if request is None:
            raise RuntimeError(f"only {len(got)} of {count} requests could be popped")
        got.append(request)
    return got


def crawlq_shape(spec: Result, window: Window) -> Result:
    """Set up one crawlq shape, warm it up, and time ``calls`` calls of it."""
    shape, k, calls, warm = spec["shape"], spec["k"], spec["calls"], spec["warmup"]
    total = calls + warm
    design = {"offered": 0, "accepted": 0, "pops": 0, "acks": 0}
    if shape == "w2":
        frontier = _frontier(spec)
        plan = workloads.w2_plan(1_000, total, HOSTS)
        _fill(frontier, list(zip(plan.seed_urls, plan.seed_priorities, strict=True)))
        children = list(zip(plan.child_urls, plan.child_priorities, strict=True))
        batches = [_requests(children[5 * s : 5 * s + 5]) for s in range(total)]
        pop, add_many = frontier.pop, frontier.add_many

        def steps(part: list[list[Any]]) -> int:
            accepted = 0
            for batch in part:
                request = pop()
                accepted += sum(add_many(batch, ack=request))
            return accepted

        steps(batches[:warm])
        popped = frontier.stats().counters.popped
        result = window.run(lambda: steps(batches[warm:]))
        popped = frontier.stats().counters.popped - popped
        design = {"offered": 5 * calls, "accepted": result["out"], "pops": popped, "acks": calls}
    elif shape in ("add_new", "add_dup", "add_ack", "add_pop"):
        frontier = _frontier(spec)
        items = urls(10_000_000, total * k)
        batches = [_requests(items[i * k : (i + 1) * k]) for i in range(total)]
        held: list[Any] = [None] * total
        if shape == "add_ack":
            _fill(frontier, urls(0, total))
            held = _pop_all(frontier, total)
        else:
            _fill(frontier, urls(0, 2_000))  # a crawl with queued hosts
        if shape == "add_dup":
            # Offered by another worker: this one's recently seen set does not
            # know them, so the server's dedup is what is measured.
            other = _frontier(spec)
            _fill(other, items)
            other.close()
        add_many, expect = frontier.add_many, frontier._expect_pops

        def adds(part: range) -> int:
            accepted = 0
            for i in part:
                if shape == "add_pop":
                    expect(1)  # the add leases one request after its links
                    accepted += sum(add_many(batches[i]))
                    frontier.pop()  # served from the prefetch: no call
                elif held[i] is None:
                    accepted += sum(add_many(batches[i]))
                else:
                    expect(0)  # the ack leases nothing after it
                    accepted += sum(add_many(batches[i], ack=held[i]))
            return accepted

        adds(range(warm))
        result = window.run(lambda: adds(range(warm, total)))
        acks = calls if shape == "add_ack" else 0
        pops = calls if shape == "add_pop" else 0
        design = {"offered": k * calls, "accepted": result["out"], "pops": pops, "acks": acks}
    elif shape in ("pop", "pop_empty"):
        frontier = _frontier(spec, prefetch=max(1, k))
        _fill(frontier, urls(0, total * k))
        pop, expect = frontier.pop, frontier._expect_pops

        def pops(count: int) -> int:
            got = 0
            for _ in range(count):
                expect(k)
                for _ in range(max(1, k)):
                    got += pop() is not None
            return got

        pops(warm)
        result = window.run(lambda: pops(calls))
        design["pops"] = result["out"]
    elif shape in ("ack", "popack"):
        delay = 0.0 if shape == "ack" else 60.0
        frontier = _frontier(spec, prefetch=k if shape == "popack" else 1000, ack_delay=delay)
        _fill(frontier, urls(0, (total + 1) * k))
        pop, ack, expect = frontier.pop, frontier.ack, frontier._expect_pops
        if shape == "ack":
            held = _pop_all(frontier, total * k)

            def acks(part: range) -> int:
                for i in part:
                    expect(0)
                    frontier.ack_many(held[i * k : (i + 1) * k])
                return len(part) * k

        else:
            expect(k)
            first = [pop() for _ in range(k)]  # leased by a pop call, acked by the first ack
            for request in first:
                ack(request)

            def acks(part: range) -> int:
                for _ in part:
                    expect(k)
                    for request in [pop() for _ in range(k)]:
                        ack(request)
                return len(part) * k

        acks(range(warm))
        result = window.run(lambda: acks(range(warm, total)))
        design["acks"] = calls * k
        design["pops"] = calls * k if shape == "popack" else 0
    else:
        raise ValueError(f"unknown shape {shape!r}")
    frontier.close()
    result["design"] = design
    return result


#: Empty functions in a library of their own (the same Lua state as crawlq's):
#: what Redis spends on an FCALL of a read-only and of a write function.
PROBES = """#!lua name=crawlq_cost_probes
redis.register_function{function_name='nop_ro', callback=function() return 1 end,
  flags={'no-writes'}}
redis.register_function{function_name='nop_w', callback=function() return 1 end, flags={}}
"""


def _common_tail() -> list[Any]:
    """The common arguments of a changing call after the call number, nothing held: one
    packed header (crawlq.stores.redis.calls.CALL_HEADER), or, for a crawlq from before
    it, seven arguments."""
    try:
        from crawlq.stores.redis.calls import CALL_HEADER  # type: ignore[attr-defined]
    except ImportError:
        return ["3600000", "0", "0", "0", "", "0", "0"]
    return [CALL_HEADER.pack(3600000, 0, 0, 0, 0, 0, 0, 0)]


def floor_shape(spec: Result, window: Window) -> Result:
    """The floors under every call: ping, empty functions, crawlq's with nothing to do."""
    from crawlq.stores.redis.library import library

    _frontier(spec).close()  # the crawl exists, the library is loaded
    client = redis.Redis(host="127.0.0.1", port=spec["ports"][0])
    functions = library().function
    shape, calls = spec["shape"], spec["calls"]
    number = iter(range(1, 10**9))
    client.execute_command("FUNCTION", "LOAD", "REPLACE", PROBES)
    if shape == "ping":
        one: Callable[[], Any] = client.ping
    elif shape in ("nop_ro", "nop_w"):
        name = shape.encode()

        def one() -> Any:
            return client.execute_command("FCALL", name, 1, PREFIX, "seen", "exact", "0", "0")

    elif shape == "pop0":
        name = functions["pop"]
        tail = _common_tail()

        def one() -> Any:
            return client.execute_command(
                "FCALL", name, 1, PREFIX, "bench/floor", str(next(number)), *tail
            )

    elif shape == "trivial":
        name = functions["read"]

        def one() -> Any:
            return client.execute_command("FCALL", name, 1, PREFIX, "seen", "exact", "0", "0")

    else:
        name = functions["add"]
        tail = [*_common_tail(), "0", "0", "0", "0", "", "0", "", "0"]

        def one() -> Any:
            return client.execute_command(
                "FCALL", name, 1, PREFIX, "bench/floor", str(next(number)), *tail
            )

    for _ in range(spec["warmup"]):
        one()

    def loop() -> None:
        for _ in range(calls):
            one()

    result = window.run(loop)
    result["design"] = {"offered": 0, "accepted": 0, "pops": 0, "acks": 0}
    return result


def scrapy_redis_shape(spec: Result, window: Window) -> Result:
    """scrapy-redis's Scheduler: one enqueue (new or seen), one next_request, or its W2 step."""
    from scrapy.exceptions import ScrapyDeprecationWarning

    from benchmarks.peers import ScrapyRedis

    adapter = ScrapyRedis("redis", spec["url"])
    with warnings.catch_warnings():  # its open() calls the deprecated Spider.log
        warnings.simplefilter("ignore", ScrapyDeprecationWarning)
        adapter.open()
    shape, calls, warm = spec["shape"], spec["calls"], spec["warmup"]
    total = calls + warm
    add, pop = adapter.add, adapter.pop
    for request in adapter.requests(urls(0, 2_000)):
        add(request)
    if shape == "sr_w2":
        plan = workloads.w2_plan(1_000, total, HOSTS)
        for request in adapter.requests(
            list(zip(plan.seed_urls, plan.seed_priorities, strict=False))
        ):
            add(request)
        children = adapter.requests(list(zip(plan.child_urls, plan.child_priorities, strict=False)))

        def run(part: range) -> int:
            accepted = 0
            for s in part:
                pop()
                for child in children[5 * s : 5 * s + 5]:
                    accepted += bool(add(child))
            return accepted

    elif shape == "sr_pop":
        for request in adapter.requests(urls(1_000_000, total)):
            add(request)

        def run(part: range) -> int:
            return sum(pop() is not None for _ in part)

    else:
        items = adapter.requests(urls(10_000_000, total))
        if shape == "sr_dup":
            for request in adapter.requests(urls(10_000_000, total)):
                add(request)

        def run(part: range) -> int:
            return sum(bool(add(items[i])) for i in part)

    run(range(warm))
    result = window.run(lambda: run(range(warm, total)))
    design = {"offered": 0, "accepted": 0, "pops": 0, "acks": 0}
    if shape == "sr_w2":
        design.update(offered=5 * calls, accepted=result["out"], pops=calls)
    elif shape == "sr_pop":
        design["pops"] = result["out"]
    else:
        design.update(offered=calls, accepted=result["out"])
    result["design"] = design
    return result


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    os.sched_setaffinity(0, {spec["core"]})
    window = Window(spec["ports"], spec["pids"])
    shape = spec["shape"]
    if shape.startswith("sr_"):
        result = scrapy_redis_shape(spec, window)
    elif shape in FLOORS:
        result = floor_shape(spec, window)
    else:
        result = crawlq_shape(spec, window)
    result.pop("out", None)
    print(RESULT_MARKER + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
