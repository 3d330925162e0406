"""`Lease`: a store's record of one lease, checked by the frontier layer; `LeaseDeadlines`."""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Mapping
from typing import Any, Final

__all__ = ["NOT_HANDED_OUT", "Lease", "LeaseDeadlines", "new_lease"]

#: The message of the `LeaseError` for anything that is not a lease of this
#: frontier's store.
NOT_HANDED_OUT: Final = (
    "{request!r} was not handed out by this frontier's pop() (it was never popped, is "
    "queued again, or came from another frontier); only requests returned by pop() or "
    "Scheduler.get() can be acked or released"
)


class Lease(tuple[Any, ...]):
    """A store's record of one lease of one request; immutable, last item its origin.

    Every store's ``pop`` puts one on the request it returns (a private slot)
    and the request carries it until it is popped again. The items before the
    last are the store's own (the memory store's heap entry, SQLite's row,
    Redis's lease id and token); the last is the store's ``origin``.
    `Frontier` checks it once, on ``ack`` and ``release``: a request without
    a lease whose origin is its store's is refused with `LeaseError`; the
    store treats a lease that already ended (acked, released, expired, or
    from before the store was reopened) as done, which at-least-once delivery
    allows.

    A tuple subclass, made with ``new_lease(Lease, (..., origin))``: the memory
    store's heap entries are leases themselves, so popping makes no object,
    and a tuple is the cheapest immutable object Python makes.
    """

    __slots__ = ()

    @property
    def origin(self) -> str:
        """The `Store.origin` of the store that made it."""
        return str(self[-1])

    def __repr__(self) -> str:
        return f"<Lease of {self[-1]}>"


#: Makes a `Lease` without a Python-level constructor: ``new_lease(Lease, items)``.
new_lease: Final = tuple.__new__


class LeaseDeadlines:
    """When the leases of a store end, in pop order (one ``lease_timeout`` for all).

    A store keeps its current leases in a dict, ``held[lease[key]] is lease``
    (a new lease of the same request is a new object). ``items`` holds
    ``deadline, lease, deadline, lease...`` flat in one deque (no pair tuples:
    fewer objects on the hot path); a store's pop may append a pair itself
    (`add` is the same, as a call). Ended leases are dropped lazily from the
    front, and the deque is compacted in place when one slow lease holds the
    front, so memory stays bounded by the live leases.
    """

    __slots__ = ("_held", "_key", "items", "timeout")

    def __init__(self, lease_timeout: float, held: Mapping[Any, Any], key: int) -> None:
        #: Seconds a lease lasts.
        self.timeout = lease_timeout
        self._held = held
        self._key = key
        #: ``deadline, lease`` pairs in pop order; the same deque for life.
        self.items: deque[Any] = deque()

    def add(self, lease: object, now: float) -> None:
        """Record a lease taken at ``now``."""
        items = self.items
        items.append(now + self.timeout)
        items.append(lease)

    def expired(self, now: float) -> list[Any]:
        """Remove and return the current leases whose deadline has passed, oldest first."""
        items = self.items
        held = self._held
        key = self._key
        out = []
        while items and items[0] <= now:
            items.popleft()
            lease = items.popleft()
            if held.get(lease[key]) is lease:
                out.append(lease)
        return out

    def trim(self, ended: Container[Any] = ()) -> None:
        """Drop ended leases from the front; compact if the deque is large.

        ``ended`` holds leases that just ended: as only an end of the oldest
        lease frees the front, the front is looked at only then (or with no
        ``ended`` given), and the size checked every time.
        """
        items = self.items
        held = self._held
        key = self._key
        if items and (not ended or items[1] in ended):
            while items and held.get(items[1][key]) is not items[1]:
                items.popleft()
                items.popleft()
        if len(items) > 4 * len(held) + 2048:
            pairs = iter(list(items))
            items.clear()
            for deadline, lease in zip(pairs, pairs, strict=True):
                if held.get(lease[key]) is lease:
                    items.append(deadline)
                    items.append(lease)

    def next_in(self, now: float) -> float | None:
        """Seconds until the oldest current lease ends; None if none is held."""
        self.trim()
        items = self.items
        return max(0.0, items[0] - now) if items else None

    def __len__(self) -> int:
        return len(self.items) // 2
