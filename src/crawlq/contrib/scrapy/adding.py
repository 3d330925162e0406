"""How the Scrapy adapter adds a request: as a payload in the store, or as an object.

`FrontierAdds` is the part of `Frontiers` that turns a Scrapy request into a
crawlq one (its fingerprint and download slot given, so the frontier does not
parse its URL; a URL crawlq does not take gets a placeholder and keeps the
real one in the payload), stores it as a pickle-free payload when the store
is durable, or keeps the object itself in memory under a token. With a
durable store it holds new requests for the next `FrontierAdds.flush`, which
writes them with the pending acks in one store call (children before parents):
one SQLite commit, or one Redis round trip shared by the pages that finished
since the last one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..._errors import InvalidRequest, StoreError
from ..._request import Request
from .codec import RequestCodec, Unserializable
from .settings import SchedulerConfig
from .source import Source as _Source
from .source import crawlq_priority

if TYPE_CHECKING:
    import scrapy

__all__ = ["PAYLOAD", "RUN", "SLOT", "TOKEN", "FrontierAdds", "Pending", "Unacked"]

#: What `FrontierAdds.add` stores of a request: its crawlq priority, download
#: slot, dont_filter, fingerprint, whether it is a start request, and its due
#: time (POSIX seconds; None: due now).
Entry = tuple[int, str, bool, bytes, bool, float | None]
#: A request held for the next flush: (crawlq request, fingerprint, a start
#: request added in its start queue's order apart from CRAWLQ_LIFO, the
#: Scrapy request).
Pending = tuple[Request, bytes, bool, Any]
#: A finished request whose ack is not written yet, and its refetch (seconds;
#: None: done for good).
Unacked = tuple[Request, float | None]

#: Meta keys of a stored Scrapy request: its download slot, its payload, and
#: (for one kept as an object) its token and the run that holds the object.
SLOT: Final = "download_slot"
PAYLOAD: Final = "scrapy"
TOKEN: Final = "scrapy_token"
RUN: Final = "scrapy_run"
#: crawlq URL of a request whose URL crawlq does not take (data:, file:, ...);
#: the real URL is in its payload.
_PLACEHOLDER_URL: Final = "http://crawlq.invalid/"
#: Most requests held for one flush.
_HOLD_MAX: Final = 1024


class FrontierAdds:
    """Adding of `Frontiers` (a mixin: its ``__init__`` sets the state)."""

    if TYPE_CHECKING:
        main: _Source
        config: SchedulerConfig
        failed: bool
        handed_out: int
        _codec: RequestCodec
        _count: Callable[[str], None]
        _on_failed: Callable[[StoreError], None]
        _on_duplicate: Callable[[Any, bool], None]
        _unacked: list[Unacked]
        _batching: bool
        _pending: list[Pending]
        _pending_keys: set[bytes]
        _starts_apart: bool
        _tokens: int
        _run: int

        def local_source(self) -> _Source: ...

    def add(
        self,
        request: scrapy.Request,
        *,
        fingerprint: bytes,
        dont_filter: bool,
        start: bool,
        slot: str,
        not_before: float | None = None,
    ) -> tuple[bool, bool, Unserializable | None]:
        """Add ``request``; return (added, stored as a payload, why it could not be).

        ``not_before`` (POSIX seconds) keeps it from being handed out before
        then. Raises `StoreError` when the store fails; nothing was added
        then. Raises `InvalidRequest` for a URL longer than the frontier's
        ``max_url_length``, before anything is held or stored.
        """
        priority = crawlq_priority(request.priority, start)
        entry: Entry = (priority, slot, dont_filter, fingerprint, start, not_before)
        if self.failed:
            return self._add_object(self.local_source(), request, entry), False, None
        main = self.main
        if not self.config.durable:
            return self._add_object(main, request, entry), False, None
        try:
            added = self._add_payload(main, request, entry)
        except Unserializable as exc:
            source = self.local_source() if self.config.shared else main
            return self._add_object(source, request, entry), False, exc
        return added, added, None

    def _crawlq_request(
        self, url: str, entry: Entry, meta: dict[str, Any], source: _Source
    ) -> Request:
        priority, _, dont_filter, _, _, not_before = entry
        try:
            creq = Request(
                url, priority=priority, meta=meta, dont_filter=dont_filter, not_before=not_before
            )
        except InvalidRequest:
            # Not an http(s) URL crawlq takes; the payload keeps the real one.
            return Request(
                _PLACEHOLDER_URL,
                priority=priority,
                meta=meta,
                dont_filter=dont_filter,
                not_before=not_before,
            )
        limit = source.frontier.max_url_length
        if len(url) > limit:
            # Refused now, as the frontier would refuse it: a request held
            # for the next flush must not fail there (with its batch).
            raise InvalidRequest(
                f"url {url[:200]!r}... is {len(url)} characters long, over the frontier's "
                f"max_url_length of {limit}; drop it, or raise max_url_length in CRAWLQ_OPTIONS"
            )
        return creq

    def _add(
        self, source: _Source, creq: Request, fingerprint: bytes, start: bool, request: Any
    ) -> bool:
        if self._batching and source is self.main and not self.failed:
            return self._hold(creq, fingerprint, start, request)
        # In memory (the store in memory, or the in-memory frontier beside a
        # durable one): nothing to batch, no ack waits for it.
        options: dict[str, Any] = {}
        if start and self._starts_apart:
            options["lifo"] = self.config.start_lifo
        added = source.frontier.add_many((creq,), fingerprints=(fingerprint,), **options)
        return bool(added[0])  # add_many is overloaded on invalid=; options are Any

    def _hold(self, creq: Request, fingerprint: bytes, start: bool, request: Any) -> bool:
        """Keep a new request for the next `flush`; False if it is a duplicate.

        This checks the requests held. On a store of this process alone the
        caller checked the store for the fingerprint, so the flush stores
        every one; a shared store (Redis) is not asked per request (a round
        trip each): the flush may find one a duplicate there (another worker,
        or an earlier run, added it), and reports it to ``on_duplicate``. The
        flush cannot refuse one otherwise: it comes with its fingerprint and
        download slot, so the frontier does not parse its URL.
        """
        if not creq.dont_filter:
            if fingerprint in self._pending_keys:
                return False
            self._pending_keys.add(fingerprint)
        self._pending.append((creq, fingerprint, start and self._starts_apart, request))
        # Written at once when no request is in flight and it is not a start
        # request (nothing would yield it again after a kill), or when many wait.
        if (not self.handed_out and not start) or len(self._pending) >= _HOLD_MAX:
            try:
                self.flush()
            except StoreError as exc:
                self._on_failed(exc)  # the request is in memory now: still added
        return True

    def _add_payload(self, source: _Source, request: scrapy.Request, entry: Entry) -> bool:
        _, slot, _, fingerprint, start, _ = entry
        meta: dict[str, Any] = {SLOT: slot}
        url = request.url
        creq = self._crawlq_request(url, entry, meta, source)
        meta[PAYLOAD] = self._codec.encode(request, with_url=creq.url != url)
        # With its fingerprint and slot given, the frontier does not parse
        # the URL: a URL crawlq's Request takes is stored as it is.
        return self._add(source, creq, fingerprint, start, request)

    def _add_object(self, source: _Source, request: scrapy.Request, entry: Entry) -> bool:
        _, slot, _, fingerprint, start, _ = entry
        meta: dict[str, Any] = {SLOT: slot, TOKEN: self._tokens + 1, RUN: self._run}
        creq = self._crawlq_request(request.url, entry, meta, source)
        self._tokens += 1
        token = self._tokens
        added = self._add(source, creq, fingerprint, start, request)
        if added:
            source.objects[token] = request
        return added

    def flush(self, *, lease: bool = False) -> None:
        """Write the requests held and the acks pending, in one durable step.

        Requests go first, acks after, in the same store call (acks whose
        refetch differs from the rest's follow at once, in their own): a
        page's ack is never durable before its links. On a shared store, a
        held request found a duplicate there goes to ``on_duplicate``. With
        ``lease`` (requests are handed out next), a store that prefetches
        (Redis) leases as many as may still be handed out, in the same round
        trip, behind the writes. Raises the store's `StoreError`; then the
        requests held go to the in-memory frontier (so the crawl loses none
        of them while it closes) and the acks are dropped (those requests
        come back on resume).
        """
        pending, unacked = self._pending, self._unacked
        if not pending and not unacked:
            return
        self._pending, self._pending_keys, self._unacked = [], set(), []
        main = self.main
        self.handed_out -= len(unacked)
        if self.failed:
            # Never acked now: they stay leased in the store until resume.
            self._rescue(pending)
            return
        # Runs of one order (start requests may be added FIFO in a LIFO crawl).
        runs: list[list[Pending]] = []
        for held in pending:
            if runs and runs[-1][0][2] == held[2]:
                runs[-1].append(held)
            else:
                runs.append([held])
        # Acks by refetch (seconds; None: none): one group goes with the last
        # run of adds (one call, the usual case), the others right after.
        groups: dict[float | None, list[Request]] = {}
        for creq, again in unacked:
            groups.setdefault(again, []).append(creq)
        frontier = main.frontier
        limit = self.config.max_in_flight
        # The engine asks for requests until none is ready: as many as may
        # still be handed out are leased by the last write, behind it (with
        # acks only, by the pop that sends them).
        pops = max(0, limit - self.handed_out) if lease and limit else None
        if pops is not None and not runs:
            frontier._expect_pops(pops)
        duplicates: list[Pending] = []
        try:
            for run in runs:
                if pops is not None and run is runs[-1]:
                    frontier._expect_pops(pops)
                options: dict[str, Any] = {}
                if run is runs[-1] and groups:
                    again, options["ack"] = groups.popitem()
                    if again is not None:
                        options["refetch_after"] = again
                added = frontier.add_many(
                    [held[0] for held in run],
                    fingerprints=[held[1] for held in run],
                    lifo=self.config.start_lifo if run[0][2] else None,
                    **options,
                )
                pending = pending[len(run) :]
                if not all(added):
                    duplicates += (held for held, new in zip(run, added, strict=True) if not new)
            for again, acked in groups.items():
                if again is None:
                    frontier.ack_many(acked)
                else:
                    frontier.ack_many(acked, refetch_after=again)
        except BaseException:
            self._rescue(pending)
            raise
        finally:
            for creq, _, _, request in duplicates:
                token = creq.meta.get(TOKEN)
                if token is not None:
                    main.objects.pop(token, None)
                self._on_duplicate(request, token is None)
        main.in_flight -= len(unacked)
        for _, again in unacked:
            self._count("crawlq/acked")
            if again is not None:
                self._count("crawlq/refetch_scheduled")

    def _rescue(self, pending: list[Pending]) -> None:
        """Move requests held for a store that failed to the in-memory frontier."""
        objects = self.main.objects
        local = self.local_source()
        for creq, fingerprint, _, request in pending:
            token = creq.meta.get(TOKEN)
            if token is not None:
                objects.pop(token, None)
            start = creq.priority % 2 == 0  # see crawlq_priority
            slot = creq.meta[SLOT]
            entry = (creq.priority, slot, creq.dont_filter, fingerprint, start, creq.not_before)
            self._add_object(local, request, entry)
