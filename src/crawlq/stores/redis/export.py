"""``crawlq export`` of a Redis crawl: every request not done, read in bounded pages.

Reads the crawl's keys directly, as `crawlq.stores.redis.inspection` does,
without a lock and without stopping its workers, a page (`PAGE` entries, or
one HSCAN step) per command: no reply holds the whole crawl. The order:

1. host by host (in the order HSCAN gives the ``hosts`` hash), each host's
   queued and leased requests oldest first: by acceptance number (a FIFO
   id, or ``10^15 - 1 -`` a LIFO id; a refetch's number is taken at its
   ack), merging its lanes (lists and ``r:HOST``) and its leases;
2. then the scheduled requests (``due``), soonest due first (equal due
   times in id order: a LIFO crawl's newest first), each with
   ``not_before`` set to its due time (a delayed release's or a refetch's,
   not the one it was added with), so an import keeps it scheduled.

Leased requests other workers hold (their prefetched ones too) are not done,
so they are exported. A crawl that workers change while it is read is not
read as one snapshot: a request that moves meanwhile (popped, released,
come due) may be written twice, or not at all when it moves to a place
already read. Export a stopped crawl for an exact copy; an import drops the
twice-written ones as duplicates.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable, Iterator
from typing import Final

from ..._errors import StoreError
from ..._request import Request, decode_request
from .config import RedisURL
from .conn import Link
from .inspection import close_link, open_link

__all__ = ["PAGE", "export", "export_at", "held_at", "scheduled_at"]

#: Entries per read (LRANGE, ZRANGE, HMGET), hash fields per HSCAN step.
PAGE: Final = 500
_TOP: Final = 999_999_999_999_999  # LIFO ids count down from here (add.lua)
_RECORD: Final = struct.Struct(">BIdd")  # a host record's head (hosts.lua)

#: A request to export: its acceptance number, its id, and its encoded
#: request, or None where it is in ``p`` (read a page at a time).
_Item = tuple[int, bytes, bytes | None]


def export(url: str) -> Iterator[Request]:
    """Yield every request of the Redis crawl at ``url`` not done yet, in the module's order.

    Raises `ConfigError` for a bad URL, `StoreError` when there is no such
    crawl, `StoreUnavailable` when the server cannot be reached. Close the
    generator (or exhaust it) to release the connection.
    """
    location, link = open_link(url)
    try:
        yield from export_at(location, link)
    finally:
        close_link(location, link)


def export_at(location: RedisURL, link: Link) -> Iterator[Request]:
    """`export` on a link to the server holding the crawl."""
    yield from held_at(location, link)
    yield from scheduled_at(location, link)


def held_at(location: RedisURL, link: Link) -> Iterator[Request]:
    """The queued and leased requests, host by host, each host's oldest first.

    On a link to the server holding the crawl (or one cluster shard).
    Raises `StoreError` when there is no such crawl.
    """
    prefix = location.prefix.encode()
    if not link.command(b"EXISTS", prefix + b"meta", doing="exporting"):
        raise StoreError(f"there is no crawl {location.crawl!r} at {location.display}")
    leased = _leases_by_host(link, prefix)
    for name, record in _hscan(link, prefix + b"hosts"):
        if not name:
            continue  # the wide entry (shared.lua), no host
        mine = sorted(leased.pop(name, []))
        yield from _payloads(link, prefix, heapq.merge(mine, *_lanes(link, prefix, name, record)))
    for rest in leased.values():  # leases of hosts without a record (none, but keep them)
        yield from _payloads(link, prefix, iter(sorted(rest)))


def _number(request_id: bytes) -> int:
    """A request's acceptance number: its FIFO id, or what its LIFO id counts down from."""
    n = int(request_id)
    return _TOP - n if request_id[:1] >= b"5" else n


def _leases_by_host(link: Link, prefix: bytes) -> dict[bytes, list[_Item]]:
    """Leased requests by host, as items whose payloads are in ``p``."""
    by_host: dict[bytes, list[_Item]] = {}
    for field, record in _hscan(link, prefix + b"lease"):
        # Fields are ids, and "@" .. owner for a worker's last outcome.
        if not field.startswith(b"@"):
            host = record.split(b" ", 3)[3]  # "token score ready host"
            by_host.setdefault(host, []).append((_number(field), field, None))
    return by_host


