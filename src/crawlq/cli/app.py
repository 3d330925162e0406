"""The ``crawlq`` app: the root options, ``crawlq demo``, and every command registered.

``crawlq demo`` crawls a generated site served on loopback, in a resumable
job directory. The other commands live in their own modules: `jobs`
(``inspect``, ``export``, ``check``, ``import``, ``purge``), `add`, `hosts`, `top`
and `metrics`, each importing only `options`, never this module. Heavy or optional imports (aiohttp
for the demo) happen inside the command that needs them, so ``crawlq --help``
works with only the core dependencies installed.

Every crawlq error ends a command with one line, ``error: <message>``, on
stderr and exit code 1; never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final

import typer

from .._version import __version__
from . import jobs
from .add import add
from .hosts import hosts
from .metrics import metrics
from .options import DEMO_NEEDS_AIOHTTP
from .top import top

__all__ = ["DEMO_NEEDS_AIOHTTP", "app", "main"]

DEFAULT_DEMO_JOB: Final = "crawlq-demo-job"
app = typer.Typer(
    name="crawlq",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
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
        float | None,
        typer.Option(
            min=0.0,
            help="Seconds between two requests to one host (default 0.2: about half a "
            "minute for the default site; 0.01 with --fast).",
            show_default=False,
        ),
    ] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Most requests in flight to one host.")
    ] = 2,
    workers: Annotated[int, typer.Option(min=1, help="Crawler workers.")] = 32,
    seed: Annotated[int, typer.Option(help="Seed of the site generator.")] = 0,
    job: Annotated[
        Path,
        typer.Option(
            help="Job directory: Ctrl-C stops the crawl, the same command resumes it.",
            file_okay=False,
        ),
    ] = Path(DEFAULT_DEMO_JOB),
    fresh: Annotated[
        bool,
        typer.Option("--fresh", help="Delete the job directory's crawl and start over."),
    ] = False,
    fast: Annotated[
        bool,
        typer.Option(
            "--fast",
            help="Crawl as fast as crawlq goes (a few seconds) instead of at a pace to watch.",
        ),
    ] = False,
) -> None:
    """Crawl a generated site on loopback with crawlq, live, and check the crawl.

    Serves a few thousand linked pages (with duplicates, tracking parameters,
    404s and 500s) from one aiohttp server per host on 127.0.0.2 and up, crawls
    them with an async crawler fed by a crawlq Scheduler over a SQLite job in
    --job, and prints a summary. It takes about half a minute (--fast: a few
    seconds). Ctrl-C stops cleanly: the requests in flight finish, then it
    exits 130 (a second Ctrl-C stops at once, putting them back); the same
    command resumes the job where it stopped, even after a kill -9. Exits 1
    unless every page of the site was fetched exactly once (requests in flight
    at a kill or a second Ctrl-C may be fetched once more).
    """
    from .demo.command import run_command

    run_command(
        pages=pages,
        hosts=hosts,
        delay=delay,
        concurrency=concurrency,
        workers=workers,
        seed=seed,
        job=job,
        fresh=fresh,
        fast=fast,
    )


app.command()(jobs.inspect)
app.command()(jobs.export)
app.command()(jobs.check)
app.command("import")(jobs.import_)
app.command()(jobs.purge)
app.command()(add)
app.command()(hosts)
app.command()(top)
app.command()(metrics)


def main() -> None:
    """Run the ``crawlq`` command line (the console script's entry point)."""
    app()
