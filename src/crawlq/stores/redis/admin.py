"""The Redis store's admin interface (`crawlq.stores.base.StoreAdmin`).

How the CLI, the metrics and watching read or change a crawl from outside:
``crawlq inspect`` renders every store's `JobReport` (this module turns the
Redis store's `Inspection` into one), ``hosts`` / ``top`` / metrics read
`snapshot` and `hosts`, ``crawlq hosts --block`` calls `change_host`, and
``crawlq purge`` `purge`. It imports redis-py through the store, so the CLI
asks for the extra only when used.
"""

from __future__ import annotations

import datetime
from typing import Any

from ..._errors import StoreError
from ..._exchange import HostReport, JobReport
from .config import parse_url
from .export import export
from .inspection import Inspection, change_host, close_link, hosts, open_link, snapshot
from .open import settings_at
from .store import inspect as inspect_crawl
from .store import purge

__all__ = [
    "change_host",
    "crawl_label",
    "crawl_settings",
    "display",
    "export",
    "hosts",
    "inspect",
    "purge",
    "report",
    "snapshot",
]

_PRIORITIES_SHOWN = 20


def display(url: str) -> str:
    """Return the frontier URL with its password masked."""
    return parse_url(url).display


def crawl_label(url: str) -> str:
    """The crawl's name, a metrics label (its URL's ``?crawl=``, else ``default``)."""
    return parse_url(url).crawl


def crawl_settings(url: str) -> dict[str, Any] | None:
    """What feeding the crawl needs: ``lifo`` and its crawlers' ``fingerprint``; None: no crawl.

    ``fingerprint`` is the `Fingerprinter.describe` of the crawl's last
    opener (None for a crawl opened before crawlq recorded it). Raises
    `StoreUnavailable` when the server cannot be reached.
    """
    location, link = open_link(url)
    try:
        return settings_at(location, link)
    finally:
        close_link(location, link)


def inspect(url: str, *, top: int = 10) -> JobReport:
    """Read a Redis crawl's counts, busiest hosts, priorities and settings.

    Read-only; works while workers run. Raises `ConfigError` for a bad URL,
    `StoreError` when no crawl of that name exists, `StoreUnavailable` or
    `StoreError` when the server cannot be read.
    """
    return report(inspect_crawl(url, hosts=top))


def _next_due(due_in: float | None) -> str:
    """The note on scheduled requests: when the first is due, by the server's clock."""
    if due_in is None:
        return "No request is scheduled (held until a due time)."
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=due_in)
    due = "is due now" if due_in <= 0 else f"is due in {due_in:,.1f}s"
    return (
        "Scheduled requests are held until their due time, apart from the queued and "
        f"leased ones; the first {due} (about {when:%Y-%m-%d %H:%M:%S} UTC)."
    )


def report(found: Inspection) -> JobReport:
    """The `JobReport` of a Redis crawl's `Inspection` (one server's, or a cluster's).

    Raises `StoreError` when the crawl does not exist.
    """
    if not found.exists:
        raise StoreError(
            f"no crawl named {found.crawl!r} exists on {found.url}; check the ?crawl=NAME "
            "of the URL (without it, the crawl is the one named 'default')"
        )
    counts = {
        "queued": found.queued,
        "leased (all workers, prefetched included)": found.leased,
        "leases past their deadline (come back at the next pop)": found.expired_leases,
        "scheduled": found.scheduled,
        "revisits": found.revisits,
        "seen": found.seen,
    }
    settings = {"crawl": found.crawl, "server": found.server_version, "dedup": found.dedup}
    settings.update(found.settings)
    notes = []
    if found.leases_by_owner:
        owners = ", ".join(f"{owner}: {n:,}" for owner, n in found.leases_by_owner.items())
        notes.append(f"leases by worker: {owners}")
    if found.bloom_fill_ratio is not None and found.bloom_false_positive_rate is not None:
        notes.append(
            f"Bloom filter {found.bloom_fill_ratio:.1%} full, estimated false-positive "
            f"rate {found.bloom_false_positive_rate:.2g}"
        )
    notes.append(_next_due(found.next_due_in))
    for shard in found.shards:
        notes.append(
            f"shard {shard.shard} on {shard.node}: {shard.queued:,} queued, "
            f"{shard.leased:,} leased, {shard.seen:,} seen"
        )
    shown = found.priorities[:_PRIORITIES_SHOWN]
    rest = found.priorities[_PRIORITIES_SHOWN:]
    return JobReport(
        store=found.url,
        counts=counts,
        hosts=[HostReport(h.host, h.queued + h.leased, None) for h in found.hosts],
        host_total=found.host_total,
        priorities=shown,
        priorities_omitted=(len(rest), sum(n for _, n in rest)),
        settings=settings,
        notes=notes,
    )
