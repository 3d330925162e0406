"""Ordering, pacing and lease expiry shared by every store.

`Policy` holds the settings, validated once. `order_key` is the tie-break
within a priority. `Board` applies the pacing to the hosts (slots) of a store
that keeps its slots in this process: which slot's head request goes next, and
when a paced slot becomes ready again (`crawlq._lease.LeaseDeadlines` tells when
leases end).
The Redis store runs the same rules in Lua (``stores/redis/lua/hosts.lua``, ``refill.lua``); the
conformance suite's golden pop orders check that every store agrees.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush, heapreplace
from typing import Any, Final

from ._errors import ConfigError

__all__ = [
    "DELAYED",
    "IDLE",
    "ORDER_SPAN",
    "READY",
    "Board",
    "Policy",
    "Slot",
    "check_count",
    "check_seconds",
    "order_key",
]


#: A lease may wait in a worker this share of ``host_delay`` (see `Policy.hold`)...
HOLD_SHARE: Final = 0.02
#: ...and at most this many seconds.
HOLD_MAX: Final = 0.02


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
    un-acked before it comes back by itself. ``ack_delay`` is how long an
    ack may wait in memory for the store's next write (0: durable when ``ack``
    returns); stores with nothing to write ignore it. ``clock`` returns
    seconds; stores that keep time across processes may ignore it.

    Raises `ConfigError` for a value of the wrong type or range.
    """

    host_delay: float = 0.0
    host_concurrency: int | None = None
    lifo: bool = False
    lease_timeout: float = 600.0
    ack_delay: float = 0.5
    max_requests_per_host: int | None = None
    seen_ttl: float | None = None
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    def __post_init__(self) -> None:
        _number("host_delay", self.host_delay, minimum=0.0, inclusive=True)
        _number("lease_timeout", self.lease_timeout, minimum=0.0, inclusive=False)
        _number("ack_delay", self.ack_delay, minimum=0.0, inclusive=True)
        check_count("host_concurrency", self.host_concurrency, "for no limit")
        check_count("max_requests_per_host", self.max_requests_per_host, "for no cap")
        if self.seen_ttl is not None:
            _number("seen_ttl", self.seen_ttl, minimum=0.0, inclusive=False)
            object.__setattr__(self, "seen_ttl", float(self.seen_ttl))
        if not isinstance(self.lifo, bool):
            raise ConfigError(f"lifo must be True or False, not {self.lifo!r}")
        if not callable(self.clock):
            raise ConfigError(f"clock must be a callable returning seconds, not {self.clock!r}")
        object.__setattr__(self, "host_delay", float(self.host_delay))
        object.__setattr__(self, "lease_timeout", float(self.lease_timeout))
        object.__setattr__(self, "ack_delay", float(self.ack_delay))

    @property
    def hold(self) -> float:
        """Seconds a request leased ahead may wait in a worker before it goes out.

        A store that leases requests before the caller asks (Redis's
        prefetch, the `Scheduler`'s lease with a write) keeps a host from its
        next lease for ``host_delay`` plus this, and gives back instead of
        handing out a request that waited longer: two hand-outs of one host
        stay ``host_delay`` apart in every worker. 2% of ``host_delay``, at
        most 20 ms; 0 without a delay.
        """
        return min(self.host_delay * HOLD_SHARE, HOLD_MAX)


