"""Configuration of the Redis store: the frontier URL and the store's options.

`parse_url` turns a frontier URL (one server, or a Redis Cluster's seed nodes)
into redis-py connection arguments, a crawl name and a display URL without
the password; `Settings` checks the Redis store's own options. Both raise
`ConfigError` before anything connects.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from ..._errors import ConfigError

__all__ = ["RedisURL", "Settings", "bloom_shape", "parse_url"]

_DEFAULT_PREFETCH: Final = 64
_DEFAULT_BLOOM_ERROR_RATE: Final = 0.001
_MAX_BLOOM_BITS: Final = 2**32  # a Redis string holds at most 512 MB
_CRAWL_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
# Query parameters handed to redis-py, with their parsers.
_QUERY_OPTIONS: Final[dict[str, Callable[[str], Any]]] = {
    "socket_timeout": float,
    "socket_connect_timeout": float,
    "client_name": str,
    "ssl_cert_reqs": str,
    "ssl_ca_certs": str,
    "ssl_certfile": str,
    "ssl_keyfile": str,
    "ssl_check_hostname": lambda v: v.lower() in ("1", "true", "yes", "on"),
}


@dataclass(frozen=True)
class RedisURL:
    """A parsed frontier URL: where the server is, which crawl, and how to show it."""

    #: The URL as given (it may hold a password: never show it).
    raw: str = field(repr=False)
    #: The URL with any password replaced by ``***``.
    display: str
    #: The crawl name that namespaces every key.
    crawl: str
    #: The database number.
    db: int
    #: Keyword arguments for ``redis.Redis``.
    kwargs: dict[str, Any] = field(repr=False)
    #: Strings that must never appear in a message (the password).
    secrets: tuple[str, ...] = field(repr=False, default=())
    #: A Redis Cluster's seed nodes, (host, port) each; empty for one server.
    nodes: tuple[tuple[str, int], ...] = ()
    #: The shard of a cluster crawl these keys belong to; None: the whole crawl.
    shard: int | None = None
    #: That shard's hash tag, when the crawl's record gives one (else NAME:K).
    tag: str | None = None

    @property
    def cluster(self) -> bool:
        """True for a ``redis+cluster://`` URL."""
        return bool(self.nodes)

    @property
    def prefix(self) -> str:
        """The key prefix of the crawl (or of one shard of it).

        The hash tag keeps a crawl, or a shard of a cluster crawl, in one
        cluster slot: ``crawlq:{NAME}:`` and ``crawlq:{NAME:K}:``.
        """
        if self.shard is None:
            return f"crawlq:{{{self.crawl}}}:"
        return f"crawlq:{{{self.tag or f'{self.crawl}:{self.shard}'}}}:"

    def of_shard(self, shard: int, host: str, port: int, tag: str | None = None) -> RedisURL:
        """This cluster crawl's shard ``shard`` (hash tag ``tag``), on the node at ``host:port``."""
        kwargs = {**self.kwargs, "host": host, "port": port}
        # A unique raw URL: shards never share the per-URL client cache.
        return replace(self, raw=f"{self.raw}#{shard}", kwargs=kwargs, shard=shard, tag=tag)

    def scrub(self, text: str) -> str:
        """Remove the password from a message (a server may echo what it was sent)."""
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


