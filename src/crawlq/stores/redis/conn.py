"""One connection to a Redis server for the Redis store: `Link`, with retries.

A `Link` is one dedicated connection of a shared client (``client``): the
store's hot path sends pre-packed commands on it (``wire``), retries
transient failures with backoff, loads the function library (``library``)
again when the server lost it, and turns every redis-py exception into a
crawlq error at this boundary.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..._errors import StoreError, StoreFull, StoreUnavailable
from .client import NotPrimary, is_transient, redis_module, translate
from .config import RedisURL
from .library import library
from .wire import as_bytes, pack, read_replies, round_trip, send_packed

if TYPE_CHECKING:
    import redis

__all__ = ["Link", "server_version"]


class Link:
    """One dedicated connection of a shared client, with retries and translation.

    Holding one connection (rather than borrowing from the pool per call) and
    sending pre-packed commands halves the cost of a round trip in redis-py.
    Not thread-safe: a store is used from one thread at a time.

    ``reroute`` (a cluster shard's link): called before each retry, it
    reads the cluster's slot map again and returns the client of the node
    that serves the link's keys now (after a failover or a reshard moved
    them), which the link then talks to. Every transient failure is retried
    so: a node that stops answering, and the replies of a node that no
    longer serves the keys (MOVED, ASK, READONLY, TRYAGAIN, CLUSTERDOWN,
    told apart by redis-py's exception classes, see ``client``).

    ``replicas`` (a cluster crawl's ``replicas`` option): every `call` is
    followed, in the same round trip, by ``WAIT replicas``, and returns only
    once that many replicas have its writes (after a failover, once the new
    primary has them again); fewer within ``retry_timeout`` raise
    `StoreUnavailable` (the write happened on the primary, and a failover
    may lose it). ``WAIT`` answered with an error (a primary demoted
    meanwhile: ``UNBLOCKED``, or a replica's refusal) is never taken for a
    count: it means the node is no longer the primary (`NotPrimary`), and
    the call is retried as above.
    """

    def __init__(
        self,
        location: RedisURL,
        client: redis.Redis,
        retry_timeout: float,
        reroute: Callable[[], redis.Redis] | None = None,
        replicas: int = 0,
    ) -> None:
        self.location = location
        self.client = client
        self.library = library()
        self.retry_timeout = retry_timeout
        self.reroute = reroute
        self.replicas = replicas
        # WAIT returns within a second, well inside the socket timeout; a
        # shortfall is asked again until retry_timeout.
        self._wait = pack([b"WAIT", b"%d" % replicas, b"1000"])
        self._pid = os.getpid()
        self._conn: Any = None
        #: Called when a call meets a transient failure (a lost connection, a
        #: timeout, a failover's redirect) or a server that lost its library:
        #: the server may have lost writes it had acknowledged (a crash with
        #: appendfsync everysec, a failover to a replica behind, a restart
        #: from an older snapshot), so what was remembered of them must go.
        self.on_fault: Callable[[], None] | None = None

    def _faulted(self) -> None:
        if self.on_fault is not None:
            self.on_fault()

    def _follow(self) -> None:
        """Talk to the node that serves this link's keys now, if it moved.

        A failed look (no node answers, the slot served by none) keeps the
        node it had: the retry loop looks again before its next try.
        """
        if self.reroute is None:
            return
        try:
            client = self.reroute()
        except StoreError:
            return
        if client is not self.client:
            self.close()
            self.client = client

    def _connection(self) -> Any:
        if self._conn is None or os.getpid() != self._pid:
            # First use, or forked: the parent owns that socket; take our own.
            self._conn = None
            self._pid = os.getpid()
            self._conn = self.client.connection_pool.get_connection()
        return self._conn

    def call(
        self,
        packed: bytes,
        doing: str,
        *,
        retry: bool = True,
        retried: Callable[[], bytes] | None = None,
    ) -> Any:
        """Send one packed command and return its reply.

        Connection resets, timeouts and transient replies (LOADING, BUSY,
        a cluster's MOVED...) are retried with exponential backoff for up to
        ``retry_timeout`` seconds (sending ``retried()`` instead, when given,
        so a function can tell a retry; on the node serving the keys now,
        with ``reroute``), then raise `StoreUnavailable`. The function
        library is loaded again if the server lost it (a restart without
        persistence). Any other failure raises `StoreError`.
        """
        errors = redis_module().exceptions
        deadline = time.monotonic() + self.retry_timeout
        wait = 0.02
        reloaded = False
        while True:
            conn = None
            try:
                conn = self._connection()
                if not self.replicas:
                    return round_trip(conn, packed)
                return self._confirmed(conn, round_trip(conn, packed + self._wait, 2), doing)
            except (errors.RedisError, NotPrimary) as exc:
                if is_transient(exc) or _lost_library(exc):
                    self._faulted()
                if _lost_library(exc) and not reloaded:
                    # A restarted server without persistence forgot the library.
                    self.load_library(doing)
                    reloaded = True
                    continue
                if not (retry and is_transient(exc)) or time.monotonic() + wait > deadline:
                    raise translate(exc, self.location, doing) from None
                if conn is not None:
                    conn.disconnect()
                time.sleep(wait)
                wait = min(wait * 2, 1.0)
                self._follow()
                if retried is not None:
                    packed = retried()

    def _confirmed(self, conn: Any, replies: list[Any], doing: str) -> Any:
        """The reply of a command sent with ``WAIT replicas``, once they confirmed it.

        Raises the command's error reply; `NotPrimary` when ``WAIT`` answers
        with an error (the node was demoted: the command may have run there,
        and the caller retries it where the keys are served now).
        """
        errors = redis_module().exceptions
        reply, confirmed = replies
        if isinstance(reply, Exception):
            raise reply
        deadline = time.monotonic() + self.retry_timeout
        while True:
            if isinstance(confirmed, Exception) or not isinstance(confirmed, int):
                # Never compared: an error (UNBLOCKED, or a replica's
                # refusal) says this node is no longer the primary.
                raise NotPrimary(
                    f"WAIT answered {self.location.scrub(str(confirmed))!r}: "
                    "the node is no longer the primary"
                )
            if confirmed >= self.replicas:
                return reply
            # Fewer replicas than asked for (one failed over and is not back
            # yet): wait for them, not for the function again.
            if time.monotonic() >= deadline:
                raise StoreUnavailable(
                    f"only {confirmed} of the {self.replicas} replicas asked for confirmed a "
                    f"write to {self.location.display} while {doing}, within "
                    f"{self.retry_timeout:g} s; the write happened on the primary, but a "
                    "failover now may lose it: check the replicas (INFO replication)"
                )
            try:
                confirmed = round_trip(conn, self._wait)
            except errors.ResponseError as exc:
                confirmed = exc

    def send(self, packed: bytes) -> bool:
        """Send one packed command without reading its reply; `receive` reads it.

        Lets a caller send to several links (a cluster crawl's shards) before
        waiting for any. Returns False when sending failed: `receive` then
        runs the command as `call` would.
        """
        errors = redis_module().exceptions
        try:
            conn = self._connection()
            send_packed(conn, packed + self._wait if self.replicas else packed)
        except (errors.RedisError, OSError):
            self._faulted()
            if self._conn is not None:
                self._conn.disconnect()
            return False
        return True

    def receive(
        self,
        packed: bytes,
        doing: str,
        *,
        sent: bool,
        retried: Callable[[], bytes] | None = None,
    ) -> Any:
        """The reply of the command `send` sent (``sent``: what it returned).

        Any failure is handled as `call` handles it: the command is sent
        again (as ``retried()``) until ``retry_timeout``.
        """
        if sent:
            errors = redis_module().exceptions
            try:
                conn = self._connection()
                replies = read_replies(conn, 2 if self.replicas else 1)
                if self.replicas:
                    return self._confirmed(conn, replies, doing)
                if isinstance(replies[0], Exception):
                    raise replies[0]
                return replies[0]
            except (errors.RedisError, NotPrimary) as exc:
                if not (is_transient(exc) or _lost_library(exc)):
                    raise translate(exc, self.location, doing) from None
                self._faulted()
                if self._conn is not None:
                    self._conn.disconnect()
                if is_transient(exc):
                    # The keys may have moved (a failover): retry where they are now.
                    self._follow()
        return self.call(retried() if retried is not None else packed, doing, retried=retried)

    def command(self, *args: bytes | str | int, doing: str, retry: bool = True) -> Any:
        """Run one plain command (not on the hot path)."""
        return self.call(pack([as_bytes(arg) for arg in args]), doing, retry=retry)

    def commands(self, commands: Sequence[Sequence[bytes | str | int]], doing: str) -> list[Any]:
        """Run read-only commands in one round trip (pipelined), with retries."""
        if not commands:
            return []
        packed = b"".join(pack([as_bytes(arg) for arg in command]) for command in commands)
        errors = redis_module().exceptions
        deadline = time.monotonic() + self.retry_timeout
        wait = 0.02
        while True:
            conn = None
            try:
                conn = self._connection()
                conn.send_packed_command((packed,), check_health=False)
                return [conn.read_response() for _ in commands]
            except errors.RedisError as exc:
                # A failed reply mid-way leaves others unread: start afresh.
                if conn is not None:
                    conn.disconnect()
                if is_transient(exc):
                    self._faulted()
                if not is_transient(exc) or time.monotonic() + wait > deadline:
                    raise translate(exc, self.location, doing) from None
                time.sleep(wait)
                wait = min(wait * 2, 1.0)
                self._follow()

    def load_library(self, doing: str) -> None:
        """Load crawlq's function library unless the server already has it."""
        errors = redis_module().exceptions
        try:
            self.command(b"FUNCTION", b"LOAD", self.library.source, doing=doing)
        except StoreFull:
            # A full server refuses FUNCTION LOAD before it looks: fine if
            # the library is loaded already.
            listed = self.command(
                b"FUNCTION", b"LIST", b"LIBRARYNAME", self.library.name, doing=doing
            )
            if not listed:
                raise
        except StoreError as exc:
            # Another worker loaded it first: same name, same source.
            if "ALREADY EXISTS" not in str(exc).upper():
                raise
        except errors.RedisError as exc:  # pragma: no cover - command() translates
            raise translate(exc, self.location, doing) from None

    def close(self) -> None:
        """Give the connection back to the client's pool."""
        if self._conn is not None and os.getpid() == self._pid:
            self.client.connection_pool.release(self._conn)
        self._conn = None


def _lost_library(exc: BaseException) -> bool:
    text = str(exc).upper()
    return "FUNCTION NOT FOUND" in text or "NOSCRIPT" in text


def server_version(link: Link) -> tuple[int, ...]:
    """The server's version as a tuple of ints, e.g. (7, 0, 15)."""
    info = link.command(b"INFO", b"server", doing="reading the server version")
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith("redis_version:"):
            parts = line.partition(":")[2].strip().split(".")
            return tuple(int(p) for p in parts if p.isdigit())
    return (0,)
