"""The Redis store's memory checks: a server that may evict a crawl's keys.

A full server under ``maxmemory-policy noeviction`` refuses adds and lets
workers drain (see ``Library`` in ``conn``); a server whose policy
evicts any key would silently drop requests, leases and seen fingerprints,
so the store refuses it at open, and refuses to go on once it has evicted
keys, unless opened with ``allow_eviction=True``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..._errors import IncompatibleStore
from .conn import Link

__all__ = ["check_evictions", "evicting", "eviction_refused", "memory_fields"]


def memory_fields(link: Link) -> dict[str, str]:
    """The server's ``INFO memory`` and ``INFO stats`` fields."""
    info = link.command(b"INFO", b"memory", b"stats", doing="reading the memory settings")
    text = info.decode() if isinstance(info, bytes) else str(info)
    return {k: v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def evicting(fields: Mapping[str, str]) -> str | None:
    """The server's ``maxmemory-policy`` if it may evict crawlq's keys (no TTL), else None.

    ``volatile-*`` policies evict only keys with a TTL, which crawlq never
    sets; ``allkeys-*`` ones evict any key once ``maxmemory`` is reached.
    """
    policy = fields.get("maxmemory_policy", "")
    return policy if policy.startswith("allkeys") else None


def eviction_refused(where: str, policy: str, lost: bool) -> IncompatibleStore:
    """The error refusing an evicting server (``lost``: it has evicted keys already)."""
    happened = (
        "has evicted keys mid-crawl (requests, leases or seen URLs may be lost)"
        if lost
        else "may evict a crawl's keys when full, losing requests"
    )
    return IncompatibleStore(
        f"Redis at {where} has maxmemory-policy {policy} and {happened}; crawlq needs "
        "maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in "
        "redis.conf), or open with allow_eviction=True to accept losing requests"
    )


def check_evictions(link: Link, where: str, evicted_before: int) -> int:
    """Refuse to go on once an evicting server has evicted keys; return its count.

    Raises `IncompatibleStore` while the server evicts any key and has
    evicted some since ``evicted_before``; another policy's evictions (keys
    with a TTL, never crawlq's) are let pass.
    """
    fields = memory_fields(link)
    evicted = int(fields.get("evicted_keys") or 0)
    if evicted > evicted_before:
        policy = evicting(fields)
        if policy is not None:
            # The caller looks again at its next call, until the server is fixed.
            raise eviction_refused(where, policy, True)
    return evicted