def parse_url(url: str) -> RedisURL:
    """Parse ``redis://``, ``rediss://``, ``unix://`` or ``redis+cluster://`` frontier URLs.

    ``redis://[user:password@]host[:port][/db][?crawl=NAME]``; ``unix:///path.sock
    ?db=N&crawl=NAME``; ``redis+cluster://[user:password@]host:port[,host:port...]
    [/][?crawl=NAME]`` (or ``rediss+cluster://``): any nodes of a Redis Cluster
    as seeds, database 0 only. The crawl name defaults to ``default``. Other
    query parameters are passed to redis-py: socket_timeout,
    socket_connect_timeout, client_name and the ssl_* settings.

    Raises `ConfigError`, naming the URL without its password, for anything
    else: another scheme, a bad port, database or crawl name, an unknown
    query parameter.
    """
    scheme_text, sep, rest = url.partition("://")
    if sep and scheme_text.lower() in ("redis+cluster", "rediss+cluster"):
        return _parse_cluster_url(url, scheme_text.lower().partition("+")[0], rest)
    scheme_text, colon, rest = url.partition(":")
    if colon and not rest.startswith("//"):
        raise ConfigError(
            f"frontier URL {_mask_raw(url)!r} lacks '//' after '{scheme_text}:'; frontier URLs "
            "look like 'memory://', 'sqlite:///job.db' or 'redis://host:6379/0?crawl=NAME'"
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"frontier URL {_mask_raw(url)!r} is malformed: {exc}") from None
    scheme = parts.scheme.lower()
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    if username is not None and password is None and "@" in parts.netloc:
        # redis://secret@host: redis-py would send it as a user name; most
        # people mean a password (Redis < 6 had no users).
        password, username = username, None
    query = parse_qsl(parts.query, keep_blank_values=True)
    crawl = "default"
    db_text: str | None = None
    # RESP2: the replies this module parses keep one shape across redis-py
    # versions (redis-py 8 defaults to RESP3 maps and pairs).
    kwargs: dict[str, Any] = {"socket_timeout": 10.0, "socket_connect_timeout": 5.0, "protocol": 2}
    display_query: list[tuple[str, str]] = []
    shown = _mask_raw(url)
    for name, value in query:
        if name == "crawl":
            crawl = value
        elif name == "db":
            db_text = value
        elif name in _QUERY_OPTIONS:
            try:
                kwargs[name] = _QUERY_OPTIONS[name](value)
            except ValueError:
                raise ConfigError(
                    f"frontier URL {shown!r}: {name}={value!r} is not a valid value"
                ) from None
            display_query.append((name, value))
        else:
            valid = ", ".join(["crawl", "db", *_QUERY_OPTIONS])
            raise ConfigError(
                f"frontier URL {shown!r} has an unknown parameter {name!r}; valid ones are: {valid}"
            )
    if not _CRAWL_NAME.fullmatch(crawl):
        raise ConfigError(
            f"frontier URL {shown!r}: crawl name {crawl!r} must be 1-200 letters, digits, "
            "'.', '_' or '-' (it namespaces the crawl's keys)"
        )
    if scheme == "unix":
        if not parts.path:
            raise ConfigError(
                f"frontier URL {shown!r} names no socket; use unix:///path/to/redis.sock?db=0"
            )
        kwargs["unix_socket_path"] = unquote(parts.path)
        where = parts.path
    elif scheme in ("redis", "rediss"):
        if not parts.hostname:
            raise ConfigError(
                f"frontier URL {shown!r} names no host; use redis://host:6379/0?crawl=NAME"
            )
        path = parts.path.strip("/")
        if path:
            if db_text is not None:
                raise ConfigError(f"frontier URL {shown!r} gives the database twice (path and db=)")
            db_text = path
        kwargs["host"] = parts.hostname
        kwargs["port"] = port or 6379
        if scheme == "rediss":
            kwargs["ssl"] = True
        host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        where = f"{host}:{port or 6379}"
    else:
        raise ConfigError(f"frontier URL {shown!r}: use redis://, rediss:// or unix://")
    try:
        db = int(db_text) if db_text is not None else 0
        if db < 0:
            raise ValueError
    except ValueError:
        raise ConfigError(
            f"frontier URL {shown!r}: database {db_text!r} must be a number >= 0"
        ) from None
    kwargs["db"] = db
    if username is not None:
        kwargs["username"] = username
    if password is not None:
        kwargs["password"] = password
    userinfo = ""
    if username is not None or password is not None:
        userinfo = quote(username or "", safe="") + (":***" if password is not None else "") + "@"
    tail = "&".join(f"{k}={quote(v, safe='/')}" for k, v in display_query)
    if scheme == "unix":
        display = f"unix://{userinfo}{where}?db={db}&crawl={crawl}"
    else:
        display = f"{scheme}://{userinfo}{where}/{db}?crawl={crawl}"
    if tail:
        display += "&" + tail
    secrets = tuple(s for s in (password, parts.password) if s and len(s) >= 3)
    return RedisURL(url, display, crawl, db, kwargs, secrets)


