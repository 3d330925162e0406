"""The SQLite job's Bloom filter of seen fingerprints, rebuilt in a thread after open.

The filter keeps most lookups of new URLs off the disk: "not in the filter"
means not seen; "in the filter" sends the lookup to the ``seen`` table. It is
built from the table in a background thread (reading through its own
read-only connection), so opening a job stays O(1); until it is ready,
lookups go to disk and new fingerprints wait in a list to join it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Final

from ..._bloom import BloomFilter

__all__ = ["SeenFilter"]

_MIN_CAPACITY: Final = 1 << 20


class SeenFilter:
    """A Bloom filter over one job's ``seen`` table, rebuilt in the background."""

    __slots__ = ("_bloom", "_path", "_pending", "_ready", "_thread")

    def __init__(self, path: Path, seen_count: int) -> None:
        self._path = path
        self._start(max(_MIN_CAPACITY, 2 * seen_count))

    def _start(self, capacity: int) -> None:
        """Build the filter from the seen table in a thread; lookups use disk until then."""
        self._bloom: BloomFilter | None = None
        self._pending: list[bytes] = []
        self._ready: BloomFilter | None = None
        self._thread = threading.Thread(
            target=self._build, args=(capacity,), name="crawlq-bloom", daemon=True
        )
        self._thread.start()

    def _build(self, capacity: int) -> None:
        bloom = BloomFilter(capacity)
        try:
            reader = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True)
            try:
                for (fingerprint,) in reader.execute("SELECT fingerprint FROM seen"):
                    bloom.add(fingerprint)
            finally:
                reader.close()
        except sqlite3.Error:
            return  # lookups simply stay on disk
        self._ready = bloom

    def now(self) -> BloomFilter | None:
        """The filter if it is ready (adopting a freshly built one), else None."""
        if self._bloom is None and self._ready is not None:
            bloom = self._ready
            bloom.update(self._pending)
            self._pending = []
            self._bloom = bloom
        return self._bloom

    def add(self, fingerprints: Collection[bytes], bloom: BloomFilter | None, seen: int) -> None:
        """Record fingerprints just committed; ``bloom`` is what `now` returned.

        A filter filled past twice its capacity is rebuilt for ``2 * seen``.
        """
        if bloom is None:
            self._pending.extend(fingerprints)
            return
        bloom.update(fingerprints)
        if len(bloom) > 2 * bloom.capacity:
            self._start(2 * seen)

    def stats(self) -> dict[str, float]:
        """The figures `FrontierStats.extra` shows."""
        bloom = self.now()
        if bloom is None:
            return {"bloom_ready": 0.0}
        return {
            "bloom_ready": 1.0,
            "bloom_capacity": float(bloom.capacity),
            "bloom_estimated_error_rate": bloom.estimated_error_rate(),
        }

    def join(self, timeout: float) -> None:
        """Wait for a build in progress (it reads the file), at most ``timeout`` seconds."""
        self._thread.join(timeout=timeout)
