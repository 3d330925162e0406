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
entered. Two generations of at most `SIZE` / 2 fingerprints each, the older
dropped every `TTL` / 2 seconds or when the newer fills: no time is kept per
fingerprint, and a lookup is one or two dict probes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from typing import Final

from .stores.base import Entry

__all__ = ["RecentlySeen"]


class RecentlySeen:
    """Fingerprints a shared store holds, as it answered them in the last `TTL` seconds."""

    #: Most fingerprints kept (two generations of half as many): ~10 MB.
    SIZE: Final = 65_536
    #: Seconds a fingerprint is trusted after the store answered for it.
    TTL: Final = 30.0

    __slots__ = ("_half", "_hits", "_lock", "_new", "_old", "_turn_at", "_turn_every", "exact")

    def __init__(self, *, capped: bool, size: int = SIZE, ttl: float = TTL) -> None:
        """``capped``: the crawl has ``max_requests_per_host``, so a refusal may not mean seen."""
        self._new: dict[bytes, None] = {}
        self._old: dict[bytes, None] = {}
        self._half = max(1, size // 2)
        self._turn_every = ttl / 2
        self._turn_at = time.monotonic() + self._turn_every
        self._hits = 0
        self._lock = threading.Lock()
        #: False when a refused add may be capped, not seen: only accepted ones are learnt.
        self.exact = not capped

    def __len__(self) -> int:
        return len(self._new) + len(self._old)

    def _turn(self) -> None:
        self._old, self._new = self._new, {}
        self._turn_at = time.monotonic() + self._turn_every

    def split(self, entries: Sequence[Entry]) -> tuple[Sequence[Entry], list[int] | None]:
        """The entries the store must see, and the places of those refused here (None: none)."""
        if time.monotonic() >= self._turn_at:
            self._turn()
        new, old = self._new, self._old
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

    def discard(self, fingerprints: Iterable[bytes]) -> None:
        """Forget these fingerprints here (the store is forgetting them)."""
        new, old = self._new, self._old
        for fingerprint in fingerprints:
            new.pop(fingerprint, None)
            old.pop(fingerprint, None)

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
