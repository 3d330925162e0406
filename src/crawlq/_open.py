"""`open_frontier`: pick a store from a URL and check the options."""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable
from typing import Any, Final

from ._errors import ConfigError
from ._fingerprint import Fingerprinter
from ._frontier import Frontier
from ._policy import Policy
from ._request import MAX_URL_LENGTH
from .stores.base import Store

__all__ = ["open_frontier"]

_POLICY_OPTIONS: Final = ("host_delay", "host_concurrency", "lifo", "lease_timeout", "clock")
_COMMON_OPTIONS: Final = (*_POLICY_OPTIONS, "fingerprinter", "max_url_length")

# A store module provides OPTIONS (the names of its own options) and
# open_store(url, policy, fingerprinter, options) -> (store, display URL).
_StoreFactory = Callable[[str, Policy, Fingerprinter, dict[str, Any]], tuple[Store, str]]

# scheme -> the module that implements it, imported only when used.
_STORES: Final = {
    "memory": "crawlq.stores.memory",
    "sqlite": "crawlq.stores.sqlite",
    "redis": "crawlq.stores.redis",
}
_SCHEME_ALIASES: Final = {"rediss": "redis", "unix": "redis"}
_SCHEME_LIKE: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")


def _store_module(scheme: str) -> tuple[_StoreFactory, tuple[str, ...]]:
    name = _STORES[scheme]
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            raise ConfigError(
                f"the {scheme} store is not part of this crawlq release yet; "
                "use 'memory://' for now"
            ) from None
        raise
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
    opens a durable job; ``redis://host:port/db?crawl=NAME`` a shared one.

    Options shared by every store: ``host_delay`` (seconds between two pops
    for one host, default 0), ``host_concurrency`` (most leased at once per
    host, default no limit), ``lifo`` (newest first within a priority, default
    False), ``lease_timeout`` (seconds before an un-acked request comes back,
    default 600), ``fingerprinter`` (a `Fingerprinter`, default
    ``Fingerprinter()``), ``max_url_length`` (longest URL accepted, in
    characters, default `MAX_URL_LENGTH`: 32 KiB) and ``clock`` (a seconds
    function, for tests).

    Raises `ConfigError` for an unknown URL scheme, an unknown option or a
    bad option value, naming what is accepted, and what the store raises when
    it cannot open (`StoreError` and its children).
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
    factory, store_options = _store_module(scheme)
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
    max_url_length = options.get("max_url_length", MAX_URL_LENGTH)
    if isinstance(max_url_length, bool) or not isinstance(max_url_length, int):
        raise ConfigError(f"max_url_length must be an int >= 16, not {max_url_length!r}")
    if max_url_length < 16:
        raise ConfigError(f"max_url_length must be an int >= 16, not {max_url_length!r}")
    extra = {k: options[k] for k in store_options if k in options}
    store, display_url = factory(url, policy, fingerprinter, extra)
    return Frontier(
        store,
        policy=policy,
        fingerprinter=fingerprinter,
        url=display_url,
        max_url_length=max_url_length,
    )
