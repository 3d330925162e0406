"""`open_frontier`: pick a store from a URL and check the options."""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, cast

from ._combined import CombinedStore
from ._errors import ConfigError
from ._fingerprint import Fingerprinter
from ._frontier import Frontier
from ._policy import Policy
from ._request import MAX_URL_LENGTH
from .stores.base import Store, StoreAdmin

__all__ = ["StoreKind", "open_frontier", "store_kind"]

_POLICY_OPTIONS: Final = (
    "host_delay",
    "host_concurrency",
    "lifo",
    "lease_timeout",
    "ack_delay",
    "max_requests_per_host",
    "seen_ttl",
    "clock",
)
_COMMON_OPTIONS: Final = (
    *_POLICY_OPTIONS,
    "fingerprinter",
    "max_url_length",
    "revisit",
    "threads",
)

# A store module provides OPTIONS (the names of its own options) and
# open_store(url, policy, fingerprinter, options) -> (store, display URL).
_StoreFactory = Callable[[str, Policy, Fingerprinter, dict[str, Any]], tuple[Store, str]]


@dataclass(frozen=True, slots=True)
class StoreKind:
    """What a frontier URL's scheme names: the store, and what it promises."""

    #: The store's name: ``memory``, ``sqlite``, ``redis`` or ``redis+cluster``.
    name: str
    #: The module that implements it, imported only when used.
    module: str
    #: Accepted requests outlive the process.
    durable: bool
    #: Other processes may add, pop and ack in the same store.
    shared: bool
    #: The module of its admin interface (`crawlq.stores.base.StoreAdmin`):
    #: how the CLI, the metrics and watching read or change a job or crawl
    #: from outside; None: nothing to read from outside (``memory``).
    jobs_module: str | None

    def admin(self, what: str = "read it") -> StoreAdmin:
        """Import and return this store's admin interface.

        ``what`` names the caller's purpose for the error messages. Raises
        `ConfigError` for a memory frontier (it lives inside its process), or
        naming the extra to install when the store's package is missing.
        """
        if self.jobs_module is None:
            raise ConfigError(
                f"a {self.name}:// frontier lives inside its process: there is nothing to "
                f"{what} from outside; give a job directory, a sqlite:/// or a redis:// URL"
            )
        try:
            module = importlib.import_module(self.jobs_module)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.startswith("crawlq"):
                raise
            extra = self.name.partition("+")[0]
            raise ConfigError(
                f"{what} for {self.name}:// needs {exc.name}: pip install 'crawlq[{extra}]'"
            ) from None
        return cast(StoreAdmin, module)


_MEMORY: Final = StoreKind("memory", "crawlq.stores.memory", False, False, None)
_SQLITE: Final = StoreKind(
    "sqlite", "crawlq.stores.sqlite", True, False, "crawlq.stores.sqlite.admin"
)
_REDIS: Final = StoreKind("redis", "crawlq.stores.redis", True, True, "crawlq.stores.redis.admin")
_REDIS_CLUSTER: Final = StoreKind(
    "redis+cluster",
    "crawlq.stores.redis.cluster",
    True,
    True,
    "crawlq.stores.redis.cluster.admin",
)
# scheme -> its store; "rediss" and "unix" are Redis over TLS and a Unix socket.
_KINDS: Final = {
    "memory": _MEMORY,
    "sqlite": _SQLITE,
    "redis": _REDIS,
    "rediss": _REDIS,
    "unix": _REDIS,
    "redis+cluster": _REDIS_CLUSTER,
    "rediss+cluster": _REDIS_CLUSTER,
}
_SCHEME_LIKE: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")


def store_kind(url: str) -> StoreKind:
    """Return the store a frontier URL (or a plain job path) names.

    Reads the URL's scheme only: nothing is opened. Raises `ConfigError` for
    something that is not a non-empty str, or an unknown scheme, naming the
    known ones.
    """
    if not isinstance(url, str) or not url:
        raise ConfigError(f"frontier URL must be a non-empty str such as 'memory://', not {url!r}")
    scheme = _scheme(url)
    kind = _KINDS.get(scheme)
    if kind is None:
        known = ", ".join(f"'{s}://'" for s in ("memory", "sqlite", "redis", "redis+cluster"))
        raise ConfigError(
            f"frontier URL {url!r} has an unknown scheme {scheme!r}; use one of {known} "
            "(or a directory path for a SQLite job)"
        )
    return kind


