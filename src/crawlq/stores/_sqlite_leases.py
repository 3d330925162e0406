"""The SQLite job's leases: held in memory only, so pop and release write nothing.

After a crash every request that was not acked is queued again, which is what
a lease ending means, so a lease needs no disk write. A lease's handle is
``(store, row id, lease number)``: the number tells a current lease from an
older one of the same row (released or expired, then leased again), and the
store tells a lease of this opening of the job from one handed out before it
was reopened.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._policy import LeaseDeadlines
from ._sqlite_hosts import Host, Key

__all__ = ["Leases"]


class Leases:
    """The leased rows of one open job, and when each lease ends."""

    __slots__ = ("_held", "_numbers", "deadlines")

    def __init__(self, lease_timeout: float) -> None:
        # row id -> (lease number, -priority, seq, host)
        self._held: dict[int, tuple[int, int, int, Host]] = {}
        self._numbers = 0
        self.deadlines = LeaseDeadlines(lease_timeout, self._current)

    def _current(self, handle: tuple[Any, int, int]) -> bool:
        held = self._held.get(handle[1])
        return held is not None and held[0] == handle[2]

    def take(self, owner: object, host: Host, row_id: int, key: Key, now: float) -> tuple[Any, ...]:
        """Lease a row of ``host``; return its handle."""
        self._numbers += 1
        number = self._numbers
        self._held[row_id] = (number, key[0], key[1], host)
        host.hidden.add(key)
        handle = (owner, row_id, number)
        self.deadlines.add(handle, now)
        return handle

    def current(self, handles: Sequence[tuple[Any, int, int]]) -> list[int]:
        """Row ids of the handles that still name their lease; stale ones are dropped."""
        held = self._held
        out = []
        for handle in handles:
            entry = held.get(handle[1])
            if entry is not None and entry[0] == handle[2]:
                out.append(handle[1])
        return out

    def end(self, row_id: int) -> tuple[Key, Host]:
        """End the lease of a row (acked, released or expired); return its key and host."""
        _, negprio, seq, host = self._held.pop(row_id)
        host.leased -= 1
        return (negprio, seq), host

    def expired(self, now: float) -> list[int]:
        """Row ids whose lease deadline has passed, oldest first (still held)."""
        return [handle[1] for handle in self.deadlines.expired(now)]

    def ack_records(self, row_ids: list[int]) -> list[tuple[int, str, float]]:
        """The log's ack items: each carries its host's pacing time, so a crash keeps it."""
        held = self._held
        return [
            (row_id, host.name, host.ready_at) for row_id in row_ids for host in (held[row_id][3],)
        ]

    def trim(self) -> None:
        """Drop deadlines of ended leases (bounded memory)."""
        self.deadlines.trim(len(self._held))

    def __len__(self) -> int:
        return len(self._held)
