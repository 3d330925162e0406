"""The SQLite job's acks and releases: plain, with an update, with a delay, with a refetch.

Leases live in memory (`leases`), so a plain release writes nothing and an
ack waits for the next write (``ack_delay``). What must outlive a kill is
logged and committed before the call returns, in the one ordered stream of
writes (`Scheduling._log`), after the acks waiting:

- a release with an update (`log.UPDATE`: the row's new priority and
  payload, its seq kept). The flush then rewrites the row (or, for a row
  added since the last flush, the add it replaces). Until that flush the
  row's old index entry stays hidden and the updated request waits in its
  host's ``fresh`` heap;
- a release with a delay (`log.DELAY`: its priority and payload, the
  update's if any, its seq kept): the request leaves its host, scheduled
  (see `due`); the flush moves its row to the ``scheduled`` table, and its
  index entry stays hidden until then;
- an ack with a refetch (`log.ACK`, then `log.REFETCH`): the row is acked
  and a new row, in a new seq taken now, is scheduled with what was stored of
  it (or the update). A refetch is written before the ack returns, whatever
  ``ack_delay`` says.

Ended leases are skipped, their update, delay or refetch included.
"""

from __future__ import annotations

from heapq import heappush
from typing import TYPE_CHECKING, Any

from ..._policy import order_key
from . import log
from .hosts import Host, Key

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ..._policy import Board
    from ..base import Entry, Refetch
    from .due import Waiting
    from .leases import Leases

__all__ = ["Finishing"]

# A leased request's refetch: (row id, delay, update or None).
_Again = tuple[int, float, "Entry | None"]


