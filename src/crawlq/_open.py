"""`open_frontier`: pick a store from a URL and check the options."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any, Final

from ._errors import ConfigError
from ._fingerprint import Fingerprinter
from ._frontier import Frontier
from ._policy import Policy
from .stores.base import Store

__all__ = ["open_frontier"]

_POLICY_OPTIONS: Final = ("host_delay", "host_concurrency", "lifo", "lease_timeout", "clock")
_COMMON_OPTIONS: Final = (*_POLICY_OPTIONS, "fingerprinter")

# scheme -> (store factory, the store's own options)
_StoreFactory = Callable[[str, Policy, Fingerprinter, dict[str, Any]], tuple[Store, str]]


def _open_memory(
    url: str, policy: Policy, fingerprinter: Fingerprinter, options: dict[str, Any]
) -> tuple[Store, str]:
    from .stores.memory import MemoryStore

    if url.rstrip("/") not in ("memory:", "memory:/"):
        raise ConfigError(f"frontier URL {url!r}: a memory frontier takes no path; use 'memory://'")
    return MemoryStore(policy), "memory://"


def _not_yet(name: str, issue: str) -> _StoreFactory:
    def factory(
        url: str, policy: Policy, fingerprinter: Fingerprinter, options: dict[str, Any]
    ) -> tuple[Store, str]:
        raise ConfigError(
            f"the {name} store is not part of this crawlq release yet ({issue}); "
            "use 'memory://' for now"
        )

    return factory


_STORES: Final[dict[str, tuple[_StoreFactory, tuple[str, ...]]]] = {
    "memory": (_open_memory, ()),
    "sqlite": (_not_yet("SQLite", "durable jobs"), ()),
    "redis": (_not_yet("Redis", "distributed frontier"), ()),
}
_SCHEME_ALIASES: Final = {"rediss": "redis", "unix": "redis"}
_SCHEME_LIKE: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")


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
    opens a durable job; ``redis://host:port/db?crawl=NAME`` a shared one.

    Options shared by every store: ``host_delay`` (seconds between two pops
    for one host, default 0), ``host_concurrency`` (most leased at once per
    host, default no limit), ``lifo`` (newest first within a priority, default
    False), ``lease_timeout`` (seconds before an un-acked request comes back,
    default 600), ``fingerprinter`` (a `Fingerprinter`, default
    ``Fingerprinter()``) and ``clock`` (a seconds function, for tests).

    Raises `ConfigError` for an unknown URL scheme, an unknown option or a
    bad option value, naming what is accepted.
    """
    if not isinstance(url, str) or not url:
        raise ConfigError(f"frontier URL must be a non-empty str such as 'memory://', not {url!r}")
    scheme = _scheme(url)
    scheme = _SCHEME_ALIASES.get(scheme, scheme)
    if scheme not in _STORES:
        known = ", ".join(f"'{s}://'" for s in _STORES)
        raise ConfigError(
            f"frontier URL {url!r} has an unknown scheme {scheme!r}; use one of {known} "
            "(or a directory path for a SQLite job)"
        )
    factory, store_options = _STORES[scheme]
    unknown = sorted(set(options) - set(_COMMON_OPTIONS) - set(store_options))
    if unknown:
        valid = ", ".join(sorted({*_COMMON_OPTIONS, *store_options}))
        raise ConfigError(
            f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} for "
            f"{scheme} frontier; valid options are: {valid}"
        )
    policy = Policy(**{k: options[k] for k in _POLICY_OPTIONS if k in options})
    fingerprinter = options.get("fingerprinter") or Fingerprinter()
    if not isinstance(fingerprinter, Fingerprinter):
        raise ConfigError(f"fingerprinter must be a crawlq.Fingerprinter, not {fingerprinter!r}")
    extra = {k: options[k] for k in store_options if k in options}
    store, display_url = factory(url, policy, fingerprinter, extra)
    return Frontier(store, policy=policy, fingerprinter=fingerprinter, url=display_url)
