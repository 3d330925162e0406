"""Redis Cluster plumbing for the cluster store: the client, the checks, shard routing.

A cluster crawl keeps each shard's keys under one hash tag
(``crawlq:{NAME:K}:``), so each shard lives on one node and its functions
stay atomic there. `ClusterClient` wraps redis-py's ``RedisCluster``: it
knows which node serves a key now and hands out that node's plain client,
on which a shard's `crawlq.stores.redis.conn.Link` talks as it would to a
single server. Opening checks the cluster (every slot served, every primary
reachable and Redis 7.0 or newer) and loads crawlq's functions on every
primary; every failure is a typed crawlq error without the password. Also
the store's small pure helpers: its options (`cluster_options`), refetches
by lease (`by_lease`) and stats over shards (`merge_stats`).
"""

from __future__ import annotations

import contextlib
import inspect
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from ...._errors import ConfigError, IncompatibleStore, StoreError, StoreUnavailable
from ...._fingerprint import Fingerprinter
from ...._policy import Policy
from ...base import Refetch
from ..client import MIN_SERVER, redis_module, translate
from ..config import RedisURL, Settings
from ..conn import Link, server_version
from ..store import RedisStore

if TYPE_CHECKING:
    import redis

__all__ = [
    "CLUSTER_FORMAT",
    "ClusterClient",
    "by_lease",
    "cluster_options",
    "merge_stats",
    "open_record",
    "record_tags",
    "shard_of",
    "shard_tags",
]

_SLOTS: Final = 16384
#: Shards of a new crawl opened without ``shards``.
DEFAULT_SHARDS: Final = 16
#: Layout version of a cluster crawl's record.
CLUSTER_FORMAT: Final = 1
_MAX_SHARDS: Final = 1024


def cluster_options(options: dict[str, Any]) -> tuple[int | None, int]:
    """Take the cluster store's own options, ``shards`` and ``replicas``, out of ``options``.

    Raises `ConfigError` for a shard count not from 1 to 1024 or a replica
    count not from 0 to 16.
    """
    shards = options.pop("shards", None)
    if shards is not None and (
        isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= _MAX_SHARDS
    ):
        raise ConfigError(f"shards must be an int from 1 to {_MAX_SHARDS}, not {shards!r}")
    replicas = options.pop("replicas", 0)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 0 <= replicas <= 16:
        raise ConfigError(f"replicas must be an int from 0 to 16, not {replicas!r}")
    return shards, replicas


def by_lease(
    leases: Sequence[object], refetch: Sequence[Refetch | None] | None
) -> dict[int, Refetch | None] | None:
    """Each lease's refetch by the lease's id(), or None when none refetches."""
    if refetch is None or not any(again is not None for again in refetch):
        return None
    return dict(zip(map(id, leases), refetch, strict=True))


def merge_stats(shards: list[dict[str, float]]) -> dict[str, float]:
    """The shards' ``extra_stats`` as one crawl's: sums, and the worst Bloom figures."""
    stats: dict[str, float] = {"prefetched": 0.0, "shards": float(len(shards))}
    for figures in shards:
        for name, value in figures.items():
            if name == "prefetched":
                stats[name] += value
            elif name == "bloom_capacity":
                stats[name] = stats.get(name, 0.0) + value
            else:
                stats[name] = max(stats.get(name, value), value)
    return stats


def shard_of(host: bytes, shards: int) -> int:
    """The shard of a host (pacing slot): CRC-32 of its name, modulo the shard count.

    Fixed for the life of a crawl: every worker, whatever its version, must
    route a host to the same shard.
    """
    return zlib.crc32(host) % shards


def shard_tags(crawl: str, shards: int) -> list[str]:
    """Hash tags for a new crawl's shards: shard K's slot in the K-th equal range of slots.

    ``NAME:K``, or ``NAME:K:S`` with the smallest S that puts it there. A
    cluster gives its primaries ranges of slots (``redis-cli --cluster
    create`` gives each an equal run), so shards spread over the primaries
    as evenly as their count allows, where tags left to chance put 16
    shards 7/5/4 on 3 primaries.
    """
    from redis.crc import key_slot

    tags = []
    for k in range(shards):
        low, high = k * _SLOTS // shards, (k + 1) * _SLOTS // shards
        tag = f"{crawl}:{k}"
        suffix = 0
        while not low <= key_slot(tag.encode()) < high:
            suffix += 1
            tag = f"{crawl}:{k}:{suffix}"
        tags.append(tag)
    return tags


def record_tags(count: str, tags: str) -> list[str | None]:
    """The shards' hash tags from a crawl's record (None each for one without tags)."""
    if not tags:
        return [None] * int(count or 0)
    return list(tags.split(" "))


