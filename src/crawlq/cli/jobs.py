"""``crawlq inspect``, ``export``, ``check``, ``import`` and ``purge``: a job as a whole.

Registered on the app by `crawlq.cli.app`. ``inspect`` and ``export`` read a
job without locking it (so they work while a crawl runs) through the store's
admin interface; ``import`` opens it as a crawler would.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Final, cast

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .._errors import ConfigError, InvalidRequest
from .._exchange import JobReport, decode_line, encode_line
from .._fingerprint import Fingerprinter
from .._open import store_kind
from .._request import Request
from .options import (
    JobArgument,
    add_requests,
    clean_errors,
    fail,
    note_default_crawl,
    store_function,
)

__all__ = ["check", "export", "import_", "inspect", "purge"]

#: Bad lines ``crawlq import`` lists before summing up the rest.
MAX_BAD_LINES: Final = 20


def inspect(
    job: JobArgument,
    top: Annotated[int, typer.Option(min=1, help="Hosts to list, busiest first.")] = 10,
) -> None:
    """Show a job's counts, busiest hosts, priorities and settings.

    Reads the job without locking it, so it works while a crawl runs. Exits 1
    with a message if there is no such job (or Redis crawl).
    """
    with clean_errors():
        note_default_crawl(job)
        report = cast(JobReport, store_function(job, "inspect")(job, top=top))
    _print_report(Console(), report)


def _print_report(console: Console, report: JobReport) -> None:
    """Render a `JobReport` as rich tables: the one view of every store's report."""
    console.print(Text(report.store, style="bold"))
    counts = Table(title="Counts", show_header=False, title_justify="left")
    counts.add_column()
    counts.add_column(justify="right")
    for label, value in report.counts.items():
        counts.add_row(label, f"{value:,}")
    console.print(counts)

    if not report.hosts:
        console.print(Text("Top hosts: none has requests", style="italic"))
        console.print(Text("Priorities: nothing is queued", style="italic"))
    else:
        _print_hosts(console, report)
        _print_priorities(console, report)
    settings = Table(title="Settings", show_header=False, title_justify="left")
    settings.add_column()
    settings.add_column()
    for name, text in report.settings.items():
        settings.add_row(name, Text(text))
    console.print(settings)
    for note in report.notes:
        console.print(Text(note, style="dim"))


def _print_hosts(console: Console, report: JobReport) -> None:
    hosts = Table(
        title=f"Top hosts ({len(report.hosts)} of {report.host_total:,} with requests)",
        title_justify="left",
    )
    hosts.add_column("host")
    hosts.add_column("requests", justify="right")
    hosts.add_column("pacing")
    for host in report.hosts:
        pacing = "ready"
        if host.ready_in is None:
            pacing = "-"
        elif host.ready_in > 0:
            pacing = f"ready in {host.ready_in:.{1 if host.ready_in >= 1 else 2}f}s"
        hosts.add_row(Text(host.name), f"{host.requests:,}", pacing)
    console.print(hosts)


def _print_priorities(console: Console, report: JobReport) -> None:
    total = sum(count for _, count in report.priorities) + report.priorities_omitted[1]
    priorities = Table(title="Priorities", title_justify="left")
    priorities.add_column("priority", justify="right")
    priorities.add_column("requests", justify="right")
    priorities.add_column("share", justify="right")
    for priority, count in report.priorities:
        priorities.add_row(f"{priority:,}", f"{count:,}", f"{100 * count / total:.1f}%")
    omitted, omitted_rows = report.priorities_omitted
    if omitted:
        priorities.caption = f"and {omitted:,} lower priorities with {omitted_rows:,} requests"
    console.print(priorities)


