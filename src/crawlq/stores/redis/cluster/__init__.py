"""The Redis Cluster store: a crawl sharded by host over a cluster's primaries.

`store` is the store, `shards` how a host maps to a shard and its hash tag,
`admin` and `inspection` how a crawl is read or changed from outside. It is
built on the one-server store of the parent package (``..store``, ``..conn``,
``..config``), which never imports this one.
"""

from .store import OPTIONS, ClusterStore, open_store

__all__ = ["OPTIONS", "ClusterStore", "open_store"]
