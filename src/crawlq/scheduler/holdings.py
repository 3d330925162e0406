"""Which asyncio task holds which request a `Scheduler` handed out.

The scheduler records each request it hands out against the task that
received it, and forgets it when it is finished (acked or released). When a
watched task ends with an exception or is cancelled, the requests it still
held are released back to the frontier and logged on the ``crawlq`` logger
(an error naming them, with the exception; a cancellation at INFO), and the
scheduler is told, with a `WorkerFailed` for an exception, so a worker that
dies is never silent. A task that returns while holding requests has passed
them on (``asyncio.wait_for`` runs ``get`` in a task of its own on Python
3.11): those are left alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._errors import CrawlqError, SchedulerClosed, WorkerFailed
from .._frontier import Frontier
from .._request import Request

__all__ = ["Holdings", "WorkerWatch", "logger"]

logger = logging.getLogger("crawlq")

# Seconds after the last worker ended before a waiting join() warns about it.
_UNATTENDED_GRACE = 1.0

#: Called when a watched task ended: the failure to raise from ``join`` (None
#: if it did not fail), and whether requests were released.
OnEnd = Callable[[WorkerFailed | None, bool], None]


class Holdings:
    """Requests held per task, released when their task dies; see the module doc."""

    __slots__ = ("_frontier", "_held", "_holders", "_on_end", "_release_one")

    def __init__(
        self, frontier: Frontier, release: Callable[[Request], None], on_end: OnEnd
    ) -> None:
        self._frontier = frontier
        self._release_one = release
        self._on_end = on_end
        # id(request) -> task, and each task's requests by id.
        self._holders: dict[int, asyncio.Task[Any]] = {}
        self._held: dict[asyncio.Task[Any], dict[int, Request]] = {}

    def __bool__(self) -> bool:
        """True while some watched task is alive."""
        return bool(self._held)

    @property
    def tasks(self) -> int:
        """How many live tasks took requests from the scheduler (its workers)."""
        return len(self._held)

    def current_task_holds(self) -> bool:
        """True if the running task holds requests it got from the scheduler."""
        task = asyncio.current_task()
        return task is not None and bool(self._held.get(task))

    def hold(self, request: Request) -> None:
        """Record that the current task holds ``request``; watch the task."""
        task = asyncio.current_task()
        if task is None:
            return
        held = self._held.get(task)
        if held is None:
            held = self._held[task] = {}
            task.add_done_callback(self._ended)
        key = id(request)
        held[key] = request
        self._holders[key] = task

    def forget(self, request: Request) -> None:
        """``request`` is finished: no task holds it any more."""
        task = self._holders.pop(id(request), None)
        if task is not None:
            held = self._held.get(task)
            if held is not None:
                held.pop(id(request), None)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        held = self._held.pop(task, {})
        for key in held:
            self._holders.pop(key, None)
        error = None if task.cancelled() else task.exception()
        if not task.cancelled() and (error is None or isinstance(error, SchedulerClosed)):
            self._on_end(None, False)  # it ended normally: what it held, it passed on
            return
        released = self._release(list(held.values()))
        names = ", ".join(map(repr, released)) or "no request"
        if error is None:
            if released:
                logger.info(
                    "task %s was cancelled holding %s; released back to the frontier",
                    task.get_name(),
                    names,
                )
            self._on_end(None, bool(released))
            return
        message = (
            f"worker task {task.get_name()} died with {error!r} holding {names}"
            f"{' (released back to the frontier)' if released else ''}; catch errors per "
            "request inside the worker (log, then task_done or release) so that one bad "
            "page cannot stop the crawl"
        )
        logger.error("%s", message, exc_info=error)
        failure = WorkerFailed(message)
        failure.__cause__ = error
        self._on_end(failure, bool(released))

    def _release(self, requests: list[Request]) -> list[Request]:
        released = []
        for request in requests:
            if self._frontier.closed:
                break
            try:
                self._release_one(request)
            except CrawlqError:
                continue  # finished another way (acked through the frontier)
            released.append(request)
        return released


class WorkerWatch:
    """The part of `Scheduler` that reacts to a task that took requests ending."""

    _frontier: Frontier
    _holdings: Holdings
    _closed: bool
    _getters: deque[asyncio.Future[Request | None]]
    _joiners: deque[asyncio.Future[None]]
    _failure: WorkerFailed | None

    if TYPE_CHECKING:

        def _changed(self) -> None: ...
        def _busy(self) -> bool: ...
        def _known_counts(self) -> tuple[int, int]: ...

    def _on_worker_end(self, failure: WorkerFailed | None, released: bool) -> None:
        """A task that took requests ended (see `Holdings`): wake whoever must know."""
        if released and not self._closed:
            self._changed()
        if failure is not None:
            if self._failure is None:
                self._failure = failure
            self._fail_joiners()
        self._warn_if_unattended()

    def _warn_if_unattended(self) -> None:
        """Say so when joins wait for work that no task is left to take.

        Checked again a moment later, so that a crawl stopping on purpose
        (closing the scheduler right after cancelling its workers) is quiet.
        """
        if self._unattended():
            asyncio.get_running_loop().call_later(_UNATTENDED_GRACE, self._warn_unattended)

    def _unattended(self) -> bool:
        if self._closed or self._frontier.closed or self._holdings or self._getters:
            return False
        return any(not future.done() for future in self._joiners) and self._busy()

    def _warn_unattended(self) -> None:
        if self._unattended():
            # Not a store call: this runs on the event loop.
            queued, leased = self._known_counts()
            logger.warning(
                "every task that took requests from the scheduler has ended, and %d "
                "requests are queued, %d in flight: join() waits for new workers",
                queued,
                leased,
            )

    def _fail_joiners(self) -> None:
        failure = self._failure
        if failure is None or not self._joiners:
            return
        delivered = False
        while self._joiners:
            future = self._joiners.popleft()
            if not future.done():
                future.set_exception(failure)
                delivered = True
        if delivered:
            self._failure = None
