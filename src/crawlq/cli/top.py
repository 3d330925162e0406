"""``crawlq top``: a live view of a running crawl, read from another process.

Registered on the app by ``crawlq.cli``. Reads a `crawlq._watch.Snapshot`
every second (no lock on a SQLite job, no frontier on Redis: the crawl goes
on undisturbed) and draws counts, rates over 10 s and 1 min, a sparkline of
pops per second, the busiest hosts and warnings. ``q`` or Ctrl-C quits.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from typing import Annotated

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .._errors import CrawlqError
from .._watch import History, read_snapshot
from .options import JobArgument, clean_errors, note_default_crawl

__all__ = ["top"]

_BARS = "▁▂▃▄▅▆▇█"
_SPARK_POINTS = 60


def top(
    job: JobArgument,
    once: Annotated[
        bool, typer.Option("--once", help="Print one frame (rates over one interval) and exit.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="With --once: print the frame's figures as JSON.")
    ] = False,
    hosts: Annotated[int, typer.Option(min=1, help="Busiest hosts to show.")] = 10,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between two readings.")] = 1.0,
) -> None:
    """Watch a running crawl: counts, rates, busiest hosts, warnings (q quits).

    Read-only, from any process: a SQLite job is read without its lock, a
    Redis crawl without opening a frontier.
    """
    with clean_errors():
        note_default_crawl(job)
        history = History()
        history.add(read_snapshot(job, top=hosts))  # a bad job or URL fails here, typed
        if once:
            time.sleep(interval)
            history.add(read_snapshot(job, top=hosts))
            if as_json:
                typer.echo(json.dumps(history.as_dict(), indent=2))
            else:
                Console().print(frame(job, history, interval))
            return
    _watch(job, history, hosts, interval)


def _watch(job: str, history: History, hosts: int, interval: float) -> None:
    console = Console()
    problem: str | None = None
    with (
        contextlib.suppress(KeyboardInterrupt),
        _keys() as next_key,
        Live(console=console, auto_refresh=False, screen=True) as live,
    ):
        while True:
            live.update(frame(job, history, interval, problem), refresh=True)
            if next_key(interval) in ("q", "Q"):
                return
            try:
                history.add(read_snapshot(job, top=hosts))
                problem = None
            except CrawlqError as exc:  # the server went away: say so, keep trying
                problem = str(exc)


@contextlib.contextmanager
def _keys() -> Iterator[Callable[[float], str]]:
    """A function waiting up to its argument in seconds for one key press ('' if none).

    Puts a terminal in cbreak mode (keys arrive unbuffered, Ctrl-C still
    interrupts) and restores it after; without a terminal it only waits.
    """
    if not sys.stdin.isatty():

        def wait(seconds: float) -> str:
            time.sleep(seconds)
            return ""

        yield wait
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def next_key(seconds: float) -> str:
        ready, _, _ = select.select([fd], [], [], seconds)
        return os.read(fd, 1).decode(errors="replace") if ready else ""

    try:
        yield next_key
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def _sparkline(values: list[float]) -> str:
    if not values:
        return ""
    peak = max(values)
    if peak <= 0:
        return _BARS[0] * len(values)
    top = len(_BARS) - 1
    return "".join(_BARS[min(top, int(v / peak * top + 0.5))] for v in values)


def _seconds(value: float | None) -> str:
    if not value:
        return ""
    return f"{value:.1f} s" if value < 60 else f"{value / 60:.0f} min"


def frame(job: str, history: History, interval: float, problem: str | None = None) -> Group:
    """One screen of ``crawlq top``, from the snapshots in ``history``."""
    now = history.latest
    assert now is not None
    parts: list[RenderableType] = [
        Text.assemble(
            ("crawlq top ", "bold"),
            job,
            f"  {time.strftime('%H:%M:%S')}  every {interval:g} s, q quits",
        )
    ]
    c = now.counters
    totals = Table.grid(padding=(0, 3))
    for _ in range(4):
        totals.add_column(justify="right")
    totals.add_row(
        f"queued [bold]{now.queued:,}[/]",
        f"leased [bold]{now.leased:,}[/]",
        f"seen [bold]{now.seen:,}[/]",
        f"accepted {c.accepted:,}",
    )
    totals.add_row(
        f"popped {c.popped:,}",
        f"acked {c.acked:,}",
        f"re-delivered {c.expired:,}",
        f"duplicates {c.duplicates:,}  capped {c.capped:,}  released {c.released:,}",
    )
    if now.scheduled or c.refetched:
        due = "-" if now.next_due_in is None else (_seconds(now.next_due_in) or "now")
        totals.add_row(
            f"scheduled [bold]{now.scheduled:,}[/]",
            f"revisits {now.revisits:,}",
            f"next due in {due}",
            f"refetched {c.refetched:,}",
        )
    parts.append(totals)
    rates = Table("over", "accepted/s", "popped/s", "acked/s", "duplicates", "re-deliveries/s")
    for label, seconds in (("10 s", 10.0), ("1 min", 60.0)):
        r = history.rates(seconds)
        if r is None:
            rates.add_row(label, "-", "-", "-", "-", "-")
            continue
        rates.add_row(
            label,
            _rate(r["accepted"]),
            _rate(r["popped"]),
            _rate(r["acked"]),
            f"{r['duplicate_ratio']:.0%}",
            _rate(r["expired"]),
        )
    parts.append(rates)
    spark = history.popped_per_second(_SPARK_POINTS)
    if spark:
        parts.append(Text(f"popped/s  {_sparkline(spark)}  (peak {max(spark):,.0f}/s)"))
    table = Table("host", "queued", "leased", "next ready in", "state")
    for h in now.hosts:
        wait = h.blocked_for if h.state == "blocked" else h.ready_in
        style = {"blocked": "red", "full": "yellow", "paced": "cyan"}.get(h.state, "")
        table.add_row(
            h.host, f"{h.queued:,}", f"{h.leased:,}", _seconds(wait), Text(h.state, style=style)
        )
    parts.append(table if now.hosts else Text("no hosts with requests"))
    for warning in history.warnings():
        parts.append(Text(f"warning: {warning}", style="bold yellow"))
    if problem:
        parts.append(Text(f"cannot read the crawl, trying again: {problem}", style="bold red"))
    return Group(*parts)
