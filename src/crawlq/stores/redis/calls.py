"""How the Redis store calls the crawl's functions: one packed FCALL, numbered, retried.

`FunctionCalls` is the part of `RedisStore` that every changing call goes
through: it packs the call (owner, call number, policy, the prefetched leases
held), sends it on the store's `Link`, and takes the requests the function
leased into the prefetch buffer. Numbers let a retried call return its first
outcome instead of running twice; a call whose reply was lost marks the
buffer suspect, and the next call gives back what the unanswered ones leased.
It also runs the self-check at open (a probe through add, pop and ack).
"""

from __future__ import annotations

import math
import os
import secrets
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..._errors import StoreError
from ..._fingerprint import Fingerprinter
from ..._lease import Lease, new_lease
from ..._request import Request, decode_request, encode_request
from .config import RedisURL
from .conn import Link
from .memory import check_evictions
from .wire import pack_args, pack_entries

__all__ = [
    "CALL_HEADER",
    "EVICTION_CHECK",
    "LINKS_HEADER",
    "LINKS_HELD",
    "FunctionCalls",
    "Pending",
]

_FAST_DRAIN: Final = 0.2  # seconds: a batch drained sooner lets the next one grow
#: Seconds a short lease answers the caller's next pop and wait (see `FunctionCalls._take`).
SHORT_FOR: Final = 0.1
#: A short lease whose next request is ready sooner than this does not answer a pop.
SHORT_SOON: Final = 0.005
#: Seconds between two looks at the server's ``evicted_keys``.
EVICTION_CHECK: Final = 5.0
#: The header of add_links (lua/links.lua): flags (1 lifo, 2 numbered, 4 due
#: times follow, 8 dedup by seen_ttl, 16 prefetched requests held),
#: host_concurrency, Bloom bits, Bloom hashes, count, max_requests_per_host,
#: seen_ttl ms, floor, span.
LINKS_HEADER: Final = struct.Struct(">BIIBIIddI")
#: add_links's second header, when prefetched requests are held: lease_timeout
#: ms, host_delay us, how many to hold after the call, how many are held,
#: the score (-priority) of the last of them, how many a top-up may leave
#: held (0: none; see `FunctionCalls._topup`), the hold us.
LINKS_HELD: Final = struct.Struct(">ddIIdII")
#: The header of every other changing call (see refill.lua): lease_timeout
#: ms, host_delay us, host_concurrency, how many to hold after the call, the
#: score of the last held, flags (1 give them back, 2 some are held, 4 say
#: when a pop may lease, if fewer are leased than asked), how many a top-up
#: may leave held, how many are held, the hold us (`Policy.hold`).
CALL_HEADER: Final = struct.Struct(">ddIIdBIII")

#: A call packed (and maybe sent) by `FunctionCalls._call_start`: its packed
#: command, how to pack its retry, what it does, its key prefix (None: the
#: store's own), whether prefetched requests were held, whether it was sent
#: (None: not tried, `Link.call` sends it), and when it was packed
#: (`time.monotonic`: the leases it takes are no older).
Pending = tuple[bytes, Callable[[], bytes], str, "bytes | None", bool, "bool | None", float]
#: An add begun by `RedisStore.add_start`: its call, its entries, whether it
#: carried the acks waiting, the finished leases for later calls, the hosts
#: of those leases, and whether it was numbered for a cluster.