def export(job: JobArgument) -> None:
    """Write a job's requests to stdout as JSONL, one per line, oldest first.

    Every request not done yet: queued and leased alike (a leased one is not
    done). Reads the job without locking it, so it works while a crawl runs.
    Each line is a JSON object with the fields of crawlq.Request, those at
    their defaults left out; the body is "body_base64", and bytes in meta are
    {"$bytes": "<base64>"}. crawlq import reads it back.
    """
    failed: list[str] = []
    with clean_errors():
        requests = cast(Iterator[Request], store_function(job, "export")(job))
        out = sys.stdout
        try:
            with contextlib.closing(requests):  # type: ignore[type-var]
                for number, request in enumerate(requests, 1):
                    try:
                        line = encode_line(request)
                    except InvalidRequest as exc:
                        failed.append(f"request {number}: {exc}")
                        continue
                    out.write(line)
                    out.write("\n")
            out.flush()
        except BrokenPipeError:
            # The reader went away (``| head``): stop quietly, like other tools.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(1) from None
    if failed:
        _report_bad(failed, "requests")
        fail(f"{len(failed):,} requests could not be exported; the others were")


def check(job: JobArgument) -> None:
    """Look for damage in a SQLite job: SQLite's integrity_check and crawlq's invariants.

    Reads the job only (never writes, never locks), so it works while a crawl
    runs. Prints what it found; exits 1 if anything is damaged.
    """
    with clean_errors():
        if store_kind(job).name != "sqlite":
            raise ConfigError(
                f"check reads a SQLite job (a job directory or sqlite:/// URL), not {job!r}; "
                "use crawlq inspect to look at other frontiers"
            )
        from ..stores.sqlite.check import check as check_job

        report = check_job(job)
    for problem in report.problems:
        typer.echo(problem)
    if report.problems:
        fail(
            f"job {report.path} is damaged ({len(report.problems):,} problems above); restore "
            "it from a copy, or save what export can still read: crawlq export JOB > saved.jsonl"
        )
    typer.echo(
        f"job {report.path}: no damage found ({report.requests:,} requests in "
        f"{report.hosts:,} hosts, {report.scheduled:,} scheduled, "
        f"{report.log_entries:,} log entries not yet applied)"
    )


def _report_bad(problems: list[str], what: str) -> None:
    for problem in problems[:MAX_BAD_LINES]:
        typer.echo(problem, err=True)
    if len(problems) > MAX_BAD_LINES:
        typer.echo(f"... and {len(problems) - MAX_BAD_LINES:,} more bad {what}", err=True)


def import_(
    job: JobArgument,
    file: Annotated[
        str, typer.Argument(help="JSONL file to read, or - for stdin.", show_default=False)
    ],
    lifo: Annotated[
        bool | None,
        typer.Option(
            "--lifo/--fifo",
            help="Order of a new job: newest first within a priority (depth-first), or "
            "oldest first [default: fifo; an existing job keeps its own].",
            show_default=False,
        ),
    ] = None,
    ignore_query_param: Annotated[
        list[str] | None,
        typer.Option(
            "--ignore-query-param",
            metavar="PATTERN",
            help="Query parameter (or glob, e.g. 'utm_*') a new job's fingerprints drop; "
            "repeat for several.",
            show_default=False,
        ),
    ] = None,
    keep_fragments: Annotated[
        bool,
        typer.Option("--keep-fragments", help="A new job's fingerprints keep #fragments."),
    ] = False,
    scrapy_fingerprints: Annotated[
        bool,
        typer.Option(
            "--scrapy-fingerprints",
            help="A new job fingerprints requests as Scrapy does (mode='scrapy').",
        ),
    ] = False,
) -> None:
    """Add the requests of a JSONL file (as crawlq export writes it) to a job.

    Every line is checked first (JSON, field types, URL, priority, meta...);
    if any is bad, each is reported with its line number and nothing is
    imported. Otherwise all requests are added in one transaction: nothing is
    ever half-imported. Blank lines are skipped. The job is opened like a
    crawler opens it, so this fails while a crawl has it open. An existing
    job keeps its own fingerprint settings and order; a new job is created
    with the defaults, or with the options given (which must then match
    what the crawler will open it with).
    """
    with clean_errors():
        lines = _read_lines(file)
        fingerprinter, job_lifo = _job_options(job)
        if ignore_query_param or keep_fragments or scrapy_fingerprints:
            fingerprinter = Fingerprinter(
                mode="scrapy" if scrapy_fingerprints else "crawlq",
                keep_fragments=keep_fragments,
                ignore_query_params=ignore_query_param or (),
            )
        requests, problems = _parse(lines, fingerprinter)
        if problems:
            _report_bad(problems, "lines")
            fail(
                f"{len(problems):,} of {len(requests) + len(problems):,} lines are "
                "invalid; nothing was imported"
            )
        if not requests:
            typer.echo(f"{file} holds no requests; nothing was imported")
            return
        order = job_lifo if lifo is None else lifo
        added, url = add_requests(job, requests, fingerprinter=fingerprinter, lifo=order)
    new = sum(added)
    typer.echo(
        f"imported {len(requests):,} requests into {url}: {new:,} added, "
        f"{len(requests) - new:,} duplicates (already seen)"
    )


