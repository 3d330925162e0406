"""The Redis Cluster store's admin interface (`crawlq.stores.base.StoreAdmin`).

As `crawlq.stores.redis.admin`, over every shard of the crawl: the report adds
the shards up and notes each shard's counts and node; `export` reads the
shards one after the other.
"""

from __future__ import annotations

from ...._exchange import JobReport
from ..admin import crawl_label, display, report
from .export import export
from .inspection import change_host, crawl_settings, hosts, purge, snapshot
from .inspection import inspect as inspect_crawl

__all__ = [
    "change_host",
    "crawl_label",
    "crawl_settings",
    "display",
    "export",
    "hosts",
    "inspect",
    "purge",
    "snapshot",
]


def inspect(url: str, *, top: int = 10) -> JobReport:
    """Read a cluster crawl's counts, busiest hosts, priorities, settings and shards.

    Read-only; works while workers run. Raises `ConfigError` for a bad URL,
    `StoreError` when no crawl of that name exists, `StoreUnavailable` or
    `StoreError` when the cluster cannot be read.
    """
    return report(inspect_crawl(url, hosts=top))
