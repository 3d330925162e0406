"""How a `Scheduler` wakes the coroutines that wait in it: getters, adders, one timer.

`Waiting` is the part of `Scheduler` that hands ready requests straight to
the oldest waiting getters (direct delivery) whenever the frontier may have
changed, arms one timer for the moment the frontier says its next request is
ready (every half second too on a shared store, where other workers change
it unseen), wakes adders when room frees, and undoes a cancelled wait
without losing a request handed over.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import TYPE_CHECKING

from .._frontier import Frontier
from .._request import Request
from .holdings import Holdings
from .store_thread import StoreThread

__all__ = ["Waiting"]

# A timer never fires sooner than this after being armed, so that a store whose
# ready time is approximate cannot make the scheduler spin.
_MIN_WAIT = 0.001
# How often a waiting get() looks again at a store other processes change.
_SHARED_POLL = 0.5


class Waiting:
    """Waking of `Scheduler` (a mixin: the scheduler's ``__init__`` sets the state)."""

    _frontier: Frontier
    _thread: StoreThread | None
    _getters: deque[asyncio.Future[Request | None]]
    _adders: deque[asyncio.Future[None]]
    _timer: asyncio.TimerHandle | None
    _timer_at: float
    _closed: bool
    _look: bool
    _holdings: Holdings

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...
        def _check_idle(self) -> None: ...
        def _full(self) -> bool: ...
        def _finish(self, request: Request, *, done: bool) -> None: ...

    async def _wait_for_room(self) -> None:
        self._check_open()
        if self._holdings.current_task_holds():
            # A worker adding the links of a page it holds never waits: if
            # every worker waited for room, none would be left to make it.
            return
        while self._full():
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._adders.append(future)
            try:
                await future
            except BaseException:
                if not future.done():
                    future.cancel()
                elif not future.cancelled() and future.exception() is None:
                    # We were woken for room we will not use: pass it on.
                    self._wake_adders()
                raise
            self._check_open()

    def _abandon(self, future: asyncio.Future[Request | None]) -> None:
        """Undo a getter's wait after it was cancelled or failed."""
        if not future.done():
            future.cancel()
            with contextlib.suppress(ValueError):
                self._getters.remove(future)
        elif not future.cancelled() and future.exception() is None:
            request = future.result()
            if request is not None and not self._frontier.closed:
                # Handed over, then cancelled before it could return: put back.
                self._finish(request, done=False)
                self._changed()

    def _changed(self) -> None:
        """The frontier may have a request ready: hand it to waiting getters."""
        if self._thread is not None:
            self._look = True
            self._thread.kick()
            return
        getters = self._getters
        while getters:
            future = getters[0]
            if future.done():
                getters.popleft()
                continue
            request = self._frontier.pop()
            if request is None:
                break
            getters.popleft()
            future.set_result(request)
            self._wake_adders()
        if getters:
            self._arm_timer(self._frontier.next_ready_in())
        self._check_idle()

    def _arm_timer(self, delay: float | None) -> None:
        """Wake the getters after ``delay`` (the store's next ready time)."""
        if not self._getters or self._closed:
            return
        if self._frontier.shared:
            # Other workers add and ack where this one cannot see it happen.
            delay = _SHARED_POLL if delay is None else min(delay, _SHARED_POLL)
        if delay is None:
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + max(delay, _MIN_WAIT)
        if self._timer is not None:
            if self._timer_at <= when:
                return
            self._timer.cancel()
        self._timer = loop.call_at(when, self._on_timer)
        self._timer_at = when

    def _on_timer(self) -> None:
        self._timer = None
        if not self._closed:
            self._changed()

    def _wake_adders(self) -> None:
        adders = self._adders
        while adders:
            future = adders.popleft()
            if not future.done():
                future.set_result(None)
                return
