"""How a `Scheduler` finishes the requests its coroutines took: ack, refetch, release.

`Finishes` is the part of `Scheduler` behind `task_done` and `release`: the
lease and any update, delay or refetch are checked at once, on the loop (the
caller gets the error), then written at once (memory) or with the next batch
of store calls (`StoreThread`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._due import check_delay
from .._frontier import Frontier
from .._request import Request
from .holdings import Holdings
from .store_thread import StoreThread

__all__ = ["Finishes"]


class Finishes:
    """Acks and releases of `Scheduler` (a mixin with no state of its own)."""

    __slots__ = ()

    if TYPE_CHECKING:
        _frontier: Frontier
        _holdings: Holdings
        _thread: StoreThread | None

        def _changed(self) -> None: ...

    def _finish(
        self,
        request: Request,
        *,
        done: bool,
        update: Request | None = None,
        delay: float | None = None,
        refetch_after: float | None = None,
        changed: bool | None = None,
    ) -> None:
        """Ack (``done``) or release (with ``update``) a request now, or with the next batch."""
        frontier = self._frontier
        if self._thread is None:
            if done:
                frontier.ack(request, refetch_after=refetch_after, changed=changed)
            else:
                frontier.release(request, update=update, delay=delay)
            return
        leases = frontier._leases((request,))
        pending = self._thread.pending
        # Checked now, on the loop: the caller gets InvalidRequest or ConfigError.
        if done:
            again = frontier._refetches((request,), refetch_after, changed)
            if again is not None and again[0] is not None:
                pending.refetched.append((leases[0], again[0]))
                return
        elif update is not None or delay:
            entry = None if update is None else frontier._update(request, update)
            seconds = 0.0 if delay is None else check_delay("delay", delay)
            pending.updated.append((leases[0], entry, seconds))
            return
        (pending.acks if done else pending.releases).extend(leases)

    def _release_held(self, request: Request) -> None:
        """Release a request whose task died (for `Holdings`)."""
        self._finish(request, done=False)
        if self._thread is not None:
            self._changed()

    def task_done(
        self,
        request: Request,
        *,
        refetch_after: float | None = None,
        changed: bool | None = None,
    ) -> None:
        """Mark a request returned by `get` as done (acks its lease).

        ``refetch_after`` and ``changed`` schedule it again later, as
        `Frontier.ack` says (a continuous crawl's refetch; raises as it does).

        Raises `LeaseError` for a request this scheduler's frontier never
        handed out. Works after ``close()``, so in-flight work can finish.
        Finish requests from `get` through the scheduler (this, `release` or
        ``add_many(..., ack=)``), not through the frontier: the scheduler
        keeps track of which task holds each one. With a store that does I/O
        the ack is written with the scheduler's next batch of store calls.
        """
        self._finish(request, done=True, refetch_after=refetch_after, changed=changed)
        self._holdings.forget(request)
        self._changed()

    def release(
        self, request: Request, *, update: Request | None = None, delay: float | None = None
    ) -> None:
        """Put a request returned by `get` back in its place, not done.

        For a request the worker could not finish now and wants fetched again
        (it is handed out again, in its place). Works after ``close()``.
        ``update`` replaces its fields as `Frontier.release` says (a retry
        count in meta, say); with a store that does I/O it is written with
        the next batch, as the release is. Raises `LeaseError` for a request
        this frontier never handed out, `InvalidRequest` for an ``update``
        that changes its url, method, body or download slot (then nothing
        is released). ``delay`` (seconds) keeps it from being handed out for
        that long (retry backoff): no worker holds it meanwhile.
        """
        self._finish(request, done=False, update=update, delay=delay)
        self._holdings.forget(request)
        self._changed()
