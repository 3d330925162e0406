"""The body of ``crawlq demo``: settings, Ctrl-C handling, progress and the summary.

Imported by the CLI only when the command runs; it needs rich, and aiohttp
once the crawl starts (a missing aiohttp is reported, not raised).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:
    from .run import DemoProgress, DemoResult

__all__ = ["run_command"]


def run_command(
    *,
    pages: int,
    hosts: int,
    delay: float | None,
    concurrency: int,
    workers: int,
    seed: int,
    job: Path,
    fresh: bool,
    fast: bool,
) -> None:
    """Run ``crawlq demo`` with its options; raises `typer.Exit` with the exit code."""
    from ..options import DEMO_NEEDS_AIOHTTP, clean_errors

    console = Console()
    try:
        from .run import PACED_DELAY, PACED_LATENCY, DemoConfig, run_demo
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "aiohttp":
            raise
        Console(stderr=True).print(DEMO_NEEDS_AIOHTTP, markup=False, highlight=False)
        raise typer.Exit(1) from None
    from .report import LiveProgress, stopped_message, summary_table, verdict

    fast_config = DemoConfig()
    try:
        config = DemoConfig(
            pages=pages,
            hosts=hosts,
            delay=delay if delay is not None else fast_config.delay if fast else PACED_DELAY,
            concurrency=concurrency,
            workers=workers,
            seed=seed,
            latency=fast_config.latency if fast else PACED_LATENCY,
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    job_dir = job.absolute()
    console.print(Text(f"job: {job_dir}", style="dim"))
    if not fast:
        console.print(
            Text(
                "press Ctrl-C to stop (the requests in flight finish), then run the same "
                "command to resume; --fast crawls in a few seconds",
                style="dim",
            )
        )

    async def crawl(on_progress: Callable[[DemoProgress], None]) -> DemoResult:
        # First Ctrl-C: let the requests in flight finish. Second: put them
        # back and stop at once. The handler is then gone, so a third one
        # interrupts outright (the job stays consistent either way).
        stop, stop_now = asyncio.Event(), asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_sigint() -> None:
            if not stop.is_set():
                stop.set()
                console.print(
                    "stopping: letting the requests in flight finish "
                    "(press Ctrl-C again to stop at once)",
                    highlight=False,
                )
                return
            stop_now.set()
            loop.remove_signal_handler(signal.SIGINT)
            console.print("stopping at once: requests in flight go back to the job")

        loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            return await run_demo(
                config,
                job=job_dir,
                fresh=fresh,
                stop=stop,
                stop_now=stop_now,
                on_progress=on_progress,
            )
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    with clean_errors():
        try:
            with LiveProgress(console) as live:
                result = asyncio.run(crawl(live.update))
        except KeyboardInterrupt:
            typer.echo(f"interrupted; run the same command to resume {job_dir}", err=True)
            raise typer.Exit(130) from None
    if result.already_complete:
        console.print(
            Text(
                f"job {job_dir} is already complete ({result.fetched:,} pages fetched in "
                f"{result.runs} run{'s' if result.runs > 1 else ''}); "
                "add --fresh to crawl it again"
            )
        )
        console.print(verdict(result), highlight=False)
        if not result.complete:
            raise typer.Exit(1)
        return
    if result.interrupted:
        console.print(Text(stopped_message(result)))
        raise typer.Exit(130)
    if result.single_address:
        console.print(
            "[yellow]note:[/] 127.0.0.2 and up could not be bound here, so every host was "
            "served on 127.0.0.1 with its own port (paced apart with meta['download_slot'])"
        )
    console.print(summary_table(result))
    console.print(verdict(result), highlight=False)
    if not result.complete:
        raise typer.Exit(1)
