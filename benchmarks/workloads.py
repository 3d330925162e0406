"""The benchmark workloads, as plain URL strings and integer priorities.

Everything here is deterministic (seeded) and implementation-neutral: each
implementation turns the same strings and priorities into its own request
objects. Priorities follow crawlq and Scrapy: a higher number comes out first
(qcrawl's adapter negates them, since qcrawl serves lower numbers first).

Every distinct URL carries a unique serial number, so no two distinct URLs can
collapse into one under any implementation's canonicalisation; duplicates are
exact repeats of an earlier URL.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "Sizes",
    "W1Data",
    "W2Plan",
    "sizes_for",
    "w1_data",
    "w2_plan",
    "w3_urls",
    "w5_data",
]

PRIORITY_RANGE = (-10, 10)


@dataclass(frozen=True)
class Sizes:
    """How big each workload is; ``quick`` shrinks them for a smoke run."""

    w1_unique: int = 100_000
    w1_hosts: int = 1_000
    w1_duplicate_every: int = 10  # one exact duplicate after every 10th new URL
    w2_seeds: int = 1_000
    w2_steps: int = 50_000
    w2_hosts: int = 1_000
    w3_unique: int = 1_000_000
    w5_requests: int = 100_000
    w5_hosts: tuple[int, ...] = (1, 100, 1_000, 10_000)
    w5_budget_s: float = 15.0  # most seconds of timed dequeues per W5 run


FULL = Sizes()
QUICK = Sizes(
    w1_unique=10_000,
    w1_hosts=1_000,
    w2_seeds=1_000,
    w2_steps=5_000,
    w3_unique=100_000,
    w5_requests=10_000,
    w5_budget_s=3.0,
)


def sizes_for(quick: bool) -> Sizes:
    return QUICK if quick else FULL


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
