"""``crawlq export`` of a Redis Cluster crawl: each shard's requests, as one server's export.

In the order of one server's export (`crawlq.stores.redis.export`): the
queued and leased requests shard by shard (by number), host by host, each
host's oldest first (a host lives in one shard); then the scheduled ones
of every shard, soonest due first. Each shard is read on the node serving it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from ...._errors import StoreError
from ...._request import Request
from ..export import held_at, scheduled_at
from .inspection import shard_links

__all__ = ["export"]


def export(url: str) -> Iterator[Request]:
    """Yield every request of the cluster crawl at ``url`` not done yet, shard by shard.

    Raises what `crawlq.stores.redis.export.export` raises. Close the
    generator (or exhaust it) to release the connections.
    """
    with shard_links(url) as (location, _, links):
        if not links:
            raise StoreError(f"there is no crawl {location.crawl!r} at {location.display}")
        for shard, link in links:
            yield from held_at(shard, link)
        scheduled = [scheduled_at(shard, link) for shard, link in links]
        yield from heapq.merge(*scheduled, key=_due)


def _due(request: Request) -> float:
    return request.not_before or 0.0
