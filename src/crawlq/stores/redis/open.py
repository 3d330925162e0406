"""Opening a Redis crawl: the server's checks, and the crawl's fixed settings.

Everything here runs before the store serves a call, and refuses (with a
typed error naming the fix, and no password) a server it must not use: one
too old for Redis Functions, one whose memory policy may evict a crawl's keys
(unless allowed), or a crawl created with settings that cannot change.
"""

from __future__ import annotations

import contextlib
import json
import logging
from typing import Any, Final, NamedTuple

from ..._errors import ConfigError, IncompatibleStore, StoreError, StoreFull
from ..._fingerprint import Fingerprinter
from ..._policy import Policy
from .client import MIN_SERVER
from .config import RedisURL, Settings, bloom_shape
from .conn import Link, server_version
from .memory import evicting, eviction_refused, memory_fields

__all__ = ["FINGERPRINTER_KEY", "FORMAT", "Dedup", "check_server", "open_crawl", "settings_at"]

#: Layout version of a crawl's keys, stored in its meta hash. Opening a
#: crawl of format 3 to 8 upgrades it in place (open.lua): format 4 keeps
#: the queue's size as counters, which crawlq before 4 would not read; format
#: 5 keeps exact dedup in buckets (an upgraded crawl keeps its `seen` set);
#: format 6 keeps queued requests in lists per host and priority
#: (``upgrade_queues`` moves them, host by host, at the first open); format
#: 7 holds scheduled requests in `due` (nothing to move: a format-6 crawl
#: has none, and an older crawlq must not open one that may); format 8 files
#: requests that come back or come due deep in a long list in `r:HOST` and
#: marks their host's head (nothing to move either: a format-7 crawl has
#: none, and a format-7 crawlq would hand a marked entry out wrong); format
#: 9 keeps wide entries in `ready`, `leases`, `hosts` and `lease` so they
#: are never packed (added at open; a format-8 crawlq would pop one).
#: Workers of format 9 on look at the format at least once a second and stop
#: at another one (check_format in shared.lua, whose FORMAT is this): a
#: format 10 must be written a second before the upgrade changes any key.
FORMAT: Final = 9
#: Key (after the crawl's prefix) of the fingerprinter its last opener used,
#: as `Fingerprinter.describe` JSON.
FINGERPRINTER_KEY: Final = b"fingerprinter"
#: Hosts moved per call of ``upgrade_queues``: a call's time grows with them.
_UPGRADE_HOSTS: Final = 100

log = logging.getLogger("crawlq.redis")


class Dedup(NamedTuple):
    """A crawl's dedup, fixed at creation: exact (all zero) or a Bloom filter's shape.

    ``timed``: exact, keeping when each fingerprint was recorded (``seen_ttl``).
    """

    bits: int
    hashes: int
    capacity: int
    error_rate: float
    timed: bool = False


def check_server(link: Link, where: str, allow_eviction: bool) -> int:
    """Check the server a crawl is on; return its ``evicted_keys`` count so far.

    Raises `StoreUnavailable` if it does not answer, `StoreError` for a
    server older than Redis 7.0, `IncompatibleStore` for a memory policy
    that evicts any key unless ``allow_eviction`` (then it logs a warning).
    """
    link.command(b"PING", doing="connecting", retry=False)
    version = server_version(link)
    if version < MIN_SERVER:
        wanted = ".".join(map(str, MIN_SERVER))
        raise StoreError(
            f"Redis at {where} is version {'.'.join(map(str, version))}; crawlq needs "
            f"Redis {wanted} or newer (for Redis Functions): upgrade the server or point "
            "the URL at another"
        )
    fields = memory_fields(link)
    policy_name = evicting(fields)
    if policy_name is not None:
        if not allow_eviction:
            raise eviction_refused(where, policy_name, False)
        log.warning(
            "Redis at %s has maxmemory-policy %s: it may evict a crawl's keys when full, "
            "losing requests (allowed by allow_eviction=True)",
            where,
            policy_name,
        )
    return int(fields.get("evicted_keys") or 0)


