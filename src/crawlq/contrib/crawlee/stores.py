"""Opening the adapter's frontier, and wiping it when ``purge``/``drop`` is allowed to.

A crawlee crawler run a second time purges its request manager. In memory
that empties the frontier (a fresh one, with the same options). A SQLite job
or a Redis crawl outlives the process and may be shared: it is wiped only
when the adapter was opened with ``allow_purge=True``; otherwise `refusal`
is the error ``purge`` raises. Wiping a SQLite job deletes its database
file (and its ``-wal``/``-shm`` companions); wiping a Redis crawl deletes
every key of that crawl (``crawlq purge``), leaving other crawls alone.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Final

from ..._errors import ConfigError
from ..._frontier import Frontier
from ..._open import open_frontier, store_kind

__all__ = ["open_for_crawlee", "refusal", "set_delay", "wipe"]

#: Frontier options the adapter sets unless given: every handled request is
#: written before ``mark_request_as_handled`` returns.
DEFAULTS: Final[dict[str, Any]] = {"ack_delay": 0.0}


def open_for_crawlee(url: str, options: dict[str, Any]) -> Frontier:
    """Open the frontier at ``url`` with the adapter's defaults under ``options``."""
    return open_frontier(url, **{**DEFAULTS, **options})


def refusal(frontier: Frontier, what: str) -> ConfigError:
    """What ``purge``/``drop`` raise on a durable or shared frontier without ``allow_purge``."""
    kind = "a shared Redis crawl" if frontier.shared else "a durable SQLite job"
    return ConfigError(
        f"crawlee asked to {what} the request manager, but its frontier {frontier.url} is "
        f"{kind}: crawlq keeps its queued requests and seen URLs. To go on with that crawl, "
        "call crawler.run(..., purge_request_queue=False); to wipe it, open the manager with "
        "RequestManager.open(url, allow_purge=True)"
    )


def wipe(url: str) -> None:
    """Delete the job or crawl at ``url`` (its frontier must be closed; blocking)."""
    kind = store_kind(url)
    if kind.name == "memory":
        return
    if kind.name == "sqlite":
        from ...stores.sqlite.file import job_path

        path = job_path(url)
        for name in (str(path), f"{path}-wal", f"{path}-shm", f"{path}-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
        return
    purge = getattr(kind.admin("purge it"), "purge", None)
    if purge is None:  # pragma: no cover - every shared store has one
        raise ConfigError(f"crawlq cannot wipe a {kind.name}:// frontier")
    purge(url)


def set_delay(frontier: Frontier, host: str, delay: float) -> None:
    """Set ``host``'s delay to at least ``delay``, keeping its concurrency (blocking)."""
    current = frontier.host_policy(host)
    if current.delay is not None and current.delay >= delay:
        return
    frontier.set_host_policy(host, delay=delay, concurrency=current.concurrency)
