"""``crawlq hosts``: list a job's or a crawl's hosts, and block, unblock or pace one.

Registered on the app by ``crawlq.cli``. Listing reads without locking (a
running crawl goes on); a change goes through the store's own write path:
on Redis the crawl's ``control`` function, as a worker would run it; on a
SQLite job the job itself when no crawler has it open, else the job's inbox,
which the running crawler applies within a second.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from .._errors import ConfigError
from .._open import store_kind
from ..stores.base import HostCount
from .options import JobArgument, clean_errors, note_default_crawl

__all__ = ["hosts"]


def _seconds(value: str, option: str) -> float | None:
    if option == "--delay" and value == "default":
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):
        raise ConfigError(f"{option} takes HOST SECONDS (a number >= 0), not {value!r}")
    return seconds


def hosts(
    job: JobArgument,
    top: Annotated[int, typer.Option(min=1, help="Hosts to list, busiest first.")] = 20,
    block: Annotated[
        tuple[str, str] | None,
        typer.Option(metavar="HOST SECONDS", help="Hand out nothing of HOST for SECONDS."),
    ] = None,
    unblock: Annotated[
        str | None, typer.Option(metavar="HOST", help="End HOST's block now.")
    ] = None,
    delay: Annotated[
        tuple[str, str] | None,
        typer.Option(
            metavar="HOST SECONDS",
            help="Give HOST its own delay between pops ('default': the crawl's again).",
        ),
    ] = None,
) -> None:
    """List hosts (queued, leased, blocked, own policy, accepted), or change one.

    Works on a running crawl: a SQLite job's crawler applies a change within a
    second (through its own writes), Redis workers from their next call.
    """
    with clean_errors():
        kind = store_kind(job)
        admin = kind.admin("list hosts of")  # memory://: a ConfigError
        note_default_crawl(job)
        changes: list[tuple[str, str, float | None]] = []
        if block is not None:
            changes.append(("block", block[0], _seconds(block[1], "--block")))
        if unblock is not None:
            changes.append(("unblock", unblock, None))
        if delay is not None:
            changes.append(("delay", delay[0], _seconds(delay[1], "--delay")))
        for what, host, seconds in changes:
            if not host:
                raise ConfigError(f"--{what} needs a host name")
            typer.echo(admin.change_host(job, what, host, seconds))
        listed = admin.hosts(job, top=top)
    _print_hosts(listed, shared=kind.name != "sqlite")


def _print_hosts(listed: list[HostCount], *, shared: bool) -> None:
    console = Console()
    if not listed:
        console.print("no hosts with requests, blocks or policies")
        return
    columns = ["host", "queued", "leased", "blocked for", "delay", "concurrency", "accepted"]
    if not shared:
        columns.remove("leased")
    table = Table(*columns)
    for h in listed:
        cells = [
            h.host,
            f"{h.queued:,}",
            f"{h.leased:,}",
            "" if h.blocked_for is None else f"{h.blocked_for:.1f} s",
            "" if h.delay is None else f"{h.delay:g} s",
            "" if h.concurrency is None else str(h.concurrency),
            f"{h.accepted:,}",
        ]
        if not shared:
            del cells[2]
        table.add_row(*cells)
    console.print(table)
    if not shared:
        console.print("queued counts include leased requests (a job keeps no leases on disk)")
