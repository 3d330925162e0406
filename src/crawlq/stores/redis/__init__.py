"""The Redis store: one frontier shared by many crawler processes.

`store` is the store on one server and `cluster` the store sharded over a
Redis Cluster; `admin` (and `cluster.admin`) is how anything outside a crawl
reads or changes one (the CLI, metrics, watching). ``lua/`` holds the server
side: one library of Redis functions, split by call kind. This part may
import the core (``crawlq._*``) and ``crawlq.stores.base``; redis-py only
inside it. Never the frontier that uses it, the asyncio layer, an adapter or
the CLI.
"""

from .store import OPTIONS, RedisStore, open_store

__all__ = ["OPTIONS", "RedisStore", "open_store"]
