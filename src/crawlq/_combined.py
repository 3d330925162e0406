"""`CombinedStore`: one frontier shared by many threads, their calls sharing store calls.

``open_frontier(url, threads=True)`` puts this wrapper in front of the store.
A thread that calls `add`, `ack`, `release` or `pop` while another thread's
store call is running queues its call; when the running call ends, one of
the waiting threads (the leader) runs every queued call as few store calls
as their kinds allow: all releases in one, all plain adds and acks in one
(each caller's links before its ack, as in one ``add_many(..., ack=)``), and
the pops after that write (on Redis, leased in the write's own round trip).
This is group commit: on Redis each call's fixed server cost is paid once
per round of threads, not once per thread (``benchmarks/threads.py``); on a
SQLite job one commit serves them all. A caller returns once its own part
is done and durable, with its own result or its own error.

Every other store method runs under the same mutex, so a thread reading
``stats()`` never meets a store call in flight.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ._request import Request
from .stores.base import Entry, HostList, Refetch, Store, StoreCounts

__all__ = ["CombinedStore"]

_ADD: Final = 0
_ACK: Final = 1
_RELEASE: Final = 2
_POP: Final = 3


class _Call:
    """One thread's call, waiting to be run with others; then its result or error."""

    __slots__ = (
        "done",
        "entries",
        "error",
        "kind",
        "leases",
        "lifo",
        "more",
        "refetch",
        "result",
        "wake",
    )

    def __init__(
        self,
        kind: int,
        entries: Sequence[Entry] = (),
        leases: Sequence[object] = (),
        lifo: bool | None = None,
        refetch: Sequence[Refetch | None] | None = None,
        more: Any = None,
    ) -> None:
        self.kind = kind
        self.entries = entries
        self.leases = leases
        self.lifo = lifo
        self.refetch = refetch
        #: A release's (updates, delays).
        self.more = more
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        #: Set when the call is done, or when its thread is to lead the next round.
        self.wake: threading.Event | None = None

    @property
    def plain(self) -> bool:
        """True for an add or ack that can share the one combined write."""
        return self.kind <= _ACK and self.lifo is None and self.refetch is None


