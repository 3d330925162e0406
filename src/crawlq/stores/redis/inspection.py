"""Looking at and removing a crawl kept in Redis: host counts, `inspect`, `purge`.

These read a crawl's keys directly, without opening a frontier, so they work
on a crawl that workers are using right now (``inspect`` reads while they
write: its figures are a close, not an atomic, snapshot) and on one created
with any settings. They are the logic behind ``crawlq inspect URL`` and
``crawlq purge URL``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from ..._errors import StoreError
from ..base import Counters, HostCount, HostList, StoreCounts
from .client import acquire_client, redis_module, release_client
from .config import RedisURL, parse_url
from .conn import Link
from .host_views import SCAN_COUNT, change_host_at, host_counts, host_policy
from .open import FORMAT
from .wire import pack

__all__ = [
    "Inspection",
    "ShardSummary",
    "change_host",
    "close_link",
    "due_figures",
    "host_counts",
    "host_policy",
    "hosts",
    "inspect",
    "meta_counts",
    "open_link",
    "purge",
    "server_counters",
    "snapshot",
]

_HIST_CHUNK: Final = 200  # hosts per inspect.lua call


def server_counters(figures: Sequence[int], leased: int, prefetched: int = 0) -> Counters:
    """`Counters` from the server's figures, in the order read.lua's counts gives them.

    The figures are accepted, duplicates, capped, popped, released, expired
    and refetched. ``leased`` is the server's lease count; ``prefetched`` requests, held
    unused by the reader, are not popped yet. Acked is what was popped and
    is neither back (released, expired) nor leased (a refetch is acked).
    """
    accepted, duplicates, capped, popped, released, expired, refetched = figures
    return Counters(
        accepted=accepted,
        duplicates=duplicates,
        capped=capped,
        popped=popped - prefetched,
        acked=popped - released - expired - leased,
        released=released,
        expired=expired,
        refetched=refetched,
    )


def meta_counts(meta: Mapping[str, str], leased: int, scheduled: int = 0) -> tuple[int, Counters]:
    """The queue's size and the crawl's `Counters` from its meta hash (see shared.lua).

    ``scheduled``: the requests in its `due` set, held and not queued.
    """

    def get(name: str) -> int:
        return int(meta.get(name, "0") or 0)

    refetched = get("refetched")
    queued = (
        get("queued")
        + get("accepted")
        + refetched
        - get("popped")
        + get("released")
        + get("expired")
        - scheduled
    )
    offered = get("seq") - get("seq0") - refetched  # seq counts refetches too
    figures = [
        get("accepted"),
        offered - get("accepted") - get("capped"),
        get("capped"),
        get("popped"),
        get("released"),
        get("expired"),
        refetched,
    ]
    return queued, server_counters(figures, leased)


@dataclass(frozen=True)
class ShardSummary:
    """One shard of a Redis Cluster crawl, as ``crawlq inspect`` shows it."""

    #: The shard's number (its keys are ``crawlq:{NAME:K}:*``).
    shard: int
    #: The primary serving it, host:port.
    node: str
    queued: int
    leased: int
    seen: int


@dataclass(frozen=True)
class Inspection:
    """What ``crawlq inspect`` shows about a crawl kept in Redis."""

    #: The frontier URL, password masked.
    url: str
    #: The crawl name.
    crawl: str
    #: False when no crawl of that name exists (every count is then 0).
    exists: bool
    #: The server's version, e.g. "7.0.15".
    server_version: str
    #: Requests waiting to be handed out.
    queued: int
    #: Requests handed out (including workers' prefetched ones) and not yet acked.
    leased: int
    #: Leases whose deadline has passed; the next pop by any worker puts them back.
    expired_leases: int
    #: Seconds until the next lease deadline, None without leases.
    next_lease_deadline_in: float | None
    #: Leased requests per worker (host/pid/random id of its store).
    leases_by_owner: dict[str, int]
    #: Fingerprints recorded (Bloom mode: insertions that set a new bit).
    seen: int
    #: "exact", "timed" (exact, with seen_ttl) or "bloom".
    dedup: str
    #: Bloom mode only: share of bits set, and the false-positive rate it implies.
    bloom_fill_ratio: float | None
    bloom_false_positive_rate: float | None
    #: Hosts with the most queued requests, busiest first.
    hosts: list[HostCount]
    #: Hosts with any queued or leased request.
    host_total: int
    #: Queued requests per priority, highest priority first.
    priorities: list[tuple[int, int]]
    #: The crawl's fixed settings and those of the last store that opened it.
    settings: dict[str, str] = field(default_factory=dict)
    #: Server memory in use (all crawls and data on that server), bytes.
    used_memory: int = 0
    #: What happened to the crawl's requests since it was created.
    counters: Counters = field(default_factory=Counters)
    #: A Redis Cluster crawl's shards (empty for one server), by number.
    shards: list[ShardSummary] = field(default_factory=list)
    #: Requests held until a due time still to come (not in ``queued``),
    #: revisits included.
    scheduled: int = 0
    #: The part of ``scheduled`` that refetches pages already done.
    revisits: int = 0
    #: Seconds until the first scheduled request is due; None when nothing
    #: is scheduled (one whose due time has come counts as queued).
    next_due_in: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (hosts as dicts)."""
        return asdict(self)


