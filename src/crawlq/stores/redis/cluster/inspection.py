"""Looking at and removing a crawl kept in a Redis Cluster: the single-server readers, per shard.

Each function reads the crawl's record (its shard count), runs the
single-server reader of `crawlq.stores.redis.inspection` on every shard, on
the node serving it, and adds the results up, so ``crawlq inspect``,
``purge``, ``hosts`` and ``top`` work the same on a cluster crawl. Like
those, they read keys directly and work while workers run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Final

from ...._errors import ConfigError, StoreError
from ...base import Counters, HostList, StoreCounts, merge_hosts, sum_counts
from ..client import redis_module
from ..config import RedisURL, parse_url
from ..conn import Link
from ..host_views import change_host_at, host_counts
from ..inspection import Inspection, ShardSummary, inspect_at, purge_at, snapshot_at
from ..open import settings_at
from .shards import ClusterClient, record_tags, shard_of

__all__ = [
    "change_host",
    "crawl_settings",
    "hosts",
    "inspect",
    "purge",
    "shard_links",
    "snapshot",
]

_RETRY: Final = 5.0


@contextmanager
def shard_links(url: str) -> Iterator[tuple[RedisURL, Link, list[tuple[RedisURL, Link]]]]:
    """The crawl's location, a link to its record's node, and one to each shard's.

    No shards when there is no such crawl.
    """
    location = parse_url(url)
    if not location.cluster:
        raise ConfigError(f"frontier URL {location.display!r} is not a redis+cluster:// URL")
    redis_module()
    cluster = ClusterClient(location)
    record = location.prefix.encode() + b"cluster"
    # Each link follows its key to the node serving it now (`ClusterClient.follow`):
    # a reshard or a failover under way does not fail a look from outside.
    links = [
        (location, Link(location, cluster.node_client(record)[0], _RETRY, cluster.follow(record)))
    ]
    try:
        count, tags = (
            v.decode() if isinstance(v, bytes) else ""
            for v in links[0][1].command(
                b"HMGET", record, b"shards", b"tags", doing="reading the crawl"
            )
        )
        for k, tag in enumerate(record_tags(count, tags)):
            key = location.of_shard(k, "", 0, tag).prefix.encode() + b"meta"
            client, host, port = cluster.node_client(key)
            shard = location.of_shard(k, host, port, tag)
            links.append((shard, Link(shard, client, _RETRY, cluster.follow(key))))
        yield location, links[0][1], links[1:]
    finally:
        for _, link in links:
            link.close()
        cluster.close()


def _node(link: Link) -> str:
    """The node a shard's link talks to now (it follows a moved slot), as host:port."""
    kwargs = link.client.connection_pool.connection_kwargs
    host, port = kwargs["host"], kwargs["port"]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def inspect(url: str, *, hosts: int = 20) -> Inspection:
    """Describe the cluster crawl at a ``redis+cluster://`` URL, without changing it.

    Figures are every shard's added up (hosts and priorities merged);
    ``shards`` lists each shard's counts and the node serving it. Raises
    what `crawlq.stores.redis.inspection.inspect` raises.
    """
    with shard_links(url) as (location, _, links):
        found = [inspect_at(shard, link, hosts) for shard, link in links]
    if not found:
        return Inspection(
            location.display, location.crawl, False, "?", 0, 0, 0, None, {}, 0, "exact",
            None, None, [], 0, [],
        )  # fmt: skip
    owners: dict[str, int] = {}
    priorities: dict[int, int] = {}
    counters = Counters()
    memory: dict[str, int] = {}
    for (_, link), one in zip(links, found, strict=True):
        for owner, n in one.leases_by_owner.items():
            owners[owner] = owners.get(owner, 0) + n
        for priority, n in one.priorities:
            priorities[priority] = priorities.get(priority, 0) + n
        counters += one.counters
        memory[_node(link)] = one.used_memory
    deadlines = [one.next_lease_deadline_in for one in found if one.next_lease_deadline_in]
    dues = [one.next_due_in for one in found if one.next_due_in is not None]
    fills = [one.bloom_fill_ratio for one in found if one.bloom_fill_ratio is not None]
    rates = [r for one in found if (r := one.bloom_false_positive_rate) is not None]
    merged = merge_hosts([HostList(one.hosts, one.host_total, 0) for one in found], hosts)
    first = found[0]
    return replace(
        first,
        exists=any(one.exists for one in found),
        server_version=" ".join(sorted({one.server_version for one in found})),
        queued=sum(one.queued for one in found),
        leased=sum(one.leased for one in found),
        expired_leases=sum(one.expired_leases for one in found),
        next_lease_deadline_in=min(deadlines) if deadlines else None,
        leases_by_owner=dict(sorted(owners.items(), key=lambda item: -item[1])),
        seen=sum(one.seen for one in found),
        bloom_fill_ratio=max(fills) if fills else None,
        bloom_false_positive_rate=max(rates) if rates else None,
        hosts=list(merged),
        host_total=sum(one.host_total for one in found),
        priorities=sorted(priorities.items(), reverse=True),
        settings={**first.settings, "shards": str(len(found))},
        used_memory=sum(memory.values()),
        counters=counters,
        scheduled=sum(one.scheduled for one in found),
        revisits=sum(one.revisits for one in found),
        next_due_in=min(dues) if dues else None,
        shards=[
            ShardSummary(k, _node(link), one.queued, one.leased, one.seen)
            for k, ((_, link), one) in enumerate(zip(links, found, strict=True))
        ],
    )


def purge(url: str) -> int:
    """Delete every key of the cluster crawl at a ``redis+cluster://`` URL; return how many.

    Each shard's keys on the node serving it, then the crawl's record. Run
    it when no worker uses the crawl. Raises what
    `crawlq.stores.redis.inspection.purge` raises.
    """
    with shard_links(url) as (location, record_link, links):
        deleted = sum(purge_at(shard, link) for shard, link in links)
        record = location.prefix.encode() + b"cluster"
        deleted += int(record_link.command(b"UNLINK", record, doing="purging"))
    return deleted


def snapshot(url: str, *, top: int = 20) -> tuple[StoreCounts, HostList]:
    """The `StoreCounts` and the busiest hosts of a cluster crawl, every shard's.

    Raises `StoreError` when there is no such crawl.
    """
    with shard_links(url) as (location, _, links):
        if not links:
            raise StoreError(f"there is no crawl {location.crawl!r} at {location.display}")
        found = [snapshot_at(shard, link, top) for shard, link in links]
    return sum_counts([counts for counts, _ in found]), merge_hosts([h for _, h in found], top)


def hosts(url: str, *, top: int = 20) -> HostList:
    """Per-host figures of a cluster crawl, every shard's, without opening a frontier."""
    with shard_links(url) as (_, _, links):
        lists = [host_counts(link, shard.prefix.encode(), top, {}) for shard, link in links]
    return merge_hosts(lists, top)


def change_host(url: str, what: str, host: str, seconds: float | None = None) -> str:
    """Change one host of a running cluster crawl, in its shard (see `inspection.change_host`)."""
    with shard_links(url) as (location, _, links):
        if not links:
            raise StoreError(f"there is no crawl {location.crawl!r} at {location.display}")
        shard, link = links[shard_of(host.encode(), len(links))]
        return change_host_at(shard, link, what, host, seconds)


def crawl_settings(url: str) -> dict[str, Any] | None:
    """A cluster crawl's ``lifo`` and ``fingerprint``, from its first shard; None: no crawl."""
    with shard_links(url) as (_, _, links):
        if not links:
            return None
        shard, link = links[0]
        return settings_at(shard, link)
