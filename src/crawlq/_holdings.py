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
from collections.abc import Callable
from typing import Any

from ._errors import CrawlqError, SchedulerClosed, WorkerFailed
from ._frontier import Frontier
from ._request import Request

__all__ = ["Holdings", "logger"]

logger = logging.getLogger("crawlq")

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
