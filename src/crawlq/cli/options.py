"""What the ``crawlq`` commands share: the job argument, the one-line errors.

Every command module imports this one (never ``app``, which imports them):
`clean_errors` turns a crawlq error into ``error: <message>`` on stderr and
exit code 1, never a traceback; `store_function` finds a function of a
store's admin interface.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Final, NoReturn, cast

import typer

from .._errors import ConfigError, CrawlqError
from .._fingerprint import Fingerprinter
from .._open import open_frontier, store_kind
from .._request import Request

__all__ = [
    "DEMO_NEEDS_AIOHTTP",
    "JobArgument",
    "add_requests",
    "clean_errors",
    "fail",
    "note_default_crawl",
    "store_function",
]

DEMO_NEEDS_AIOHTTP: Final = "crawlq demo needs aiohttp: pip install 'crawlq[demo]'"

JobArgument = Annotated[
    str,
    typer.Argument(
        help="The job: a job directory, its database file, or a frontier URL "
        "such as sqlite:///job.db.",
        show_default=False,
    ),
]


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


@contextlib.contextmanager
def clean_errors() -> Iterator[None]:
    """Turn a crawlq error into one ``error: ...`` line on stderr and exit code 1."""
    try:
        yield
    except CrawlqError as exc:
        fail(str(exc))


def note_default_crawl(url: str) -> None:
    """Say so when a Redis URL names no crawl: it then means the crawl 'default'."""
    redis = store_kind(url).name in ("redis", "redis+cluster")
    if redis and "crawl=" not in url.partition("?")[2]:
        typer.echo(
            "note: the URL has no ?crawl=NAME, so it means the crawl named 'default'", err=True
        )


def store_function(job: str, name: str) -> Callable[..., Any]:
    """Return the function ``name`` (inspect, export, purge...) of ``job``'s store admin.

    Raises `ConfigError` for a memory frontier, an unknown scheme, a store
    whose extra is not installed, or a store that does not provide it.
    """
    kind = store_kind(job)
    if kind.jobs_module is None:
        raise ConfigError(
            f"a {kind.name}:// frontier lives inside its process: there is no job to {name}; "
            "give a job directory or a sqlite:/// URL"
        )
    function = getattr(kind.admin(name), name, None)
    if function is None:
        raise ConfigError(f"{name} for {kind.name}:// comes with the {kind.name.title()} store")
    return cast(Callable[..., Any], function)


def add_requests(
    url: str, requests: list[Request], *, fingerprinter: Fingerprinter, lifo: bool
) -> tuple[list[bool], str]:
    """Add ``requests`` to the crawl at ``url`` in one batch: their outcomes, its display URL."""
    frontier = open_frontier(url, fingerprinter=fingerprinter, lifo=lifo)
    try:
        return frontier.add_many(requests), frontier.url
    finally:
        frontier.close()