def open_record(
    location: RedisURL, cluster: ClusterClient, retry_timeout: float, shards: int | None
) -> list[str | None]:
    """Create or read a cluster crawl's record; return its shards' hash tags.

    None for each shard of a crawl recorded before the record kept tags
    (its shards use ``NAME:K``). Raises `IncompatibleStore` for a record of
    another format, or of another shard count than ``shards`` (None: any),
    and what `Link.command` raises.
    """
    key = location.prefix.encode() + b"cluster"
    count = shards or DEFAULT_SHARDS
    link = Link(location, cluster.node_client(key)[0], retry_timeout, cluster.follow(key))
    try:
        stored = link.command(
            b"FCALL",
            link.library.function["cluster_record"],
            b"1",
            key,
            b"%d" % CLUSTER_FORMAT,
            b"%d" % count,
            " ".join(shard_tags(location.crawl, count)).encode(),
            doing="opening the crawl",
        )
    finally:
        link.close()
    fmt, stored_count, tags = (v.decode() if isinstance(v, bytes) else "" for v in stored)
    crawl, where = location.crawl, location.display
    if fmt != str(CLUSTER_FORMAT) or not stored_count.isdigit():
        raise IncompatibleStore(
            f"crawl {crawl!r} at {where} has a cluster record of format {fmt or '?'}, not "
            f"crawlq's {CLUSTER_FORMAT}; use another crawl name or upgrade crawlq"
        )
    if shards is not None and int(stored_count) != shards:
        raise IncompatibleStore(
            f"crawl {crawl!r} at {where} was created with shards={stored_count}; its shard "
            f"count cannot change: open it with shards={stored_count} (or without shards), "
            "or use another crawl name",
            setting="shards",
        )
    return record_tags(stored_count, tags)


def open_shard(
    location: RedisURL,
    cluster: ClusterClient,
    k: int,
    tag: str | None,
    options: tuple[Policy, Fingerprinter, Settings],
    replicas: int = 0,
) -> RedisStore:
    """Open shard ``k`` (hash tag ``tag``) of a cluster crawl, on the node serving it.

    ``options`` are the store's. The store follows its shard to another node
    when the cluster moves it (a failover). Raises what `RedisStore` raises.
    """
    meta = location.of_shard(k, "", 0, tag).prefix.encode() + b"meta"
    client, host, port = cluster.node_client(meta)
    where = location.of_shard(k, host, port, tag)
    return RedisStore(where, client, *options, cluster.follow(meta), replicas)


