"""Which asyncio task holds which request a `Scheduler` handed out.

The scheduler records each request it hands out against the task that
received it, and forgets it when it is finished (acked or released). When a
watched task ends, the requests it still held are given to a callback, with
how the task ended, so a worker that dies is never silent. A task that
returns while holding requests has passed them on (``asyncio.wait_for`` runs
``get`` in a task of its own on Python 3.11): the scheduler leaves those alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ._request import Request

__all__ = ["Holdings"]

#: Called with a task that ended, the requests it still held, and its end:
#: None if it was cancelled, else its exception (None if it returned).
OnEnd = Callable[["asyncio.Task[Any]", list[Request], BaseException | None, bool], None]


class Holdings:
    """Requests held per task; ``on_end(task, held, error, cancelled)`` when a task ends."""

    __slots__ = ("_held", "_holders", "_on_end")

    def __init__(self, on_end: OnEnd) -> None:
        self._on_end = on_end
        # id(request) -> task, and each task's requests by id.
        self._holders: dict[int, asyncio.Task[Any]] = {}
        self._held: dict[asyncio.Task[Any], dict[int, Request]] = {}

    def __bool__(self) -> bool:
        """True while some watched task is alive."""
        return bool(self._held)

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
        if task.cancelled():
            self._on_end(task, list(held.values()), None, True)
        else:
            self._on_end(task, list(held.values()), task.exception(), False)