def _hscan(link: Link, key: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Every field and value of the hash ``key``, in pages of `PAGE`, each field once.

    (A scan may return a field twice when the hash grows while it runs.)
    """
    done: set[bytes] = set()
    cursor = b"0"
    while True:
        cursor, flat = link.command(b"HSCAN", key, cursor, b"COUNT", PAGE, doing="exporting")
        for field, value in zip(flat[::2], flat[1::2], strict=True):
            if field not in done:
                done.add(field)
                yield field, value
        if cursor in (b"0", 0):
            return


def _lanes(link: Link, prefix: bytes, name: bytes, record: bytes) -> list[Iterator[_Item]]:
    """A host's queued requests as streams of items, each in acceptance order.

    One stream per lane list (l:LANE:HOST) and per lane rank of its returned
    requests (r:HOST); its only request, alone in ``p``, is one of its own.
    """
    if len(record) <= _RECORD.size:
        return []  # nothing queued
    head_id = record[21:36]
    if record[36:37] == b"p":
        return [iter([(_number(head_id), head_id, None)])]
    score = int(_RECORD.unpack_from(record)[3])
    head_lane = b"%d%s" % (score, b"L" if head_id[:1] >= b"5" else b"")
    lanes = [head_lane, *link.command(b"ZRANGE", prefix + b"i:" + name, 0, -1, doing="exporting")]
    streams = [
        _list(link, prefix + b"l:" + lane + b":" + name, lane.endswith(b"L")) for lane in lanes
    ]
    returned = prefix + b"r:" + name
    first = link.command(b"ZRANGE", returned, 0, 0, b"WITHSCORES", doing="exporting")
    while first:
        rank = int(float(first[1]))
        streams.append(_returned(link, returned, rank))
        first = link.command(
            b"ZRANGE", returned, b"(%d" % rank, b"+inf", b"BYSCORE", b"LIMIT", 0, 1,
            b"WITHSCORES", doing="exporting",
        )  # fmt: skip
    return streams


def _list(link: Link, key: bytes, lifo: bool) -> Iterator[_Item]:
    """A lane list's entries oldest first: from its front (FIFO ids), else from its end."""
    at = 0
    while True:
        if lifo:
            page = link.command(b"LRANGE", key, -(at + PAGE), -(at + 1), doing="exporting")
            page.reverse()
        else:
            page = link.command(b"LRANGE", key, at, at + PAGE - 1, doing="exporting")
        for entry in page:
            # id, then '^' when marked (see r:HOST in queues.lua), then the request
            start = 16 if entry[15:16] == b"^" else 15
            yield _number(entry[:15]), entry[:15], entry[start:]
        if len(page) < PAGE:
            return
        at += PAGE


def _returned(link: Link, key: bytes, rank: int) -> Iterator[_Item]:
    """The returned requests (r:HOST) of one lane rank, oldest first; payloads in ``p``."""
    text = b"%d" % rank
    lifo = rank % 2 == 1
    at = 0
    while True:
        bounds = (text, text, b"BYSCORE", b"REV") if lifo else (text, text, b"BYSCORE")
        page = link.command(b"ZRANGE", key, *bounds, b"LIMIT", at, PAGE, doing="exporting")
        for request_id in page:
            yield _number(request_id), request_id, None
        if len(page) < PAGE:
            return
        at += PAGE


def _payloads(link: Link, prefix: bytes, items: Iterable[_Item]) -> Iterator[Request]:
    """Decode each item in order, reading the payloads in ``p`` a page at a time."""
    page: list[_Item] = []
    for item in items:
        page.append(item)
        if len(page) >= PAGE:
            yield from _decoded(link, prefix, page)
            page = []
    yield from _decoded(link, prefix, page)


def _decoded(link: Link, prefix: bytes, page: list[_Item]) -> Iterator[Request]:
    wanted = [request_id for _, request_id, payload in page if payload is None]
    stored = dict(
        zip(wanted, link.command(b"HMGET", prefix + b"p", *wanted, doing="exporting"), strict=True)
        if wanted
        else ()
    )
    for _, request_id, payload in page:
        data = stored[request_id] if payload is None else payload
        if data:  # (gone meanwhile: acked, or moved by a worker)
            yield decode_request(data)


def scheduled_at(location: RedisURL, link: Link) -> Iterator[Request]:
    """The scheduled requests, soonest due first, ``not_before`` their due time.

    On a link to the server holding the crawl (or one cluster shard). Paged
    by score (the last page's last due time, and how many of that time were
    read), so a pop moving due ones meanwhile shifts no page.
    """
    prefix = location.prefix.encode()
    key = prefix + b"due"
    low, skip = b"-inf", 0
    while True:
        flat = link.command(
            b"ZRANGE", key, low, b"+inf", b"BYSCORE", b"LIMIT", skip, PAGE, b"WITHSCORES",
            doing="exporting",
        )  # fmt: skip
        members, scores = flat[::2], flat[1::2]
        if members:
            ids = [member[:15] for member in members]
            payloads = link.command(b"HMGET", prefix + b"p", *ids, doing="exporting")
            for payload, score in zip(payloads, scores, strict=True):
                if payload:
                    request = decode_request(payload)
                    request.not_before = float(score) / 1000  # ms of server time
                    yield request
        if len(members) < PAGE:
            return
        last = scores[-1]
        tied = sum(1 for score in scores if score == last)
        skip = skip + tied if last == low else tied
        low = last
