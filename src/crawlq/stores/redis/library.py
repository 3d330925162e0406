"""crawlq's Redis functions: the ``lua/`` files joined into one library, loaded by name."""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Final

__all__ = ["Library", "library"]


class Library:
    """crawlq's Redis functions: one library joined from the package's .lua files.

    The library is named after a hash of its source, so crawlq versions with
    different Lua can share a server; `Link` loads it on first use and
    again whenever the server has lost it (a restart without persistence).
    """

    #: Files joined in this order: a Lua ``local function`` must come before
    #: its callers, so the shared helpers go first (shared.lua: key layout,
    #: call state, clock; then dedup, host records, host queues, leases,
    #: scheduled requests and the refill/pop machinery, each relying only on
    #: those before it), then the entry points.
    PARTS: Final = (
        "shared",
        "seen",
        "hosts",
        "queues",
        "leases",
        "due",
        "refill",
        "add",
        "links",
        "pop",
        "ack_or_release",
        "control",
        "read",
        "inspect",
        "open",
    )
    #: Function name suffix -> (Lua function, flags). A full Redis (used
    #: memory over ``maxmemory``, policy ``noeviction``) refuses every
    #: function but ``no-writes`` and ``allow-oom`` ones: only adding is
    #: refused, so workers can still drain the queue (pops, acks and releases
    #: free memory or add a few bytes of lease records), save their state and
    #: open the crawl. ``probe`` is add for the self-check's scratch keys,
    #: deleted at once, so a full server can still be opened.
    FUNCTIONS: Final = {
        "add": ("add", ""),
        "links": ("add_links", ""),
        "probe": ("probe", "allow-oom"),
        "pop": ("pop", "allow-oom"),
        "ack_or_release": ("ack_or_release", "allow-oom"),
        "control": ("control", "allow-oom"),
        "read": ("read", "no-writes"),
        "histogram": ("histogram", "no-writes"),
        "queued_per_host": ("queued_per_host", "no-writes"),
        "upgrade": ("upgrade_queues", "allow-oom"),
        "open": ("open", "allow-oom"),
        "state": ("save_state", "allow-oom"),
        "forget": ("forget", "allow-oom"),
        "cluster_record": ("cluster_record", "allow-oom"),
    }

    def __init__(self) -> None:
        folder = resources.files("crawlq.stores.redis").joinpath("lua")
        body = "\n".join(folder.joinpath(f"{part}.lua").read_text("utf-8") for part in self.PARTS)
        self.name = "crawlq_" + hashlib.sha1(body.encode()).hexdigest()[:12]
        lines = [f"#!lua name={self.name}", body]
        for suffix, (function, flags) in self.FUNCTIONS.items():
            lines.append(
                f"redis.register_function{{function_name='{self.name}_{suffix}', "
                f"callback={function}, flags={{{repr(flags) if flags else ''}}}}}"
            )
        self.source = "\n".join(lines).encode()
        #: FCALL names by suffix ("add", "pop", ...).
        self.function: dict[str, bytes] = {
            suffix: f"{self.name}_{suffix}".encode() for suffix in self.FUNCTIONS
        }


_LIBRARY: Library | None = None


def library() -> Library:
    """The library, read from the package once per process."""
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = Library()
    return _LIBRARY