def open_crawl(
    link: Link,
    location: RedisURL,
    policy: Policy,
    settings: Settings,
    fingerprinter: Fingerprinter,
) -> Dedup:
    """Create the crawl if new, record the last settings, and check the fixed ones.

    The opener's fingerprinter is recorded in ``FINGERPRINTER_KEY`` (a key of
    its own: a value this long would turn the meta hash from a listpack into
    a hash table), so that ``crawlq add`` fingerprints fed URLs as the
    crawlers do.

    Returns the crawl's dedup. Raises `IncompatibleStore` for keys of another
    layout, or a crawl created with another ``lifo`` or Bloom shape, or
    without ``seen_ttl`` when it is given; `ConfigError` for ``seen_ttl``
    with a Bloom filter.
    """
    if policy.seen_ttl is not None and settings.bloom_capacity is not None:
        raise ConfigError(
            "seen_ttl cannot be used with a Bloom filter (bloom_capacity): a Bloom filter "
            "keeps no time per fingerprint and cannot forget one; drop one of the two"
        )
    if settings.bloom_capacity is not None and settings.bloom_error_rate is not None:
        bloom = bloom_shape(settings.bloom_capacity, settings.bloom_error_rate)
        bloom_args = [
            str(bloom[0]),
            str(bloom[1]),
            str(settings.bloom_capacity),
            repr(settings.bloom_error_rate),
        ]
    else:
        bloom_args = ["0", "0", "0", "0"]
    stored = link.command(
        b"FCALL",
        link.library.function["open"],
        1,
        location.prefix.encode(),
        str(FORMAT),
        "1" if policy.lifo else "0",
        *bloom_args,
        "1" if policy.seen_ttl is not None else "0",
        "last_host_delay",
        repr(policy.host_delay),
        "last_host_concurrency",
        str(policy.host_concurrency or 0),
        "last_lease_timeout",
        repr(policy.lease_timeout),
        "last_prefetch",
        str(settings.prefetch),
        doing="opening the crawl",
    )
    values = [v.decode() if isinstance(v, bytes) else "" for v in stored]
    dedup = _check_stored(location, values[:7], policy, bloom_args)
    # A convenience for `crawlq add`, not worth refusing an open for: a full
    # server (which still drains, and opens) keeps the last record it had.
    with contextlib.suppress(StoreFull):
        link.command(
            b"SET",
            location.prefix.encode() + FINGERPRINTER_KEY,
            json.dumps(fingerprinter.describe(), sort_keys=True),
            doing="recording the crawl's fingerprinter",
        )
    if values[7]:
        _upgrade_queues(link, location)
    return dedup


def _upgrade_queues(link: Link, location: RedisURL) -> None:
    """Move a crawl's queued requests to the lists of format 6 on (see open.lua), to the end.

    Each call moves a few hosts atomically, so the server keeps serving
    other clients between them; a second opener doing the same at once is
    harmless (a moved host is skipped).
    """
    log.info(
        "crawl %r at %s: moving queued requests to key format %d",
        location.crawl,
        location.display,
        FORMAT,
    )
    call = (b"FCALL", link.library.function["upgrade"], 1, location.prefix.encode())
    done = 0
    while done != 1:  # 1 once every host is moved
        done = link.command(*call, str(_UPGRADE_HOSTS), doing="upgrading the crawl's keys")


def _check_stored(
    location: RedisURL, stored: list[str], policy: Policy, bloom_args: list[str]
) -> Dedup:
    fmt, lifo, bits, hashes, capacity, rate, timed = stored
    crawl, where = location.crawl, location.display
    if not fmt:
        raise IncompatibleStore(
            f"crawl {crawl!r} at {where} has keys but no key format: what is left of a crawl "
            "whose keys were lost while its workers ran (they raised CorruptStore), not a "
            "crawl; purge it (crawlq purge URL) to start it again"
        )
    if fmt != str(FORMAT):
        newer = fmt.isdigit() and int(fmt) > FORMAT
        raise IncompatibleStore(
            f"crawl {crawl!r} at {where} uses key format {fmt or '?'}, "
            + (
                "newer than this crawlq understands; upgrade crawlq"
                if newer
                else f"not crawlq's format {FORMAT}; use another crawl name"
            )
        )
    if lifo != ("1" if policy.lifo else "0"):
        raise IncompatibleStore(
            f"crawl {crawl!r} at {where} was created with lifo={lifo == '1'}; open it with "
            f"lifo={lifo == '1'}, or use another crawl name (?crawl=NAME)",
            setting="lifo",
        )
    if bloom_args[0] != "0" and bloom_args[:2] != [bits, hashes]:
        was = "exact dedup"
        if bits != "0":
            was = f"bloom_capacity={capacity}, bloom_error_rate={rate}"
        raise IncompatibleStore(
            f"crawl {crawl!r} at {where} was created with {was}; its dedup cannot change: "
            "open it with those settings (or none), or use another crawl name",
            setting="dedup",
        )
    if bits not in ("", "0") and policy.seen_ttl is not None:
        raise ConfigError(
            f"crawl {crawl!r} at {where} dedups with a Bloom filter, which keeps no times: "
            "seen_ttl cannot apply to it; open it without seen_ttl, or use another crawl name"
        )
    if timed != "1" and policy.seen_ttl is not None:
        raise IncompatibleStore(
            f"crawl {crawl!r} at {where} was created without seen_ttl, so its seen set keeps "
            "no times; open it without seen_ttl, or start a new crawl with it",
            setting="seen_ttl",
        )
    dedup = Dedup(int(bits or 0), int(hashes or 0), int(capacity or 0), float(rate or 0))
    return dedup._replace(timed=timed == "1")


def settings_at(location: RedisURL, link: Link) -> dict[str, Any] | None:
    """A crawl's ``lifo`` and its last opener's ``fingerprint`` description; None: no crawl."""
    prefix = location.prefix.encode()
    lifo, fingerprint = link.commands(
        [(b"HGET", prefix + b"meta", b"lifo"), (b"GET", prefix + FINGERPRINTER_KEY)],
        "reading the crawl's settings",
    )
    if lifo is None:
        return None
    return {"lifo": lifo == b"1", "fingerprint": json.loads(fingerprint) if fingerprint else None}
