"""The CLI's view of a Redis Cluster crawl: inspect, display and purge.

As `crawlq.stores._redis_inspect`, over every shard of the crawl: the
report adds the shards up and notes each shard's counts and node.
"""

from __future__ import annotations

from .._exchange import JobReport
from ._redis_cluster_admin import inspect as inspect_crawl
from ._redis_cluster_admin import purge
from ._redis_inspect import display, report

__all__ = ["display", "inspect", "purge"]


def inspect(url: str, *, top: int = 10) -> JobReport:
    """Read a cluster crawl's counts, busiest hosts, priorities, settings and shards.

    Read-only; works while workers run. Raises `ConfigError` for a bad URL,
    `StoreError` when no crawl of that name exists, `StoreUnavailable` or
    `StoreError` when the cluster cannot be read.
    """
    return report(inspect_crawl(url, hosts=top))