class Finishing:
    """Acks and releases of `SqliteStore` (a mixin: the store's ``__init__`` sets the state)."""

    if TYPE_CHECKING:
        _ack_delay: float
        _acks_since: float
        _board: Board
        _clock: Callable[[], float]
        _leases: Leases
        _lifo: bool
        _next_id: int
        _refetched: int
        _released: int
        _expiries: int
        _rows: int
        _unflushed: dict[int, bytes]
        _unflushed_acks: dict[int, tuple[Host, Key]]
        _unflushed_delays: dict[int, tuple[Host, Key]]
        _updated: dict[int, tuple[bytes, Host, Key]]
        _waiting_acks: list[tuple[int, str, float]]

        def _check_open(self) -> None: ...
        def _log(self, *records: log.Record) -> None: ...
        def _after_write(self, now: float) -> None: ...
        def _flush_if_full(self, now: float) -> None: ...
        def _housekeep(self, write: Callable[[float], None], now: float) -> None: ...
        def _save_totals(self, now: float) -> None: ...
        def _schedule(self, waiting: Waiting) -> None: ...
        def _stored_payload(self, row_id: int) -> bytes: ...

    # -- acking -----------------------------------------------------------------

    def _current(self, leases: Sequence[Any]) -> list[int]:
        """Row ids of the handles that still name their lease; ended ones are dropped.

        A handle of an earlier opening of this job names a lease that ended
        when that opening closed.
        """
        return self._leases.current([lease for lease in leases if lease[0] is self])

    def ack(
        self, leases: Sequence[object], refetch: Sequence[Refetch | None] | None = None
    ) -> None:
        self._check_open()
        if refetch is not None:
            self._ack_refetching(leases, refetch)
            return
        row_ids = self._current(leases)
        if not row_ids:
            return
        records = self._leases.ack_records(row_ids, self._board)
        now = self._clock()
        if self._ack_delay <= 0.0:
            self._log((log.ACK, records, None))
            self._acked(row_ids, now)
            self._after_write(now)
            return
        # The ack waits for the next write; memory changes now, since a
        # lost ack only hands the request out again (at-least-once).
        if not self._waiting_acks:
            self._acks_since = now
        self._waiting_acks.extend(records)
        self._acked(row_ids, now)
        if now - self._acks_since >= self._ack_delay:
            self._housekeep(self._write_acks, now)  # a full disk: they wait on
        else:
            self._flush_if_full(now)

    def _write_acks(self, now: float) -> None:
        """Log the waiting acks in a commit of their own (their delay is up, or a flush).

        If it raises (`StoreFull`), the acks are still waiting.
        """
        self._log((log.ACK, self._waiting_acks, None))
        self._waiting_acks = []
        self._after_write(now)

    def _acks_due(self, now: float) -> None:
        if self._waiting_acks and now - self._acks_since >= self._ack_delay:
            self._housekeep(self._write_acks, now)  # a full disk: they wait on

    def flush(self) -> None:
        self._check_open()
        now = self._clock()
        if self._waiting_acks:
            self._write_acks(now)  # StoreFull: the acks stay waiting
        self._housekeep(self._save_totals, now)  # statistics: not what flush promises

    def _acked(self, row_ids: list[int], now: float) -> None:
        """Update memory after the acks of ``row_ids`` were logged."""
        touched: set[Host] = set()
        unflushed = self._unflushed
        gone = self._unflushed_acks
        delayed = self._unflushed_delays
        for row_id in row_ids:
            key, host = self._leases.end(row_id)
            host.count -= 1
            if unflushed.pop(row_id, None) is not None:
                # Not in the index under this key (`_show`, inlined).
                if not delayed or delayed.get(row_id, (None, None))[1] != key:
                    host.hidden.discard(key)
            else:
                gone[row_id] = (host, key)
            touched.add(host)
        self._rows -= len(row_ids)
        for host in touched:
            self._board.place(host, now)
        self._leases.trim()

    def _show(self, row_id: int, host: Host, key: Key) -> None:
        """Unhide ``key`` of a row whose lease ended, unless the index still holds it there.

        A row of the tables scheduled again stays in the index until the
        flush: if it came due and was leased under the same key since, that
        key must stay hidden until the flush moves the old entry out.
        """
        delayed = self._unflushed_delays
        if not delayed or delayed.get(row_id, (None, None))[1] != key:
            host.hidden.discard(key)

    def _ack_refetching(self, leases: Sequence[Any], refetch: Sequence[Refetch | None]) -> None:
        """Ack ``leases``, scheduling the refetched ones again; logged before it returns."""
        now = self._clock()
        row_ids, again = self._refetches(leases, refetch)
        if not row_ids:
            self._acks_due(now)
            return
        items = self._refetch_items(again, self._next_id, now)
        records = self._leases.ack_records(row_ids, self._board)
        refetched = [(log.REFETCH, items, None)] if items else []
        self._log((log.ACK, self._waiting_acks + records, None), *refetched)
        self._waiting_acks = []
        self._acked(row_ids, now)
        self._refetches_logged(items)
        self._after_write(now)

    def _refetches(
        self, leases: Sequence[Any], refetch: Sequence[Refetch | None]
    ) -> tuple[list[int], list[_Again]]:
        """Row ids of the current leases, and the refetch of each that has one."""
        row_ids: dict[int, None] = {}
        again: list[_Again] = []
        for lease, entry in zip(leases, refetch, strict=True):
            for row_id in self._current((lease,)):
                if row_id not in row_ids:
                    row_ids[row_id] = None
                    if entry is not None:
                        again.append((row_id, entry[0], entry[1]))
        return list(row_ids), again

    def _refetch_items(self, again: list[_Again], next_id: int, now: float) -> list[Any]:
        """The `log.REFETCH` items of ``again``, in new row ids from ``next_id`` on.

        Each is due ``delay`` from ``now``, in the store's order as if added
        now. Raises `StoreError` if reading a stored payload fails.
        """
        items = []
        for offset, (row_id, delay, update) in enumerate(again):
            handle = self._leases.handle(row_id)
            if update is None:
                negprio, payload = handle[2], self._stored_payload(row_id)
            else:
                assert update[3] is not None  # the store needs payloads
                negprio, payload = -update[2].priority, update[3]
            new_id = next_id + offset
            seq = order_key(new_id, self._lifo, self._lifo)
            items.append((new_id, handle[4].name, negprio, seq, now + delay, payload))
        return items

    def _refetches_logged(self, items: list[Any]) -> None:
        """Schedule the refetches just logged (their new row ids are taken)."""
        for new_id, name, negprio, seq, due, payload in items:
            self._schedule((due, new_id, name, negprio, seq, payload, 1))
        self._next_id += len(items)
        self._refetched += len(items)

    # -- releasing --------------------------------------------------------------

    def release(
        self,
        leases: Sequence[object],
        updates: Sequence[Entry | None] | None = None,
        delays: Sequence[float] | None = None,
    ) -> None:
        self._check_open()
        now = self._clock()
        if updates is not None or delays is not None:
            self._release_logged(leases, updates, delays, now)
            return
        self._acks_due(now)
        for row_id in self._current(leases):
            self._requeue(row_id, now)
        self._leases.trim()

    def _requeue(self, row_id: int, now: float, *, expired: bool = False) -> None:
        if expired:
            self._expiries += 1
        else:
            self._released += 1
        key, host = self._leases.end(row_id)
        self._show(row_id, host, key)
        payload = self._unflushed.get(row_id)
        if payload is None and self._updated:
            payload = self._still_updated(row_id, host)
        if payload is not None:
            heappush(host.fresh, (key[0], key[1], row_id, payload))
        else:
            host.rewind(key)
        host.improve(key)
        self._board.place(host, now)

    def _release_logged(
        self,
        leases: Sequence[Any],
        updates: Sequence[Entry | None] | None,
        delays: Sequence[float] | None,
        now: float,
    ) -> None:
        """Release ``leases``, with their updates and delays (see the module doc).

        The updates and delays of current leases are logged in one commit,
        with the acks waiting, before memory changes: if the commit raises
        (`StoreFull`), nothing was released.
        """
        current: dict[int, None] = {}
        updated: dict[int, tuple[int, str, int, int, bytes]] = {}
        delayed: dict[int, tuple[int, str, int, int, float, bytes]] = {}
        for index, lease in enumerate(leases):
            update = None if updates is None else updates[index]
            delay = 0.0 if delays is None else delays[index]
            for row_id in self._current((lease,)):  # none for an ended lease
                current[row_id] = None
                updated.pop(row_id, None)
                delayed.pop(row_id, None)
                negprio, payload = lease[2], None
                if update is not None:
                    assert update[3] is not None  # the store needs payloads
                    negprio, payload = -update[2].priority, update[3]
                if delay > 0:
                    if payload is None:
                        payload = self._stored_payload(row_id)
                    due = now + delay
                    delayed[row_id] = (row_id, lease[4].name, negprio, lease[3], due, payload)
                elif payload is not None:
                    updated[row_id] = (row_id, lease[4].name, negprio, lease[3], payload)
        records: list[log.Record] = []
        if updated or delayed:
            if self._waiting_acks:
                records.append((log.ACK, self._waiting_acks, None))
            if updated:
                records.append((log.UPDATE, list(updated.values()), None))
            if delayed:
                records.append((log.DELAY, list(delayed.values()), None))
            self._log(*records)
            self._waiting_acks = []
        else:
            self._acks_due(now)
        for row_id in current:
            if row_id in delayed:
                self._delay(delayed[row_id], now)
            elif row_id in updated:
                item = updated[row_id]
                self._requeue_updated(row_id, item[2], item[4], now)
            else:
                self._requeue(row_id, now)
        self._leases.trim()
        if records:
            self._after_write(now)

    def _delay(self, item: tuple[int, str, int, int, float, bytes], now: float) -> None:
        """Schedule a leased row again as its logged DELAY item: out of its host until due."""
        row_id, name, negprio, seq, due, payload = item
        self._released += 1
        key, host = self._leases.end(row_id)
        host.count -= 1
        self._rows -= 1
        if row_id in self._unflushed:
            del self._unflushed[row_id]
            self._show(row_id, host, key)
        else:
            # In the index until the flush moves it (under an update's old
            # key, if one is logged): that entry stays hidden until then.
            before = self._updated.pop(row_id, None)
            index_key = key if before is None else before[2]
            if key != index_key:
                host.hidden.discard(key)
            self._unflushed_delays[row_id] = (host, index_key)
        self._schedule((due, row_id, name, negprio, seq, payload, 0))
        self._board.place(host, now)

    def _requeue_updated(self, row_id: int, negprio: int, payload: bytes, now: float) -> None:
        """Queue a leased row again as its logged update: new priority and payload, same seq."""
        self._released += 1
        key, host = self._leases.end(row_id)
        if row_id in self._unflushed:
            self._show(row_id, host, key)
            self._unflushed[row_id] = payload  # the flush writes the update with the add
        else:
            # The index holds the row under its old key (the lease's, or an
            # earlier update's) until the flush: keep that hidden.
            before = self._updated.get(row_id)
            index_key = key if before is None else before[2]
            if key != index_key:
                host.hidden.discard(key)
            self._updated[row_id] = (payload, host, index_key)
        new_key = (negprio, key[1])
        heappush(host.fresh, (negprio, key[1], row_id, payload))
        host.improve(new_key)
        self._board.place(host, now)

    def _still_updated(self, row_id: int, host: Host) -> bytes | None:
        """A requeued row's logged, unflushed update (its index key hidden again), or None."""
        update = self._updated.get(row_id)
        if update is None:
            return None
        host.hidden.add(update[2])
        return update[0]