def check_count(name: str, value: Any, none_means: str) -> None:
    """Refuse a count that is not an int >= 1 or None (`ConfigError` naming ``name``)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"{name} must be an int >= 1, or None {none_means}, not {value!r}")


def check_seconds(name: str, value: Any) -> float:
    """Return a finite number of seconds >= 0 as a float; `ConfigError` naming ``name``."""
    return _number(name, value, minimum=0.0, inclusive=True)


#: Keys of requests added in the other order than the store's are moved by
#: this much, past every key of the store's own order (an acceptance number
#: never reaches it).
ORDER_SPAN = 10**15


def order_key(number: int, lifo: bool, store_lifo: bool) -> int:
    """Return the tie-break key (lower first) of the ``number``-th accepted request.

    FIFO-added requests count up, LIFO-added ones count down, and every
    FIFO-added key is below every LIFO-added one, whichever order the store
    has: a store's own keys are ``number`` (FIFO) or ``-number`` (LIFO), as
    they always were, and the other kind is shifted by `ORDER_SPAN`.
    """
    if lifo:
        return -number if store_lifo else ORDER_SPAN - number
    return number - ORDER_SPAN if store_lifo else number


# Where a slot is filed: in no heap (nothing queued, or at its concurrency
# limit), in the ready heap, or in the delayed heap.
IDLE: Final = 0
READY: Final = 1
DELAYED: Final = 2


class Slot:
    """The pacing state of one host (download slot), as a `Board` files it.

    ``head`` is a sequence whose first two items are ``(-priority, order)`` of
    the slot's best queued request, or None when nothing is queued; stores keep
    it current and call `Board.place` after every change to a slot. A store
    that makes a slot calls `Board.adopt` on it before filing it.
    """

    __slots__ = ("concurrency", "delay", "entry", "head", "leased", "name", "ready_at", "state")

    def __init__(self, name: str) -> None:
        self.name = name
        self.head: tuple[Any, ...] | None = None
        self.leased = 0
        self.ready_at = 0.0
        self.state = IDLE
        #: The slot's live entry in the ready heap (None unless READY): any
        #: other entry of the slot there is stale.
        self.entry: tuple[int, int, int, Slot] | None = None
        #: This host's delay and concurrency limit (the policy's, or its own).
        self.delay = 0.0
        self.concurrency = _NO_LIMIT

    def __lt__(self, other: object) -> bool:
        """Never less: reached only when two heap entries of one slot tie on every key.

        A stale entry and the slot's live one can hold the same key (a
        request released with a delay and back at the head with the same
        leases); either order is right, since `Board.take` skips the stale
        one. Without this, the heap compared two slots and raised TypeError.
        """
        return False


#: A concurrency limit no host reaches.
_NO_LIMIT: Final = 1 << 62


class Board:
    """Picks the slot whose head request goes next, under the policy's pacing.

    Ready slots sit in one heap keyed by ``(-priority, leased, order)`` of their
    head: priority, then fewest leases, then acceptance order. Slots waiting for
    ``host_delay`` sit in a second heap keyed by the time they become ready.
    Slots at ``host_concurrency`` sit in neither until a lease ends. Both pops
    are O(log slots).

    Heap entries are never removed in place: a slot's live entry is the one it
    holds (``slot.entry``; a new filing makes the old one stale), stale
    entries are dropped when they reach the top, and the ready heap is rebuilt
    when stale entries outnumber live ones. ``forget`` is called for a slot with nothing
    queued or leased once its delay has passed, so the store can drop it.

    A slot that stays ready after `popped` keeps its entry at the top, keyed
    by the head just leased, until the board next changes or reads the ready
    heap: then one sift re-keys it there. A crawler acks (`place`) before it
    pops again, so a pop and its ack move the slot once, not twice, and leave
    no stale entry behind.

    Host controls live here too, by host name, so they outlive the slots the
    store drops: ``overrides`` (a host's own delay and concurrency) and
    ``blocks`` (a host hands out nothing until a time). A block is a delay
    that ends at its time: the slot's ``ready_at`` moves there, and the
    pacing time it had is kept to come back to on `unblock`. ``slots`` is
    the store's own map of live slots by name.
    """

    __slots__ = (
        "_concurrency",
        "_delay",
        "_delayed",
        "_forget",
        "_lagging",
        "_ready",
        "_ready_slots",
        "_slots",
        "blocks",
        "overrides",
    )

    def __init__(
        self, policy: Policy, forget: Callable[[Slot], None], slots: Mapping[str, Slot]
    ) -> None:
        self._delay = policy.host_delay
        self._concurrency = policy.host_concurrency or _NO_LIMIT
        self._forget = forget
        self._slots = slots
        self._ready: list[tuple[int, int, int, Slot]] = []
        self._delayed: list[tuple[float, str, Slot]] = []
        self._ready_slots = 0
        # The slot `popped` left ready with its old entry at the top (see above).
        self._lagging: Slot | None = None
        #: Host -> (delay or None, concurrency or None): its own policy.
        self.overrides: dict[str, tuple[float | None, int | None]] = {}
        #: Host -> (blocked until, the pacing time it had before the block).
        self.blocks: dict[str, tuple[float, float]] = {}

    def adopt(self, slot: Slot) -> None:
        """Give a new slot its host's policy and any block on it (before filing it)."""
        name = slot.name
        override = self.overrides.get(name) if self.overrides else None
        if override is None:
            slot.delay = self._delay
            slot.concurrency = self._concurrency
        else:
            delay, concurrency = override
            slot.delay = self._delay if delay is None else delay
            slot.concurrency = self._concurrency if concurrency is None else concurrency
        if self.blocks:
            block = self.blocks.get(name)
            if block is not None and block[0] > slot.ready_at:
                self.blocks[name] = (block[0], slot.ready_at)
                slot.ready_at = block[0]

    def block(self, name: str, until: float, now: float) -> bool:
        """Hand out nothing of host ``name`` before ``until``; False if already blocked longer."""
        block = self.blocks.get(name)
        if block is not None and block[0] >= until:
            return False
        slot = self._slots.get(name)
        if block is not None and block[0] > now:
            pace = block[1]
        else:
            pace = slot.ready_at if slot is not None else 0.0
        self.blocks[name] = (until, pace)
        if slot is not None:
            slot.ready_at = until
            self._refile(slot, now)
        return True

    def unblock(self, name: str, now: float) -> bool:
        """End a block on host ``name`` now; False if it had none."""
        block = self.blocks.pop(name, None)
        if block is None:
            return False
        slot = self._slots.get(name)
        if slot is not None and slot.ready_at == block[0]:
            slot.ready_at = block[1]
            self._refile(slot, now)
        return block[0] > now

    def pace(self, slot: Slot) -> float:
        """The slot's pacing time: its ``ready_at``, or the one a block put aside."""
        if self.blocks:
            block = self.blocks.get(slot.name)
            if block is not None and slot.ready_at == block[0]:
                return block[1]
        return slot.ready_at

    def timing(self, name: str, now: float) -> tuple[float, bool]:
        """Host ``name``'s seconds until its delay has passed, and whether it is at its limit."""
        slot = self._slots.get(name)
        if slot is None:
            return 0.0, False
        return max(0.0, self.pace(slot) - now), slot.leased >= slot.concurrency

    def blocked(self, now: float) -> dict[str, float]:
        """Hosts blocked now, with the time each block ends; ended blocks are dropped."""
        blocks = self.blocks
        for name in [name for name, (until, _) in blocks.items() if until <= now]:
            del blocks[name]
        return {name: until for name, (until, _) in blocks.items()}

    def set_policy(
        self, name: str, delay: float | None, concurrency: int | None, now: float
    ) -> None:
        """Give host ``name`` its own delay and/or concurrency (None: the policy's).

        A new delay counts from the host's next pop; a new limit applies now.
        """
        if delay is None and concurrency is None:
            self.overrides.pop(name, None)
        else:
            self.overrides[name] = (delay, concurrency)
        slot = self._slots.get(name)
        if slot is not None:
            self.adopt(slot)
            self._refile(slot, now)

    def _refile(self, slot: Slot, now: float) -> None:
        if slot.state == DELAYED:
            slot.state = IDLE  # its entry in the delayed heap goes stale
        self.place(slot, now)

    def place(self, slot: Slot, now: float) -> None:
        """File a slot where its state calls for, after any change to its head or leases.

        A slot waiting out its delay stays where it is: its entry in the
        delayed heap files it again when the delay has passed.
        """
        state = slot.state
        if state == DELAYED:
            return
        lagging = self._lagging
        if lagging is not None:
            self._lagging = None
            if lagging is not slot:
                self._rekey(lagging)
            else:
                head = slot.head
                if head is not None and slot.leased < slot.concurrency and slot.ready_at <= now:
                    # Still ready (after an ack, say): re-key its entry, still at the top.
                    entry = slot.entry = (head[0], slot.leased, head[1], slot)
                    heapreplace(self._ready, entry)
                    return
                # It leaves the ready heap (below): its entry at the top goes stale.
        if state == READY:
            self._ready_slots -= 1
            slot.entry = None
        head = slot.head
        if head is None or slot.leased >= slot.concurrency:
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
            entry = slot.entry = (head[0], slot.leased, head[1], slot)
            heappush(self._ready, entry)
            if len(self._ready) > 2 * self._ready_slots + 64:
                self._compact()

    def take(self, now: float) -> Slot | None:
        """Return the slot to pop from now, or None if no slot is ready.

        The slot's entry stays at the top of the ready heap: the caller leases
        the slot's head, sets its new head and calls `popped`, or changes the
        slot and calls `place`.
        """
        lagging = self._lagging
        if lagging is not None:
            self._lagging = None
            self._rekey(lagging)
        delayed = self._delayed
        if delayed and delayed[0][0] <= now:
            self._wake(now)
        ready = self._ready
        while ready:
            entry = ready[0]
            slot = entry[3]
            if slot.entry is entry:
                return slot
            heappop(ready)  # stale
        return None

    def popped(self, slot: Slot, now: float) -> None:
        """Record that the head of the slot `take` returned was leased; file the slot.

        Counts the lease and starts the slot's delay; the caller has already
        set the slot's new head. A slot that stays ready keeps its entry at
        the top until the next `place` or `take` re-keys it.
        """
        slot.leased += 1
        if slot.delay:
            slot.ready_at = now + slot.delay
        if slot.head is not None and slot.leased < slot.concurrency and slot.ready_at <= now:
            self._lagging = slot
        else:
            heappop(self._ready)
            slot.state = IDLE
            slot.entry = None
            self._ready_slots -= 1
            self.place(slot, now)

    def next_ready_in(self, now: float) -> float | None:
        """Seconds until `take` may return a slot; None if no slot is filed."""
        if self._lagging is not None:
            return 0.0  # it is ready
        ready = self._ready
        while ready and ready[0][3].entry is not ready[0]:
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
        self._lagging = None
        for entry in self._ready:
            entry[3].entry = None
        self._ready.clear()
        self._delayed.clear()
        self._ready_slots = 0

    def _rekey(self, slot: Slot) -> None:
        """Key the lagging slot's entry, at the top of the ready heap, by its head now."""
        head: Any = slot.head  # not None: the slot is still ready
        entry = slot.entry = (head[0], slot.leased, head[1], slot)
        heapreplace(self._ready, entry)

    def _wake(self, now: float) -> None:
        delayed = self._delayed
        while delayed and delayed[0][0] <= now:
            entry = heappop(delayed)
            if _due(entry):
                slot = entry[2]
                slot.state = IDLE  # its delay has passed: file it anew
                self.place(slot, now)

    def _compact(self) -> None:
        self._ready = [entry for entry in self._ready if entry[3].entry is entry]
        heapify(self._ready)


def _due(entry: tuple[float, str, Slot]) -> bool:
    slot = entry[2]
    return slot.state == DELAYED and slot.ready_at == entry[0]