class CombinedStore:
    """A store shared by threads: concurrent calls are combined (see the module doc)."""

    def __init__(self, inner: Store) -> None:
        self._inner = inner
        self.needs_payload = inner.needs_payload
        self.shared = inner.shared
        self.durable = inner.durable
        self.origin = inner.origin
        self._mutex = threading.Lock()
        self._queue: list[_Call] = []
        self._running = False
        # Held while the store is in use: by the leader, or a passed-through call.
        self._io = threading.Lock()
        self._expect = getattr(inner, "expect_pops", None)

    # -- combined calls ---------------------------------------------------------

    def add(
        self,
        entries: Sequence[Entry],
        finished: Sequence[object] = (),
        *,
        lifo: bool | None = None,
        refetch: Sequence[Refetch | None] | None = None,
    ) -> list[bool]:
        result: list[bool] = self._run(_Call(_ADD, entries, finished, lifo, refetch))
        return result

    def ack(
        self, leases: Sequence[object], refetch: Sequence[Refetch | None] | None = None
    ) -> None:
        self._run(_Call(_ACK, (), leases, None, refetch))

    def release(
        self,
        leases: Sequence[object],
        updates: Sequence[Entry | None] | None = None,
        delays: Sequence[float] | None = None,
    ) -> None:
        self._run(_Call(_RELEASE, (), leases, more=(updates, delays)))

    def pop(self) -> Request | None:
        result: Request | None = self._run(_Call(_POP))
        return result

    def _run(self, call: _Call) -> Any:
        """Run ``call`` now, or queue it for the round after the running one; return or raise.

        The thread that finds no round running leads one; a queued caller
        sleeps on its own event until its call is done, or until the leader
        before it hands it the lead (so each round wakes only the threads it
        served and the next leader, not every waiting thread).
        """
        with self._mutex:
            if self._running:
                call.wake = threading.Event()
                self._queue.append(call)
            else:
                self._running = True
        if call.wake is not None:
            call.wake.wait()
            if call.done:
                if call.error is not None:
                    raise call.error
                return call.result
        with self._mutex:
            calls, self._queue = self._queue, []
        if call not in calls:
            calls.insert(0, call)
        try:
            with self._io:
                self._round(calls)
        finally:
            with self._mutex:
                following = self._queue[0] if self._queue else None
                if following is None:
                    self._running = False
            for served in calls:
                served.done = True
                if served is not call and served.wake is not None:
                    served.wake.set()
            if following is not None:
                assert following.wake is not None
                following.wake.set()  # it leads the next round
        if call.error is not None:
            raise call.error
        return call.result

    def _round(self, calls: list[_Call]) -> None:
        """Run one round of queued calls: releases, the combined write, the rest, pops."""
        inner = self._inner
        releases = [call for call in calls if call.kind == _RELEASE]
        if releases:
            _settle(releases, lambda: _release_all(inner, releases))
        pops = [call for call in calls if call.kind == _POP]
        expect = self._expect
        if expect is not None:
            expect(len(pops))  # leased in the round trip of the write below
        try:
            plain = [call for call in calls if call.plain]
            if plain:
                _settle(plain, lambda: _write_all(inner, plain))
            for call in calls:
                if call.kind <= _ACK and not call.plain:
                    _settle([call], lambda call=call: _write_one(inner, call))
            for call in pops:
                _settle([call], lambda call=call: _pop_into(inner, call))
        finally:
            if expect is not None:
                expect(None)

    # -- passed through, one at a time ------------------------------------------

    def expect_pops(self, count: int | None) -> None:
        """Passed on to a store that prefetches (for a `Scheduler` on this frontier)."""
        if self._expect is not None:
            with self._io:
                self._expect(count)

    def seen(self, fingerprints: Sequence[bytes]) -> list[bool]:
        with self._io:
            return self._inner.seen(fingerprints)

    def counts(self) -> StoreCounts:
        with self._io:
            return self._inner.counts()

    def host_counts(self, limit: int) -> HostList:
        with self._io:
            return self._inner.host_counts(limit)

    def block_host(self, host: str, seconds: float | None) -> None:
        with self._io:
            self._inner.block_host(host, seconds)

    def set_host_policy(self, host: str, delay: float | None, concurrency: int | None) -> None:
        with self._io:
            self._inner.set_host_policy(host, delay, concurrency)

    def host_policy(self, host: str) -> tuple[float | None, int | None]:
        with self._io:
            return self._inner.host_policy(host)

    def forget(self, fingerprints: Sequence[bytes]) -> int:
        with self._io:
            return self._inner.forget(fingerprints)

    def next_ready_in(self) -> float | None:
        with self._io:
            return self._inner.next_ready_in()

    def extra_stats(self) -> dict[str, float]:
        with self._io:
            return self._inner.extra_stats()

    def load_state(self) -> dict[str, Any]:
        with self._io:
            return self._inner.load_state()

    def save_state(self, state: Mapping[str, Any]) -> None:
        with self._io:
            self._inner.save_state(state)

    def flush(self) -> None:
        with self._io:
            self._inner.flush()

    def close(self) -> None:
        with self._io:
            self._inner.close()

    def __getattr__(self, name: str) -> Any:
        """Anything else a store offers (its admin hooks), from the store itself."""
        return getattr(self._inner, name)


def _settle(calls: list[_Call], run: Any) -> None:
    """Run ``run`` for ``calls``: each gets its part of the result, or the error."""
    try:
        run()
    except BaseException as exc:  # every caller gets it: each re-raises in its thread
        for call in calls:
            call.error = exc


def _release_all(inner: Store, calls: list[_Call]) -> None:
    leases = [lease for call in calls for lease in call.leases]
    if all(call.more == (None, None) for call in calls):
        inner.release(leases)
        return
    updates: list[Entry | None] = []
    delays: list[float] = []
    for call in calls:
        given_updates, given_delays = call.more
        count = len(call.leases)
        updates.extend(given_updates if given_updates is not None else [None] * count)
        delays.extend(given_delays if given_delays is not None else [0.0] * count)
    if any(delays):
        inner.release(leases, updates, delays)
    else:
        inner.release(leases, updates)


def _write_all(inner: Store, calls: list[_Call]) -> None:
    """The plain adds and acks as one store write; each add gets its slice of the result."""
    entries = [entry for call in calls for entry in call.entries]
    finished = [lease for call in calls for lease in call.leases]
    if not entries:
        inner.ack(finished)
        for call in calls:
            if call.kind == _ADD:
                call.result = []
        return
    added = inner.add(entries, finished)
    start = 0
    for call in calls:
        if call.kind == _ADD:
            end = start + len(call.entries)
            call.result = added[start:end]
            start = end


def _write_one(inner: Store, call: _Call) -> None:
    if call.kind == _ACK:
        inner.ack(call.leases, call.refetch)
    elif call.refetch is not None:
        call.result = inner.add(call.entries, call.leases, lifo=call.lifo, refetch=call.refetch)
    else:
        call.result = inner.add(call.entries, call.leases, lifo=call.lifo)


def _pop_into(inner: Store, call: _Call) -> None:
    call.result = inner.pop()
