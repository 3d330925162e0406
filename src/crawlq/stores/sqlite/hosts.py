"""The SQLite job's hosts in memory: each host's place in the index, and its read-ahead.

Each host with requests keeps a `Host` (a `Slot` of the board) holding the key
of its best request, a cursor into the ``requests`` index and a small
read-ahead, so a pop from disk costs one indexed query per few requests.
Requests logged since the last flush are not in the index yet: each host keeps
them in its ``fresh`` heap, so they can be handed out at once.

A key is ``(-priority, seq)``, ``seq`` being `crawlq._policy.order_key` of the
request's row id: the index's order, which is the pop order within a host.
"""

from __future__ import annotations

import sqlite3
from heapq import heappop
from typing import Final

from ..._policy import Slot

__all__ = ["LOWEST_KEY", "Fresh", "Host", "Key", "Row", "load_hosts", "revive"]

Key = tuple[int, int]  # (-priority, seq)
Row = tuple[int, int, int, bytes]  # id, -priority, seq, payload
Fresh = tuple[int, int, int, bytes]  # -priority, seq, id, payload (heap order)

_READ_AHEAD: Final = 4  # requests read from a host's index at once
#: A key no request has: the head of a host whose stored hint is unknown.
LOWEST_KEY: Final = (-(2**31) - 1, 0)


class Host(Slot):
    """A host of the job: its slot, and where its next requests are."""

    __slots__ = ("ahead", "count", "cursor", "exact", "fresh", "hidden", "id", "rewound")

    def __init__(self, name: str, host_id: int | None) -> None:
        super().__init__(name)
        #: Row id in ``hosts``; None until a flush writes the host.
        self.id = host_id
        #: Requests of this host, leased ones included, acked ones not.
        self.count = 0
        #: Index rows up to this key were handed out (or are hidden); None: none.
        self.cursor: Key | None = None
        #: The next rows after the cursor, read ahead; None: read at next pop.
        self.ahead: list[Row] | None = [] if host_id is None else None
        #: Requests logged since the last flush and not leased (a heap).
        self.fresh: list[Fresh] = []
        #: Keys of rows in the tables that must not be handed out: leased, or
        #: acked and waiting for the flush to delete them.
        self.hidden: set[Key] = set()
        #: True while some hidden rows may lie after the cursor (it moved back).
        self.rewound = False
        #: False while ``head`` is the stored hint, a lower bound of the truth.
        self.exact = host_id is None

    def improve(self, key: Key) -> None:
        """Record that a request with ``key`` is available on this host."""
        head = self.head
        if head is None or key < head:
            # Better than the best known (exact or a lower bound): exact now.
            self.head = key
            self.exact = True

    def rewind(self, key: Key) -> None:
        """A row with ``key`` is in the index and available: read from it again."""
        cursor = self.cursor
        if cursor is not None and key <= cursor:
            self.cursor = (key[0], key[1] - 1)
            self.rewound = bool(self.hidden)
        self.ahead = None

    def best(self) -> Key | None:
        """The key of the best request known in memory (read-ahead or fresh)."""
        ahead = self.ahead
        fresh = self.fresh
        disk = (ahead[0][1], ahead[0][2]) if ahead else None
        new = (fresh[0][0], fresh[0][1]) if fresh else None
        if disk is None or (new is not None and new < disk):
            return new
        return disk

    def scan(self, db: sqlite3.Connection) -> list[Row]:
        """Read the host's next requests after its cursor from the index.

        Rows are handed out in key order, so hidden rows lie at or before the
        cursor unless it moved back; then reading as many more rows as are
        hidden after it is enough.
        """
        if self.id is None:
            return []
        after = 0
        if self.rewound:
            cursor = self.cursor
            after = sum(1 for key in self.hidden if cursor is None or key > cursor)
            self.rewound = after > 0
        wanted = _READ_AHEAD + after
        if self.cursor is None:
            rows = db.execute(
                "SELECT id, negprio, seq, payload FROM requests WHERE host = ?"
                " ORDER BY negprio, seq LIMIT ?",
                (self.id, wanted),
            ).fetchall()
        else:
            rows = db.execute(
                "SELECT id, negprio, seq, payload FROM requests WHERE host = ?"
                " AND (negprio, seq) > (?, ?) ORDER BY negprio, seq LIMIT ?",
                (self.id, *self.cursor, wanted),
            ).fetchall()
        if after:
            hidden = self.hidden
            rows = [row for row in rows if (row[1], row[2]) not in hidden]
        return rows[:_READ_AHEAD]

    def next_row(self, db: sqlite3.Connection) -> tuple[Row, bool] | None:
        """The row of the host's best available request, and whether it is from disk.

        None if the host has no available request. Reads ahead from the index
        when the read-ahead is empty.
        """
        if self.ahead is None:
            self.ahead = self.scan(db)
        ahead = self.ahead
        fresh = self.fresh
        if ahead and (not fresh or (ahead[0][1], ahead[0][2]) < fresh[0][:2]):
            return ahead[0], True
        if fresh:
            negprio, seq, row_id, payload = fresh[0]
            return (row_id, negprio, seq, payload), False
        return None

    def take_row(self, db: sqlite3.Connection, key: Key, from_disk: bool) -> None:
        """Remove the row `next_row` returned from what the host holds; set its new head."""
        if from_disk:
            ahead = self.ahead
            assert ahead is not None
            del ahead[0]
            self.cursor = key
            if not ahead:
                self.ahead = self.scan(db)
        else:
            heappop(self.fresh)
        self.head = self.best()
        self.exact = True


def load_hosts(db: sqlite3.Connection) -> list[tuple[Host, int]]:
    """Make the hosts that have stored requests, filed by their stored head hint.

    Returns each host with its row id. The stored head is never worse than the
    truth (an add improves it, a pop or an ack does not worsen it), so filing
    a host by it keeps the order; its first pop corrects it. Reads only the
    ``hosts`` rows: O(1) in queued requests.
    """
    hosts = []
    rows = db.execute(
        "SELECT id, name, queued, ready_at, head_negprio, head_seq FROM hosts WHERE queued > 0"
    )
    for host_id, name, queued, ready_at, head_negprio, head_seq in rows:
        host = Host(name, host_id)
        host.count = queued
        host.ready_at = ready_at
        host.head = (head_negprio, head_seq) if head_negprio is not None else LOWEST_KEY
        hosts.append((host, host_id))
    return hosts


def revive(db: sqlite3.Connection, name: str, host_id: int | None) -> Host:
    """Make the in-memory host for a name that has no requests now.

    Its pacing time comes from its row, if it has one: a host that was idle
    when the job was opened still waits out its delay.
    """
    if host_id is None:
        row = db.execute("SELECT id, ready_at FROM hosts WHERE name = ?", (name,)).fetchone()
    else:
        row = db.execute("SELECT id, ready_at FROM hosts WHERE id = ?", (host_id,)).fetchone()
    host = Host(name, row[0] if row is not None else host_id)
    host.ahead = []  # no rows of it in the index: it had no requests
    host.exact = True
    host.ready_at = row[1] if row is not None else 0.0
    return host
