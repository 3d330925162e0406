"""How the Redis store ends leases: acks, refetches and releases (a mixin of `RedisStore`).

Every lease ends in a call of the ``ack_or_release`` function
(``lua/ack_or_release.lua``), or rides an add (``add_many(ack=)``). Plain
acks wait up to ``ack_delay`` to ride the store's next call; an ack that
refetches (schedules the request again, ``lua/due.lua``) and a release go at
once, so what they schedule is stored when they return, and the acks
waiting go first in the same call (a release sends them in a call of their
own first).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ..._request import Request
from ..base import Entry, Refetch
from .tuples import lease_pairs, plain_tuples, refetch_tuples, release_tuples, update_quads

__all__ = ["FINISH_CHUNK", "Finishing", "finish_items"]

#: Leases per call at most: Lua unpacks their arguments onto its stack.
FINISH_CHUNK: Final = 1000


def finish_items(
    leases: Sequence[object],
    refetch: Sequence[Refetch | None] | None,
    waiting: list[bytes],
    waiting_hosts: set[bytes],
) -> tuple[list[bytes], set[bytes], int]:
    """The arguments that end ``leases`` (the ``waiting`` acks first), their hosts, their stride.

    (id, token) pairs (stride 2) for plain acks; (id, token, delay, score,
    payload) tuples (stride 5) when some lease refetches (see finish_tuples
    in due.lua).
    """
    if refetch is not None and any(again is not None for again in refetch):
        items, hosts = refetch_tuples(leases, refetch)
        if waiting:
            items = plain_tuples(waiting) + items
            hosts |= waiting_hosts
        return items, hosts, 5
    items, hosts = lease_pairs(leases)
    if waiting:
        items = waiting + items
        hosts |= waiting_hosts
    return items, hosts, 2


class Finishing:
    """Acks, refetches and releases of `crawlq.stores.redis.RedisStore`."""

    if TYPE_CHECKING:
        _ack_delay: float
        _acks_since: float
        _buffer: deque[tuple[Request, bytes]]
        _waiting: list[bytes]
        _waiting_hosts: set[bytes]
        id_mark: int

        def _call(
            self, function: bytes, refill: int, force: bool, extra: Sequence[bytes], doing: str
        ) -> list[Any]: ...
        def _refill(self, finishing: bool) -> int: ...
        def _stale(self) -> bool: ...

    def _finish(self, mode: bytes, leases: Sequence[object], doing: str) -> None:
        pairs, hosts = lease_pairs(leases)
        self._finish_pairs(mode, pairs, hosts, doing)

    def _finish_pairs(
        self,
        mode: bytes,
        pairs: list[bytes],
        hosts: set[bytes],
        doing: str,
        stride: int = 2,
        head: Sequence[bytes] = (),
    ) -> None:
        """End leases in calls of at most `FINISH_CHUNK` (``stride`` arguments each).

        ``head`` goes between the count and the leases (a refetch's floor,
        'f' mode); a cluster shard's refetches then reply its new number
        mark, kept in ``id_mark``.
        """
        for start in range(0, len(pairs), stride * FINISH_CHUNK):
            chunk = pairs[start : start + stride * FINISH_CHUNK]
            buffer = self._buffer
            # A prefetched request of an acked host was picked with that host's
            # old lease count: its place may change, so give the batch back.
            force = bool(buffer) and (self._stale() or any(h in hosts for _, h in buffer))
            extra = [mode, b"%d" % (len(chunk) // stride), *head, *chunk]
            reply = self._call(b"ack_or_release", self._refill(True), force, extra, doing)
            if head and reply[0]:
                self.id_mark = int(reply[0][1:])  # b":" .. mark

    def ack(
        self,
        leases: Sequence[object],
        refetch: Sequence[Refetch | None] | None = None,
        floor: int | None = None,
    ) -> None:
        """Finish these leases; ``refetch`` (one per lease) schedules some again.

        Plain acks wait for ``ack_delay`` (see the store); refetches go now,
        with the acks waiting. ``floor`` (a cluster shard's): the number the
        refetches' new numbers come after (see "Ids across shards" in add.lua).
        """
        if refetch is not None:
            items, hosts, stride = finish_items(leases, refetch, self._waiting, self._waiting_hosts)
            if stride == 5:
                head = [b"" if floor is None else b"%d" % floor]
                self._finish_pairs(b"f", items, hosts, "acking", 5, head)
                self._waiting, self._waiting_hosts = [], set()
                return
        if self._ack_delay <= 0.0:
            self._finish(b"a", leases, "acking")
            return
        pairs, hosts = lease_pairs(leases)
        waiting = self._waiting
        now = time.monotonic()
        if not waiting:
            self._acks_since = now
        waiting.extend(pairs)
        self._waiting_hosts |= hosts
        if len(waiting) >= 2 * FINISH_CHUNK or now - self._acks_since >= self._ack_delay:
            self.flush()

    def flush(self) -> None:
        if self._waiting:
            self._finish_pairs(b"a", self._waiting, self._waiting_hosts, "acking")
            self._waiting, self._waiting_hosts = [], set()

    def release(
        self,
        leases: Sequence[object],
        updates: Sequence[Entry | None] | None = None,
        delays: Sequence[float] | None = None,
    ) -> None:
        self.flush()
        if delays is not None and any(delay > 0 for delay in delays):
            # Held for their delays (due.lua), updates applied, in one call.
            tuples, hosts = release_tuples(leases, updates, delays)
            self._finish_pairs(b"d", tuples, hosts, "releasing", 5)
        elif updates is None:
            self._finish(b"r", leases, "releasing")
        else:  # payloads replaced in the call that releases (release_updated in leases.lua)
            quads, hosts = update_quads(leases, updates)
            self._finish_pairs(b"u", quads, hosts, "releasing", 4)
