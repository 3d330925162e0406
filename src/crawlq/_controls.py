"""Crawl controls every worker of a frontier obeys: host blocks, per-host policy, forgetting.

They live in the store, next to the pacing they change, so every process
sharing a Redis crawl obeys them together and a SQLite job keeps them across
restarts. `HostControls` is mixed into `Frontier`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._errors import FrontierClosed, InvalidRequest
from ._policy import check_count, check_seconds
from ._request import Request

if TYPE_CHECKING:
    import threading

    from ._fingerprint import Fingerprinter
    from ._recent import RecentlySeen
    from .stores.base import Store

__all__ = ["HostControls", "HostPolicy"]


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """A host's own pacing, set with `Frontier.set_host_policy`; None: the frontier's."""

    #: Least seconds between two pops of the host.
    delay: float | None = None
    #: Most requests of the host leased at once.
    concurrency: int | None = None


def _host(host: Any) -> str:
    if type(host) is not str or not host:
        raise InvalidRequest(f"a host (download slot) must be a non-empty str, not {host!r}")
    return host


class HostControls:
    """The control methods of `Frontier` (a mixin: it holds no state of its own)."""

    __slots__ = ()

    if TYPE_CHECKING:
        _store: Store
        _recent: RecentlySeen | None
        _lock: threading.RLock
        _closed: bool
        url: str

        @property
        def fingerprinter(self) -> Fingerprinter: ...

    def _control_store(self) -> Store:
        if self._closed:
            raise FrontierClosed(f"frontier {self.url} is closed")
        return self._store

    def host_of(self, request: Request | str) -> str:
        """The host (download slot) the frontier paces ``request`` by.

        Its ``meta["download_slot"]`` if set, else its URL's host, lowercased,
        without the port: the name `block_host` and `set_host_policy` take.
        Raises `InvalidRequest` for a URL crawlq cannot read.
        """
        if isinstance(request, str):
            request = Request(request)
        slot = request.meta.get("download_slot") if request.meta else None
        if type(slot) is str and slot:
            return slot
        return self.fingerprinter.canonical_and_host(request.url)[1]

    def block_host(self, host: str, seconds: float) -> None:
        """Hand out nothing of ``host`` (a download slot) for ``seconds`` from now.

        For a server that answered 429 or 503 with ``Retry-After``: every
        worker sharing the frontier stops popping the host until the block
        ends, then its requests come out in their order. A block ending later
        than the current one extends it; one ending sooner changes nothing.
        Redis blocks by the server's clock; a SQLite job keeps the block
        across restarts (by the wall clock). Requests of the host can still
        be added. Raises `InvalidRequest` for a host that is not a non-empty
        str, `ConfigError` for a negative or non-finite ``seconds``.
        """
        host = _host(host)
        seconds = check_seconds("seconds", seconds)
        store = self._control_store()
        with self._lock:
            store.block_host(host, seconds)

    def unblock_host(self, host: str) -> None:
        """End ``host``'s block now; a host that is not blocked is left as it is."""
        host = _host(host)
        store = self._control_store()
        with self._lock:
            store.block_host(host, None)

    def set_host_policy(
        self, host: str, *, delay: float | None = None, concurrency: int | None = None
    ) -> None:
        """Give ``host`` its own delay and concurrency limit (None: back to the frontier's).

        ``delay`` overrides ``host_delay`` (a robots.txt ``Crawl-delay``, say)
        from the host's next pop on; ``concurrency`` overrides
        ``host_concurrency`` at once. Both None removes the host's policy.
        Shared by every worker of a Redis crawl and kept by a SQLite job.
        Raises `InvalidRequest` for a bad host, `ConfigError` for a bad value.
        """
        host = _host(host)
        if delay is not None:
            delay = check_seconds("delay", delay)
        check_count("concurrency", concurrency, "for the frontier's")
        store = self._control_store()
        with self._lock:
            store.set_host_policy(host, delay, concurrency)

    def host_policy(self, host: str) -> HostPolicy:
        """Return ``host``'s own policy; its fields are None where it follows the frontier's."""
        host = _host(host)
        store = self._control_store()
        with self._lock:
            delay, concurrency = store.host_policy(host)
        return HostPolicy(delay, concurrency)

    def forget(self, requests: Iterable[Request | str]) -> int:
        """Make these requests (or URLs) new again: drop their fingerprints from the seen set.

        A later ``add`` accepts them; requests already queued stay queued.
        Returns how many were recorded as seen. For a fingerprint that must
        expire by itself, open the frontier with ``seen_ttl``. Raises
        `InvalidRequest` for a URL crawlq cannot fingerprint, `ConfigError`
        on a Redis crawl with a Bloom filter (which cannot remove a member).
        """
        fingerprint = self.fingerprinter.fingerprint
        fingerprints = []
        for item in requests:
            request = item if isinstance(item, Request) else Request(item)
            fingerprints.append(fingerprint(request)[:16])
        store = self._control_store()
        if not fingerprints:
            return 0
        with self._lock:
            removed = store.forget(fingerprints)
        recent = self._recent
        if recent is not None:
            recent.discard(fingerprints)  # a later add asks the store again
        return removed
