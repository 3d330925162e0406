"""The SQLite store: a durable job in one file, for one crawler process.

`store` is the store (opened by ``open_frontier`` through ``OPTIONS`` and
``open_store``); `admin` is how anything outside a crawl reads or changes a
job (the CLI, metrics, watching); the other modules are its parts. This part
may import the core (``crawlq._*``) and ``crawlq.stores.base``; never the
frontier that uses it, the asyncio layer, an adapter or the CLI.
"""

from .store import OPTIONS, SqliteStore, open_store

__all__ = ["OPTIONS", "SqliteStore", "open_store"]
