"""The ``crawlq`` command line: one typer app, one function per command.

``crawlq demo`` crawls a generated site served on loopback. Commands that work
on a frontier (inspect, export, import, purge) are meant to be added here as
further ``@app.command()`` functions. Heavy or optional imports (aiohttp for
the demo) happen inside the command that needs them, so ``crawlq --help``
works with only the core dependencies installed.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Final

import typer
from rich.console import Console

from . import __version__

__all__ = ["app", "main"]

DEMO_NEEDS_AIOHTTP: Final = "crawlq demo needs aiohttp: pip install 'crawlq[demo]'"

app = typer.Typer(
    name="crawlq",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"crawlq {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """crawlq: a crawl frontier for Python.

    Deduplication, priority and per-host pacing for crawlers.
    """


@app.command()
def demo(
    pages: Annotated[int, typer.Option(min=1, help="Pages of the generated site.")] = 3000,
    hosts: Annotated[
        int, typer.Option(min=1, max=250, help="Hosts, served on 127.0.0.2 and up.")
    ] = 20,
    delay: Annotated[
        float, typer.Option(min=0.0, help="Seconds between two requests to one host.")
    ] = 0.01,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Most requests in flight to one host.")
    ] = 2,
    workers: Annotated[int, typer.Option(min=1, help="Crawler workers.")] = 32,
    seed: Annotated[int, typer.Option(help="Seed of the site generator.")] = 0,
) -> None:
    """Crawl a generated site on loopback with crawlq, live, and check the crawl.

    Serves a few thousand linked pages (with duplicates, tracking parameters,
    404s and 500s) from one aiohttp server per host on 127.0.0.2 and up, crawls
    them with an async crawler fed by a crawlq Scheduler over a memory
    frontier, and prints a summary. Exits 1 unless every page of the site was
    fetched exactly once.
    """
    console = Console()
    try:
        from ._demo import DemoConfig, run_demo
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "aiohttp":
            raise
        Console(stderr=True).print(DEMO_NEEDS_AIOHTTP, markup=False, highlight=False)
        raise typer.Exit(1) from None
    from ._demo.report import LiveProgress, summary_table, verdict

    try:
        config = DemoConfig(
            pages=pages,
            hosts=hosts,
            delay=delay,
            concurrency=concurrency,
            workers=workers,
            seed=seed,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    with LiveProgress(console) as live:
        result = asyncio.run(run_demo(config, on_progress=live.update))
    if result.single_address:
        console.print(
            "[yellow]note:[/] 127.0.0.2 and up could not be bound here, so every host was "
            "served on 127.0.0.1 with its own port (paced apart with meta['download_slot'])"
        )
    console.print(summary_table(result))
    console.print(verdict(result), highlight=False)
    if not result.complete:
        raise typer.Exit(1)


def main() -> None:
    """Run the ``crawlq`` command line (the console script's entry point)."""
    app()
