"""The synchronous frontier: validation, fingerprints and codec in front of a store."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from ._batch import check_state, with_skipped
from ._controls import HostControls
from ._due import Revisit
from ._entries import EntryChecks, Invalid
from ._errors import ConfigError, FrontierClosed, InvalidRequest
from ._fingerprint import Fingerprinter
from ._finishing import Finishing
from ._lease import Lease
from ._policy import Policy
from ._recent import RecentlySeen
from ._request import MAX_URL_LENGTH, Request
from .stores.base import Counters, Entry, HostCount, Refetch, Store

__all__ = ["Counters", "Frontier", "FrontierStats", "HostCount", "Invalid"]


@dataclass(frozen=True, slots=True)
class FrontierStats:
    """A snapshot of a frontier's counts, read from its store."""

    #: Requests waiting to be handed out.
    queued: int
    #: Requests handed out and not yet acked or released.
    leased: int
    #: Distinct fingerprints recorded for deduplication.
    seen: int
    #: The store's URL, without any password.
    store: str
    #: Per-host counts, busiest first, when asked for with ``hosts=True``.
    hosts: tuple[HostCount, ...] | None = None
    #: Store-specific figures, e.g. a Bloom filter's fill ratio.
    extra: Mapping[str, float] = field(default_factory=dict)
    #: Invalid requests ``add_many(..., invalid="skip")`` skipped through this
    #: frontier object since it was opened (not stored: one process's count).
    skipped: int = 0
    #: What happened to the crawl's requests since it was created (kept by
    #: the store: every worker's): accepted, duplicates, capped, popped...
    counters: Counters = field(default_factory=Counters)
    #: With ``hosts``: how many hosts hold requests (queued or leased), and
    #: how many are blocked now, listed or not.
    busy_hosts: int | None = None
    blocked_hosts: int | None = None
    #: Requests held but not due yet (``not_before``, a delayed release, a
    #: refetch); not in ``queued``.
    scheduled: int = 0
    #: The part of ``scheduled`` that refetches pages already done.
    revisits: int = 0
    #: Seconds until the first scheduled request is due; None: none is.
    next_due_in: float | None = None