def _parse_cluster_url(url: str, scheme: str, rest: str) -> RedisURL:
    """Parse a ``redis+cluster://`` URL: seed nodes, then as ``redis://`` for the rest."""
    shown = _mask_raw(url)
    authority, slash, tail = rest.partition("/")
    if not slash:
        authority, question, query = authority.partition("?")
        tail = question + query
    userinfo, at, hostports = authority.rpartition("@")
    nodes: list[tuple[str, int]] = []
    for item in hostports.split(","):
        host, colon, port_text = item.strip().rpartition(":")
        if not colon or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(
                f"frontier URL {shown!r}: {item.strip()!r} is not a host:port; use "
                "redis+cluster://host:port[,host:port...]/?crawl=NAME"
            )
        nodes.append((host.strip("[]"), int(port_text)))
    path, _, query = tail.partition("?")
    if path.strip("/") not in ("", "0"):
        raise ConfigError(
            f"frontier URL {shown!r}: a Redis Cluster has only database 0; drop "
            f"'/{path.strip('/')}' from the URL"
        )
    # The first seed and the rest of the URL parse as a one-server URL.
    inner = f"{scheme}://{userinfo}{at}{_host_port(*nodes[0])}/0" + (f"?{query}" if query else "")
    try:
        single = parse_url(inner)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace(_mask_raw(inner), shown)) from None
    if single.db != 0:
        raise ConfigError(f"frontier URL {shown!r}: a Redis Cluster has only database 0")
    seeds = ",".join(_host_port(host, port) for host, port in nodes)
    display_user = single.display.partition("://")[2].rpartition("@")
    user_shown = display_user[0] + "@" if display_user[1] else ""
    display = f"{scheme}+cluster://{user_shown}{seeds}/?{single.display.partition('?')[2]}"
    return replace(single, raw=url, display=display, nodes=tuple(nodes))


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _mask_raw(url: str) -> str:
    """Hide the password of a URL that may not even parse."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    if "@" in authority:
        userinfo, _, hostport = authority.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        authority = (f"{user}:***" if colon else "***") + "@" + hostport
    return f"{scheme}://{authority}{slash}{tail}"


@dataclass(frozen=True, slots=True)
class Settings:
    """The Redis store's own options, checked.

    ``prefetch`` (default 64) caps how many requests one pop leases ahead.
    ``bloom_capacity`` and ``bloom_error_rate`` (default 0.001) switch a new
    crawl to Bloom dedup. ``retry_timeout`` (default 10 s) bounds how long
    connection failures are retried before `StoreUnavailable`.
    ``allow_eviction`` (default False) opens a server whose
    ``maxmemory-policy`` evicts any key (``allkeys-*``): lossy, as the server
    then drops requests, leases and seen fingerprints when full.

    Raises `ConfigError` for a value of the wrong type or range.
    """

    prefetch: int
    bloom_capacity: int | None
    bloom_error_rate: float | None
    retry_timeout: float
    allow_eviction: bool = False

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Settings:
        prefetch = options.get("prefetch", _DEFAULT_PREFETCH)
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or not 1 <= prefetch <= 1000:
            raise ConfigError(f"prefetch must be an int from 1 to 1000, not {prefetch!r}")
        capacity = options.get("bloom_capacity")
        if capacity is not None and (
            isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1
        ):
            raise ConfigError(f"bloom_capacity must be an int >= 1 (or None), not {capacity!r}")
        rate = options.get("bloom_error_rate")
        if rate is not None:
            if capacity is None:
                raise ConfigError("bloom_error_rate needs bloom_capacity: set both, or neither")
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate < 0.5:
                raise ConfigError(f"bloom_error_rate must be a number in (0, 0.5), not {rate!r}")
            rate = float(rate)
        elif capacity is not None:
            rate = _DEFAULT_BLOOM_ERROR_RATE
        if capacity is not None and rate is not None:
            bloom_shape(capacity, rate)  # refuse a filter too big before connecting
        retry = options.get("retry_timeout", 10.0)
        if isinstance(retry, bool) or not isinstance(retry, int | float) or not 0 <= retry < 3600:
            raise ConfigError(f"retry_timeout must be seconds in [0, 3600), not {retry!r}")
        allow_eviction = options.get("allow_eviction", False)
        if not isinstance(allow_eviction, bool):
            raise ConfigError(f"allow_eviction must be True or False, not {allow_eviction!r}")
        return cls(prefetch, capacity, rate, float(retry), allow_eviction)


def bloom_shape(capacity: int, error_rate: float) -> tuple[int, int]:
    """Bits and hash count of a Bloom filter for ``capacity`` items at ``error_rate``."""
    bits = math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)
    if bits > _MAX_BLOOM_BITS:
        raise ConfigError(
            f"a Bloom filter for bloom_capacity={capacity} at bloom_error_rate={error_rate} "
            "needs more than 512 MB (a Redis string's limit); lower the capacity or raise the rate"
        )
    hashes = min(30, max(1, round(bits / capacity * math.log(2))))
    return bits, hashes
