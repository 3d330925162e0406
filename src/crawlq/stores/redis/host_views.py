"""Per-host views and changes of a Redis crawl, read from its keys: counts, policies, controls.

What `crawlq.stores.redis.inspection` (``crawlq hosts``, ``top``, metrics)
and the store's own `host_counts` read of a crawl's hosts, and how
``crawlq hosts --block`` changes one through the crawl's ``control``
function. Scheduled requests (``due``) are in no host's counts until due.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import replace as dataclass_replace
from typing import Final

from ..._errors import StoreError
from ..base import HostList, host_details
from .config import RedisURL
from .conn import Link
from .wire import pack

__all__ = ["SCAN_COUNT", "change_host_at", "host_counts", "host_policy"]

#: Hash fields (or keys) per HSCAN or SCAN, and hosts per function call.
SCAN_COUNT: Final = 1000
_STATE_HEAD: Final = struct.Struct(">BId")  # flag, leased, ready (ms)
_FLAG_FULL: Final = 73  # shared.lua's FLAG_I: at its concurrency limit
_STATE_SIZE: Final = struct.calcsize(">BIdd")  # then the head id, if any


def _scan_hosts(link: Link, prefix: bytes) -> dict[str, tuple[int, bool, float]]:
    """Every host with state: its lease count, whether it is at its
    concurrency limit with requests queued, and when its delay ends (ms)."""
    leased: dict[str, tuple[int, bool, float]] = {}
    cursor = b"0"
    while True:
        cursor, flat = link.command(
            b"HSCAN", prefix + b"hosts", cursor, b"COUNT", SCAN_COUNT, doing="listing hosts"
        )
        for i in range(0, len(flat), 2):
            if not flat[i]:
                continue  # the wide entry (shared.lua), no host
            # The state is packed by hosts.lua as struct '>BI4dd' .. head id.
            state = flat[i + 1]
            flag, held, ready = _STATE_HEAD.unpack_from(state)
            head = len(state) > _STATE_SIZE
            leased[flat[i].decode()] = (held, head and flag == _FLAG_FULL, ready)
        if cursor in (b"0", 0):
            return leased


def host_counts(link: Link, prefix: bytes, limit: int, prefetched: Mapping[str, int]) -> HostList:
    """Up to ``limit`` hosts: the most queued first, then blocked or with a policy.

    ``prefetched`` counts, per host, requests this process leased ahead and has
    not handed out: they are reported as queued. Costs O(hosts) on the client
    and a function call per ``SCAN_COUNT`` hosts.
    """
    leased = _scan_hosts(link, prefix)
    names = list(leased)
    queued: list[int] = []
    link.load_library("counting hosts")
    function = link.library.function["queued_per_host"]
    for start in range(0, len(names), SCAN_COUNT):
        chunk = [name.encode() for name in names[start : start + SCAN_COUNT]]
        queued += link.call(pack([b"FCALL", function, b"1", prefix, *chunk]), "counting hosts")
    busy: dict[str, tuple[int, int]] = {}
    for name, waiting in zip(names, queued, strict=True):
        mine = prefetched.get(name, 0)
        held = leased[name][0]
        waiting += mine
        held -= mine
        if waiting or held:
            busy[name] = (waiting, held)
    clock, blocks, policies = link.commands(
        [(b"TIME",), (b"HGETALL", prefix + b"blocks"), (b"HGETALL", prefix + b"policy")],
        "reading host controls",
    )
    now = int(clock[0]) * 1000 + int(clock[1]) / 1000
    blocked = {}
    for i in range(0, len(blocks), 2):
        until = float(blocks[i + 1].split()[0])
        if until > now:
            blocked[blocks[i].decode()] = until / 1000
    overrides = {policies[i].decode(): _policy(policies[i + 1]) for i in range(0, len(policies), 2)}

    def timing(name: str) -> tuple[float, bool]:
        _, full, ready = leased.get(name, (0, False, 0.0))
        return max(0.0, (ready - now) / 1000), full

    details = host_details(busy, blocked, overrides, lambda name: 0, limit, now / 1000, timing)
    if not details:
        return details
    accepted = link.command(
        b"HMGET", prefix + b"accepted", *(h.host.encode() for h in details), doing="listing hosts"
    )
    return HostList(
        [
            dataclass_replace(h, accepted=int(count or 0))
            for h, count in zip(details, accepted, strict=True)
        ],
        details.busy,
        details.blocked,
    )


def _policy(value: bytes) -> tuple[float | None, int | None]:
    """A host's ``policy`` field, "<delay ms> <concurrency>", as (seconds, limit)."""
    delay, _, concurrency = value.decode().partition(" ")
    return (float(delay) / 1000 if delay else None, int(concurrency) if concurrency else None)


def host_policy(link: Link, prefix: bytes, host: str) -> tuple[float | None, int | None]:
    """A host's own (delay, concurrency), None where it follows the crawl's."""
    value = link.command(b"HGET", prefix + b"policy", host.encode(), doing="reading a policy")
    return (None, None) if value is None else _policy(value)


def change_host_at(
    location: RedisURL, link: Link, what: str, host: str, seconds: float | None
) -> str:
    """`change_host` on a link to the server holding the crawl (or the host's shard)."""
    prefix = location.prefix.encode()
    delay_s, concurrency = link.command(
        b"HMGET", prefix + b"meta", b"last_host_delay", b"last_host_concurrency",
        doing="reading the crawl's settings",
    )  # fmt: skip
    if delay_s is None:
        raise StoreError(f"there is no crawl {location.crawl!r} at {location.display}")
    link.load_library("loading crawlq's functions")
    head = [b"FCALL", link.library.function["control"], b"1", prefix, what.encode()]
    pacing = [b"%d" % math.ceil(float(delay_s) * 1_000_000), concurrency or b"0"]
    args: list[bytes] = []
    if what == "block":
        assert seconds is not None
        args = [b"%d" % math.ceil(seconds * 1000)]
    elif what == "delay":
        own = host_policy(link, prefix, host)[1]
        args = [
            b"" if seconds is None else b"%d" % math.ceil(seconds * 1000),
            b"" if own is None else b"%d" % own,
        ]
        what_bytes = b"policy"
        head[-1] = what_bytes
    link.call(pack([*head, *pacing, host.encode(), *args]), "changing a host")
    return f"changed {host}: every worker obeys it from its next call"