def open_link(url: str) -> tuple[RedisURL, Link]:
    """A link to the server of a crawl's URL, for one reading; `close_link` after."""
    location = parse_url(url)
    redis_module()
    client = acquire_client(location)
    return location, Link(location, client, retry_timeout=5.0)


def close_link(location: RedisURL, link: Link) -> None:
    """Close a link `open_link` gave."""
    link.close()
    release_client(location)


def inspect(url: str, *, hosts: int = 20) -> Inspection:
    """Describe the crawl at a Redis frontier URL, without changing it.

    Reads counts, the ``hosts`` busiest hosts, the priority histogram (one
    short server-side walk per host queue), leases per worker and the crawl's
    settings. Raises `ConfigError` for a bad URL, `StoreUnavailable` or
    `StoreError` when the server cannot be read.
    """
    location, link = open_link(url)
    try:
        return inspect_at(location, link, hosts)
    finally:
        close_link(location, link)


def inspect_at(location: RedisURL, link: Link, hosts: int) -> Inspection:
    """`inspect` on a link to the server holding the crawl (or one cluster shard)."""
    prefix = location.prefix.encode()
    meta_flat = link.command(b"HGETALL", prefix + b"meta", doing="inspecting")
    meta = {meta_flat[i].decode(): meta_flat[i + 1].decode() for i in range(0, len(meta_flat), 2)}
    info = link.command(b"INFO", doing="inspecting").decode()
    fields = dict(
        line.split(":", 1) for line in info.splitlines() if ":" in line and line[0] != "#"
    )
    bloom_bits = int(meta.get("bloom_bits", "0") or 0)
    now_s, now_us = link.command(b"TIME", doing="inspecting")
    now_ms = int(now_s) * 1000 + int(now_us) // 1000
    leases = prefix + b"leases"
    replies = link.commands(
        [
            (b"ZCOUNT", leases, b"-inf", b"(+inf"),  # all but the wide entry
            (b"ZCOUNT", leases, b"-inf", now_ms),
            (b"ZRANGE", leases, b"-inf", b"(+inf", b"BYSCORE", b"LIMIT", 0, 1, b"WITHSCORES"),
            (b"SCARD", prefix + b"seen"),
            (b"BITCOUNT", prefix + b"bloom"),
            (b"HLEN", prefix + b"seen_at"),
        ],
        "inspecting",
    )
    leased, expired, first, seen_set, ones, seen_timed = replies
    # (A crawl that is not there, or of another key format, is refused by this
    # crawlq's functions: read as having nothing scheduled.)
    ours = meta.get("format") == str(FORMAT)
    scheduled, revisits, due_in = due_figures(link, prefix) if ours else (0, 0, None)
    by_owner = _leases_by_owner(link, prefix)
    every = host_counts(link, prefix, 1 << 62, {})
    priorities = _priorities(link, prefix, [h.host for h in every if h.queued])
    fill = ones / bloom_bits if bloom_bits else None
    hashes = int(meta.get("bloom_hashes", "0") or 0)
    queued, counters = meta_counts(meta, int(leased), scheduled)
    settings = {
        k: v
        for k, v in meta.items()
        if k in ("format", "lifo", "created", "bloom_capacity", "bloom_error_rate")
        or k.startswith("last_")
    }
    return Inspection(
        url=location.display,
        crawl=location.crawl,
        exists=bool(meta),
        server_version=fields.get("redis_version", "?"),
        queued=queued,
        leased=int(leased),
        expired_leases=int(expired),
        next_lease_deadline_in=(max(0.0, (float(first[1]) - now_ms) / 1000) if first else None),
        leases_by_owner=by_owner,
        seen=_seen(meta, int(seen_set), int(seen_timed)),
        dedup="bloom" if bloom_bits else "timed" if meta.get("seen_ttl") == "1" else "exact",
        bloom_fill_ratio=fill,
        bloom_false_positive_rate=fill**hashes if fill is not None else None,
        hosts=every[:hosts],
        host_total=len(every),
        priorities=priorities,
        settings=settings,
        used_memory=int(fields.get("used_memory", "0") or 0),
        counters=counters,
        scheduled=scheduled,
        revisits=revisits,
        next_due_in=due_in,
    )