def _store_module(kind: StoreKind) -> tuple[_StoreFactory, tuple[str, ...]]:
    module = importlib.import_module(kind.module)
    return module.open_store, tuple(module.OPTIONS)


def _scheme(url: str) -> str:
    head, colon, _ = url.partition(":")
    if "://" in url:
        return head.lower()
    if head == "memory" and colon:
        return "memory"
    if colon and _SCHEME_LIKE.fullmatch(head) and not os.path.exists(url):
        return head.lower()  # a URL missing its '//', reported as an unknown scheme
    return "sqlite"  # a plain path: a SQLite job directory


def open_frontier(url: str = "memory://", **options: Any) -> Frontier:
    """Open the frontier stored at ``url``.

    ``memory://`` keeps everything in this process. ``sqlite:///job.db``
    (relative), ``sqlite:////abs/job.db`` (absolute) or a plain directory path
    opens a durable job; ``redis://host:port/db?crawl=NAME`` a shared one,
    and ``redis+cluster://host:port[,host:port...]/?crawl=NAME`` one sharded
    by host over a Redis Cluster.

    Options shared by every store: ``host_delay`` (seconds between two pops
    for one host, default 0), ``host_concurrency`` (most leased at once per
    host, default no limit), ``lifo`` (newest first within a priority, default
    False), ``lease_timeout`` (seconds before an un-acked request comes back,
    default 600), ``ack_delay`` (seconds an ack may wait for the store's next
    write, default 0.5), ``max_requests_per_host`` (further adds of a host
    that had this many accepted return False and count as capped, default
    no cap), ``seen_ttl`` (seconds a fingerprint counts as seen, default
    forever), ``fingerprinter`` (a `Fingerprinter`, default
    ``Fingerprinter()``), ``max_url_length`` (longest URL accepted, in
    characters, default `MAX_URL_LENGTH`: 32 KiB), ``revisit`` (a
    `crawlq.Revisit`: how ``ack(request, changed=)`` paces refetches, default
    none), ``threads`` (True: every method may be called from any thread,
    and calls made at once share store calls; see `Frontier`) and ``clock``
    (a seconds function, for tests).

    Raises `ConfigError` for an unknown URL scheme, an unknown option or a
    bad option value, naming what is accepted, and what the store raises when
    it cannot open (`StoreError` and its children).
    """
    kind = store_kind(url)
    factory, store_options = _store_module(kind)
    unknown = sorted(set(options) - set(_COMMON_OPTIONS) - set(store_options))
    if unknown:
        valid = ", ".join(sorted({*_COMMON_OPTIONS, *store_options}))
        raise ConfigError(
            f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for "
            f"{kind.name} frontier; valid options are: {valid}"
        )
    policy = Policy(**{k: options[k] for k in _POLICY_OPTIONS if k in options})
    fingerprinter = options.get("fingerprinter") or Fingerprinter()
    if not isinstance(fingerprinter, Fingerprinter):
        raise ConfigError(f"fingerprinter must be a crawlq.Fingerprinter, not {fingerprinter!r}")
    max_url_length = options.get("max_url_length", MAX_URL_LENGTH)
    if isinstance(max_url_length, bool) or not isinstance(max_url_length, int):
        raise ConfigError(f"max_url_length must be an int >= 16, not {max_url_length!r}")
    if max_url_length < 16:
        raise ConfigError(f"max_url_length must be an int >= 16, not {max_url_length!r}")
    extra = {k: options[k] for k in store_options if k in options}
    threads = options.get("threads", False)
    if type(threads) is not bool:
        raise ConfigError(f"threads must be True or False, not {threads!r}")
    store, display_url = factory(url, policy, fingerprinter, extra)
    try:
        frontier = Frontier(
            store,
            policy=policy,
            fingerprinter=fingerprinter,
            url=display_url,
            max_url_length=max_url_length,
            revisit=options.get("revisit"),
        )
    except BaseException:
        store.close()
        raise
    if threads:
        frontier._replace_store(CombinedStore(store))
    return frontier
