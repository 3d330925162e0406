"""How ``crawlq demo`` shows itself: a live progress bar and a summary table.

This module needs rich only, so the CLI can import it before aiohttp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

if TYPE_CHECKING:
    from .run import DemoProgress, DemoResult

__all__ = ["LiveProgress", "stopped_message", "summary_table", "verdict"]


class LiveProgress:
    """A rich progress bar fed with `DemoProgress` snapshots; a context manager.

    The bar counts responses against the fetches a complete crawl makes, with
    the frontier's queued, in-flight and seen counts and the rate beside it.
    """

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            BarColumn(bar_width=12),
            MofNCompleteColumn(),
            TextColumn(
                "{task.fields[queued]:,} queued  {task.fields[in_flight]} in flight  "
                "{task.fields[seen]:,} seen  {task.fields[rate]:,.0f}/s"
            ),
            TimeElapsedColumn(),
            console=console,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> LiveProgress:
        return self  # the display starts with the first snapshot

    def __exit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._progress.stop()

    def update(self, snapshot: DemoProgress) -> None:
        """Show ``snapshot``."""
        if self._task is None:
            self._progress.start()
            self._task = self._progress.add_task(
                "crawl", total=snapshot.expected, queued=0, in_flight=0, seen=0, rate=0.0
            )
        self._progress.update(
            self._task,
            completed=snapshot.fetched,
            queued=snapshot.queued,
            in_flight=snapshot.in_flight,
            seen=snapshot.seen,
            rate=snapshot.pages_per_second,
        )


def summary_table(result: DemoResult) -> Table:
    """Return the end-of-crawl table: fetches, hosts, duplicates, errors, time, rate."""
    config = result.config
    table = Table(title="crawlq demo", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column(style="dim")
    if result.job is not None:
        table.add_row(
            "Job", f"run {result.runs}", f"{result.job} ({'resumed' if result.resumed else 'new'})"
        )
    broken = result.expected_fetches - result.site_pages
    table.add_row(
        "Pages fetched",
        f"{result.fetched:,}",
        f"{result.site_pages:,} pages + {broken:,} broken links",
    )
    table.add_row(
        "Server's log",
        f"{result.server_urls:,}",
        f"URLs served, {result.server_fetches:,} fetches in all",
    )
    if result.resumed or result.refetch_bound:
        table.add_row(
            "Re-fetched after resume",
            f"{result.refetches:,}",
            f"≤ {result.refetch_bound:,} in flight when stopped",
        )
    table.add_row("Hosts", f"{result.hosts_crawled:,}", _hosts_note(result))
    table.add_row(
        "Duplicates filtered",
        f"{result.duplicates:,}",
        f"of {result.links:,} links (add_many said False)",
    )
    kinds = ", ".join(f"{kind}: {n:,}" for kind, n in result.errors.items())
    table.add_row(
        "Errors",
        f"{result.error_count:,}",
        f"{kinds}; acked, not retried" if kinds else "",
    )
    runs = f", {result.runs} runs" if result.resumed else ""
    table.add_row("Elapsed", f"{result.elapsed:.2f} s", f"{config.workers} workers{runs}")
    table.add_row("Pages/s", f"{result.pages_per_second:,.0f}", "")
    busiest = max(result.max_concurrency, default=0)
    table.add_row("Per-host delay", f"{config.delay * 1000:g} ms", "host_delay")
    table.add_row(
        "Per-host concurrency",
        f"{config.concurrency}",
        f"host_concurrency; server saw ≤ {busiest} at once",
    )
    return table


def stopped_message(result: DemoResult) -> str:
    """Return what a stopped run says: how far it got, by the job and by the server."""
    put_back = (
        f"{result.in_flight_at_stop:,} put back unfinished"
        if result.in_flight_at_stop
        else "the requests in flight finished"
    )
    return (
        f"stopped: {result.fetched:,} of {result.expected_fetches:,} fetched "
        f"(the server's log: {result.server_urls:,} URLs, {result.server_fetches:,} fetches), "
        f"{result.queued:,} requests left in the job, {put_back}; "
        "run the same command to resume (--fresh starts over)"
    )


def _hosts_note(result: DemoResult) -> str:
    netlocs = [url.partition("://")[2] for url in result.base_urls]
    if not netlocs:
        return ""
    if result.single_address:
        return f"127.0.0.1, one port each ({netlocs[0]} … {netlocs[-1]})"
    first, _, port = netlocs[0].rpartition(":")
    last, _, last_port = netlocs[-1].rpartition(":")
    if port == last_port:
        return f"{first} … {last}, port {port}"
    return f"{netlocs[0]} … {netlocs[-1]}"


def verdict(result: DemoResult) -> str:
    """Return the crawl check as rich markup: a tick, or what went wrong.

    Every page must be fetched exactly once, except that the requests in
    flight when an earlier run was stopped may have been fetched again.
    """
    pages = f"{result.site_pages:,} pages"
    if result.complete:
        if result.refetches:
            return (
                f"[green]✓[/] every one of the {pages} was fetched, exactly once but for "
                f"{result.refetches:,} re-fetched after resume (≤ {result.refetch_bound:,} "
                "in flight when stopped)"
            )
        runs = f", over {result.runs} runs (resumed)" if result.resumed else ""
        return f"[green]✓[/] every one of the {pages} was fetched exactly once{runs}"
    lines = [f"[red]✗[/] the crawl does not match the site ({pages}):"]
    if result.missing:
        sample = ", ".join(result.missing[:3])
        lines.append(f"  {len(result.missing):,} pages never fetched, e.g. {sample}")
    if result.repeated and result.refetches > result.refetch_bound:
        sample = ", ".join(f"{url} ({n}x)" for url, n in list(result.repeated.items())[:3])
        allowed = (
            f" ({result.refetches:,} re-fetches, more than the {result.refetch_bound:,} "
            "in flight when stopped)"
            if result.refetch_bound
            else ""
        )
        lines.append(
            f"  {len(result.repeated):,} URLs fetched more than once{allowed}, e.g. {sample}"
        )
    return "\n".join(lines)
