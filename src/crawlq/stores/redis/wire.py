"""The Redis protocol on one redis-py connection: packing and raw round trips.

`pack` and `pack_entries` build commands as bytes once; `round_trip`,
`send_packed` and `read_replies` talk to the connection's socket and hiredis
reader directly, which takes half the client time of redis-py's
``send_packed_command`` + ``read_response`` (their per-call checks cost more
than the system calls); without hiredis they use those. Failures raise
redis-py's exceptions, as redis-py would, and leave a broken connection
disconnected: `Link` (``conn``) retries and translates them.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any, Final

from ..base import Entry
from .client import redis_module

__all__ = [
    "pack",
    "pack_args",
    "pack_blob",
    "pack_entries",
    "read_replies",
    "round_trip",
    "send_packed",
]


def pack(args: Sequence[bytes]) -> bytes:
    """Pack one command in the Redis protocol (all arguments already bytes)."""
    return b"*%d\r\n" % len(args) + pack_args(args)


def pack_args(args: Iterable[bytes]) -> bytes:
    """Pack arguments without the count header, to join with packed others."""
    return b"".join([b"$%d\r\n%b\r\n" % (len(arg), arg) for arg in args])


def as_bytes(value: bytes | str | int) -> bytes:
    """One command argument as bytes (str encoded as UTF-8, int in decimal)."""
    if isinstance(value, bytes):
        return value
    return str(value).encode()


def round_trip(conn: Any, packed: bytes, replies: int = 1) -> Any:
    """Send packed commands on ``conn`` and read the reply (or ``replies`` of them, a list).

    With several replies, a failed one is returned in the list (as an
    exception object), not raised, and every reply is read.
    """
    if replies > 1:
        send_packed(conn, packed)
        return read_replies(conn, replies)
    # One reply, the hot path: kept inline (each call here is a round trip).
    sock = conn._sock
    parser = conn._parser
    reader = getattr(parser, "_reader", None)
    buffer = getattr(parser, "_buffer", None)
    if sock is None or reader is None or type(buffer) is not bytearray:
        conn.send_packed_command((packed,), check_health=False)
        return conn.read_response()
    errors = redis_module().exceptions
    try:
        sock.sendall(packed)
        reply = _next_reply(sock, reader, buffer, errors)
    except BaseException as exc:
        raise _broken(conn, exc, errors, "reading from") from None
    if isinstance(reply, Exception):
        if isinstance(reply, errors.ConnectionError):
            conn.disconnect()
        raise reply
    return reply


def send_packed(conn: Any, packed: bytes) -> None:
    """Send packed commands on ``conn`` (its socket directly, with hiredis)."""
    sock = conn._sock
    if sock is None or getattr(conn._parser, "_reader", None) is None:
        conn.send_packed_command((packed,), check_health=False)
        return
    errors = redis_module().exceptions
    try:
        sock.sendall(packed)
    except BaseException as exc:
        raise _broken(conn, exc, errors, "writing to") from None


def read_replies(conn: Any, replies: int) -> list[Any]:
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
    try:
        read = [_next_reply(sock, reader, buffer, errors) for _ in range(replies)]
    except BaseException as exc:
        raise _broken(conn, exc, errors, "reading from") from None
    if any(isinstance(reply, errors.ConnectionError) for reply in read):
        conn.disconnect()
    return read


def _next_reply(sock: Any, reader: Any, buffer: bytearray, errors: Any) -> Any:
    """Read from the socket until hiredis has one whole reply; return it."""
    need_more = _not_enough_data()
    reply = reader.gets()
    while reply is need_more:
        size = sock.recv_into(buffer)
        if size == 0:
            raise errors.ConnectionError("Connection closed by server.")
        reader.feed(buffer, 0, size)
        reply = reader.gets()
    return reply


def _broken(conn: Any, exc: BaseException, errors: Any, doing: str) -> BaseException:
    """Disconnect ``conn`` after ``exc`` broke a round trip; the exception to raise.

    The connection is out of step (a reply half read, or a command half
    sent), so it is never used again. OS errors become redis-py's, as
    redis-py raises them; anything else (redis-py's own errors, an interrupt
    between send and reply) is raised as it is.
    """
    conn.disconnect()
    replaced: BaseException = exc
    if isinstance(exc, TimeoutError):
        replaced = errors.TimeoutError(f"Timeout {doing} socket")
    elif isinstance(exc, OSError):
        replaced = errors.ConnectionError(f"Error while talking to the server: {exc}")
    return replaced


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


_ENTRY: Final = struct.Struct(">16sBiI")
_LENGTH: Final = struct.Struct(">I")
_DUE: Final = struct.Struct(">Id")


def pack_blob(entries: Sequence[Entry]) -> tuple[bytes, bytes]:
    """A batch's entries as add.lua's blob, and its due times (empty when none has one).

    Each entry is packed big-endian: 16-byte fingerprint, flags byte (bit 0:
    dont_filter), int32 priority, uint32 length + host, uint32 length +
    encoded request. The due times are (uint32 entry number from 1, double
    ``not_before`` in ms) for the entries that have one, packed.
    """
    parts: list[bytes] = []
    append = parts.append
    pack_entry = _ENTRY.pack
    pack_length = _LENGTH.pack
    dues: list[bytes] = []
    for fingerprint, host, request, payload in entries:
        assert payload is not None  # needs_payload
        host_bytes = host.encode()
        append(pack_entry(fingerprint, request.dont_filter, request.priority, len(host_bytes)))
        append(host_bytes)
        append(pack_length(len(payload)))
        append(payload)
        if request.not_before is not None:
            # Judged by the server's clock (TIME, POSIX): a past one queues at once.
            dues.append(_DUE.pack(len(parts) // 4, request.not_before * 1000))
    return b"".join(parts), b"".join(dues)


def pack_entries(
    entries: Sequence[Entry], bloom_bits: int, bloom_hashes: int, lifo: bool
) -> tuple[list[bytes], bytes]:
    """The arguments of add.lua for a batch (order, dedup mode, count, entries), and its due times.

    The entries and due times as `pack_blob` packs them; add.lua takes no
    argument for the due times when none has one.
    """
    blob, dues = pack_blob(entries)
    # Ids of LIFO-added requests count down from the top, FIFO-added ones
    # up from 0 (add.lua): the order of crawlq._policy.order_key.
    args = [
        b"1" if lifo else b"0",
        b"%d" % bloom_bits,
        b"%d" % bloom_hashes,
        b"%d" % len(entries),
        blob,
    ]
    return args, dues
