"""The Redis store: many crawler processes share one frontier.

``redis://[user:password@]host:port/db?crawl=NAME`` (also ``rediss://`` and
``unix:///path.sock?db=N&crawl=NAME``). The crawl name namespaces every key,
so many crawls share one server; all keys of a crawl carry the hash tag
``{NAME}`` and so sit in one cluster slot. Every change is one call of a Lua
function run atomically by the server (Redis Functions, from the package's
``stores/redis/lua/*.lua``, where the key layout is documented; Redis 7.0 or newer):
add is dedup plus enqueue for a whole batch; pop leases a batch in the order
of ``stores/base.py`` under per-host delay and concurrency kept in Redis, so
every worker shares them; ack and release end leases. Time is the server's
(``TIME``), never a worker's clock.

Prefetch
    A pop leases up to ``prefetch`` requests in one round trip (growing from 1
    while the caller keeps draining them quickly) and serves them locally.
    They are real leases: other workers never get them, and they count as
    leased for everyone but this store, which reports them as queued. A batch
    is a snapshot in order; to keep one process's order exact, any add, ack or
    release that makes a request at least as good as the last prefetched one
    ready gives the batch back and leases afresh, in that same round trip.
    While the caller keeps popping, an ack or release also leases the next
    request, so a pop / add / ack loop pays two round trips per step. A caller
    that knows how many pops follow its next call (the asyncio `Scheduler`:
    one per waiting getter) says so with `expect_pops`: that call leases them
    behind its own changes, and prefetched requests that need not go back
    stay, the new ones after them. Other workers' changes, and hosts whose
    delay ends meanwhile, count from the next round trip. Unserved requests
    go back at ``close()``, and are given back rather than served once half
    their ``lease_timeout`` (with a host delay, half `Policy.hold`) has passed.

Settings
    ``lifo`` and the dedup mode (exact, or Bloom with ``bloom_capacity`` and
    ``bloom_error_rate``) are fixed when a crawl is created; a later open
    with others raises `IncompatibleStore`, one without Bloom options adopts
    the crawl's filter. ``host_delay``, ``host_concurrency`` and
    ``lease_timeout`` travel with each call, so they apply to what each worker
    pops: give every worker the same ones.

Durability
    What Redis keeps: with ``appendonly yes`` and ``appendfsync always`` an
    acknowledged call survives a server crash. A call whose reply was lost is
    retried with the same call number; the function remembers each worker's
    last outcome and returns it instead of running twice. When the retries
    give up (`StoreUnavailable`), the worker's next call gives back what the
    unanswered call leased, so a long outage leaves no lease stuck until
    ``lease_timeout``.

Due times
    A request added with a ``not_before`` still to come, released with a
    delay, or acked with a refetch waits in the crawl's ``due`` sorted set
    (``lua/due.lua``), judged by the server's clock; the pops of every worker
    move the due ones into their hosts' queues, a bounded batch per call,
    each in a constant number of commands however long its host's list
    (``r:HOST`` in ``lua/queues.lua``). Counts take a request whose due time
    has come as queued before a pop moves it (``due_figures`` in
    ``lua/read.lua``). Refetches and delayed releases are sent at once
    (never held for ``ack_delay``), so what they schedule is stored when
    they return.

Nothing is wiped implicitly: ``close()`` never deletes shared data. `purge`
removes a crawl and `inspect` describes one (both for the ``crawlq`` CLI).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from itertools import compress
from operator import itemgetter
from typing import Any, Final

from ..._errors import StoreError
from ..._fingerprint import Fingerprinter
from ..._policy import Policy
from ..._recent import RecentlySeen
from ..._request import Request
from ..base import Entry, Refetch, StoreCounts
from . import finishing
from .calls import FunctionCalls
from .client import acquire_client, redis_module, release_client
from .config import RedisURL, Settings, parse_url
from .conn import Link
from .controls import RedisControls
from .finishing import Finishing, finish_items
from .inspection import Inspection, inspect, purge, server_counters
from .lean import LeanAdds, PendingAdd, WorkerCounts
from .open import Dedup, check_server, open_crawl
from .state import bloom_stats, load_state, save_state
from .wire import pack, pack_entries

__all__ = [
    "OPTIONS",
    "Inspection",
    "RedisStore",
    "inspect",
    "open_store",
    "purge",
]

#: Options of the Redis store, besides the common ones.
OPTIONS: Final = (
    "prefetch",
    "bloom_capacity",
    "bloom_error_rate",
    "retry_timeout",
    "allow_eviction",
)

_ACCEPTED_EVERY: Final = 1.0  # seconds a worker may hold its per-host accepted counts
_HOST: Final = itemgetter(1)  # an Entry's host

log = logging.getLogger("crawlq.redis")


def open_store(
    url: str, policy: Policy, fingerprinter: Fingerprinter, options: dict[str, Any]
) -> tuple[RedisStore, str]:
    """Open (creating if new) the crawl a Redis URL names, after a self-check.

    Returns the store and its URL with the password masked. Raises
    `ConfigError` for a bad URL or option, or a missing redis-py;
    `StoreUnavailable` when the server cannot be reached; `StoreError` for
    wrong credentials, a database the server does not have, a server older
    than Redis 7.0, or a failed self-check; `IncompatibleStore` for a crawl
    created with other ``lifo`` or Bloom settings, or keys that are not
    crawlq's under the crawl's prefix.
    """
    location = parse_url(url)
    settings = Settings.from_options(options)
    redis_module()
    client = acquire_client(location)
    try:
        store = RedisStore(location, client, policy, fingerprinter, settings)
    except BaseException:
        release_client(location)
        raise
    return store, location.display


class RedisStore(FunctionCalls, Finishing, LeanAdds, WorkerCounts, RedisControls):
    """A frontier kept in Redis and shared by every process that opens its URL.

    Use `crawlq.open_frontier` with a ``redis://`` URL. See the module
    docstring for prefetch, durability and what ``close()`` keeps.
    """

    needs_payload = True
    durable = True
    shared = True

    def __init__(
        self,
        location: RedisURL,
        client: Any,
        policy: Policy,
        fingerprinter: Fingerprinter,
        settings: Settings,
        reroute: Callable[[], Any] | None = None,
        replicas: int = 0,
    ) -> None:
        self._location = location
        # Any frontier on the same crawl may finish a lease: the server checks it.
        self.origin = f"{location.display.partition('?')[0]}#{location.prefix}"
        self._prefix = location.prefix.encode()
        self._link = Link(location, client, settings.retry_timeout, reroute, replicas)
        self._functions = {
            name.encode(): function for name, function in self._link.library.function.items()
        }
        self._lease_timeout = policy.lease_timeout
        # Milliseconds (the delay in microseconds) of server time; rounded
        # up so nothing comes early.
        self._policy_numbers = (
            math.ceil(policy.lease_timeout * 1000),
            math.ceil(round(policy.host_delay * 1_000_000, 3)),
            policy.host_concurrency or 0,
            math.ceil(round(policy.hold * 1_000_000, 3)),
        )
        self._hold_limit = policy.hold / 2  # (see _stale)
        self._lifo = policy.lifo
        self._ack_delay = policy.ack_delay
        self._control_head = [
            b"%d" % math.ceil(round(policy.host_delay * 1_000_000, 3)),
            b"%d" % (policy.host_concurrency or 0),
        ]
        self._seen_ttl = policy.seen_ttl
        # add.lua's cap and TTL arguments (set once the crawl's dedup is known).
        self._add_tail = [b"%d" % (policy.max_requests_per_host or 0), b""]
        # The same for add_links's header.
        self._cap = policy.max_requests_per_host or 0
        self._ttl_ms: int | None = None
        # Without a cap, each host's accepted count is for stats only: this
        # worker adds its own up and sends them once a second (a command per
        # host per second, not per request); with a cap add.lua counts exactly.
        self._host_accepted: Counter[str] | None = (
            Counter() if policy.max_requests_per_host is None else None
        )
        self._host_accepted_at = time.monotonic()
        # Fingerprints the frontier refuses without a call (`recent_seen`),
        # and what forgets them when the server may have lost writes.
        self._recent: RecentlySeen | None = None
        self._fault_listeners: list[Callable[[], None]] = []
        self._link.on_fault = self._faulted
        # Acks not sent yet: (id, token) pairs and their hosts. They travel in
        # the next call (a prefetch refill, an add), at the latest once
        # ack_delay has passed since the first of them (see `ack`).
        self._waiting: list[bytes] = []
        self._waiting_hosts: set[bytes] = set()
        self._acks_since = 0.0
        self._prefetch = settings.prefetch
        self._want = 1
        # Requests the caller will pop right after its next call (see
        # `expect_pops`): that call leases them, behind its own writes. None:
        # not said, so guess (a caller that keeps popping gets one).
        self._demand: int | None = None
        self._said = False  # this call's refill is a demand said (see _take)
        # The last call leased fewer than asked for pops said to follow: it
        # answers the next pop and wait (see _take in calls.py).
        self._short_at = 0.0
        self._short_pop = False
        self._short_wait = False
        self._short_ready: float | None = None
        # How many prefetched requests a top-up may leave held (see `_topup`).
        self._topup_room = 4
        self._buffer: deque[tuple[Request, bytes]] = deque()
        self._fetched_at = self._replied_at = 0.0
        self._fetched_full = False
        self._popping = False
        # After a failed call the prefetched leases may have been given back
        # (the reply was lost): serve none, give them back at the next call.
        self._suspect = False
        # The first of the calls that went unanswered since the last answer
        # (their leases are given back by the next call), or None.
        self._lost: int | None = None
        self._calls = 0
        #: The next number after this store's last numbered add (cluster shards).
        self.id_mark = 0
        self._allow_eviction = settings.allow_eviction
        self._evicted = 0
        self._next_eviction_check()
        self._new_owner()
        try:
            self._open(policy, fingerprinter, settings)
        except BaseException:
            self._link.close()
            raise

    # -- opening --------------------------------------------------------------

    def _open(self, policy: Policy, fingerprinter: Fingerprinter, settings: Settings) -> None:
        self._evicted = check_server(self._link, self._location.display, self._allow_eviction)
        self._link.load_library("loading crawlq's functions")
        self._dedup: Dedup = open_crawl(self._link, self._location, policy, settings, fingerprinter)
        self._bloom_bits, self._bloom_hashes = self._dedup.bits, self._dedup.hashes
        if self._dedup.timed:
            ttl = self._seen_ttl
            self._ttl_ms = 0 if ttl is None else max(1, round(ttl * 1000))
            self._add_tail[1] = b"%d" % self._ttl_ms
        self._self_check(fingerprinter)

    # -- the store protocol ----------------------------------------------------

    def add(
        self,
        entries: Sequence[Entry],
        finished: Sequence[object] = (),
        *,
        lifo: bool | None = None,
        refetch: Sequence[Refetch | None] | None = None,
    ) -> list[bool]:
        return self.add_end(self.add_start(entries, finished, lifo, refetch=refetch))

    def add_start(
        self,
        entries: Sequence[Entry],
        finished: Sequence[object] = (),
        lifo: bool | None = None,
        send: bool = False,
        numbering: tuple[int, bytes, int] | None = None,
        refetch: Sequence[Refetch | None] | None = None,
    ) -> PendingAdd:
        """`add`, up to sending its call (with ``send``); `add_end` finishes it.

        A store that spreads one batch over several (a cluster crawl's
        shards) sends every part before it waits for any reply, and numbers
        the part's requests after the whole batch: ``numbering`` is (floor,
        each entry's place in the batch as packed uint32, batch size), see
        "Ids across shards" in add.lua; `add_end` then sets ``id_mark``. A
        shard's part that refetches must be numbered (its refetches take
        numbers after the floor), entries or none.
        """
        buffer = self._buffer
        if lifo is None:
            lifo = self._lifo
        waiting = self._waiting
        refill = self._refill(bool(finished) or bool(waiting))
        if self._lean(entries, finished, refill):
            return self._links_start_add(entries, lifo, send, numbering, refill)
        extra, dues = pack_entries(entries, self._bloom_bits, self._bloom_hashes, lifo)
        extra += self._add_tail
        items, hosts, stride = finish_items(finished, refetch, waiting, self._waiting_hosts)
        # Lua unpacks the leases onto its stack: more go in later calls, after
        # the batch, which keeps children durable before their parents' acks.
        chunk = stride * finishing.FINISH_CHUNK
        items, rest = items[:chunk], items[chunk:]
        count = len(items) // stride
        extra.append(b"%d" % count if stride == 2 else b"f%d" % count)
        extra.extend(items)
        if numbering is not None:
            floor, offsets, span = numbering
            extra += [b"%d" % floor, offsets, b"%d" % span]
        elif dues:
            extra += [b"", b"", b""]  # (not numbered)
        if dues:
            extra.append(dues)
        # As for an ack (see _finish): a finished lease of a prefetched host
        # gives the batch back, and a caller that keeps popping gets the next
        # request leased in this same call.
        force = bool(buffer) and (self._stale() or any(h in hosts for _, h in buffer))
        pending = self._call_start(b"add", refill, force, extra, "adding", None, send)
        later = (
            (b"a", 2, [])
            if stride == 2
            else (b"f", 5, [b"" if numbering is None else b"%d" % numbering[0]])
        )
        return pending, entries, bool(waiting), rest, hosts, later, numbering is not None, False

    def add_end(self, started: PendingAdd) -> list[bool]:
        """The outcome of an add `add_start` began (False marks a duplicate)."""
        pending, entries, waited, rest, hosts, later, numbered, lean = started
        outcome: bytes = self._links_end(pending) if lean else self._call_end(pending)[0]
        if numbered:
            outcome, _, mark = outcome.partition(b":")
            self.id_mark = int(mark)
        if waited:
            self._waiting, self._waiting_hosts = [], set()
        if rest:
            mode, stride, head = later
            self._finish_pairs(mode, rest, hosts, "acking", stride, head)
        added = [flag == 49 for flag in outcome]  # b"1"
        counts = self._host_accepted
        if counts is not None:
            # The hosts of the accepted requests, counted in C.
            counts.update(map(_HOST, compress(entries, added)))
        if (counts or self._recent is not None) and (
            time.monotonic() - self._host_accepted_at >= _ACCEPTED_EVERY
        ):
            self._send_host_accepted()
        return added

    def pop(self) -> Request | None:
        buffer = self._buffer
        if self._waiting and time.monotonic() - self._acks_since >= self._ack_delay:
            self.flush()  # may give the batch back and lease a new one
            buffer = self._buffer
        if buffer and not self._stale():
            self._popping = True
            return buffer.popleft()[0]
        if self._short_pop and self._answered_short(buffer):
            return None
        buffer = self._fetch()
        if buffer and self._expired():
            # Its call waited out an outage past half the lease time: its
            # leases may have ended already; lease afresh instead.
            buffer = self._fetch()
        if not buffer or self._expired():
            self._popping = False
            return None
        self._popping = True
        return buffer.popleft()[0]

    def peek(self) -> Request | None:
        """The request `pop` would return now (leased in a batch if need be), kept for `take`.

        For a store that merges several (a cluster crawl's shards): returns
        None, as `pop` would, when nothing is ready.
        """
        buffer = self._buffer
        if self._waiting and time.monotonic() - self._acks_since >= self._ack_delay:
            self.flush()
            buffer = self._buffer
        if not buffer or self._stale():
            if self._short_pop and self._answered_short(buffer):
                return None
            buffer = self._fetch()
            if buffer and self._expired():
                buffer = self._fetch()  # leases that may have ended: afresh (see pop)
            if not buffer or self._expired():
                self._popping = False
                return None
        return buffer[0][0]

    def take(self) -> Request:
        """Hand out the request `peek` returned."""
        self._popping = True
        return self._buffer.popleft()[0]

    def expect_pops(self, count: int | None) -> None:
        """Have the next changing call lease ``count`` requests (at most ``prefetch``).

        For a caller that pops that many right after its write, and no more
        before its next one (the asyncio `Scheduler`'s batch of waiting
        getters, 0 when none waits): they are leased in the write's own round
        trip, after its changes, so none is leased ahead only to be given
        back when the write brings better requests. None goes back to
        guessing from how the caller pops.
        """
        self._demand = None if count is None else min(count, self._prefetch)

    def counts(self) -> StoreCounts:
        self.flush()  # the server's lease counts then include this worker's acks
        queued, leased, seen, *figures, scheduled, revisits, due_in = self._read(b"counts")
        if self._recent is not None:
            figures[1] += self._recent.hits  # refused here, not sent yet
        # This store's own prefetched requests are not handed out yet.
        mine = len(self._buffer)
        counters = server_counters(figures, leased, mine)
        return StoreCounts(
            queued + mine,
            leased - mine,
            seen,
            counters,
            scheduled,
            revisits,
            None if due_in < 0 else due_in / 1_000_000,
        )

    def next_ready_in(self) -> float | None:
        if self._buffer and not self._expired():
            return 0.0  # (held past their hold, a pop leases them afresh)
        answered, wait = self._answered_wait()  # for pops said to follow (see _take)
        if answered:
            return wait
        # A host at its concurrency limit must not wait on acks held here.
        self.flush()
        if self._buffer and not self._expired():
            return 0.0  # (the acks' call leased it)
        wait = self._read(b"wait")
        return None if wait < 0 else wait / 1_000_000

    def seen(self, fingerprints: Sequence[bytes]) -> list[bool]:
        found: list[bool] = []
        # A few thousand at a time: Lua unpacks them onto its stack.
        for i in range(0, len(fingerprints), finishing.FINISH_CHUNK):
            chunk = list(fingerprints[i : i + finishing.FINISH_CHUNK])
            first = self._add_tail[1] if self._dedup.timed else b"%d" % self._bloom_bits
            reply = self._read(b"seen", first, b"%d" % self._bloom_hashes, *chunk)
            found.extend(flag == 1 for flag in reply)
        return found

    def _read(self, what: bytes, *args: bytes) -> Any:
        mode = b"bloom" if self._bloom_bits else b"timed" if self._dedup.timed else b"exact"
        command = pack([b"FCALL", self._functions[b"read"], b"1", self._prefix, what, mode, *args])
        return self._link.call(command, "reading counts" if what == b"counts" else "reading")

    def extra_stats(self) -> dict[str, float]:
        """Store-specific figures for ``stats()``: prefetch, and the Bloom filter's state.

        See `crawlq.stores.redis.state.bloom_stats` for the Bloom figures.
        """
        stats = {"prefetched": float(len(self._buffer))}
        if self._bloom_bits:
            stats.update(bloom_stats(self._link, self._prefix, self._dedup))
        return stats

    def load_state(self) -> dict[str, Any]:
        return load_state(self._link, self._prefix, self._location.display)

    def save_state(self, state: Mapping[str, Any]) -> None:
        save_state(self._link, self._functions[b"state"], self._prefix, state)

    def close(self) -> None:
        """Give back unserved prefetched requests; shared data stays untouched."""
        try:
            waiting = self._waiting
            if (self._buffer or waiting or self._lost is not None) and os.getpid() == self._pid:
                # Acks waiting, and the prefetched requests given back.
                extra = [b"a", b"%d" % (len(waiting) // 2), *waiting]
                self._call(b"ack_or_release", 0, True, extra, "closing")
                self._buffer.clear()
                self._waiting = []
            if os.getpid() == self._pid:
                self._send_host_accepted()
            self._link.command(
                b"HDEL", self._prefix + b"lease", b"@" + self._owner, doing="closing", retry=False
            )
        except StoreError as exc:
            # Not fatal: prefetched leases come back when they expire.
            log.warning("closing %s: %s", self._location.display, exc)
        finally:
            self._link.close()
            release_client(self._location)

    def __repr__(self) -> str:
        return f"<RedisStore {self._location.display}>"
