"""The benchmark workloads, declared once: their data, their sizes and the plan.

Everything here is deterministic (seeded) and implementation-neutral: each
adapter turns the same URL strings and integer priorities into its own request
objects. A higher priority comes out first (qcrawl's in-process queues serve
lower numbers first, so their adapter negates). Every distinct URL carries a
unique serial number, so no two distinct URLs can merge under any
canonicalisation; a duplicate is an exact repeat of an earlier URL.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

PRIORITY_RANGE = (-10, 10)
BACKENDS = ("memory", "sqlite", "redis")


@dataclass(frozen=True)
class Sizes:
    """How big each workload is, per backend; ``QUICK`` shrinks them about 10x."""

    w1: dict[str, int] = field(
        default_factory=lambda: {"memory": 100_000, "sqlite": 50_000, "redis": 20_000}
    )
    w1_hosts: int = 1_000
    qcrawl_disk_w1: int = 10_000  # qcrawl's DiskQueue writes one file per request (~1k/s)
    w2_seeds: int = 1_000
    w2_steps: dict[str, int] = field(
        default_factory=lambda: {"memory": 50_000, "sqlite": 20_000, "redis": 10_000}
    )
    qcrawl_disk_w2: int = 2_000
    w3: int = 1_000_000
    w4: int = 100_000
    w4_big: int = 1_000_000  # crawlq only; drains w4_big_drain of them
    w4_big_drain: int = 100_000
    w5: int = 100_000
    w5_hosts: tuple[int, ...] = (1, 100, 1_000, 10_000)
    budget_s: float = 15.0  # most timed seconds of a slow peer's drain (W4, W5)
    w6: int = 40_000
    e2e_pages: int = 2_000
    e2e_hosts: int = 20


FULL = Sizes()
QUICK = replace(
    FULL,
    w1={"memory": 10_000, "sqlite": 5_000, "redis": 4_000},
    qcrawl_disk_w1=2_000,
    w2_steps={"memory": 5_000, "sqlite": 2_000, "redis": 2_000},
    qcrawl_disk_w2=200,
    w3=100_000,
    w4=10_000,
    w4_big=100_000,
    w4_big_drain=10_000,
    w5=10_000,
    budget_s=3.0,
    w6=8_000,
    e2e_pages=500,
)


def _host(h: int, *, upper: bool = False) -> str:
    name = f"host{h}.example{h % 7}.com"
    return name.upper() if upper else name


def w1_url(n: int, h: int) -> str:
    """The ``n``-th distinct W1 URL, on host number ``h``, with some variety."""
    kind = n % 50
    if kind < 30:  # 60%: the common shape
        return f"https://{_host(h)}/path/{n}/page.html?id={n}&sort=asc"
    if kind < 36:  # 12%: no query
        return f"https://{_host(h)}/path/{n}/page.html"
    if kind < 41:  # 10%: percent-encoded path and query
        return f"https://{_host(h)}/caf%C3%A9/{n}/na%C3%AFve%20page.html?q=a%2Fb&id={n}"
    if kind < 45:  # 8%: query not in canonical order, and a fragment
        return f"https://{_host(h)}/list/{n}?sort=asc&id={n}&page=2#top"
    if kind < 47:  # 4%: plain http, trailing slash
        return f"http://{_host(h)}/section/{n}/"
    if kind < 49:  # 4%: non-ASCII path and a space, left for canonicalisation to encode
        return f"https://{_host(h)}/wiki/Café {n}?lang=fr"
    return f"https://{_host(h, upper=True)}/Path/{n}/Page.html?id={n}"  # 2%: upper-case host


@dataclass(frozen=True)
class W1Data:
    """URLs offered in order (duplicates interleaved) and their priorities."""

    urls: list[str]
    priorities: list[int]
    unique: int
    hosts: int


def w1_data(unique: int, hosts: int, duplicate_every: int = 10, seed: int = 1) -> W1Data:
    """``unique`` distinct URLs spread evenly over ``hosts`` hosts, random priorities.

    After every ``duplicate_every``-th new URL an exact duplicate of a random
    earlier URL is offered (``duplicate_every=0``: no duplicates).
    """
    rng = random.Random(seed)
    low, high = PRIORITY_RANGE
    urls: list[str] = []
    priorities: list[int] = []
    distinct: list[str] = []
    for n in range(unique):
        url = w1_url(n, n % hosts)
        distinct.append(url)
        urls.append(url)
        priorities.append(rng.randint(low, high))
        if duplicate_every and n % duplicate_every == duplicate_every - 1:
            urls.append(distinct[rng.randrange(len(distinct))])
            priorities.append(rng.randint(low, high))
    return W1Data(urls, priorities, unique, hosts)


def w5_data(requests: int, hosts: int, seed: int = 5) -> W1Data:
    """``requests`` distinct URLs over ``hosts`` hosts, random priorities, no duplicates."""
    return w1_data(requests, hosts, duplicate_every=0, seed=seed)


@dataclass(frozen=True)
class W2Plan:
    """Seeds, then for each step the five children offered after one dequeue.

    The children do not depend on which request was dequeued, so every
    implementation gets exactly the same offers whatever order it serves in.
    Half the children (2 or 3 of 5, alternating) repeat a URL offered earlier,
    which every implementation has therefore already seen.
    """

    seed_urls: list[str]
    seed_priorities: list[int]
    child_urls: list[str]  # 5 per step, step-major
    child_priorities: list[int]
    steps: int
    fanout: int = 5


def w2_plan(seeds: int, steps: int, hosts: int, seed: int = 2) -> W2Plan:
    rng = random.Random(seed)
    low, high = PRIORITY_RANGE
    seed_urls = [f"https://site{h}.example{h % 7}.org/" for h in range(seeds)]
    offered = list(seed_urls)
    child_urls: list[str] = []
    child_priorities: list[int] = []
    serial = 0
    for step in range(steps):
        seen_count = 2 if step % 2 else 3
        batch: list[str] = []
        for _ in range(5 - seen_count):
            h = rng.randrange(hosts)
            batch.append(f"https://site{h}.example{h % 7}.org/a/{serial}/item.html?ref={step % 13}")
            serial += 1
        # Earlier offers only: these are duplicates for every implementation.
        repeats = [offered[rng.randrange(len(offered))] for _ in range(seen_count)]
        offered.extend(batch)
        batch.extend(repeats)
        rng.shuffle(batch)
        child_urls.extend(batch)
        child_priorities.extend(rng.randint(low, high) for _ in batch)
    return W2Plan(seed_urls, [0] * seeds, child_urls, child_priorities, steps)


def w3_urls(count: int, hosts: int = 1_000) -> Iterator[str]:
    """``count`` distinct URLs, built lazily so the strings never pile up."""
    for n in range(count):
        h = n % hosts
        yield f"https://host{h}.example{h % 7}.com/path/{n}/page.html?id={n}&sort=asc"


def fill_items(count: int, hosts: int, seed: int = 4) -> Iterator[tuple[str, int]]:
    """``count`` distinct W1-shaped URLs and priorities, built lazily (fills of 1M)."""
    rng = random.Random(seed)
    low, high = PRIORITY_RANGE
    for n in range(count):
        yield w1_url(n, n % hosts), rng.randint(low, high)


# -- the plan: every measurement, declared once ------------------------------------

WORKLOADS = ("W1", "W2", "A1", "W3", "W4", "W4K", "W5", "W6", "C1", "E2E")
#: A1's coroutines (asyncio workers in one process).
A1_COROUTINES = 32
PEERS = {  # backend -> the peers' adapter names, in table order
    "memory": ("scrapy-spq", "scrapy-dapq", "qcrawl"),
    "sqlite": ("scrapy-jobdir", "qcrawl"),
    "redis": ("scrapy-redis", "qcrawl"),
}
NAMES = {
    ("scrapy-spq", "memory"): "Scrapy SPQ",
    ("scrapy-dapq", "memory"): "Scrapy DAPQ (default)",
    ("qcrawl", "memory"): "qcrawl",
    ("scrapy-jobdir", "sqlite"): "Scrapy JOBDIR",
    ("qcrawl", "sqlite"): "qcrawl DiskQueue",
    ("scrapy-redis", "redis"): "scrapy-redis",
    ("qcrawl", "redis"): "qcrawl RedisQueue",
}


@dataclass(frozen=True)
class Spec:
    """One measurement: workload, backend, implementation and its parameters.

    ``params`` holds everything the measuring process needs (sizes included).
    """

    workload: str
    backend: str
    impl: str
    label: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.workload}/{self.backend}/{self.impl}/{extra}"

    @property
    def group(self) -> str:
        """The table this measurement belongs to."""
        p, extra = self.params, ""
        if self.workload == "W5":
            extra = f", {p['hosts']:,} host{'s' * (p['hosts'] > 1)}"
        if self.workload == "W6":
            extra = f", {p['workers']} worker{'s' * (p['workers'] > 1)}"
        return f"{self.workload} {self.backend}{extra}"


def _peers(workload: str, backend: str, params: dict[str, Any], sizes: Sizes) -> list[Spec]:
    specs = []
    for impl in PEERS[backend]:
        p = dict(params)
        if (impl, backend) == ("qcrawl", "sqlite") and workload in ("W1", "W2"):
            key = "n" if workload == "W1" else "steps"
            p[key] = sizes.qcrawl_disk_w1 if workload == "W1" else sizes.qcrawl_disk_w2
        label = NAMES[impl, backend] + (f" [{p.get('n', p.get('steps')):,}]" if p != params else "")
        specs.append(Spec(workload, backend, impl, label, p))
    return specs


def plan(sz: Sizes) -> list[Spec]:
    """Every measurement of a full run, in table order."""
    specs: list[Spec] = []
    for backend in BACKENDS:
        w1 = {"n": sz.w1[backend], "hosts": sz.w1_hosts}
        specs += [
            Spec(
                "W1",
                backend,
                "crawlq",
                "crawlq add_many(100), pop + ack",
                {**w1, "enqueue": "add_many", "dequeue": "pop+ack"},
            ),
            Spec(
                "W1",
                backend,
                "crawlq",
                "crawlq add, pop only",
                {**w1, "enqueue": "add", "dequeue": "pop"},
            ),
            *_peers("W1", backend, w1, sz),
        ]
    for backend in BACKENDS:
        w2 = {"seeds": sz.w2_seeds, "steps": sz.w2_steps[backend], "hosts": sz.w1_hosts}
        specs += [
            Spec(
                "W2",
                backend,
                "crawlq",
                "crawlq pop, add_many(5), ack",
                {**w2, "children": "add_many"},
            ),
            Spec("W2", backend, "crawlq", "crawlq pop, 5 x add, ack", {**w2, "children": "add"}),
        ]
        if backend == "redis":
            specs.append(
                Spec(
                    "W2",
                    backend,
                    "crawlq",
                    "crawlq pop, add_many(5, ack=parent)",
                    {**w2, "children": "add_many_ack"},
                )
            )
        specs += _peers("W2", backend, w2, sz)
    for backend in BACKENDS:
        a1 = {
            "seeds": sz.w2_seeds,
            "steps": sz.w2_steps[backend],
            "hosts": sz.w1_hosts,
            "coroutines": A1_COROUTINES,
        }
        label = f"Scheduler, {A1_COROUTINES} coroutines"
        specs.append(Spec("A1", backend, "crawlq", f"crawlq {label}", a1))
        if backend == "sqlite":
            steps = sz.qcrawl_disk_w2
            specs.append(
                Spec("A1", backend, "qcrawl", f"qcrawl {label} [{steps:,}]", {**a1, "steps": steps})
            )
        else:
            specs.append(Spec("A1", backend, "qcrawl", f"qcrawl {label}", a1))
    specs += [
        Spec("W3", "memory", impl, NAMES.get((impl, "memory"), "crawlq"), {"n": sz.w3})
        for impl in ("crawlq", "scrapy-spq", "qcrawl")
    ]
    w4 = {"n": sz.w4, "hosts": sz.w1_hosts, "budget_s": sz.budget_s}
    specs += [
        Spec("W4", "sqlite", "crawlq", "crawlq", w4),
        Spec(
            "W4",
            "sqlite",
            "crawlq",
            f"crawlq, {sz.w4_big:,} queued",
            {**w4, "n": sz.w4_big, "drain": sz.w4_big_drain},
        ),
        *_peers("W4", "sqlite", w4, sz),
    ]
    for case in ("first-session", "resumed"):
        specs += [
            Spec(
                "W4K",
                "sqlite",
                impl,
                f"{NAMES.get((impl, 'sqlite'), 'crawlq')}, {case}",
                {"n": sz.w4, "hosts": sz.w1_hosts, "case": case},
            )
            for impl in ("crawlq", "scrapy-jobdir", "qcrawl")
            if case == "resumed" or impl != "qcrawl"
        ]  # qcrawl: both cases are the same
    for hosts in sz.w5_hosts:
        w5 = {"n": sz.w5, "hosts": hosts, "enqueue": "add", "budget_s": sz.budget_s}
        specs += [
            Spec("W5", "memory", "crawlq", "crawlq pop + ack", {**w5, "dequeue": "pop+ack"}),
            Spec("W5", "memory", "crawlq", "crawlq pop only", {**w5, "dequeue": "pop"}),
            Spec("W5", "memory", "scrapy-spq", "Scrapy SPQ", w5),
            Spec("W5", "memory", "scrapy-dapq", "Scrapy DAPQ (default)", w5),
        ]
    for workers in (1, 2):
        w6 = {"n": sz.w6, "hosts": sz.w1_hosts, "workers": workers}
        specs += [
            Spec("W6", "redis", impl, f"{name}, {workers} worker{'s' * (workers > 1)}", w6)
            for impl, name in (("crawlq", "crawlq pop + ack"), ("scrapy-redis", "scrapy-redis"))
        ]
    c1 = {"n": sz.w1["memory"], "hosts": sz.w1_hosts}
    specs += [
        Spec("C1", "memory", "crawlq", "crawlq Fingerprinter().canonical_url", c1),
        Spec("C1", "memory", "w3lib", "w3lib.url.canonicalize_url", c1),
        Spec("C1", "memory", "qcrawl", "qcrawl normalize_url (info)", c1),
    ]
    for backend in ("memory", "sqlite"):
        e2e = {"pages": sz.e2e_pages, "hosts": sz.e2e_hosts}
        where = "" if backend == "memory" else ", JOBDIR"
        specs += [
            Spec("E2E", backend, "crawlq", f"Scrapy + crawlq scheduler{where}", e2e),
            Spec("E2E", backend, "scrapy", f"Scrapy's own scheduler{where}", e2e),
        ]
    return specs
