"""`Lease`: a popped request's claim on the store that handed it out."""

from __future__ import annotations

from typing import Any, Final, final

__all__ = ["NOT_HANDED_OUT", "Lease"]

#: The message of the `LeaseError` for anything that is not a lease of this
#: frontier's store.
NOT_HANDED_OUT: Final = (
    "{request!r} was not handed out by this frontier's pop() (it was never popped, is "
    "queued again, or came from another frontier); only requests returned by pop() or "
    "Scheduler.get() can be acked or released"
)


@final
class Lease:
    """A popped request's claim on the store that handed it out; immutable.

    A store's ``pop`` makes one and the request carries it (in a private slot)
    until it is popped again; `Frontier` checks it once, on ``ack`` and
    ``release``: a lease whose ``origin`` is not its store's is refused with
    `LeaseError`. ``handle`` is the store's own record of the lease; a store
    treats a handle whose lease already ended (acked, released, expired, or
    from before the store was reopened) as done, which at-least-once delivery
    allows.
    """

    __slots__ = ("handle", "origin")

    handle: Any
    origin: str

    def __init__(self, origin: str, handle: Any) -> None:
        object.__setattr__(self, "origin", origin)
        object.__setattr__(self, "handle", handle)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Lease cannot be changed")

    def __repr__(self) -> str:
        return f"<Lease of {self.origin}>"