class Frontier(EntryChecks, Finishing, HostControls):
    """Stores requests, drops the ones already seen, hands out the next ready one.

    Use `open_frontier` to make one. Every method is synchronous and returns
    without waiting for a request to become ready; `Scheduler` is the asyncio
    layer that waits. See ``crawlq.stores.base`` for the semantics every store
    shares.

    Threads: the reading and bookkeeping methods (`stats`, ``len()``,
    `next_ready_in`, `seen_many`, `flush`, the state methods, `close`) take
    the frontier's lock, so any thread may call them while a `Scheduler`
    works the store on its own thread. The per-request methods (`add`,
    `add_many`, `pop`, `ack`, `release`) do not (a lock would cost the memory
    store a tenth of its speed): call them from one thread at a time, and
    through the scheduler while one runs. Opened with ``threads=True``,
    every method may be called from any thread: calls made while another
    thread's store call runs are combined into the next one (one commit or
    round trip for all of them; see ``crawlq._combined``).
    """

    __slots__ = (
        "_closed",
        "_fingerprinter",
        "_lock",
        "_max_url_length",
        "_needs_payload",
        "_origin",
        "_recent",
        "_revisit",
        "_skipped",
        "_store",
        "_store_ack",
        "_store_add",
        "_store_pop",
        "policy",
        "url",
    )

    def __init__(
        self,
        store: Store,
        *,
        policy: Policy,
        fingerprinter: Fingerprinter,
        url: str,
        max_url_length: int = MAX_URL_LENGTH,
        revisit: Revisit | None = None,
    ) -> None:
        if revisit is not None and not isinstance(revisit, Revisit):
            raise ConfigError(f"revisit must be a crawlq.Revisit, not {revisit!r}")
        self._revisit = revisit
        self._store = store
        self._max_url_length = max_url_length
        self._fingerprinter = fingerprinter
        self._needs_payload = store.needs_payload
        self._store_add = store.add
        self._store_ack = store.ack
        self._store_pop = store.pop
        self._origin = store.origin
        # A shared store's recently answered fingerprints (see crawlq._recent).
        recent_seen = getattr(store, "recent_seen", None)
        self._recent: RecentlySeen | None = None if recent_seen is None else recent_seen()
        self._closed = False
        self._skipped = 0
        # Held by a Scheduler's store thread for each of its batches of calls.
        self._lock = threading.RLock()
        self.policy = policy
        self.url = url

    @property
    def shared(self) -> bool:
        """True if other processes may add or ack in this frontier's store (Redis)."""
        return self._store.shared

    @property
    def durable(self) -> bool:
        """True if accepted requests outlive this process (SQLite jobs, Redis)."""
        return self._store.durable

    @property
    def fingerprinter(self) -> Fingerprinter:
        """The fingerprinter that decides which requests are duplicates."""
        return self._fingerprinter

    @property
    def max_url_length(self) -> int:
        """The longest URL this frontier accepts (`open_frontier`'s ``max_url_length``)."""
        return self._max_url_length

    def add(self, request: Request) -> bool:
        """Queue ``request`` unless it was seen before; return False for a duplicate.

        Raises `InvalidRequest` (or `SerializationError`) for a request that
        cannot be stored, `FrontierClosed` after ``close()``, `StoreError` when
        the store fails; in every case nothing was stored.
        """
        if self._closed:
            raise FrontierClosed(f"frontier {self.url} is closed")
        if self._recent is None:
            return self._store_add((self._entry(request),))[0]
        return self._add_known([self._entry(request)], ())[0]

    @overload
    def add_many(
        self,
        requests: Iterable[Request | str],
        *,
        fingerprints: Sequence[bytes] | None = None,
        ack: Request | Iterable[Request] | None = None,
        lifo: bool | None = None,
        invalid: Literal["raise"] = "raise",
        refetch_after: float | None = None,
        changed: bool | None = None,
    ) -> list[bool]: ...

    @overload
    def add_many(
        self,
        requests: Iterable[Request | str],
        *,
        fingerprints: Sequence[bytes] | None = None,
        ack: Request | Iterable[Request] | None = None,
        lifo: bool | None = None,
        invalid: Invalid,
        refetch_after: float | None = None,
        changed: bool | None = None,
    ) -> list[bool | None]: ...

    def add_many(
        self,
        requests: Iterable[Request | str],
        *,
        fingerprints: Sequence[bytes] | None = None,
        ack: Request | Iterable[Request] | None = None,
        lifo: bool | None = None,
        invalid: Invalid = "raise",
        refetch_after: float | None = None,
        changed: bool | None = None,
    ) -> list[bool] | list[bool | None]:
        """Queue a batch (the links of one page, say); False marks each duplicate.

        Each item is a `Request` or a URL string (``Request(url)`` with
        default fields). With ``invalid="raise"`` (the default) the batch is
        validated whole before anything is stored, so one bad request raises
        `InvalidRequest` and stores none of the batch. With
        ``invalid="skip"`` a request that cannot be stored (a URL that is not
        absolute http(s), meta msgpack cannot encode...) is skipped: it is
        never stored, its place in the result is ``None`` (not False, which
        means a duplicate), and it is counted in ``stats().skipped``; the rest
        of the batch is added. An item that is neither a `Request` nor a str
        is a bug in the caller and raises `InvalidRequest` either way.

        A durable store writes the batch in one transaction. ``fingerprints``,
        one per request (at least 16 bytes each; the first 16 count), replaces
        the frontier's own fingerprinter, for crawlers that fingerprint
        requests their own way (Scrapy's ``crawler.request_fingerprinter``); a
        request that also has a ``meta["download_slot"]`` then needs nothing
        from its URL, which is stored as given without being parsed. ``ack``
        is a popped request (or several) to mark done in the same durable
        step, after the batch: the page whose links these are. A durable store
        then commits once, not twice. ``refetch_after`` and ``changed``
        make those acks refetches, as `ack` says (the page is due again later).
        ``lifo`` orders this batch against the frontier's ``lifo`` setting
        (None: the setting): within a priority, requests added FIFO come out
        oldest first, requests added LIFO newest first, and every request
        added FIFO comes before every request added LIFO. Scrapy's start
        requests, say, keep the order they were yielded in a LIFO crawl.
        Raises `FrontierClosed` after ``close()`` and `StoreError` when the
        store fails; nothing of the batch is stored then.
        """
        if self._closed:
            raise FrontierClosed(f"frontier {self.url} is closed")
        entries, skipped = self._prepare(requests, fingerprints, invalid)
        finished: Sequence[object] = ()
        refetch = None
        if ack is not None:
            pages = [ack] if isinstance(ack, Request) else list(ack)
            finished = self._leases(pages)
            refetch = self._refetches(pages, refetch_after, changed)
        else:
            self._check_refetch_kinds(refetch_after=refetch_after, changed=changed)
        if lifo is not None and lifo is not self.policy.lifo:
            if type(lifo) is not bool:
                raise InvalidRequest(f"lifo must be True, False or None, not {lifo!r}")
        else:
            lifo = None
        if self._recent is not None:
            added = self._add_known(entries, finished, lifo=lifo, refetch=refetch)
        else:
            added = self._send(entries, finished, lifo, refetch)
        if not skipped:
            return added
        self._skipped += len(skipped)
        return with_skipped(added, skipped)

    def _count_skipped(self, skipped: list[int] | None) -> None:
        if skipped:
            self._skipped += len(skipped)

    def _send(
        self,
        entries: Sequence[Entry],
        finished: Sequence[object],
        lifo: bool | None,
        refetch: Sequence[Refetch | None] | None,
    ) -> list[bool]:
        """One store add of prepared entries and the leases they finish (none: no call)."""
        if not entries and not finished:
            return []
        if refetch is not None:
            return self._store.add(entries, finished, lifo=lifo, refetch=refetch)
        if lifo is not None:
            return self._store.add(entries, finished, lifo=lifo)
        return self._store.add(entries, finished)

    def _add_known(
        self,
        entries: list[Entry],
        finished: Sequence[object],
        *,
        lifo: bool | None = None,
        refetch: Sequence[Refetch | None] | None = None,
    ) -> list[bool]:
        """Add through the store's `RecentlySeen`: the links it knows are refused here."""
        recent = self._recent
        assert recent is not None
        sent, known = recent.split(entries) if entries else (entries, None)
        added = self._send(sent, finished, lifo, refetch)
        recent.learn(sent, added)
        return added if known is None else recent.merge(added, known, len(entries))

    def _write(self, entries: list[Entry], leases: Sequence[Lease]) -> list[bool]:
        """Store prepared entries and end leases in one store operation (for `Scheduler`)."""
        self._check_open()
        if self._recent is not None:
            return self._add_known(entries, leases)
        return self._store.add(entries, leases) if entries or leases else []

    def _expect_pops(self, count: int | None) -> None:
        """Tell a store that prefetches (Redis) that ``count`` pops follow its next call.

        For `Scheduler`: the requests are then leased in the round trip of the
        batch's write, after it (None: no longer said). A no-op for the other
        stores.
        """
        expect = getattr(self._store, "expect_pops", None)
        if expect is not None:
            expect(count)

    def _on_store_fault(self, forget: Callable[[], None]) -> None:
        """Call ``forget`` when the store meets a fault that may have lost writes.

        For caches of what the store answered (the Scrapy scheduler's):
        Redis calls it on a lost connection, a timeout or a failover; the
        other stores never lose acknowledged writes, and never call it.
        """
        register = getattr(self._store, "on_fault", None)
        if register is not None:
            register(forget)

    def _counts(self) -> tuple[int, int]:
        """Requests to hand out (queued, or scheduled but revisits) and leased (for `Scheduler`).

        Revisits are left out: a one-shot crawl is done without them (see
        `Scheduler.join`).
        """
        self._check_open()
        counts = self._store.counts()
        return counts.queued + counts.scheduled - counts.revisits, counts.leased

    def seen(self, request: Request) -> bool:
        """Return True if ``request`` is a duplicate: `add` would refuse it now.

        Read-only: nothing is recorded. ``dont_filter`` is not considered (a
        ``dont_filter`` request is added whether seen or not). With a Bloom
        filter a True may be a false positive, exactly when `add` would
        refuse the request too. Raises `InvalidRequest` for a URL crawlq
        cannot fingerprint.
        """
        return self.seen_many((self._fingerprinter.fingerprint(request),))[0]

    def seen_many(self, fingerprints: Sequence[bytes]) -> list[bool]:
        """Return, for each fingerprint, whether `add` would refuse its request now.

        Fingerprints are those `add_many` takes (at least 16 bytes; the
        first 16 count), or ``frontier.fingerprinter.fingerprint(request)``.
        One store operation for the whole sequence.
        """
        if self._closed:
            raise FrontierClosed(f"frontier {self.url} is closed")
        for fingerprint in fingerprints:
            if type(fingerprint) is not bytes or len(fingerprint) < 16:
                raise InvalidRequest(
                    f"a fingerprint must be at least 16 bytes, not {fingerprint!r}"
                )
        if not fingerprints:
            return []
        with self._lock:
            return self._store.seen([fingerprint[:16] for fingerprint in fingerprints])

    def pop(self) -> Request | None:
        """Lease and return the next ready request; None if none is ready now.

        The returned request must be finished with `ack` or put back with
        `release`; if neither happens within ``lease_timeout`` it comes back
        by itself.
        """
        if self._closed:
            raise FrontierClosed(f"frontier {self.url} is closed")
        # Read as an attribute, then called: Python 3.11 cannot specialise a
        # method-style call of a callable kept in a slot (``self._store_pop()``).
        store_pop = self._store_pop
        return store_pop()

    def flush(self) -> None:
        """Make every ack made so far durable now.

        Acks wait in memory for the store's next write, at most ``ack_delay``
        seconds (an option of `open_frontier`, default 0.5); a kill before
        they are written hands their requests out again. ``close()`` flushes
        too. Raises `FrontierClosed` after ``close()``, `StoreError` when the
        store fails (the acks stay waiting).
        """
        if self._closed:
            raise FrontierClosed(f"frontier {self.url} is closed")
        with self._lock:
            self._store.flush()

    def next_ready_in(self) -> float | None:
        """Seconds until `pop` may return a request (0.0: now; None: only after an add)."""
        if self._closed:
            raise FrontierClosed(f"frontier {self.url} is closed")
        with self._lock:
            return self._store.next_ready_in()

    def __len__(self) -> int:
        """Every request the frontier holds: queued, leased and scheduled."""
        with self._lock:
            counts = self._store.counts()
        return counts.queued + counts.leased + counts.scheduled

    def _replace_store(self, store: Store) -> None:
        """Put ``store``, a wrapper of the current one (`crawlq.metrics`), in its place."""
        with self._lock:
            self._store = store
            self._store_add, self._store_ack, self._store_pop = store.add, store.ack, store.pop

    def stats(self, *, hosts: bool | int = False) -> FrontierStats:
        """Return counts from the store; ``hosts=True`` (or a limit) adds per-host figures.

        Per host (`HostCount`): queued, leased, seconds left of a block, its
        own policy and how many requests it ever had accepted; the busiest
        hosts first, then blocked hosts and hosts with a policy of their own.
        """
        if self._closed:
            raise FrontierClosed(f"frontier {self.url} is closed")
        with self._lock:
            counts = self._store.counts()
            per_host = busy = blocked = None
            if hosts:
                limit = 50 if hosts is True else int(hosts)
                listed = self._store.host_counts(limit)
                per_host, busy, blocked = tuple(listed), listed.busy, listed.blocked
            extra = self._store.extra_stats()
        return FrontierStats(
            counts.queued,
            counts.leased,
            counts.seen,
            self.url,
            per_host,
            extra,
            self._skipped,
            counts.counters,
            busy,
            blocked,
            counts.scheduled,
            counts.revisits,
            counts.next_due_in,
        )

    def load_state(self) -> dict[str, Any]:
        """Return the crawler's key/value state, as last saved (like Scrapy's ``spider.state``).

        Durable stores keep it across restarts; the memory store keeps it for
        the life of the frontier.
        """
        self._check_open()
        with self._lock:
            return self._store.load_state()

    def save_state(self, state: Mapping[str, Any]) -> None:
        """Replace the crawler's key/value state; values must be msgpack-able.

        Raises `SerializationError` naming a value that cannot be stored.
        """
        self._check_open()
        check_state(state)
        with self._lock:
            self._store.save_state(state)

    def _check_open(self) -> None:
        if self._closed:
            raise FrontierClosed(f"frontier {self.url} is closed")

    @property
    def closed(self) -> bool:
        """True after `close`."""
        return self._closed

    def close(self) -> None:
        """Close the store. Durable state stays; closing twice does nothing."""
        with self._lock:  # after a Scheduler's store call in flight, never during it
            if not self._closed:
                self._closed = True
                self._store.close()

    def __enter__(self) -> Frontier:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<Frontier {self.url} {state}>"
