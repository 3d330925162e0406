"""redis-py for the Redis store: the extra, one client per URL, errors translated.

`acquire_client` keeps one redis-py client per distinct URL (as parsed by
``config``), shared by every store opened on it; `translate` turns every
redis-py exception into a crawlq error naming the fix, and `is_transient`
says which ones a retry may get past. ``redis`` is imported lazily, so
``import crawlq`` works without the extra.

Error replies are told apart by redis-py's exception classes, never by their
text alone: redis-py strips the code from the replies it has a class for
(``MOVED 2454 host:port`` becomes ``MovedError("2454 host:port")``).
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from ..._errors import (
    CorruptStore,
    IncompatibleStore,
    StoreError,
    StoreFull,
    StoreUnavailable,
    import_extra,
)
from .config import RedisURL

if TYPE_CHECKING:
    import redis

__all__ = [
    "INSTALL_HINT",
    "MIN_SERVER",
    "NotPrimary",
    "acquire_client",
    "is_transient",
    "redis_module",
    "release_client",
    "translate",
]

INSTALL_HINT: Final = "the Redis store needs redis-py: pip install 'crawlq[redis]'"
#: Oldest server crawlq's Lua runs on: Redis Functions came with 7.0.
MIN_SERVER: Final = (7, 0)
# Replies a retry may get past, by their code. redis-py raises most of them
# as their own classes, their text without the code (see `_reply_code`);
# BUSY (a script running too long) keeps its code in the text. MOVED and ASK
# come from a Redis Cluster whose slots moved (a failover, a reshard), as do
# READONLY (a demoted primary, in a cluster or behind Sentinel), TRYAGAIN,
# CLUSTERDOWN and MASTERDOWN: a link that can reroute (`Link.reroute`) reads
# the slot map again and retries on the node serving its keys now.
#
# ASK is retried so too, never followed (ASKING, then the call on the node
# importing the slot): crawlq's functions name one key, the shard's prefix,
# which is no key at all, and reach the shard's keys by name. While a slot
# moves the source answers every call ASK (it lacks the key named), and the
# target, asked, would run the function on the keys moved so far. So a
# shard's calls wait, retried, until the slot is the target's (MOVED), and
# run on one node that holds all its keys (tests/redis/test_cluster_migration.py).
_TRANSIENT_REPLIES: Final = (
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "MASTERDOWN",
    "READONLY",
    "CLUSTERDOWN",
    "MOVED",
    "ASK",
    # A server that cannot write its append-only file or its snapshot (a
    # full disk) refuses every change until a write succeeds again.
    "MISCONF",
    # A primary with min-replicas-to-write refuses changes while too few
    # replicas are connected (one restarting, lagging, cut off).
    "NOREPLICAS",
)


class NotPrimary(Exception):
    """A node answered ``WAIT`` with an error: it is no longer a primary.

    Raised by `crawlq.stores.redis.conn.Link` for a write sent with ``WAIT
    replicas`` (a cluster crawl's ``replicas`` option) to a node that was
    demoted meanwhile: it unblocks a waiting ``WAIT`` with ``UNBLOCKED`` and
    refuses a new one. Transient: the call goes again, to the node serving
    its keys now, as a retry (the function returns its first outcome if
    that write reached the new primary, else runs it there).
    """


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
    code = _reply_code(exc)
    text = location.scrub(str(exc)) or type(exc).__name__
    if code and not text.upper().startswith(code):
        text = f"{code} {text}"  # the code redis-py took off, back in front
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
    if code == "MISCONF":
        return StoreFull(
            f"Redis at {where} cannot write to its disk and refused every change while {doing}, "
            f"until the retries gave up ({text}): the call did nothing, and everything accepted "
            "before it is kept. Adds, pops and acks all wait for room: free space where the "
            "server keeps its files (CONFIG GET dir); it takes changes again once its next "
            "append-only write or snapshot succeeds. Then call again"
        )
    if code == "NOREPLICAS":
        return StoreUnavailable(
            f"Redis at {where} refused every change while {doing}, until the retries gave up "
            f"({text}): its min-replicas-to-write wants more replicas connected than it has. "
            "The call did nothing and everything accepted before it is kept; it may pass once "
            "a replica is back (INFO replication): call again, or raise retry_timeout"
        )
    if isinstance(exc, NotPrimary) or code in _MOVING:
        return StoreUnavailable(
            f"Redis at {where} kept answering that it no longer serves the crawl's keys while "
            f"{doing} ({text}), until the retries gave up; a failover or a reshard is under "
            "way or stuck: check the cluster (redis-cli --cluster check), then call again"
        )
    if isinstance(exc, errors.ConnectionError | errors.TimeoutError):
        return StoreUnavailable(
            f"cannot reach Redis at {where} while {doing} ({text}); check that the server is "
            "running and that the host, port and TLS setting of the frontier URL are right"
        )
    if code in _TRANSIENT_REPLIES:
        return StoreUnavailable(
            f"Redis at {where} was not ready while {doing} ({text}), until the retries gave "
            "up; it may pass: call again, or raise retry_timeout"
        )
    if upper.startswith("CRAWLGONE"):
        return CorruptStore(
            f"crawl {location.crawl!r} is gone from Redis at {where} (found while {doing}): "
            "its keys were lost under its workers (a restart without persistence, a FLUSHALL "
            "or FLUSHDB, or a purge while they ran), and with them what was queued, leased and "
            "seen. crawlq stops rather than go on as an empty crawl. Keep crawls on a server "
            "with appendonly yes; to start this one again, open it anew (crawlq purge it first "
            "if opening then says it has no key format)"
        )
    if upper.startswith("CRAWLFORMAT"):
        stored = text.split()[1].rstrip(":") if len(text.split()) > 1 else "?"
        return IncompatibleStore(
            f"crawl {location.crawl!r} at {where} is now in key format {stored} (found while "
            f"{doing}): a crawlq of another version upgraded it while this one ran. This "
            "worker stops rather than misread it: run the same crawlq version on every worker "
            "(stop the older ones before a newer one opens the crawl)"
        )
    if "WRONGTYPE" in upper:
        return IncompatibleStore(
            f"a key under {location.prefix}* on {where} holds data that is not crawlq's "
            f"({text}); use another crawl name (?crawl=NAME) or purge this one"
        )
    return StoreError(f"Redis at {where} failed while {doing}: {text}")


def is_transient(exc: BaseException) -> bool:
    """True for failures that retrying the same call may get past.

    Connection failures and timeouts; the replies of `_TRANSIENT_REPLIES`
    (a cluster's redirections among them), by redis-py's class or by code;
    and `NotPrimary`.
    """
    errors = redis_module().exceptions
    if isinstance(exc, NotPrimary):
        return True
    if isinstance(exc, errors.AuthenticationError | errors.AuthorizationError):
        return False
    if isinstance(exc, errors.ConnectionError | errors.TimeoutError):
        return True
    return bool(_reply_code(exc))


#: Codes of the replies of a node that does not serve the keys asked for now.
_MOVING: Final = ("MOVED", "ASK", "READONLY")


def _reply_code(exc: BaseException) -> str:
    """The code of a transient error reply (MOVED, ASK, TRYAGAIN...), or "" for any other.

    By redis-py's exception class where it has one (it strips the code from
    the text), else by the text's first word.
    """
    errors = redis_module().exceptions
    if not isinstance(exc, errors.ResponseError):
        return ""
    for cls, code in (
        ("MovedError", "MOVED"),  # before AskError: a subclass of it
        ("AskError", "ASK"),
        ("TryAgainError", "TRYAGAIN"),
        ("MasterDownError", "MASTERDOWN"),  # before ClusterDownError: a subclass of it
        ("ClusterDownError", "CLUSTERDOWN"),
        ("ReadOnlyError", "READONLY"),
    ):
        found = getattr(errors, cls, None)
        if found is not None and isinstance(exc, found):
            return code
    first = str(exc).lstrip().partition(" ")[0].upper()
    return first if first in _TRANSIENT_REPLIES else ""
