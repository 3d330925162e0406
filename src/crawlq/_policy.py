"""Ordering and pacing shared by every store: the settings, and the slot board.

`Policy` holds the settings, validated once. `Board` applies them to the hosts
(slots) of a store that keeps its slots in this process: which slot's head
request goes next, and when a paced slot becomes ready again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush, heapreplace
from typing import Any, Final

from ._errors import ConfigError

__all__ = ["DELAYED", "IDLE", "READY", "Board", "Policy", "Slot"]


def _number(name: str, value: Any, *, minimum: float, inclusive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number of seconds, not {value!r}")
    if value < minimum or (not inclusive and value == minimum):
        relation = ">=" if inclusive else ">"
        raise ConfigError(f"{name} must be {relation} {minimum}, not {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Policy:
    """How a frontier orders and paces requests.

    ``host_delay`` is the least time in seconds between two pops for one host
    (download slot). ``host_concurrency`` is the most leased requests a host may
    have at once (None: no limit). ``lifo`` hands out the newest request first
    within a priority. ``lease_timeout`` is how long a popped request may stay
    un-acked before it comes back by itself. ``clock`` returns seconds; stores
    that keep time across processes may ignore it.

    Raises `ConfigError` for a value of the wrong type or range.
    """

    host_delay: float = 0.0
    host_concurrency: int | None = None
    lifo: bool = False
    lease_timeout: float = 600.0
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    def __post_init__(self) -> None:
        _number("host_delay", self.host_delay, minimum=0.0, inclusive=True)
        _number("lease_timeout", self.lease_timeout, minimum=0.0, inclusive=False)
        concurrency = self.host_concurrency
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise ConfigError(
                f"host_concurrency must be an int >= 1, or None for no limit, not {concurrency!r}"
            )
        if not isinstance(self.lifo, bool):
            raise ConfigError(f"lifo must be True or False, not {self.lifo!r}")
        if not callable(self.clock):
            raise ConfigError(f"clock must be a callable returning seconds, not {self.clock!r}")
        object.__setattr__(self, "host_delay", float(self.host_delay))
        object.__setattr__(self, "lease_timeout", float(self.lease_timeout))


# Where a slot is filed: in no heap (nothing queued, or at its concurrency
# limit), in the ready heap, or in the delayed heap.
IDLE: Final = 0
READY: Final = 1
DELAYED: Final = 2


class Slot:
    """The pacing state of one host (download slot), as a `Board` files it.

    ``head`` is a sequence whose first two items are ``(-priority, order)`` of
    the slot's best queued request, or None when nothing is queued; stores keep
    it current and call `Board.place` after every change to a slot.
    """

    __slots__ = ("head", "leased", "name", "ready_at", "state")

    def __init__(self, name: str) -> None:
        self.name = name
        self.head: tuple[Any, ...] | None = None
        self.leased = 0
        self.ready_at = 0.0
        self.state = IDLE


class Board:
    """Picks the slot whose head request goes next, under the policy's pacing.

    Ready slots sit in one heap keyed by ``(-priority, leased, order)`` of their
    head: priority, then fewest leases, then acceptance order. Slots waiting for
    ``host_delay`` sit in a second heap keyed by the time they become ready.
    Slots at ``host_concurrency`` sit in neither until a lease ends. Both pops
    are O(log slots).

    Heap entries are never removed in place: an entry is live while it still
    describes its slot (same state, lease count and head), stale entries are
    dropped when they reach the top, and the ready heap is rebuilt when stale
    entries outnumber live ones. ``forget`` is called for a slot with nothing
    queued or leased once its delay has passed, so the store can drop it.
    """

    __slots__ = ("_concurrency", "_delay", "_delayed", "_forget", "_ready", "_ready_slots")

    def __init__(self, policy: Policy, forget: Callable[[Slot], None]) -> None:
        self._delay = policy.host_delay
        self._concurrency = policy.host_concurrency or (1 << 62)
        self._forget = forget
        self._ready: list[tuple[int, int, int, Slot]] = []
        self._delayed: list[tuple[float, str, Slot]] = []
        self._ready_slots = 0

    def place(self, slot: Slot, now: float) -> None:
        """File a slot where its state calls for, after any change to it."""
        if slot.state == READY:
            self._ready_slots -= 1
        head = slot.head
        if head is None or slot.leased >= self._concurrency:
            slot.state = IDLE
            if head is None and not slot.leased:
                if slot.ready_at <= now:
                    self._forget(slot)
                else:
                    # Keep its pacing state until the delay has passed.
                    slot.state = DELAYED
                    heappush(self._delayed, (slot.ready_at, slot.name, slot))
        elif slot.ready_at > now:
            slot.state = DELAYED
            heappush(self._delayed, (slot.ready_at, slot.name, slot))
        else:
            slot.state = READY
            self._ready_slots += 1
            heappush(self._ready, (head[0], slot.leased, head[1], slot))
            if len(self._ready) > 2 * self._ready_slots + 64:
                self._compact()

    def take(self, now: float) -> Slot | None:
        """Return the slot to pop from now, or None if no slot is ready.

        The slot's entry stays at the top of the ready heap: the caller leases
        the slot's head, sets its new head and calls `popped` (which moves the
        entry with one sift), or changes the slot and calls `place`.
        """
        delayed = self._delayed
        if delayed and delayed[0][0] <= now:
            self._wake(now)
        ready = self._ready
        while ready:
            entry = ready[0]
            slot = entry[3]
            head = slot.head
            if (
                slot.state == READY
                and slot.leased == entry[1]
                and head is not None
                and head[1] == entry[2]
            ):
                return slot
            heappop(ready)  # stale
        return None

    def popped(self, slot: Slot, now: float) -> None:
        """Record that the head of the slot `take` returned was leased; file the slot.

        Counts the lease and starts the slot's delay; the caller has already
        set the slot's new head.
        """
        slot.leased += 1
        if self._delay:
            slot.ready_at = now + self._delay
        head = slot.head
        if head is not None and slot.leased < self._concurrency and slot.ready_at <= now:
            # Still ready: replace its entry at the top in one sift.
            heapreplace(self._ready, (head[0], slot.leased, head[1], slot))
        else:
            heappop(self._ready)
            slot.state = IDLE
            self._ready_slots -= 1
            self.place(slot, now)

    def next_ready_in(self, now: float) -> float | None:
        """Seconds until `take` may return a slot; None if no slot is filed."""
        ready = self._ready
        while ready and not _live(ready[0]):
            heappop(ready)
        if ready:
            return 0.0
        delayed = self._delayed
        while delayed and not _due(delayed[0]):
            heappop(delayed)
        if delayed:
            return max(0.0, delayed[0][0] - now)
        return None

    def clear(self) -> None:
        self._ready.clear()
        self._delayed.clear()
        self._ready_slots = 0

    def _wake(self, now: float) -> None:
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            entry = heappop(delayed)
            if _due(entry):
                self.place(entry[2], now)

    def _compact(self) -> None:
        live = {id(entry[3]): entry for entry in self._ready if _live(entry)}
        self._ready = list(live.values())
        heapify(self._ready)


def _live(entry: tuple[int, int, int, Slot]) -> bool:
    slot = entry[3]
    head = slot.head
    return (
        slot.state == READY and slot.leased == entry[1] and head is not None and head[1] == entry[2]
    )


def _due(entry: tuple[float, str, Slot]) -> bool:
    slot = entry[2]
    return slot.state == DELAYED and slot.ready_at == entry[0]
