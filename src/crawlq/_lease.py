"""`Lease`: a store's record of one lease, checked by the frontier layer."""

from __future__ import annotations

from typing import Any, Final

__all__ = ["NOT_HANDED_OUT", "Lease", "new_lease"]

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
