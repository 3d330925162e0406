"""The ``crawlq`` command line: one typer app, one function per command.

``crawlq demo`` crawls a generated site served on loopback, in a resumable
job directory. ``crawlq inspect``, ``export`` and ``import`` work on a job:
the first two read it without locking it (so they work while a crawl runs),
``import`` opens it like a crawler would; ``hosts`` (``_cli_hosts``) lists
hosts and changes one. Heavy or optional imports (aiohttp
for the demo) happen inside the command that needs them, so ``crawlq --help``
works with only the core dependencies installed.

Every crawlq error ends a command with one line, ``error: <message>``, on
stderr and exit code 1; never a traceback.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, NoReturn, cast

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ._errors import ConfigError, CrawlqError, InvalidRequest
from ._exchange import JobReport, decode_line, encode_line
from ._fingerprint import Fingerprinter
from ._open import open_frontier, store_kind
from ._request import Request
from ._version import __version__

if TYPE_CHECKING:
    pass

__all__ = ["app", "main"]

DEMO_NEEDS_AIOHTTP: Final = "crawlq demo needs aiohttp: pip install 'crawlq[demo]'"
DEFAULT_DEMO_JOB: Final = "crawlq-demo-job"
#: Bad lines ``crawlq import`` lists before summing up the rest.
MAX_BAD_LINES: Final = 20
app = typer.Typer(
    name="crawlq",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

JobArgument = Annotated[
    str,
    typer.Argument(
        help="The job: a job directory, its database file, or a frontier URL "
        "such as sqlite:///job.db.",
        show_default=False,
    ),
]


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


@contextlib.contextmanager
def _clean_errors() -> Iterator[None]:
    """Turn a crawlq error into one ``error: ...`` line on stderr and exit code 1."""
    try:
        yield
    except CrawlqError as exc:
        _fail(str(exc))


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
    from ._demo.command import run_command

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


# -- jobs -----------------------------------------------------------------------


def _note_default_crawl(url: str) -> None:
    """Say so when a Redis URL names no crawl: it then means the crawl 'default'."""
    redis = store_kind(url).name in ("redis", "redis+cluster")
    if redis and "crawl=" not in url.partition("?")[2]:
        typer.echo(
            "note: the URL has no ?crawl=NAME, so it means the crawl named 'default'", err=True
        )


def _job_reader(job: str, name: str) -> Callable[..., Any]:
    """Return the function ``name`` (inspect, export) of the store module for ``job``.

    Raises `ConfigError` for a memory frontier, an unknown scheme, or a store
    that does not provide it (yet).
    """
    kind = store_kind(job)
    scheme = kind.name
    if scheme == "memory":
        raise ConfigError(
            f"a memory:// frontier lives inside its process: there is no job to {name}; "
            "give a job directory or a sqlite:/// URL"
        )
    module_name = kind.jobs_module
    assert module_name is not None  # every store but memory has job functions
    module = None
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise ConfigError(
                f"{name} for {scheme}:// needs {exc.name}: pip install 'crawlq[{scheme}]'"
            ) from None
    function = getattr(module, name, None)
    if function is None:
        raise ConfigError(f"{name} for {scheme}:// comes with the {scheme.title()} store")
    return cast(Callable[..., Any], function)


@app.command()
def inspect(
    job: JobArgument,
    top: Annotated[int, typer.Option(min=1, help="Hosts to list, busiest first.")] = 10,
) -> None:
    """Show a job's counts, busiest hosts, priorities and settings.

    Reads the job without locking it, so it works while a crawl runs. Exits 1
    with a message if there is no such job (or Redis crawl).
    """
    with _clean_errors():
        _note_default_crawl(job)
        report = cast(JobReport, _job_reader(job, "inspect")(job, top=top))
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


@app.command()
def export(job: JobArgument) -> None:
    """Write a job's requests to stdout as JSONL, one per line, oldest first.

    Every request not done yet: queued and leased alike (a leased one is not
    done). Reads the job without locking it, so it works while a crawl runs.
    Each line is a JSON object with the fields of crawlq.Request, those at
    their defaults left out; the body is "body_base64", and bytes in meta are
    {"$bytes": "<base64>"}. crawlq import reads it back.
    """
    failed: list[str] = []
    with _clean_errors():
        requests = cast(Iterator[Request], _job_reader(job, "export")(job))
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
        _fail(f"{len(failed):,} requests could not be exported; the others were")


@app.command()
def check(job: JobArgument) -> None:
    """Look for damage in a SQLite job: SQLite's integrity_check and crawlq's invariants.

    Reads the job only (never writes, never locks), so it works while a crawl
    runs. Prints what it found; exits 1 if anything is damaged.
    """
    with _clean_errors():
        if store_kind(job).name != "sqlite":
            raise ConfigError(
                f"check reads a SQLite job (a job directory or sqlite:/// URL), not {job!r}; "
                "use crawlq inspect to look at other frontiers"
            )
        from .stores._sqlite_check import check as check_job

        report = check_job(job)
    for problem in report.problems:
        typer.echo(problem)
    if report.problems:
        _fail(
            f"job {report.path} is damaged ({len(report.problems):,} problems above); restore "
            "it from a copy, or save what export can still read: crawlq export JOB > saved.jsonl"
        )
    typer.echo(
        f"job {report.path}: no damage found ({report.requests:,} requests in "
        f"{report.hosts:,} hosts, {report.log_entries:,} log entries not yet applied)"
    )


def _report_bad(problems: list[str], what: str) -> None:
    for problem in problems[:MAX_BAD_LINES]:
        typer.echo(problem, err=True)
    if len(problems) > MAX_BAD_LINES:
        typer.echo(f"... and {len(problems) - MAX_BAD_LINES:,} more bad {what}", err=True)


@app.command("import")
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
    with _clean_errors():
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
            _fail(
                f"{len(problems):,} of {len(requests) + len(problems):,} lines are "
                "invalid; nothing was imported"
            )
        if not requests:
            typer.echo(f"{file} holds no requests; nothing was imported")
            return
        frontier = open_frontier(
            job, fingerprinter=fingerprinter, lifo=job_lifo if lifo is None else lifo
        )
        try:
            added = frontier.add_many(requests)
            url = frontier.url
        finally:
            frontier.close()
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
    """The fingerprinter and LIFO setting an existing job was created with (else defaults)."""
    if store_kind(job).name != "sqlite":
        return Fingerprinter(), False
    from .stores._sqlite_inspect import job_settings

    settings = job_settings(job)
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


@app.command()
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
    with _clean_errors():
        if store_kind(url).name not in ("redis", "redis+cluster"):
            raise ConfigError(
                f"purge deletes a Redis crawl; for a SQLite job ({url}), stop its crawl "
                "and delete the job directory or file"
            )
        _note_default_crawl(url)
        purge_crawl = _job_reader(url, "purge")
        shown = _job_reader(url, "display")(url)
        if not yes and not typer.confirm(f"Delete every key of {shown}?", default=False):
            _fail("nothing was deleted")
        deleted = purge_crawl(url)
    typer.echo(f"deleted {deleted:,} keys of {shown}")


from ._cli_hosts import hosts as _hosts  # noqa: E402 - it uses the helpers above

app.command("hosts")(_hosts)

from ._cli_top import top as _top  # noqa: E402 - it uses the helpers above

app.command("top")(_top)

from ._cli_metrics import metrics as _metrics  # noqa: E402 - it uses the helpers above

app.command("metrics")(_metrics)


def main() -> None:
    """Run the ``crawlq`` command line (the console script's entry point)."""
    app()