def _read_lines(file: str) -> list[bytes]:
    """Return the raw lines of ``file`` ("-": stdin); `ConfigError` if it cannot be read."""
    try:
        if file == "-":
            return sys.stdin.buffer.read().split(b"\n")
        return Path(file).read_bytes().split(b"\n")
    except OSError as exc:
        raise ConfigError(f"cannot read {file}: {exc.strerror or exc}") from None


def _job_options(job: str) -> tuple[Fingerprinter, bool]:
    """The fingerprinter and LIFO setting an existing job or crawl was created with (else defaults).

    Read through the store's admin interface, so a Redis crawl made by a
    Scrapy worker (``lifo=True``) is imported into in its own order.
    """
    kind = store_kind(job)
    if kind.name == "memory":
        return Fingerprinter(), False
    settings = kind.admin("import into").crawl_settings(job)
    if not settings:
        return Fingerprinter(), False
    fingerprint = settings.get("fingerprint")
    fingerprinter = Fingerprinter.from_description(fingerprint) if fingerprint else Fingerprinter()
    return fingerprinter, bool(settings.get("lifo", False))


def _parse(lines: list[bytes], fingerprinter: Fingerprinter) -> tuple[list[Request], list[str]]:
    """Decode every non-blank line: the requests, and ``line N: reason`` for each bad one."""
    requests: list[Request] = []
    problems: list[str] = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            request = decode_line(raw.decode("utf-8"))
            fingerprinter.fingerprint_and_host(request)
        except UnicodeDecodeError as exc:
            problems.append(f"line {number}: not UTF-8 (byte {exc.start + 1})")
        except InvalidRequest as exc:
            problems.append(f"line {number}: {exc}")
        else:
            requests.append(request)
    return requests, problems


def purge(
    url: Annotated[
        str, typer.Argument(help="A redis:// or redis+cluster:// URL with its ?crawl=NAME.")
    ],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete a shared frontier: every key of one crawl on a Redis server or cluster.

    A worker's close() never deletes shared data; this is the explicit way.
    Other crawls on the same server are left alone. Asks for confirmation
    unless given --yes. Stop the crawl's workers first: a running worker
    recreates the keys it touches.
    """
    with clean_errors():
        if store_kind(url).name not in ("redis", "redis+cluster"):
            raise ConfigError(
                f"purge deletes a Redis crawl; for a SQLite job ({url}), stop its crawl "
                "and delete the job directory or file"
            )
        note_default_crawl(url)
        purge_crawl = store_function(url, "purge")
        shown = store_function(url, "display")(url)
        if not yes and not typer.confirm(f"Delete every key of {shown}?", default=False):
            fail("nothing was deleted")
        deleted = purge_crawl(url)
    typer.echo(f"deleted {deleted:,} keys of {shown}")
