"""The Redis Cluster store: one crawl sharded by host across a cluster's primaries.

``redis+cluster://[user:password@]host:port[,host:port...]/?crawl=NAME`` (also
``rediss+cluster://``): any nodes as seeds. A crawl has ``shards`` shards
(default 16, fixed at creation, kept in its ``crawlq:{NAME}:cluster`` record),
each a crawl of the single-server store under its own hash tag,
``crawlq:{NAME:K}:`` or ``crawlq:{NAME:K:S}:`` (S puts shard K's slot in the
K-th equal range of slots), so a shard's keys sit in one slot and its
functions stay atomic. A request goes to the shard of its pacing slot (host
or ``download_slot``): CRC-32 of the name modulo the shard count (`shard_of`).

What is exact, and what is not
    Per host everything is as on one server, since a host lives in one
    shard: dedup, delay, concurrency, leases, FIFO/LIFO. Dedup is per shard:
    two URLs with one fingerprint but different ``download_slot`` values go
    to two shards and are both accepted (on one server the second is a
    duplicate). Across shards, one worker merges the shards' prefetched
    batches by the rules of one server: highest priority, then the host it
    holds fewest requests of (its own, not other workers'), then the lower
    number. Each shard numbers the worker's adds after the highest number the
    worker has seen in any shard ("Ids across shards" in add.lua), so for one
    worker the order is exact across shards with ``ack_delay=0``; acks
    waiting in the worker count as leases on the server (as on one server),
    which makes first-in-first-out across hosts approximate otherwise. A
    shard that had nothing ready is asked again when written to, when its
    next host delay ends, and every half second (others' adds).

Writes
    An add whose batch spans shards makes one call per shard, all sent
    before any reply is read. The leases it finishes (``add_many(links,
    ack=page)``) go in a call after every child is stored (under
    `expect_pops`, with ``ack_delay``, they wait in their shards as `ack`'s
    do), so a parent's ack is never durable before its children.

Prefetch, acks riding the next write, ``ack_delay``, durability and the
self-check are those of `crawlq.stores.redis`, per shard (with `expect_pops`,
as the `Scheduler` uses it, a share of the pops). Counts, stats, hosts sum.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from ...._errors import ConfigError, StoreError
from ...._fingerprint import Fingerprinter
from ...._policy import Policy
from ...._recent import RecentlySeen
from ...base import Entry, HostList, Refetch, StoreCounts, merge_hosts, sum_counts
from ..client import redis_module
from ..config import RedisURL, Settings, parse_url
from ..store import OPTIONS as _REDIS_OPTIONS
from ..store import RedisStore
from .merge import ShardMerge
from .shards import (
    ClusterClient,
    by_lease,
    cluster_options,
    merge_stats,
    open_record,
    open_shard,
    shard_of,
)

__all__ = ["OPTIONS", "ClusterStore", "open_store"]

#: Options of the cluster store, besides the common ones.
OPTIONS: Final = (*_REDIS_OPTIONS, "shards", "replicas")

_HOST_CACHE: Final = 100_000  # hosts whose shard is remembered


def open_store(
    url: str, policy: Policy, fingerprinter: Fingerprinter, options: dict[str, Any]
) -> tuple[ClusterStore, str]:
    """Open (creating if new) the cluster crawl a ``redis+cluster://`` URL names.

    Returns the store and its URL with the password masked. Raises
    `ConfigError` for a bad URL or option, or a missing redis-py;
    `StoreUnavailable` when no node answers; `StoreError` for wrong
    credentials, a cluster that does not serve every slot, a primary older
    than Redis 7.0, or a failed self-check; `IncompatibleStore` for a crawl
    created with another shard count, ``lifo`` or Bloom settings.
    """
    location = parse_url(url)
    if not location.cluster:
        raise ConfigError(f"frontier URL {location.display!r} is not a redis+cluster:// URL")
    options = dict(options)
    shards, replicas = cluster_options(options)
    settings = Settings.from_options(options)
    redis_module()
    cluster = ClusterClient(location)
    try:
        store = ClusterStore(location, cluster, policy, fingerprinter, settings, shards, replicas)
    except BaseException:
        cluster.close()
        raise
    return store, location.display


class ClusterStore(ShardMerge):
    """A frontier sharded by host over a Redis Cluster, shared by every process on its URL.

    Use `crawlq.open_frontier` with a ``redis+cluster://`` URL. See the module
    docstring for what is exact across shards and what is not.
    """

    needs_payload = True
    durable = True
    shared = True

    def __init__(
        self,
        location: RedisURL,
        cluster: ClusterClient,
        policy: Policy,
        fingerprinter: Fingerprinter,
        settings: Settings,
        shards: int | None,
        replicas: int = 0,
    ) -> None:
        self._location = location
        self._cluster = cluster
        self.origin = f"{location.display.partition('?')[0]}#{location.prefix}"
        cluster.check(settings.retry_timeout, replicas)
        tags = open_record(location, cluster, settings.retry_timeout, shards)
        self._count = len(tags)
        if settings.bloom_capacity is not None:
            # Each shard holds its share of the crawl's fingerprints.
            share = math.ceil(settings.bloom_capacity / self._count)
            settings = replace(settings, bloom_capacity=share)
        self._shards: list[RedisStore] = []
        self._recent_watched = False
        try:
            for k, tag in enumerate(tags):
                options = (policy, fingerprinter, settings)
                self._shards.append(open_shard(location, cluster, k, tag, options, replicas))
                # One origin for the whole crawl: a lease's host names its shard.
                self._shards[-1].origin = self.origin
        except BaseException:
            for shard in self._shards:
                shard.close()
            raise
        # When each shard that had nothing ready may be asked again, and when
        # it said its next request would be ready (monotonic).
        self._due = [0.0] * self._count
        self._ready_at = [0.0] * self._count
        # Which shards had no request queued or leased when last asked.
        self._idle = [False] * self._count
        # Each shard's next request as (-priority, id), while known: a shard
        # is asked (`RedisStore.peek`) again only once this worker took its
        # head or wrote to it, and every merge._REPEEK seconds (stale batches, acks
        # due to be written).
        self._known: list[tuple[int, int, bytes] | None] = [None] * self._count
        self._repeek_at = 0.0
        self._where: dict[str | bytes, int] = {}
        # The highest request number this worker knows of (any shard): its adds' floor.
        self._mark = 0
        # Requests this worker handed out and has not acked or released, per
        # host: the fewest-leases tie-break across shards, for its own pops.
        self._held: dict[bytes, int] = {}
        # Pops the caller said follow its next write (`expect_pops`), less
        # those served since; None: not said (each shard guesses its own).
        self._left: int | None = None
        self._prefetch = settings.prefetch
        self._acks_wait = policy.ack_delay > 0

    # -- routing -----------------------------------------------------------------

    def _shard_index(self, host: str | bytes) -> int:
        where = self._where
        k = where.get(host)
        if k is None:
            if len(where) >= _HOST_CACHE:
                where.clear()
            name = host.encode() if isinstance(host, str) else host
            k = where[host] = shard_of(name, self._count)
        return k

    # -- the store protocol ----------------------------------------------------------

    def add(
        self,
        entries: Sequence[Entry],
        finished: Sequence[object] = (),
        *,
        lifo: bool | None = None,
        refetch: Sequence[Refetch | None] | None = None,
    ) -> list[bool]:
        again = by_lease(finished, refetch)
        groups: dict[int, list[int]] = {}
        for i, entry in enumerate(entries):
            groups.setdefault(self._shard_index(entry[1]), []).append(i)
        done = self._leases_by_shard(finished)
        for k in groups:
            self._touch(k)
        flags = [False] * len(entries)
        if len(groups) == 1 and len(done) <= 1 and (not done or done.keys() == groups.keys()):
            # One shard: the batch and its finished leases in one call, as on one server.
            k, indexes = next(iter(groups.items()))
            self._scatter([(k, indexes, finished)], entries, flags, lifo, again, {k})
            return flags
        # Under expect_pops (two held per shard) plain acks wait in their shards
        # (ack_delay); not otherwise: acks of held hosts give a deep batch back.
        wait = self._acks_wait and again is None and self._left is not None
        last = next(iter(done)) if len(done) == 1 and not wait else None
        # Children first, in every shard at once, then acks (a shard's last
        # call of the write leases what the pops need of it).
        self._scatter(
            [(k, indexes, ()) for k, indexes in groups.items() if k != last],
            entries,
            flags,
            lifo,
            again,
            groups.keys() if wait else groups.keys() - done.keys(),
        )
        if wait:
            self._ack(done, None)
        elif done:
            self._scatter(
                [(k, groups.get(k, []) if k == last else [], leases) for k, leases in done.items()],
                entries,
                flags,
                lifo,
                again,
                done.keys(),
            )
            for k in done:
                self._touch(k)
        return flags

    def _scatter(
        self,
        parts: list[tuple[int, list[int], Sequence[object]]],
        entries: Sequence[Entry],
        flags: list[bool],
        lifo: bool | None,
        again: dict[int, Refetch | None] | None,
        leasing: Collection[int],
    ) -> None:
        """Add each part (shard, indexes of its entries, leases it finishes) to its shard.

        Every part's call is sent before any reply is read, so the shards
        (on several nodes) work at once; their outcomes go into ``flags``.
        Every call sent has its reply read, even after a failure (unread, it
        would be taken by the next command on its connection for its own),
        then the first failure is raised. ``again`` maps a finished lease (by
        id) to its refetch; the calls to the shards in ``leasing`` lease what
        `expect_pops` asks.
        """
        shards = self._shards
        scatter = len(parts) > 1
        span = len(entries)
        started: list[tuple[int, list[int], Any, bool]] = []
        failure: BaseException | None = None
        try:
            for k, indexes, leases in parts:
                part = [entries[i] for i in indexes]
                refetch = None if again is None else [again[id(lease)] for lease in leases]
                # Numbered after the whole batch (see "Ids across shards" in add.lua);
                # refetches take numbers too: after the floor, entries or none.
                mark = bool(part) or (refetch is not None and any(refetch))
                packed = struct.pack(f">{len(indexes)}I", *indexes)
                numbering = (self._mark, packed, span) if mark else None
                if k in leasing:
                    self._expect(k)
                one = shards[k].add_start(part, leases, lifo, scatter, numbering, refetch)
                started.append((k, indexes, one, mark))
        except BaseException as exc:  # (a part that could not start: see above)
            failure = exc
        for k, indexes, one, mark in started:
            shard = shards[k]
            try:
                added = shard.add_end(one)
            except StoreError as exc:
                failure = failure or exc
                continue
            if mark:
                self._mark = max(self._mark, shard.id_mark)
            for i, flag in zip(indexes, added, strict=True):
                flags[i] = flag
        if failure is not None:
            raise failure

    def ack(
        self, leases: Sequence[object], refetch: Sequence[Refetch | None] | None = None
    ) -> None:
        self._ack(self._leases_by_shard(leases), by_lease(leases, refetch))

    def _ack(self, groups: dict[int, list[Any]], again: dict[int, Refetch | None] | None) -> None:
        for k, group in groups.items():
            shard = self._shards[k]
            self._expect(k)
            if again is None:
                shard.ack(group)
            else:  # new numbers after every request this worker knows of
                shard.ack(group, [again[id(lease)] for lease in group], self._mark)
                self._mark = max(self._mark, shard.id_mark)
            # A host at its concurrency limit may be ready again.
            self._touch(k)

    def release(
        self,
        leases: Sequence[object],
        updates: Sequence[Entry | None] | None = None,
        delays: Sequence[float] | None = None,
    ) -> None:
        update_of = dict(zip(map(id, leases), updates or (), strict=False))  # same host: shard
        delay_of = dict(zip(map(id, leases), delays or (), strict=False))
        for k, group in self._leases_by_shard(leases).items():
            self._expect(k)
            self._shards[k].release(
                group,
                updates and [update_of[id(lease)] for lease in group],
                None if delays is None else [delay_of[id(lease)] for lease in group],
            )
            self._touch(k)

    def _leases_by_shard(self, leases: Sequence[Any]) -> dict[int, list[Any]]:
        """Group leases by shard; they end, so their hosts hold one fewer each."""
        groups: dict[int, list[Any]] = {}
        held = self._held
        for lease in leases:
            host = lease[2]
            count = held.get(host, 0)
            if count > 1:
                held[host] = count - 1
            elif count:
                del held[host]
            groups.setdefault(self._shard_index(host), []).append(lease)
        return groups

    def flush(self) -> None:
        for shard in self._shards:
            shard.flush()

    def counts(self) -> StoreCounts:
        return sum_counts([shard.counts() for shard in self._shards])

    def seen(self, fingerprints: Sequence[bytes]) -> list[bool]:
        # A fingerprint's shard is its host's, which a fingerprint alone does
        # not tell: any shard that saw it counts.
        found = [False] * len(fingerprints)
        for shard in self._shards:
            for i, flag in enumerate(shard.seen(fingerprints)):
                found[i] = found[i] or flag
        return found

    def forget(self, fingerprints: Sequence[bytes]) -> int:
        return sum(shard.forget(fingerprints) for shard in self._shards)

    def recent_seen(self) -> RecentlySeen | None:
        """The first shard's `RedisStore.recent_seen`, for the whole crawl.

        A link the frontier refuses there costs no call to its own shard;
        the first shard counts the refusals (counters are summed over shards).
        """
        recent = self._shards[0].recent_seen()
        if recent is not None and not self._recent_watched:
            # A fault on any shard may have lost writes the set learnt from.
            self._recent_watched = True
            for shard in self._shards[1:]:
                shard.on_fault(recent.clear)
        return recent

    def on_fault(self, forget: Callable[[], None]) -> None:
        """Call ``forget`` on a fault of any shard's calls (see `RedisStore.on_fault`)."""
        for shard in self._shards:
            shard.on_fault(forget)

    def host_counts(self, limit: int) -> HostList:
        return merge_hosts([shard.host_counts(limit) for shard in self._shards], limit)

    def block_host(self, host: str, seconds: float | None) -> None:
        k = self._shard_index(host)
        self._shards[k].block_host(host, seconds)
        self._touch(k)  # an unblocked host may be ready now

    def set_host_policy(self, host: str, delay: float | None, concurrency: int | None) -> None:
        k = self._shard_index(host)
        self._shards[k].set_host_policy(host, delay, concurrency)
        self._touch(k)

    def host_policy(self, host: str) -> tuple[float | None, int | None]:
        return self._shards[self._shard_index(host)].host_policy(host)

    def extra_stats(self) -> dict[str, float]:
        """Store-specific figures for ``stats()``: prefetch over every shard, and the shard count.

        With Bloom dedup, the fill ratio and false-positive rate are the
        highest among the shards (each has its share of the capacity).
        """
        return merge_stats([shard.extra_stats() for shard in self._shards])

    def load_state(self) -> dict[str, Any]:
        return self._shards[0].load_state()

    def save_state(self, state: Mapping[str, Any]) -> None:
        self._shards[0].save_state(state)

    def close(self) -> None:
        """Give back every shard's unserved prefetched requests; shared data stays untouched."""
        try:
            for shard in self._shards:
                shard.close()  # never raises: a failure is logged, the leases expire
        finally:
            self._cluster.close()

    def __repr__(self) -> str:
        return f"<ClusterStore {self._location.display} shards={self._count}>"
