"""Adds of links alone, and a worker's own counts (mixins of `RedisStore`).

`LeanAdds`: an add that carries links and nothing else (no lease to end, no
request to lease beyond the batch held) is a lean call of the ``add_links``
function (``lua/links.lua``): a packed header and the entries, not add's
eighteen arguments and frame. `WorkerCounts`: what a worker counts itself and
sends once a second (per-host accepted counts, links refused from its
recently seen set).
"""

from __future__ import annotations

import os
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..._recent import RecentlySeen
from ..._request import Request
from ..base import Entry
from .calls import Pending
from .wire import pack_blob

if TYPE_CHECKING:
    from .conn import Link
    from .open import Dedup

__all__ = ["LeanAdds", "PendingAdd", "WorkerCounts"]

#: An add begun by `RedisStore.add_start`: its call, its entries, whether it
#: carried the acks waiting, the finished leases' arguments left for later
#: calls with their hosts, mode and head (see `Finishing._finish_pairs`),
#: whether it was numbered for a cluster, and whether it is a lean call
#: (add_links: links alone, its reply the outcome alone).
PendingAdd = tuple[
    Pending,
    Sequence[Entry],
    bool,
    list[bytes],
    set[bytes],
    tuple[bytes, int, list[bytes]],
    bool,
    bool,
]


class LeanAdds:
    """The lean add path of `crawlq.stores.redis.RedisStore`."""

    if TYPE_CHECKING:
        _buffer: deque[tuple[Request, bytes]]
        _waiting: list[bytes]
        _lost: int | None
        _suspect: bool
        _pid: int
        _policy_numbers: tuple[int, int, int, int]
        _bloom_bits: int
        _bloom_hashes: int
        _cap: int
        _ttl_ms: int | None

        def _stale(self) -> bool: ...
        def _links_start(
            self, flags: int, header: Sequence[Any], tail: list[bytes], refill: int, send: bool
        ) -> Pending: ...

    def _lean(self, entries: Sequence[Entry], finished: Sequence[object], refill: int) -> bool:
        """Whether an add of ``entries`` can be a lean call (add_links, lua/links.lua).

        When it carries links alone: no lease to end (``finished``, acks
        waiting), nothing to lease after it (``refill`` no more than the
        prefetched requests held), no unanswered call whose leases to give
        back, and no prefetched request to give back whatever the links
        (a stale or suspect batch). The function still gives the batch back
        when a link it accepts comes before the batch's last request.
        """
        if not entries or finished or self._waiting or self._lost is not None or self._suspect:
            return False
        if os.getpid() != self._pid:
            return False  # a forked copy: add renews its owner and forgets the batch first
        buffer = self._buffer
        return refill <= len(buffer) and not (buffer and self._stale())

    def _links_start_add(
        self,
        entries: Sequence[Entry],
        lifo: bool,
        send: bool,
        numbering: tuple[int, bytes, int] | None,
        refill: int,
    ) -> PendingAdd:
        """`add_start` as a lean call: the links alone (see `_lean`)."""
        blob, dues = pack_blob(entries)
        tail = [blob]
        flags = (1 if lifo else 0) | (4 if dues else 0)
        floor = span = 0
        if numbering is not None:
            floor, offsets, span = numbering
            flags |= 2
            tail.append(offsets)
        if dues:
            tail.append(dues)
        ttl = self._ttl_ms
        if ttl is not None:
            flags |= 8
        header = (
            self._policy_numbers[2],
            self._bloom_bits,
            self._bloom_hashes,
            len(entries),
            self._cap,
            ttl or 0,
            floor,
            span,
        )
        pending = self._links_start(flags, header, tail, refill, send)
        return pending, entries, False, [], set(), (b"a", 2, []), numbering is not None, True


class WorkerCounts:
    """Counts a `crawlq.stores.redis.RedisStore` worker keeps and sends once a second."""

    if TYPE_CHECKING:
        _dedup: Dedup
        _recent: RecentlySeen | None
        _host_accepted: Counter[str] | None
        _host_accepted_at: float
        _prefix: bytes
        _link: Link
        _fault_listeners: list[Callable[[], None]]
        _buffer: deque[tuple[Request, bytes]]
        _suspect: bool
        _faults: int

    def recent_seen(self) -> RecentlySeen | None:
        """The fingerprints the frontier may refuse without a call (see ``crawlq._recent``).

        None for a crawl whose dedup expires (``seen_ttl``): a fingerprint
        seen a moment ago may be new again now. The requests refused there
        are counted as duplicates with this worker's per-host counts, once a
        second, and in `counts` at once.
        """
        if self._dedup.timed:
            return None
        if self._recent is None:
            self._recent = RecentlySeen(capped=self._host_accepted is None)
            self.on_fault(self._recent.clear)
        return self._recent

    def on_fault(self, forget: Callable[[], None]) -> None:
        """Call ``forget`` each time a call meets a fault that may have lost writes.

        A lost connection, a timeout or a failover may mean the server lost
        writes it had acknowledged (see `Link.on_fault`): what a cache learnt
        from them must go, or a page that comes back would have its links
        refused from memory of a state the server no longer has.
        """
        self._fault_listeners.append(forget)

    def _faulted(self) -> None:
        self._faults += 1
        if self._buffer:
            # Their leases may be gone with the server's last writes, their
            # requests queued for other workers: given back, not served.
            self._suspect = True
        for forget in self._fault_listeners:
            forget()

    def _send_host_accepted(self) -> None:
        """Add this worker's per-host accepted counts and its own refusals to the crawl's.

        One round trip. A request the frontier refused from `recent_seen`
        was offered and is a duplicate: read.lua counts duplicates as seq -
        seq0 - the rest, so they lower seq0 (seq numbers requests).
        """
        counts = self._host_accepted
        self._host_accepted_at = time.monotonic()
        hits = 0 if self._recent is None else self._recent.take_hits()
        commands = []
        if counts:
            key = self._prefix + b"accepted"
            commands = [(b"HINCRBY", key, host.encode(), b"%d" % n) for host, n in counts.items()]
        if hits:
            commands.append((b"HINCRBY", self._prefix + b"meta", b"seq0", b"%d" % -hits))
        if not commands:
            return
        try:
            self._link.commands(commands, "counting accepted requests")
        except BaseException:
            if self._recent is not None:
                self._recent.give_back_hits(hits)
            raise
        if counts:
            counts.clear()