class ClusterClient:
    """redis-py's cluster client for a ``redis+cluster://`` URL, and its nodes' clients.

    Raises `StoreUnavailable` when no seed node answers, `StoreError` for
    refused credentials or a server that is not a cluster node.
    """

    def __init__(self, location: RedisURL) -> None:
        redis = redis_module()
        from redis.cluster import ClusterNode, RedisCluster

        self.location = location
        self._lock = threading.Lock()
        kwargs = {k: v for k, v in location.kwargs.items() if k not in ("host", "port", "db")}
        seeds = [ClusterNode(host, port) for host, port in location.nodes]  # type: ignore[no-untyped-call]
        try:
            self.client: Any = RedisCluster(startup_nodes=seeds, **kwargs)
        except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
            raise _translate(exc, location, "connecting to the cluster") from None

    def node_client(self, key: bytes, *, refresh: bool = False) -> tuple[redis.Redis, str, int]:
        """The client of the primary serving ``key`` now, and its host and port.

        With ``refresh``, reads the cluster's slot map again first (after a
        redirection such as MOVED, or a node that stopped answering), asking
        the node that served ``key`` until now last: it may be the one that
        stopped answering. A failed refresh keeps the map it had. Raises
        `StoreUnavailable` when no node serves ``key``'s slot.
        """
        errors = redis_module().exceptions
        failures = (errors.RedisError, errors.RedisClusterException)
        with self._lock:
            try:
                if refresh:
                    manager = self.client.nodes_manager
                    last = None
                    with contextlib.suppress(*failures):
                        last = self.client.get_node_from_key(key).name
                    # On failure keep the old map: the retry loop tries again.
                    with contextlib.suppress(*failures):
                        if last is not None and _defers_failed_node(manager):
                            manager.initialize(last_failed_node_name=last)
                        else:
                            manager.initialize()
                node = self.client.get_node_from_key(key)
            except failures as exc:
                raise _translate(exc, self.location, "finding the node of a shard") from None
            return node.redis_connection, node.host, int(node.port)

    def follow(self, key: bytes) -> Callable[[], redis.Redis]:
        """A `Link`'s ``reroute`` for ``key``: the client of its node, the slot map read afresh.

        Every link to a key's node needs one, short-lived ones too: without
        it, a slot moved (a reshard, a failover) while the link retries is
        asked on the old node until ``retry_timeout``, which answers MOVED
        however long ago the move ended.
        """

        def reroute() -> redis.Redis:
            return self.node_client(key, refresh=True)[0]

        return reroute

    def primaries(self) -> list[tuple[str, int, redis.Redis]]:
        """Every primary of the cluster: host, port and client."""
        return [
            (node.host, int(node.port), node.redis_connection)
            for node in self.client.get_primaries()
        ]

    def check(self, retry_timeout: float, replicas: int = 0) -> None:
        """Check that the cluster serves every slot and each primary runs Redis 7.0+.

        With ``replicas``, also that each primary has that many replicas
        connected. Loads crawlq's function library on every primary. Slots
        no node serves and missing replicas are what every failover passes
        through: the check is made again (the slot map read afresh) until
        ``retry_timeout``, then raises `StoreUnavailable` naming them. Raises
        `StoreUnavailable` for a primary that does not answer, `StoreError`
        for a primary older than Redis 7.0.
        """
        deadline = time.monotonic() + retry_timeout
        wait = 0.05
        while True:
            try:
                self._check_once(retry_timeout, replicas)
                return
            except _NotReady as exc:
                if time.monotonic() + wait > deadline:
                    raise StoreUnavailable(
                        f"{exc}, for {retry_timeout:g} s (retry_timeout); a failover in "
                        "progress ends by itself: open again once it has"
                    ) from None
            time.sleep(wait)
            wait = min(wait * 2, 1.0)
            with self._lock, contextlib.suppress(Exception):
                self.client.nodes_manager.initialize()  # the slot map, afresh

    def _check_once(self, retry_timeout: float, replicas: int) -> None:
        where = self.location.display
        for host, port, client in self.primaries():
            link = Link(self.location.of_shard(0, host, port), client, retry_timeout)
            try:
                info = link.command(b"CLUSTER", b"INFO", doing="checking the cluster", retry=False)
                text = info.decode() if isinstance(info, bytes) else str(info)
                fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
                assigned = int(fields.get("cluster_slots_ok", "0"))
                if fields.get("cluster_state") != "ok" or assigned < _SLOTS:
                    raise _NotReady(
                        f"the Redis Cluster at {where} is not serving every slot (node "
                        f"{host}:{port} says cluster_state:{fields.get('cluster_state', '?')}, "
                        f"{assigned} of {_SLOTS} slots ok); fix the cluster (redis-cli --cluster "
                        "check) before opening a crawl on it"
                    )
                version = server_version(link)
                if version < MIN_SERVER:
                    raise StoreError(
                        f"Redis at {host}:{port} (a primary of {where}) is version "
                        f"{'.'.join(map(str, version))}; crawlq needs Redis "
                        f"{'.'.join(map(str, MIN_SERVER))} or newer on every primary"
                    )
                if replicas:
                    _check_replicas(link, f"{host}:{port}", where, replicas)
                link.load_library("loading crawlq's functions")
            finally:
                link.close()

    def close(self) -> None:
        """Close every connection of the cluster client."""
        # Closing must not mask the outcome that led here.
        with contextlib.suppress(Exception):
            self.client.close()


def _defers_failed_node(manager: Any) -> bool:
    """Whether redis-py's slot-map refresh can ask a node last (newer redis-py)."""
    try:
        return "last_failed_node_name" in inspect.signature(manager.initialize).parameters
    except (TypeError, ValueError):  # pragma: no cover - not introspectable
        return False


class _NotReady(StoreError):
    """A cluster state a failover passes through (`ClusterClient.check` waits it out)."""


def _check_replicas(link: Link, node: str, where: str, replicas: int) -> None:
    info = link.command(b"INFO", b"replication", doing="checking the replicas")
    text = info.decode() if isinstance(info, bytes) else str(info)
    connected = 0
    for line in text.splitlines():
        if line.startswith("connected_slaves:"):
            connected = int(line.partition(":")[2])
    if connected < replicas:
        raise _NotReady(
            f"the primary {node} of {where} has {connected} replica(s) connected; "
            f"replicas={replicas} makes every write wait for {replicas}: add replicas "
            "to each primary, or open with a lower replicas="
        )


def _translate(exc: BaseException, location: RedisURL, doing: str) -> StoreError:
    errors = redis_module().exceptions
    if isinstance(exc, errors.RedisClusterException) and not isinstance(exc, errors.RedisError):
        text = location.scrub(str(exc)) or type(exc).__name__
        if "AUTH" in text.upper() or "PASSWORD" in text.upper():
            return StoreError(
                f"the Redis Cluster at {location.display} refused the credentials while "
                f"{doing} ({text}); fix the user and password in the frontier URL"
            )
        return StoreUnavailable(
            f"cannot reach the Redis Cluster at {location.display} while {doing} ({text}); "
            "check that its nodes are running, that the URL names at least one of them, "
            "and that they run with cluster-enabled yes"
        )
    return translate(exc, location, doing)