class FunctionCalls:
    """The calls of `RedisStore` (a mixin: the store's ``__init__`` sets the state)."""

    if TYPE_CHECKING:
        origin: str
        _ack_delay: float
        _allow_eviction: bool
        _buffer: deque[tuple[Request, bytes]]
        _calls: int
        _demand: int | None
        _said: bool
        _short_at: float
        _short_pop: bool
        _short_ready: float | None
        _short_wait: bool
        _eviction_check_at: float
        _evicted: int
        _fetched_at: float
        _fetched_full: bool
        _functions: dict[bytes, bytes]
        _lease_timeout: float
        _lifo: bool
        _link: Link
        _location: RedisURL
        _lost: int | None
        _policy_numbers: tuple[int, int, int, int]
        _replied_at: float
        _hold_limit: float
        _popping: bool
        _prefetch: int
        _prefix: bytes
        _suspect: bool
        _topup_room: int
        _waiting: list[bytes]
        _waiting_hosts: set[bytes]
        _want: int

    # Faults met (see `WorkerCounts._faulted`); their number as the call began.
    _faults = _call_faults = 0

    def _new_owner(self) -> None:
        host = "".join(c for c in socket.gethostname() if c.isalnum() or c in ".-")[:40]
        self._owner = f"{host or 'host'}/{os.getpid()}/{secrets.token_hex(3)}".encode()
        self._pid = os.getpid()
        self._lost = None  # a forked copy never made its parent's calls
        # Packed heads of each function's calls (they hold the owner).
        self._heads: dict[bytes, bytes] = {}

    def _self_check(self, fingerprinter: Fingerprinter) -> None:
        """Push a probe through add, pop and ack in scratch keys; compare fingerprints."""
        tag = secrets.token_hex(6)
        prefix = self._prefix + b"probe:" + tag.encode() + b":"
        probe = Request(f"https://self-check.invalid/{tag}", meta={"probe": tag}, priority=7)
        fingerprint, host = fingerprinter.fingerprint_and_host(probe)
        entry = (fingerprint, host, probe, encode_request(probe))
        doing = "running the self-check"
        try:
            extra = [*pack_entries([entry], 0, 0, self._lifo)[0], b"0", b"", b"0"]
            added = self._call(b"probe", 0, False, extra, doing, prefix)
            popped = self._call(b"pop", 1, True, [], doing, prefix)
            items = popped[2:]
            back = decode_request(items[3]) if len(items) == 4 else None
            if back is not None:
                ack = [b"a", b"1", items[0], items[1]]
                self._call(b"ack_or_release", 0, False, ack, doing, prefix)
        finally:
            keys = [b"meta", b"seen", b"hosts", b"ready", b"delayed", b"leases", b"lease", b"p"]
            keys.append(b"accepted")
            self._link.command(b"DEL", *(prefix + key for key in keys), doing=doing)
        if added[0] != b"1" or back is None or fingerprinter.fingerprint(back) != fingerprint:
            raise StoreError(
                f"self-check failed at {self._location.display}: a probe request pushed to "
                f"Redis came back as {back!r}; the server does not run crawlq's functions "
                "faithfully"
            )

    def _next_eviction_check(self) -> None:
        """Look at the server's ``evicted_keys`` again from the first call after this long."""
        self._eviction_check_at = time.monotonic() + EVICTION_CHECK

    def _before_call(self) -> None:
        """What every call of this store's functions checks first: a fork, evictions."""
        # (The last call's answer, see _take: any call replaces it.)
        self._short_pop, self._short_wait, self._short_ready = False, False, None
        self._call_faults = self._faults  # (see _answered)
        if os.getpid() != self._pid:
            # A forked copy: the parent owns the prefetched leases.
            self._new_owner()
            self._buffer.clear()
        if not self._allow_eviction and time.monotonic() >= self._eviction_check_at:
            self._evicted = check_evictions(self._link, self._location.display, self._evicted)
            self._next_eviction_check()

    def _call(
        self,
        function: bytes,
        refill: int,
        force: bool,
        extra: Sequence[bytes],
        doing: str,
        prefix: bytes | None = None,
    ) -> list[Any]:
        return self._call_end(self._call_start(function, refill, force, extra, doing, prefix))

    def _call_start(
        self,
        function: bytes,
        refill: int,
        force: bool,
        extra: Sequence[bytes],
        doing: str,
        prefix: bytes | None = None,
        send: bool = False,
    ) -> Pending:
        """Pack a call (and with ``send``, send it now); `_call_end` gets its reply."""
        started = time.monotonic()
        self._before_call()
        # The self-check runs in scratch keys and leaves this store's own
        # prefetched requests alone.
        buffer = self._buffer if prefix is None else deque()
        self._calls += 1
        if prefix is None:
            head = self._heads.get(function)
            if head is None:
                head = self._heads[function] = pack_args(
                    [b"FCALL", self._functions[function], b"1", self._prefix, self._owner]
                )
        else:
            head = pack_args([b"FCALL", self._functions[function], b"1", prefix, self._owner])
        topup = self._topup(refill) if buffer and prefix is None else 0
        flags = (1 if force or self._suspect else 0) | (2 if buffer else 0)
        if refill and self._said and prefix is None:
            flags |= 4  # (see _take)
        lease_ms, delay_us, concurrency, hold_us = self._policy_numbers
        worst = -buffer[-1][0].priority if buffer else 0
        args = [
            CALL_HEADER.pack(
                lease_ms, delay_us, concurrency, refill, worst, flags, topup, len(buffer), hold_us
            )
        ]
        for request, _ in buffer:
            lease = request._lease
            args.append(lease[0])  # type: ignore[index]
            args.append(lease[1])  # type: ignore[index]
        args.extend(extra)
        # FCALL, function, 1, prefix, owner, call number, then args.
        start = b"*%d\r\n%b" % (6 + len(args), head)
        rest = pack_args(args)

        number = b"%d" % self._calls
        if self._lost is not None and prefix is None:
            # Calls from _lost on went unanswered: the function gives back
            # what they leased (see give_back_lost in refill.lua).
            number += b"g%d" % self._lost

        def retried() -> bytes:
            # The function then checks whether its first run completed.
            return start + pack_args([b"r" + number]) + rest

        packed = start + pack_args([number]) + rest
        sent = self._link.send(packed) if send else None
        return packed, retried, doing, prefix, bool(buffer), sent, started

    def _call_end(self, pending: Pending) -> list[Any]:
        """The reply of a call `_call_start` packed (or sent), its leases taken."""
        packed, retried, doing, prefix, buffered, sent, started = pending
        try:
            reply: list[Any]
            if sent is None:
                reply = self._link.call(packed, doing, retried=retried)
            else:
                reply = self._link.receive(packed, doing, sent=sent, retried=retried)
        except StoreError:
            if prefix is None:
                if buffered:
                    self._suspect = True
                if self._lost is None:
                    self._lost = self._calls
            raise
        if prefix is None:
            self._answered(buffered, reply[1])
            if reply[1] or len(reply) > 2:
                self._take(reply, started)
        return reply

    def _answered(self, buffered: bool, returned: int) -> None:
        """Note a call answered; ``returned``: its reply's give-back flag (see `_take`).

        A fault the call met (retried, then answered) leaves the requests
        held before it suspect (see `WorkerCounts._faulted`) unless the
        reply gave them back.
        """
        self._suspect = buffered and self._faults != self._call_faults and returned % 4 != 1
        self._lost = None

    def _links_start(
        self, flags: int, header: Sequence[Any], tail: list[bytes], refill: int, send: bool
    ) -> Pending:
        """Pack a call of add_links (lua/links.lua), and with ``send`` send it now.

        Only for a call that carries links alone, as `RedisStore.add_start`
        decides: ``flags`` and ``header`` (the rest of `LINKS_HEADER`),
        ``tail`` the entries and what follows them, ``refill`` no more than
        the prefetched requests held. `_links_end` gets its reply.
        """
        started = time.monotonic()
        self._before_call()
        buffer = self._buffer
        if buffer:
            # Should a link come first, the function gives them back (see
            # conclude in refill.lua), and leases as many afresh.
            lease_ms, delay_us, _, hold_us = self._policy_numbers
            worst = -buffer[-1][0].priority
            topup = self._topup(refill)
            tail.append(
                LINKS_HELD.pack(lease_ms, delay_us, refill, len(buffer), worst, topup, hold_us)
            )
            for request, _ in buffer:
                lease = request._lease
                tail.append(lease[0])  # type: ignore[index]
                tail.append(lease[1])  # type: ignore[index]
            flags |= 16
        self._calls += 1
        head = self._heads.get(b"links")
        if head is None:
            head = self._heads[b"links"] = pack_args(
                [b"FCALL", self._functions[b"links"], b"1", self._prefix, self._owner]
            )
        # FCALL, function, 1, prefix, owner, call number, header, tail.
        start = b"*%d\r\n%b" % (7 + len(tail), head)
        rest = pack_args([LINKS_HEADER.pack(flags, *header), *tail])
        # (No "gL" on the number: the store makes no lean call while calls went unanswered.)
        number = b"%d" % self._calls

        def retried() -> bytes:
            return start + pack_args([b"r" + number]) + rest

        packed = start + pack_args([number]) + rest
        sent = self._link.send(packed) if send else None
        return packed, retried, "adding", None, bool(buffer), sent, started

    def _links_end(self, pending: Pending) -> bytes:
        """The outcome of an add_links call `_links_start` packed (or sent)."""
        packed, retried, doing, _, buffered, sent, started = pending
        try:
            reply: bytes | list[Any]
            if sent is None:
                reply = self._link.call(packed, doing, retried=retried)
            else:
                reply = self._link.receive(packed, doing, sent=sent, retried=retried)
        except StoreError:
            if buffered:
                self._suspect = True  # it may have given them back
            if self._lost is None:
                self._lost = self._calls
            raise
        self._answered(buffered, 0 if isinstance(reply, bytes) else reply[1])
        if isinstance(reply, bytes):
            return reply
        # The prefetched requests went back (or were topped up): see _take.
        self._take(reply, started)
        outcome: bytes = reply[0]
        return outcome

    def _refill(self, finishing: bool) -> int:
        """How many prefetched requests a changing call should leave this store holding.

        What the caller said with `expect_pops` (at least those held now),
        said for this call only; else those held now, or one for a caller
        that keeps popping when the call ends leases (``finishing``).
        """
        demand, self._demand = self._demand, None
        self._said = demand is not None
        held = len(self._buffer)
        self._topup_room = 2 * max(demand or 0, 2)
        if demand is not None:
            return max(held, demand)
        return held or int(self._popping and finishing)

    def _topup(self, refill: int) -> int:
        """How many prefetched requests a top-up may leave this store holding (0: none).

        When a call brings a request before the last one held, the function
        either gives those held back and leases afresh, or (a top-up) leases
        what comes before it on top, and this store merges them in by
        priority, then id (see conclude in refill.lua): priority order and
        first-in-first-out within a host stay exact, the fewest-in-flight
        order between hosts of one priority does not. So only with
        ``ack_delay`` > 0, whose acks waiting already make that order
        approximate. At most twice the pops the caller last said follow
        (`expect_pops`; 2 when unsaid), at least 4, at most ``prefetch``:
        a deeper batch only makes the next top-up likelier.
        """
        if self._ack_delay <= 0:
            return 0
        return min(self._prefetch, self._topup_room)

    def _take(self, reply: list[Any], started: float) -> None:
        """Take the requests a function just leased, as prefetched ones.

        They replace those held if the function gave them back (``reply[1]``
        1), are merged in by priority then id after a top-up (2), else they
        follow them. ``started``: when the call was packed, which its leases
        cannot precede.
        """
        buffer = self._buffer
        returned, first = reply[1], 2
        if returned >= 4:
            # Fewer leased than asked: nothing else was ready. The caller
            # said its pops follow this call (`expect_pops`): once these
            # are served, its next pop is None without a call, and its next
            # `next_ready_in` the wait this reply says, for SHORT_FOR seconds.
            returned, first = returned - 4, 3
            wait = reply[2]
            self._short_at, self._short_pop, self._short_wait = started, True, True
            # (From the reply, as a look at the server counts it: a wake-up
            # a little early would only find nothing and wait again.)
            self._short_ready = math.inf if wait < 0 else time.monotonic() + wait / 1_000_000
        if returned == 2 and buffer:
            merged = list(buffer)
            items = iter(reply[first:])
            for id_, token, host, payload in zip(items, items, items, items, strict=True):
                request = decode_request(payload)
                request._lease = new_lease(Lease, (id_, token, host, self.origin))
                merged.append((request, host))
            # (stable: those held keep their order among equals)
            merged.sort(key=lambda item: (-item[0].priority, item[0]._lease[0]))  # type: ignore[index]
            self._buffer = deque(merged)
            return
        if returned or not buffer:
            buffer = self._buffer = deque()
            # The staleness of a batch counts from its oldest lease: from
            # the call's first send, not its reply, since a call retried
            # across an outage may return a first run's leases (the same
            # call number) that are older than the wait for the reply.
            self._fetched_at = started
            # Their hold counts from the reply (see _stale), the oldest's
            # when more join them.
            self._replied_at = time.monotonic()
        items = iter(reply[first:])
        for id_, token, host, payload in zip(items, items, items, items, strict=True):
            request = decode_request(payload)
            request._lease = new_lease(Lease, (id_, token, host, self.origin))
            buffer.append((request, host))

    def _answered_short(self, buffer: deque[tuple[Request, bytes]]) -> bool:
        """Whether the last call's short lease answers this pop: None, once (see _take)."""
        self._short_pop = False
        now = time.monotonic()
        if buffer or self._waiting or now - self._short_at > SHORT_FOR:
            return False
        ready = self._short_ready
        if ready is None or ready - now < SHORT_SOON:
            # A request ready that soon is worth the round trip: a caller
            # woken by a timer would come later (a polite crawl at its
            # hosts' pace lost 3% of its pages/s waiting for timers).
            return False
        self._popping = False
        return True

    def _answered_wait(self) -> tuple[bool, float | None]:
        """The last call's short lease as this wait's answer: (True, seconds or None), once."""
        ready = self._short_ready
        if not self._short_wait or ready is None or self._waiting:
            return False, None
        self._short_wait = False
        now = time.monotonic()
        if now - self._short_at > SHORT_FOR:
            return False, None
        return True, None if ready == math.inf else max(0.0, ready - now)

    def _stale(self) -> bool:
        """Whether the prefetched requests must go back rather than out.

        After a failed call (they may be back already), once half their
        lease has passed, and with a host delay once they have waited half
        `Policy.hold` since their reply: the server keeps their hosts for the
        delay plus the hold, so that one going out now is still the delay
        after its host's last hand-out, in any worker (the asyncio
        `Scheduler` may keep it the other half).
        """
        return self._expired() or (
            self._hold_limit > 0 and time.monotonic() - self._replied_at > self._hold_limit
        )

    def _expired(self) -> bool:
        """Whether the batch a call just leased may hold ended leases (see `_stale`)."""
        return self._suspect or time.monotonic() - self._fetched_at > self._lease_timeout / 2

    def _fetch(self) -> deque[tuple[Request, bytes]]:
        """Lease a new batch (acks waiting go first, in the same call); return it."""
        # Grow the batch while the caller drains full batches quickly; shrink
        # it when they sit (prefetched requests hold their hosts' slots).
        now = time.monotonic()
        if self._fetched_full:
            # (With a host delay, a batch kept longer than the hold goes back.)
            fast = min(_FAST_DRAIN, self._hold_limit) if self._hold_limit else _FAST_DRAIN
            if now - self._fetched_at < fast:
                self._want = min(self._want * 2, self._prefetch)
            else:
                self._want = max(1, self._want // 2)
        want, demand = self._want, self._demand
        self._said = demand is not None
        if demand is not None:
            # The caller pops this many now and no more before its next call.
            want, self._demand = max(1, demand), None
        waiting = self._waiting
        if waiting:
            # The acks waiting end their leases first, then the refill is
            # leased, in one call: the lease counts it sees are current.
            extra = [b"a", b"%d" % (len(waiting) // 2), *waiting]
            self._call(b"ack_or_release", want, True, extra, "popping")
            self._waiting, self._waiting_hosts = [], set()
        else:
            self._call(b"pop", want, True, [], "popping")
        buffer = self._buffer
        if not buffer:
            self._short_pop = False  # (this pop has its answer, None: the next one asks)
        self._fetched_full = len(buffer) == want
        return buffer
