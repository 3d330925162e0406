"""How a `Frontier` finishes popped requests: ack, refetch, release, delay.

`Finishing` is the part of `Frontier` that checks a popped request's lease
and hands it to the store: done for good (`ack`), done and due again later
(``ack(refetch_after=)``, or a `crawlq.Revisit` policy's interval), or back in
its place (`release`), at once or after a delay (retry backoff).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ._due import Revisit, check_delay
from ._errors import ConfigError, FrontierClosed, InvalidRequest, LeaseError
from ._lease import NOT_HANDED_OUT, Lease
from ._request import Request
from .stores.base import Entry, Refetch, Store

__all__ = ["Finishing"]


class Finishing:
    """Acks and releases of `Frontier` (a mixin with no state of its own)."""

    __slots__ = ()

    if TYPE_CHECKING:
        _closed: bool
        _origin: str
        _revisit: Revisit | None
        _store: Store
        url: str

        _store_ack: Callable[[Sequence[object]], None]

        def _update(self, request: Request, update: Request) -> Entry: ...

    def _leases(self, requests: Iterable[Request]) -> list[Lease]:
        """These requests' leases, for the store: the one check of a lease.

        Raises `LeaseError` for a request that carries no lease of this
        frontier's store (never popped, queued again, or popped elsewhere).
        A lease that already ended is passed on: the store treats it as done.
        """
        if self._closed:
            raise FrontierClosed(f"frontier {self.url} is closed")
        origin = self._origin
        handles = []
        for request in requests:
            lease = getattr(request, "_lease", None)
            if type(lease) is not Lease or (lease[-1] is not origin and lease[-1] != origin):
                raise LeaseError(NOT_HANDED_OUT.format(request=request))
            handles.append(lease)
        return handles

    def ack(
        self,
        request: Request,
        *,
        refetch_after: float | None = None,
        changed: bool | None = None,
    ) -> None:
        """Mark a popped request done; with ``refetch_after`` or ``changed``, due again later.

        Counts change at once; a durable store writes the ack with its next
        write, at the latest ``ack_delay`` seconds later (on the next call),
        or at `flush` / `close` (``ack_delay=0``: before this returns). A kill
        before then hands the request out again. Acking after the lease
        expired, or twice, does nothing (the request was put back and will be
        handed out again).

        ``refetch_after`` (seconds) schedules the same request again after
        that long (a continuous crawl's refetch): it stays held, counted in
        ``len()`` and ``stats().scheduled``, and its fingerprint stays seen.
        ``changed`` (True or False) says whether the page changed since its
        last fetch, for the frontier's `crawlq.Revisit` policy, which then
        picks the interval (an explicit ``refetch_after`` wins); its refetch
        is written before this returns. Raises `LeaseError` for a request
        that was never handed out by this frontier, `InvalidRequest` for a
        bad ``refetch_after``, `ConfigError` for ``changed`` without a
        revisit policy.
        """
        if refetch_after is not None or changed is not None:
            leases = self._leases((request,))
            self._store.ack(leases, (self._refetch(request, refetch_after, changed),))
            return
        try:
            lease = request._lease  # an attribute read: half the cost of getattr()
        except AttributeError:
            lease = None  # not a Request: _leases raises
        if type(lease) is Lease and lease[-1] is self._origin and not self._closed:
            store_ack = self._store_ack  # an attribute read, then a call: see `Frontier.pop`
            store_ack((lease,))
        else:
            self._store_ack(self._leases((request,)))

    def ack_many(
        self,
        requests: Iterable[Request],
        *,
        refetch_after: float | None = None,
        changed: bool | None = None,
    ) -> None:
        """Mark several popped requests done, in one store operation (see `ack`).

        ``refetch_after`` and ``changed`` apply to each of them.
        """
        batch = list(requests)
        leases = self._leases(batch)
        refetch = self._refetches(batch, refetch_after, changed)
        if refetch is None:
            self._store.ack(leases)
        else:
            self._store.ack(leases, refetch)

    def _refetches(
        self, requests: Sequence[Request], refetch_after: float | None, changed: bool | None
    ) -> list[Refetch | None] | None:
        """One refetch per request (for a store's ``refetch``), or None for plain acks."""
        if refetch_after is None and changed is None:
            return None
        return [self._refetch(request, refetch_after, changed) for request in requests]

    def _refetch(
        self, request: Request, refetch_after: float | None, changed: bool | None
    ) -> Refetch | None:
        """What acking ``request`` schedules: (delay, update), or None for done for good."""
        update: Entry | None = None
        if changed is not None:
            revisit = self._revisit
            if revisit is None:
                raise ConfigError(
                    "ack(changed=...) needs a revisit policy: open the frontier with "
                    "revisit=crawlq.Revisit(initial=..., min=..., max=...), "
                    "or give refetch_after= seconds"
                )
            if type(changed) is not bool:
                raise InvalidRequest(f"changed must be True or False, not {changed!r}")
            interval = revisit.next_interval(request.revisit_interval, changed)
            updated = request.replace()
            updated.revisit_interval = interval
            update = self._update(request, updated)
            if refetch_after is None:
                return (interval, update)
        if refetch_after is None:
            return None
        return (check_delay("refetch_after", refetch_after), update)

    def release(
        self, request: Request, *, update: Request | None = None, delay: float | None = None
    ) -> None:
        """Put a popped request back in its place without counting it done.

        With ``update`` (a `Request`), the request goes back with its fields
        replaced by ``update``'s: headers, meta, callback, errback, depth,
        priority and dont_filter (a retry count in meta, say). It keeps its
        place: its original sequence number, filed under ``update``'s
        priority. ``update`` must have the same url, method, body and
        ``meta["download_slot"]`` (they make the fingerprint and the host);
        it may be ``request`` itself, changed in place. The seen set and the
        counters change as for a plain release; a durable store has written
        the update when this returns. If the lease already ended (expired,
        acked), nothing happens, update included, as for a plain release.

        With ``delay`` (seconds), the request is not handed out again for
        that long (retry backoff): it is held meanwhile, counted in
        ``stats().scheduled``, and neither holds a worker nor counts against
        its host's concurrency.

        Raises `LeaseError` for a request that was never handed out,
        `InvalidRequest` for an ``update`` that changes what it must keep or
        a bad ``delay``, `SerializationError` for meta that cannot be stored;
        nothing is released then.
        """
        leases = self._leases((request,))
        delays = None if delay is None else [check_delay("delay", delay)]
        if update is None:
            self._store_release(leases, None, delays)
        else:
            self._store_release(leases, [self._update(request, update)], delays)

    def release_many(
        self,
        requests: Sequence[Request],
        *,
        updates: Sequence[Request | None] | None = None,
        delay: float | Sequence[float] | None = None,
    ) -> None:
        """Put several popped requests back, in one store operation.

        ``updates``, one per request (None: released unchanged), replaces
        their fields as `release` does. ``delay`` is one delay for all, or
        one per request. Every request is checked before anything is
        released: one bad update or delay releases none.
        """
        leases = self._leases(requests)
        delays = self._delays(delay, len(leases))
        if updates is None:
            self._store_release(leases, None, delays)
            return
        updates = list(updates)
        if len(updates) != len(leases):
            raise InvalidRequest(
                f"release_many got {len(updates)} updates for {len(leases)} requests; "
                "give one per request (None: unchanged)"
            )
        entries = [
            None if update is None else self._update(request, update)
            for request, update in zip(requests, updates, strict=True)
        ]
        self._store_release(leases, entries if any(entries) else None, delays)

    @staticmethod
    def _delays(delay: float | Sequence[float] | None, count: int) -> list[float] | None:
        """One checked delay per request, or None for none (`release_many`)."""
        if delay is None:
            return None
        if isinstance(delay, Sequence) and not isinstance(delay, str | bytes):
            if len(delay) != count:
                raise InvalidRequest(
                    f"release_many got {len(delay)} delays for {count} requests; "
                    "give one delay, or one per request"
                )
            delays = [check_delay("delay", value) for value in delay]
        else:
            delays = [check_delay("delay", delay)] * count
        return delays if any(delays) else None

    def _store_release(
        self,
        leases: Sequence[Lease],
        updates: Sequence[Entry | None] | None,
        delays: Sequence[float] | None,
    ) -> None:
        """Hand releases to the store, passing only the parts it is given."""
        if delays is not None and any(delays):
            self._store.release(leases, updates, delays)
        elif updates is not None:
            self._store.release(leases, updates)
        else:
            self._store.release(leases)

    def _finish(
        self,
        leases: Sequence[Lease],
        *,
        done: bool,
        updates: Sequence[Entry | None] | None = None,
        delays: Sequence[float] | None = None,
        refetch: Sequence[Refetch | None] | None = None,
    ) -> None:
        """Ack (``done``, ``refetch``) or release checked leases (for `Scheduler`)."""
        if self._closed:
            raise FrontierClosed(f"frontier {self.url} is closed")
        if done:
            if refetch is not None and any(refetch):
                self._store.ack(leases, refetch)
            else:
                self._store.ack(leases)
        else:
            self._store_release(leases, updates or None, delays)

    @staticmethod
    def _check_refetch_kinds(**given: Any) -> None:
        """Refuse ``refetch_after``/``changed`` given without ``ack`` (`add_many`)."""
        named = [name for name, value in given.items() if value is not None]
        if named:
            raise InvalidRequest(
                f"add_many: {' and '.join(named)} apply to the page given as ack=; give ack= too"
            )
