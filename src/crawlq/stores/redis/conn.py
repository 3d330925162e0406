"""Redis plumbing for the Redis store: cached clients, one connection, errors.

`acquire_client` keeps one redis-py client per distinct URL (as parsed by
``config``), shared by every store opened on it. A
`Link` is one dedicated connection of such a client: the store's hot path
sends pre-packed commands on it (the redis-py client wrapper costs more than
the round trip itself), retries transient failures with backoff, loads the
function library again when the server lost it, and turns every redis-py
exception into a crawlq error at this boundary.

``redis`` is imported lazily, so ``import crawlq`` works without the extra.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from ..._errors import IncompatibleStore, StoreError, StoreFull, StoreUnavailable, import_extra
from ..base import Entry
from .config import RedisURL

if TYPE_CHECKING:
    import redis

__all__ = [
    "Library",
    "Link",
    "acquire_client",
    "library",
    "pack",
    "release_client",
    "server_version",
    "translate",
]

INSTALL_HINT: Final = "the Redis store needs redis-py: pip install 'crawlq[redis]'"
#: Oldest server crawlq's Lua runs on: Redis Functions came with 7.0.
MIN_SERVER: Final = (7, 0)
# MOVED and ASK come from a Redis Cluster whose slots moved (a failover, a
# reshard): a link that can reroute (`Link.reroute`) retries on the new owner.
_TRANSIENT_REPLIES: Final = (
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "MASTERDOWN",
    "READONLY",
    "CLUSTERDOWN",
    "MOVED",
    "ASK",
)


def redis_module() -> ModuleType:
    """Import redis-py, or raise `ConfigError` naming the extra to install."""
    return import_extra("redis", INSTALL_HINT)


# -- one client per URL ------------------------------------------------------------

_clients: dict[str, tuple[Any, int]] = {}
_clients_lock = threading.Lock()


def acquire_client(location: RedisURL) -> redis.Redis:
    """Return the client for this exact URL, creating it on first use.

    Clients are shared per URL string, so frontiers of one spider reuse one
    connection pool while spiders with other settings never share the wrong
    one. Pair each call with `release_client`.
    """
    redis = redis_module()
    with _clients_lock:
        client, users = _clients.get(location.raw, (None, 0))
        if client is None:
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            # Retries are ours (Link.call): redis-py's would hide how long we waited.
            client = redis.Redis(**location.kwargs, retry=Retry(NoBackoff(), 0))
        _clients[location.raw] = (client, users + 1)
        return client  # type: ignore[no-any-return]


def release_client(location: RedisURL) -> None:
    """Drop one use of a client; the last user closes its connections."""
    with _clients_lock:
        client, users = _clients.get(location.raw, (None, 0))
        if client is None:
            return
        if users > 1:
            _clients[location.raw] = (client, users - 1)
            return
        del _clients[location.raw]
    client.close()


# -- errors ------------------------------------------------------------------------


def translate(exc: BaseException, location: RedisURL, doing: str) -> StoreError:
    """Turn a redis-py exception into a crawlq error naming the fix."""
    redis = redis_module()
    errors = redis.exceptions
    where = location.display
    text = location.scrub(str(exc)) or type(exc).__name__
    upper = text.upper()
    if isinstance(exc, errors.AuthenticationError) or "WRONGPASS" in upper or "NOAUTH" in upper:
        return StoreError(
            f"Redis at {where} refused the credentials while {doing} ({text}); fix the user "
            "and password in the frontier URL: redis://USER:PASSWORD@host:port/db"
        )
    if "DB INDEX IS OUT OF RANGE" in upper:
        return StoreError(
            f"Redis at {where} has no database {location.db} ({text}); use a database number "
            "below the server's `databases` setting (16 by default) in the frontier URL"
        )
    if isinstance(exc, errors.NoPermissionError) or "NOPERM" in upper:
        return StoreError(
            f"the Redis user of {where} may not do what crawlq needs while {doing} ({text}); "
            "grant it scripting and read/write on the crawlq:* keys, e.g. "
            "ACL SETUSER <user> ~crawlq:* +@read +@write +@scripting +info +time"
        )
    if isinstance(exc, errors.OutOfMemoryError):
        return StoreFull(
            f"Redis at {where} is out of memory (used memory over maxmemory) and refused {doing}: "
            f"this call stored nothing; everything accepted before it is kept ({text}). "
            "Popping, acking and releasing still work and free memory; raise maxmemory, "
            "or use Bloom dedup (bloom_capacity=...) to shrink the seen set"
        )
    if isinstance(exc, errors.ConnectionError | errors.TimeoutError):
        return StoreUnavailable(
            f"cannot reach Redis at {where} while {doing} ({text}); check that the server is "
            "running and that the host, port and TLS setting of the frontier URL are right"
        )
    if "WRONGTYPE" in upper:
        return IncompatibleStore(
            f"a key under {location.prefix}* on {where} holds data that is not crawlq's "
            f"({text}); use another crawl name (?crawl=NAME) or purge this one"
        )
    return StoreError(f"Redis at {where} failed while {doing}: {text}")


def is_transient(exc: BaseException) -> bool:
    """True for failures that retrying the same call may get past."""
    errors = redis_module().exceptions
    if isinstance(exc, errors.AuthenticationError | errors.AuthorizationError):
        return False
    if isinstance(exc, errors.ConnectionError | errors.TimeoutError):
        return True
    if isinstance(exc, errors.ResponseError):
        return str(exc).upper().startswith(_TRANSIENT_REPLIES)
    return False


# -- the function library ------------------------------------------------------------


class Library:
    """crawlq's Redis functions: one library joined from the package's .lua files.

    The library is named after a hash of its source, so crawlq versions with
    different Lua can share a server; `Link` loads it on first use and
    again whenever the server has lost it (a restart without persistence).
    """

    #: Files joined in this order; lib.lua defines what the others share.
    PARTS: Final = ("lib", "add", "pop", "ack_or_release", "control", "read", "inspect", "open")
    #: Function name suffix -> (Lua function, flags). A full Redis (used
    #: memory over ``maxmemory``, policy ``noeviction``) refuses every
    #: function but ``no-writes`` and ``allow-oom`` ones: only adding is
    #: refused, so workers can still drain the queue (pops, acks and releases
    #: free memory or add a few bytes of lease records), save their state and
    #: open the crawl. ``probe`` is add for the self-check's scratch keys,
    #: deleted at once, so a full server can still be opened.
    FUNCTIONS: Final = {
        "add": ("add", ""),
        "probe": ("add", "allow-oom"),
        "pop": ("pop", "allow-oom"),
        "ack_or_release": ("ack_or_release", "allow-oom"),
        "control": ("control", "allow-oom"),
        "read": ("read", "no-writes"),
        "histogram": ("histogram", "no-writes"),
        "queued_per_host": ("queued_per_host", "no-writes"),
        "upgrade": ("upgrade_queues", "allow-oom"),
        "open": ("open", "allow-oom"),
        "state": ("save_state", "allow-oom"),
        "forget": ("forget", "allow-oom"),
        "cluster_record": ("cluster_record", "allow-oom"),
    }

    def __init__(self) -> None:
        folder = resources.files("crawlq.stores.redis").joinpath("lua")
        body = "\n".join(folder.joinpath(f"{part}.lua").read_text("utf-8") for part in self.PARTS)
        self.name = "crawlq_" + hashlib.sha1(body.encode()).hexdigest()[:12]
        lines = [f"#!lua name={self.name}", body]
        for suffix, (function, flags) in self.FUNCTIONS.items():
            lines.append(
                f"redis.register_function{{function_name='{self.name}_{suffix}', "
                f"callback={function}, flags={{{repr(flags) if flags else ''}}}}}"
            )
        self.source = "\n".join(lines).encode()
        #: FCALL names by suffix ("add", "pop", ...).
        self.function: dict[str, bytes] = {
            suffix: f"{self.name}_{suffix}".encode() for suffix in self.FUNCTIONS
        }


_LIBRARY: Library | None = None


def library() -> Library:
    """The library, read from the package once per process."""
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = Library()
    return _LIBRARY


# -- the connection ----------------------------------------------------------------


def pack(args: Sequence[bytes]) -> bytes:
    """Pack one command in the Redis protocol (all arguments already bytes)."""
    return b"*%d\r\n" % len(args) + pack_args(args)


def pack_args(args: Iterable[bytes]) -> bytes:
    """Pack arguments without the count header, to join with packed others."""
    return b"".join([b"$%d\r\n%b\r\n" % (len(arg), arg) for arg in args])


class Link:
    """One dedicated connection of a shared client, with retries and translation.

    Holding one connection (rather than borrowing from the pool per call) and
    sending pre-packed commands halves the cost of a round trip in redis-py.
    Not thread-safe: a store is used from one thread at a time.

    ``reroute`` (a cluster shard's link): called before each retry, it
    returns the client of the node that serves the link's keys now (after a
    failover or a reshard moved them), which the link then talks to.

    ``replicas`` (a cluster crawl's ``replicas`` option): every `call` is
    followed, in the same round trip, by ``WAIT replicas``, and returns only
    once that many replicas have its writes (after a failover, once the new
    primary has them again); fewer within ``retry_timeout`` raise
    `StoreUnavailable` (the write happened on the primary, and a failover
    may lose it).
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

    def _follow(self) -> None:
        """Talk to the node that serves this link's keys now, if it moved."""
        if self.reroute is None:
            return
        client = self.reroute()
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

        Connection resets, timeouts and transient replies (LOADING, BUSY...)
        are retried with exponential backoff for up to ``retry_timeout``
        seconds (sending ``retried()`` instead, when given, so a function can
        tell a retry), then raise `StoreUnavailable`. The function library is
        loaded again if the server lost it (a restart without persistence).
        Any other failure raises `StoreError`.
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
                    return _round_trip(conn, packed)
                return self._confirmed(conn, _round_trip(conn, packed + self._wait, 2), doing)
            except errors.RedisError as exc:
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
        """The reply of a command sent with ``WAIT replicas``, once they confirmed it."""
        reply, confirmed = replies
        if isinstance(reply, Exception):
            raise reply
        deadline = time.monotonic() + self.retry_timeout
        while confirmed < self.replicas:
            # Fewer replicas than asked for (one failed over and is not back
            # yet): wait for them, not for the function again.
            if time.monotonic() >= deadline:
                raise StoreUnavailable(
                    f"only {confirmed} of the {self.replicas} replicas asked for confirmed a "
                    f"write to {self.location.display} while {doing}, within "
                    f"{self.retry_timeout:g} s; the write happened on the primary, but a "
                    "failover now may lose it: check the replicas (INFO replication)"
                )
            confirmed = _round_trip(conn, self._wait)
        return reply

    def send(self, packed: bytes) -> bool:
        """Send one packed command without reading its reply; `receive` reads it.

        Lets a caller send to several links (a cluster crawl's shards) before
        waiting for any. Returns False when sending failed: `receive` then
        runs the command as `call` would.
        """
        errors = redis_module().exceptions
        try:
            conn = self._connection()
            _send_packed(conn, packed + self._wait if self.replicas else packed)
        except (errors.RedisError, OSError):
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
                replies = _read(conn, 2 if self.replicas else 1)
                if self.replicas:
                    return self._confirmed(conn, replies, doing)
                if isinstance(replies[0], Exception):
                    raise replies[0]
                return replies[0]
            except errors.RedisError as exc:
                if not (is_transient(exc) or _lost_library(exc)):
                    raise translate(exc, self.location, doing) from None
                if self._conn is not None:
                    self._conn.disconnect()
        return self.call(retried() if retried is not None else packed, doing, retried=retried)

    def command(self, *args: bytes | str | int, doing: str, retry: bool = True) -> Any:
        """Run one plain command (not on the hot path)."""
        return self.call(pack([_bytes(arg) for arg in args]), doing, retry=retry)

    def commands(self, commands: Sequence[Sequence[bytes | str | int]], doing: str) -> list[Any]:
        """Run read-only commands in one round trip (pipelined), with retries."""
        if not commands:
            return []
        packed = b"".join(pack([_bytes(arg) for arg in command]) for command in commands)
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


def _round_trip(conn: Any, packed: bytes, replies: int = 1) -> Any:
    """Send packed commands on ``conn`` and read the reply (or ``replies`` of them, a list).

    With several replies, a failed one is returned in the list (as an
    exception object), not raised, and every reply is read.

    With redis-py's hiredis parser this talks to the connection's socket and
    reader directly, which takes half the client time of
    ``send_packed_command`` + ``read_response`` (their per-call checks cost
    more than the system calls); otherwise it uses those. Failures raise
    redis-py's exceptions, as they would, and leave a broken connection
    disconnected.
    """
    if replies > 1:
        _send_packed(conn, packed)
        return _read(conn, replies)
    # One reply, the hot path: kept inline (each call here is a round trip).
    sock = conn._sock
    parser = conn._parser
    reader = getattr(parser, "_reader", None)
    buffer = getattr(parser, "_buffer", None)
    if sock is None or reader is None or type(buffer) is not bytearray:
        conn.send_packed_command((packed,), check_health=False)
        return conn.read_response()
    need_more = _not_enough_data()
    errors = redis_module().exceptions
    try:
        sock.sendall(packed)
        reply = reader.gets()
        while reply is need_more:
            size = sock.recv_into(buffer)
            if size == 0:
                raise errors.ConnectionError("Connection closed by server.")
            reader.feed(buffer, 0, size)
            reply = reader.gets()
    except errors.RedisError:
        conn.disconnect()
        raise
    except TimeoutError:
        conn.disconnect()
        raise errors.TimeoutError("Timeout reading from socket") from None
    except OSError as exc:
        conn.disconnect()
        raise errors.ConnectionError(f"Error while talking to the server: {exc}") from None
    except BaseException:
        # Interrupted between send and reply: the connection is out of step.
        conn.disconnect()
        raise
    if isinstance(reply, Exception):
        if isinstance(reply, errors.ConnectionError):
            conn.disconnect()
        raise reply
    return reply


def _send_packed(conn: Any, packed: bytes) -> None:
    """Send packed commands on ``conn`` (its socket directly, with hiredis)."""
    errors = redis_module().exceptions
    sock = conn._sock
    if sock is None or getattr(conn._parser, "_reader", None) is None:
        conn.send_packed_command((packed,), check_health=False)
        return
    try:
        sock.sendall(packed)
    except TimeoutError:
        conn.disconnect()
        raise errors.TimeoutError("Timeout writing to socket") from None
    except OSError as exc:
        conn.disconnect()
        raise errors.ConnectionError(f"Error while talking to the server: {exc}") from None
    except BaseException:
        conn.disconnect()
        raise


def _read(conn: Any, replies: int) -> list[Any]:
    """Read ``replies`` replies from ``conn``; an error reply is returned, not raised.

    A broken connection raises redis-py's exception and is left disconnected.
    """
    errors = redis_module().exceptions
    parser = conn._parser
    reader = getattr(parser, "_reader", None)
    buffer = getattr(parser, "_buffer", None)
    sock = conn._sock
    if sock is None or reader is None or type(buffer) is not bytearray:
        got: list[Any] = []
        for _ in range(replies):
            try:
                got.append(conn.read_response())
            except errors.ResponseError as exc:
                got.append(exc)
        return got
    need_more = _not_enough_data()
    read: list[Any] = []
    try:
        for _ in range(replies):
            reply = reader.gets()
            while reply is need_more:
                size = sock.recv_into(buffer)
                if size == 0:
                    raise errors.ConnectionError("Connection closed by server.")
                reader.feed(buffer, 0, size)
                reply = reader.gets()
            read.append(reply)
    except errors.RedisError:
        conn.disconnect()
        raise
    except TimeoutError:
        conn.disconnect()
        raise errors.TimeoutError("Timeout reading from socket") from None
    except OSError as exc:
        conn.disconnect()
        raise errors.ConnectionError(f"Error while talking to the server: {exc}") from None
    except BaseException:
        # Interrupted between send and reply: the connection is out of step.
        conn.disconnect()
        raise
    if any(isinstance(reply, errors.ConnectionError) for reply in read):
        conn.disconnect()
    return read


_NOT_ENOUGH_DATA: Any = None


def _not_enough_data() -> Any:
    """What redis-py's hiredis reader returns while a reply is incomplete."""
    global _NOT_ENOUGH_DATA
    if _NOT_ENOUGH_DATA is None:
        try:
            from redis._parsers.hiredis import NOT_ENOUGH_DATA
        except ImportError:  # older redis-py: hiredis's own default
            NOT_ENOUGH_DATA = False
        _NOT_ENOUGH_DATA = NOT_ENOUGH_DATA
    return _NOT_ENOUGH_DATA


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


def _bytes(value: bytes | str | int) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()


_ENTRY: Final = struct.Struct(">16sBiI")
_LENGTH: Final = struct.Struct(">I")


def pack_entries(
    entries: Sequence[Entry], bloom_bits: int, bloom_hashes: int, lifo: bool
) -> list[bytes]:
    """The arguments of add.lua for a batch: its order, dedup mode, count and entries.

    Each entry is packed big-endian: 16-byte fingerprint, flags byte (bit 0:
    dont_filter), int32 priority, uint32 length + host, uint32 length +
    encoded request.
    """
    parts: list[bytes] = []
    append = parts.append
    pack_entry = _ENTRY.pack
    pack_length = _LENGTH.pack
    for fingerprint, host, request, payload in entries:
        assert payload is not None  # needs_payload
        host_bytes = host.encode()
        append(pack_entry(fingerprint, request.dont_filter, request.priority, len(host_bytes)))
        append(host_bytes)
        append(pack_length(len(payload)))
        append(payload)
    # Ids of LIFO-added requests count down from the top, FIFO-added ones
    # up from 0 (add.lua): the order of crawlq._policy.order_key.
    return [
        b"1" if lifo else b"0",
        b"%d" % bloom_bits,
        b"%d" % bloom_hashes,
        b"%d" % len(entries),
        b"".join(parts),
    ]