def _leases_by_owner(link: Link, prefix: bytes) -> dict[str, int]:
    owners: dict[str, int] = {}
    cursor = b"0"
    while True:
        cursor, flat = link.command(
            b"HSCAN", prefix + b"lease", cursor, b"COUNT", SCAN_COUNT, doing="listing leases"
        )
        for field_, record in zip(flat[::2], flat[1::2], strict=True):
            if field_.startswith(b"@"):
                continue  # a worker's last outcome, not a lease
            # The token starts the record: "owner:call.n".
            token = record.partition(b" ")[0]
            owner = token.rpartition(b":")[0].decode(errors="replace")
            owners[owner] = owners.get(owner, 0) + 1
        if cursor in (b"0", 0):
            return dict(sorted(owners.items(), key=lambda item: -item[1]))


def _priorities(link: Link, prefix: bytes, names: list[str]) -> list[tuple[int, int]]:
    link.load_library("inspecting")
    function = link.library.function["histogram"]
    totals: dict[int, int] = {}
    for start in range(0, len(names), _HIST_CHUNK):
        chunk = [name.encode() for name in names[start : start + _HIST_CHUNK]]
        flat = link.call(pack([b"FCALL", function, b"1", prefix, *chunk]), "inspecting")
        for i in range(0, len(flat), 2):
            priority = -int(float(flat[i]))
            totals[priority] = totals.get(priority, 0) + int(flat[i + 1])
    return sorted(totals.items(), reverse=True)


def purge(url: str) -> int:
    """Delete every key of the crawl at a Redis frontier URL; return how many.

    The only way crawlq deletes shared data (``close()`` never does). Run it
    when no worker uses the crawl: a worker still running raises
    `CorruptStore` from its calls within a second (what it wrote meanwhile
    may need purging again). Other crawls on the server are left alone. Raises
    `ConfigError` for a bad URL, `StoreUnavailable` or `StoreError` when the
    server cannot be reached or refuses.
    """
    location, link = open_link(url)
    try:
        return purge_at(location, link)
    finally:
        close_link(location, link)


def purge_at(location: RedisURL, link: Link) -> int:
    """`purge` on a link to the server holding the crawl (or one cluster shard)."""
    # The crawl name allows no glob characters, so this matches its keys only.
    pattern = location.prefix.encode() + b"*"
    deleted = 0
    cursor = b"0"
    while True:
        cursor, keys = link.command(
            b"SCAN", cursor, b"MATCH", pattern, b"COUNT", SCAN_COUNT, doing="purging"
        )
        if keys:
            deleted += int(link.command(b"UNLINK", *keys, doing="purging"))
        if cursor in (b"0", 0):
            return deleted


