"""The SQLite job's leases: held in memory only, so pop and release write nothing.

After a crash every request that was not acked is queued again, which is what
a lease ending means, so a lease needs no disk write (a release with an
update or a delay writes that, not the lease: see `finishing`). A lease's handle is
a `Lease` ``(store, row id, -priority, seq, host, origin)``; the current lease of a row is the
very handle tuple held for it, so an older handle of the same row (released or
expired, then leased again) is told apart by identity, and one handed out
before the job was reopened by its store.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..._lease import Lease, LeaseDeadlines, new_lease
from ..._policy import Board
from .hosts import Host, Key

__all__ = ["Handle", "Leases"]

Handle = Lease  # store, row id, -priority, seq, host, origin


class Leases:
    """The leased rows of one open job, and when each lease ends."""

    __slots__ = ("_held", "deadlines")

    def __init__(self, lease_timeout: float) -> None:
        self._held: dict[int, Handle] = {}  # row id -> its current lease
        self.deadlines = LeaseDeadlines(lease_timeout, self._held, 1)

    def take(self, owner: Any, host: Host, row_id: int, key: Key, now: float) -> Handle:
        """Lease a row of ``host``; return its lease."""
        handle = new_lease(Lease, (owner, row_id, key[0], key[1], host, owner.origin))
        self._held[row_id] = handle
        host.hidden.add(key)
        self.deadlines.add(handle, now)
        return handle

    def current(self, handles: Iterable[Handle]) -> list[int]:
        """Row ids of the handles that still name their lease; ended ones are dropped."""
        held = self._held
        return [handle[1] for handle in handles if held.get(handle[1]) is handle]

    def end(self, row_id: int) -> tuple[Key, Host]:
        """End the lease of a row (acked, released or expired); return its key and host."""
        _, _, negprio, seq, host, _ = self._held.pop(row_id)
        host.leased -= 1
        return (negprio, seq), host

    def handle(self, row_id: int) -> Handle:
        """The current lease of a leased row (KeyError if it is not leased)."""
        return self._held[row_id]

    def key_of(self, row_id: int) -> Key | None:
        """The key a row is leased under now; None if it is not leased."""
        handle = self._held.get(row_id)
        return None if handle is None else (handle[2], handle[3])

    def expired(self, now: float) -> list[int]:
        """Row ids whose lease deadline has passed, oldest first (still held)."""
        return [handle[1] for handle in self.deadlines.expired(now)]

    def ack_records(self, row_ids: list[int], board: Board) -> list[tuple[int, str, float]]:
        """The log's ack items: each carries its host's pacing time, so a crash keeps it.

        A blocked host's pacing time is the one its block put aside (`Board.pace`).
        """
        held = self._held
        if board.blocks:
            pace = board.pace
            return [(row_id, h.name, pace(h)) for row_id in row_ids for h in (held[row_id][4],)]
        return [(row_id, h.name, h.ready_at) for row_id in row_ids for h in (held[row_id][4],)]

    def trim(self) -> None:
        """Drop deadlines of ended leases (bounded memory)."""
        self.deadlines.trim()

    def __len__(self) -> int:
        return len(self._held)
