"""`RecentlySeen`: fingerprints a shared store said it holds, refused here without asking it.

Most links a crawl offers are links to pages it has met already (a site's
navigation, say). On Redis each one costs the shared server a dedup lookup in
a function call, and on a cluster often a call to a shard of its own. A
frontier on such a store keeps the fingerprints its store recently answered
for (recorded as new, or refused as seen) and refuses them itself.

It is exact within its limits: a fingerprint enters only once the store has
recorded it, and the store keeps a fingerprint until ``forget()`` (a crawl
whose dedup expires, ``seen_ttl``, gets no such set). A `forget` through this
frontier drops the fingerprints here too; one made by another process reaches
this one when the fingerprint leaves this set: at most `TTL` seconds after it
entered. A fault on the store's connection (see ``Link.on_fault`` in the
Redis store) empties the set: the server may have lost the writes it learnt
from. Two generations of at most `SIZE` / 2 fingerprints each, the older
dropped every `TTL` / 2 seconds or when the newer fills: no time is kept per
fingerprint, and a lookup is one or two dict probes (`Generations`, which the
Scrapy scheduler's own set uses too).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import Final

from .stores.base import Entry

__all__ = ["Generations", "RecentlySeen"]


class Generations:
    """Fingerprints kept for at most ``ttl`` seconds after they entered, ``size`` at most.

    Two generations of at most ``size`` / 2 each: the newer takes what is
    added; every ``ttl`` / 2 seconds, or when it fills, it becomes the older
    and the older is dropped. No time is kept per fingerprint, and a lookup
    is one or two dict probes. Turns happen at lookups and adds: one that
    comes late turns on the schedule it missed, and after a whole period
    without one, both generations are dropped, so nothing outlives ``ttl``.
    """

    __slots__ = ("_half", "_new", "_old", "_turn_at", "_turn_every")

    def __init__(self, size: int, ttl: float) -> None:
        self._new: dict[bytes, None] = {}
        self._old: dict[bytes, None] = {}
        self._half = max(1, size // 2)
        self._turn_every = ttl / 2
        self._turn_at = time.monotonic() + self._turn_every

    def __len__(self) -> int:
        return len(self._new) + len(self._old)

    def __contains__(self, fingerprint: bytes) -> bool:
        if time.monotonic() >= self._turn_at:
            self._turn()
        return fingerprint in self._new or fingerprint in self._old

    def _turn(self) -> None:
        now, due = time.monotonic(), self._turn_at
        if now >= due + self._turn_every:  # the newer's first are a whole ttl old, or more
            self._old, self._new = {}, {}
            self._turn_at = now + self._turn_every
            return
        self._old, self._new = self._new, {}
        # (A late turn keeps the schedule: what the older holds goes ttl
        # after its generation began, at the latest.)
        self._turn_at = min(now, due) + self._turn_every

    def generations(self) -> tuple[dict[bytes, None], dict[bytes, None]]:
        """The newer and the older generation, turned first if due (for loops of lookups)."""
        if time.monotonic() >= self._turn_at:
            self._turn()
        return self._new, self._old

    def add(self, fingerprint: bytes) -> None:
        new = self._new
        new[fingerprint] = None
        if len(new) >= self._half:
            self._turn()

    def clear(self) -> None:
        """Drop every fingerprint (the store they were learnt from may have lost them)."""
        self._new, self._old = {}, {}

    def discard(self, fingerprints: Iterable[bytes]) -> None:
        """Drop these fingerprints."""
        new, old = self._new, self._old
        for fingerprint in fingerprints:
            new.pop(fingerprint, None)
            old.pop(fingerprint, None)


class RecentlySeen(Generations):
    """Fingerprints a shared store holds, as it answered them in the last `TTL` seconds."""

    #: Most fingerprints kept (two generations of half as many): ~10 MB.
    SIZE: Final = 65_536
    #: Seconds a fingerprint is trusted after the store answered for it.
    TTL: Final = 30.0

    __slots__ = ("_hits", "_lock", "exact")

    def __init__(self, *, capped: bool, size: int = SIZE, ttl: float = TTL) -> None:
        """``capped``: the crawl has ``max_requests_per_host``, so a refusal may not mean seen."""
        super().__init__(size, ttl)
        self._hits = 0
        self._lock = threading.Lock()
        #: False when a refused add may be capped, not seen: only accepted ones are learnt.
        self.exact = not capped

    def split(self, entries: Sequence[Entry]) -> tuple[Sequence[Entry], list[int] | None]:
        """The entries the store must see, and the places of those refused here (None: none)."""
        new, old = self.generations()
        known: list[int] | None = None
        sent: list[Entry] = []
        for place, entry in enumerate(entries):
            fingerprint = entry[0]
            if (fingerprint in new or fingerprint in old) and not entry[2].dont_filter:
                if known is None:
                    known = [place]
                else:
                    known.append(place)
            else:
                sent.append(entry)
        if known is None:
            return entries, None
        with self._lock:
            self._hits += len(known)
        return sent, known

    def learn(self, entries: Sequence[Entry], added: Sequence[bool]) -> None:
        """Record what the store answered for ``entries`` (True: added)."""
        new = self._new
        exact, half = self.exact, self._half
        for entry, flag in zip(entries, added, strict=True):
            if (flag or exact) and not entry[2].dont_filter:
                new[entry[0]] = None
                if len(new) >= half:
                    self._turn()
                    new = self._new

    @staticmethod
    def merge(added: Sequence[bool], known: list[int], size: int) -> list[bool]:
        """The outcome of a whole batch of ``size``: ``added`` for the sent, False at ``known``."""
        result = list(added)
        for place in known:  # (ascending: each lands where the batch had it)
            result.insert(place, False)
        return result

    def take_hits(self) -> int:
        """Requests refused here since the last call: the store counts them as duplicates."""
        with self._lock:
            hits, self._hits = self._hits, 0
        return hits

    def give_back_hits(self, hits: int) -> None:
        """Keep ``hits`` taken by `take_hits` for the next time (the store could not count them)."""
        with self._lock:
            self._hits += hits

    @property
    def hits(self) -> int:
        """Requests refused here and not yet handed to the store's counters."""
        return self._hits