def hosts(url: str, *, top: int = 20) -> HostList:
    """Per-host figures of the crawl at a Redis URL, without opening a frontier."""
    location, link = open_link(url)
    try:
        return host_counts(link, location.prefix.encode(), top, {})
    finally:
        close_link(location, link)


def change_host(url: str, what: str, host: str, seconds: float | None = None) -> str:
    """Change one host of a running Redis crawl: ``block`` / ``delay`` (seconds) or ``unblock``.

    Runs the crawl's ``control`` function, as a worker's `Frontier.block_host`
    or `set_host_policy` would (with the pacing its workers last opened it
    with); every worker obeys it from its next call. ``delay`` None gives the
    host the crawl's delay again, keeping its own concurrency. Returns what
    ``crawlq hosts`` says. Raises `StoreError` when there is no such crawl.
    """
    location, link = open_link(url)
    try:
        return change_host_at(location, link, what, host, seconds)
    finally:
        close_link(location, link)


def snapshot(url: str, *, top: int = 20) -> tuple[StoreCounts, HostList]:
    """The `StoreCounts` and the ``top`` busiest hosts of a Redis crawl.

    For ``crawlq top`` and metrics read from outside the workers; leased
    includes workers' prefetched requests, queued leaves out scheduled ones.
    Costs what `host_counts` costs.
    Raises `StoreError` when there is no such crawl, `StoreUnavailable` when
    the server cannot be reached.
    """
    location, link = open_link(url)
    try:
        return snapshot_at(location, link, top)
    finally:
        close_link(location, link)


def snapshot_at(location: RedisURL, link: Link, top: int) -> tuple[StoreCounts, HostList]:
    """`snapshot` on a link to the server holding the crawl (or one cluster shard)."""
    prefix = location.prefix.encode()
    meta_flat, leased, seen_set, seen_timed = link.commands(
        [
            (b"HGETALL", prefix + b"meta"),
            (b"ZCOUNT", prefix + b"leases", b"-inf", b"(+inf"),  # all but the wide entry
            (b"SCARD", prefix + b"seen"),
            (b"HLEN", prefix + b"seen_at"),
        ],
        "reading the crawl",
    )
    if not meta_flat:
        raise StoreError(f"there is no crawl {location.crawl!r} at {location.display}")
    meta = {meta_flat[i].decode(): meta_flat[i + 1].decode() for i in range(0, len(meta_flat), 2)}
    ours = meta.get("format") == str(FORMAT)  # (as in inspect_at)
    scheduled, revisits, due_in = due_figures(link, prefix) if ours else (0, 0, None)
    busiest = host_counts(link, prefix, top, {})
    queued, counters = meta_counts(meta, int(leased), scheduled)
    counts = StoreCounts(
        queued,
        int(leased),
        _seen(meta, int(seen_set), int(seen_timed)),
        counters,
        scheduled=scheduled,
        revisits=revisits,
        next_due_in=due_in,
    )
    return counts, busiest


def due_figures(link: Link, prefix: bytes) -> tuple[int, int, float | None]:
    """A crawl's scheduled requests, the revisits among them, and seconds until the first is due.

    As the store counts them (``due_figures`` in read.lua): a request whose
    due time has come by the server's clock is queued, not scheduled, even
    before a pop moves it into its host; None when nothing is scheduled.
    One function call, O(log n) in scheduled requests.
    """
    link.load_library("reading the crawl")
    function = link.library.function["read"]
    scheduled, revisits, due_in = link.call(
        pack([b"FCALL", function, b"1", prefix, b"due", b""]), "reading the crawl"
    )
    return int(scheduled), int(revisits), None if due_in < 0 else due_in / 1_000_000


def _seen(meta: Mapping[str, str], set_size: int, timed_size: int) -> int:
    """Fingerprints a crawl holds, by its dedup: Bloom, timed, buckets, or an older set."""
    if int(meta.get("bloom_bits", "0") or 0):
        return int(meta.get("seen", "0") or 0)  # insertions that set a new bit
    if meta.get("seen_ttl") == "1":
        return timed_size
    if "sl" in meta:
        return int(meta.get("ns", "0") or 0)
    return set_size
