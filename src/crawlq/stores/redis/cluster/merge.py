"""The cluster store's merge of its shards' heads: pops in order, and when to ask a shard.

`ShardMerge` is `ClusterStore`'s pop side: each pop compares the shards'
next requests (peeked, so leased in their batches) and hands out the first
by priority, then the host this worker holds fewest of, then number; a
shard with nothing ready is asked again after `_POLL` seconds (or when its
next request is due), one this worker wrote to at its next pop.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

from ...._request import Request

if TYPE_CHECKING:
    from ..store import RedisStore

__all__ = ["ShardMerge"]

#: Seconds before a shard that had nothing ready is asked again (unless written
#: to, or a delay ends sooner): how late this worker sees others' adds there.
_POLL: Final = 0.5
_LIFO_TOP: Final = 999_999_999_999_999  # ids: FIFO ones count up from 0, LIFO ones down
_FIFO_IDS: Final = _LIFO_TOP // 2
_REPEEK: Final = 0.25  # seconds between two looks at every shard's batch, known or not
#: Requests a shard leases at least for pops a caller said follow (`ShardMerge.expect_pops`).
_DEPTH: Final = 1


class ShardMerge:
    """Pops across shards in order, and the waits of shards with nothing ready."""

    if TYPE_CHECKING:
        _shards: list[RedisStore]
        _count: int
        _due: list[float]
        _ready_at: list[float]
        _idle: list[bool]
        _known: list[tuple[int, int, bytes] | None]
        _repeek_at: float
        _mark: int
        _held: dict[bytes, int]
        _left: int | None
        _prefetch: int

    def pop(self) -> Request | None:
        """The first of the shards' heads, leased; None when no shard has one ready.

        A head goes out only from a shard whose batch is not stale (leased
        less than half a lease ago and, with a host delay, held no longer
        than `RedisStore.pop` serves): a peek of another shard may have
        waited out an outage (a failover) since this head was peeked, and
        its lease may have ended meanwhile. Such a shard is peeked again
        (its batch leased afresh), once per shard and twice more at most.
        """
        for _ in range(self._count + 2):
            best_k, best = self._best()
            if best is None:
                return None
            if not self._shards[best_k]._stale():
                return self._take(best_k, best)
            self._known[best_k] = None
        return None

    def _best(self) -> tuple[int, tuple[int, int, bytes] | None]:
        """The shard whose head comes first, and its merge key (None: nothing ready)."""
        best_k = -1
        best: tuple[int, int, bytes] | None = None
        now = time.monotonic()
        if now >= self._repeek_at:
            self._known = [None] * self._count
            self._repeek_at = now + _REPEEK
        known, due, shards = self._known, self._due, self._shards
        for k in range(self._count):
            key = known[k]
            if key is None:
                if due[k] > now:
                    continue
                if self._left is not None:
                    self._expect(k)
                head = shards[k].peek()
                if head is None:
                    self._asked_empty(k, now)
                    continue
                # Highest priority first; among equals, the host this worker
                # holds fewest requests of (handed out, not yet acked), then
                # the lower number: first in, first out (see add.lua).
                lease = head._lease
                held = self._held.get(lease[2], 0)  # type: ignore[index]
                key = known[k] = (-head.priority, held, lease[0])  # type: ignore[index]
            if best is None or key < best:
                best, best_k = key, k
        return best_k, best

    def _take(self, best_k: int, best: tuple[int, int, bytes]) -> Request:
        """Hand out shard ``best_k``'s head, the merge's first (`_best`)."""
        shards = self._shards
        self._known[best_k] = None
        if self._left:
            self._left -= 1
        request = shards[best_k].take()
        host = request._lease[2]  # type: ignore[index]
        self._held[host] = self._held.get(host, 0) + 1
        # Number this worker's next adds after every request it has seen.
        n = int(best[2])
        if n > _FIFO_IDS:
            n = _LIFO_TOP - n  # a LIFO id counts down from the top
        if n > self._mark:
            self._mark = n
        return request

    def expect_pops(self, count: int | None) -> None:
        """Have the next changing calls lease what ``count`` pops need, shard by shard.

        `RedisStore.expect_pops` over shards: a shard's last call of a write,
        and a shard the merge looks at again, lease its share of the pops
        (``count`` over the shard count), at least its head (`_DEPTH`). Less,
        few shards cost a call per two pops (3 shards: 0.6 calls a page, 0.3);
        more is mostly given back when a write brings a better one (A1, 16
        shards: 6.4% fewer server instructions). None: each guesses again.
        """
        self._left = None if count is None else min(count, self._prefetch)
        for shard in self._shards:
            shard.expect_pops(None)  # said for the caller's next calls only

    def _expect(self, k: int) -> None:
        """Tell shard ``k`` how many requests its next call leases (see `expect_pops`)."""
        left = self._left
        if left is not None:  # a share of the pops, at least its head
            self._shards[k].expect_pops(min(left, max(_DEPTH, -(-left // self._count))))

    def _touch(self, k: int) -> None:
        """Shard ``k`` changed by this worker: ask it again at the next pop."""
        self._due[k] = 0.0
        self._known[k] = None

    def _asked_empty(self, k: int, now: float) -> None:
        """Note when shard ``k``, which had nothing ready, is worth asking again."""
        wait = self._shards[k].next_ready_in()
        self._idle[k] = wait is None
        self._ready_at[k] = now + (wait or 0.0)
        self._due[k] = now + (_POLL if wait is None else min(wait, _POLL))

    def next_ready_in(self) -> float | None:
        now = time.monotonic()
        soonest: float | None = None
        for k, shard in enumerate(self._shards):
            if shard._buffer and not shard._expired():
                return 0.0  # (held past their hold, a peek leases them afresh)
            if self._due[k] <= now:
                self._asked_empty(k, now)
            if self._idle[k]:
                continue
            wait = max(0.0, self._ready_at[k] - now)
            soonest = wait if soonest is None else min(soonest, wait)
        return soonest
