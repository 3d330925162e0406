"""The crawl a chaos run makes: a forest of known size, its links derived from each URL.

Nodes are numbered ``0 .. size-1``. The first ``roots`` are the seeds, which
the feeding worker adds over time; node ``c >= roots`` is a link found on
node ``(c - roots) // fanout``, so every node but a seed has exactly one
parent, and a worker computes a page's links from its URL alone (no page
content, no shared state): the crawl is finite and its whole set of URLs is
known in advance, which is what lets the checker say "nothing lost".

``https://h<H>.chaos.test/<run>/<node>``: ``H`` spreads nodes over ``hosts``
hosts (parent and children on different hosts, as links usually are), and
``run`` names the run, so two runs never share a URL.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class Tree:
    size: int
    roots: int
    fanout: int = 3
    hosts: int = 100
    run: str = "chaos"

    def __post_init__(self) -> None:
        if not 0 < self.roots <= self.size or self.fanout < 1 or self.hosts < 1:
            raise ValueError(f"not a tree: {self}")

    def host(self, node: int) -> str:
        # A multiplicative spread: consecutive nodes (siblings) on different hosts.
        return f"h{(node * 7919) % self.hosts}.chaos.test"

    def url(self, node: int) -> str:
        return f"https://{self.host(node)}/{self.run}/{node}"

    @staticmethod
    def node(url: str) -> int:
        return int(url.rpartition("/")[2])

    def children(self, node: int) -> range:
        first = self.roots + node * self.fanout
        return range(min(first, self.size), min(first + self.fanout, self.size))

    def parent(self, node: int) -> int | None:
        return None if node < self.roots else (node - self.roots) // self.fanout

    @cached_property
    def urls(self) -> frozenset[str]:
        return frozenset(self.url(n) for n in range(self.size))

    def owns(self, url: str) -> bool:
        """True for a URL of this tree."""
        try:
            node = self.node(url)
        except ValueError:
            return False
        return 0 <= node < self.size and url == self.url(node)

    def args(self) -> list[str]:
        """Command-line arguments that rebuild this tree (see `from_args`)."""
        return [f"{self.size}:{self.roots}:{self.fanout}:{self.hosts}:{self.run}"]

    @classmethod
    def from_arg(cls, text: str) -> Tree:
        size, roots, fanout, hosts, run = text.split(":", 4)
        return cls(int(size), int(roots), int(fanout), int(hosts), run)
