"""``crawlq add CRAWL URL...``: feed URLs to a crawl, with the crawl's own settings.

Registered on the app by `crawlq.cli.app`. The crawl must exist (its
workers, or an earlier crawl, created it): it is opened with the order and
fingerprinter it was created with, so the URLs are deduplicated against what
the crawl has seen, and a Scrapy crawl (``lifo=True``, Scrapy's
fingerprints) opens without `IncompatibleStore`. Both are read through the
store's admin interface (``crawl_settings``): a SQLite job records them, a
Redis crawl its order and the fingerprinter its last worker opened it with.
"""

from __future__ import annotations

import sys
from typing import Annotated, Final

import typer

from .._errors import ConfigError, InvalidRequest, StoreError
from .._fingerprint import Fingerprinter
from .._open import store_kind
from .._request import Request
from .options import add_requests, clean_errors, fail, note_default_crawl

__all__ = ["add"]

#: Bad URLs listed before summing up the rest.
_MAX_BAD: Final = 20


def add(
    crawl: Annotated[
        str,
        typer.Argument(
            help="The crawl: a job directory, its database file, a sqlite:/// URL, or a "
            "redis:// URL with its ?crawl=NAME.",
            show_default=False,
        ),
    ],
    urls: Annotated[
        list[str],
        typer.Argument(
            help="URLs to add, or - to read them from stdin, one per line.", show_default=False
        ),
    ],
) -> None:
    """Add URLs to a crawl, running or not, as new requests (GET, priority 0).

    The crawl is opened with its own stored settings (order, fingerprints),
    so URLs it has seen already are not added again. Every URL is checked
    first; if any is bad, each is reported and nothing is added. Blank lines
    on stdin are skipped. A SQLite job cannot be fed while its crawl runs
    (it is locked); a Redis crawl can, and its idle workers
    (CRAWLQ_IDLE_CLOSE) fetch the URLs.
    """
    with clean_errors():
        note_default_crawl(crawl)
        given = _read_urls(urls)
        fingerprinter, lifo = _crawl_options(crawl)
        requests: list[Request] = []
        problems: list[str] = []
        for number, url in enumerate(given, 1):
            try:
                request = Request(url)
                fingerprinter.fingerprint_and_host(request)
            except InvalidRequest as exc:
                problems.append(f"URL {number} ({url[:200]!r}): {exc}")
            else:
                requests.append(request)
        if problems:
            for problem in problems[:_MAX_BAD]:
                typer.echo(problem, err=True)
            if len(problems) > _MAX_BAD:
                typer.echo(f"... and {len(problems) - _MAX_BAD:,} more bad URLs", err=True)
            fail(f"{len(problems):,} of {len(given):,} URLs are invalid; nothing was added")
        if not requests:
            fail("no URLs given; nothing was added")
        added, where = add_requests(crawl, requests, fingerprinter=fingerprinter, lifo=lifo)
    new = sum(added)
    typer.echo(f"added {new:,} new URLs ({len(requests) - new:,} already seen) to {where}")


def _read_urls(urls: list[str]) -> list[str]:
    """The URLs given, or stdin's non-blank lines for ``-``."""
    if urls != ["-"]:
        if "-" in urls:
            raise ConfigError("give URLs as arguments, or - alone to read them from stdin")
        return urls
    try:
        text = sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"stdin is not UTF-8 (byte {exc.start + 1})") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def _crawl_options(crawl: str) -> tuple[Fingerprinter, bool]:
    """The fingerprinter and order ``crawl`` was created with; an error if there is none."""
    kind = store_kind(crawl)
    admin = kind.admin("add to")  # memory://: a ConfigError
    settings = admin.crawl_settings(crawl)
    if settings is None and kind.name == "sqlite":
        raise StoreError(
            f"there is no job at {crawl}: crawlq add feeds an existing crawl; start its "
            "crawler first, or create the job with crawlq import"
        )
    if settings is None:
        where = getattr(admin, "display", str)(crawl)
        raise StoreError(
            f"no crawl named {admin.crawl_label(crawl)!r} exists on {where}: crawlq add feeds "
            "an existing crawl; start a worker on it first (check the ?crawl=NAME)"
        )
    fingerprint = settings.get("fingerprint")
    fingerprinter = Fingerprinter.from_description(fingerprint) if fingerprint else Fingerprinter()
    return fingerprinter, bool(settings.get("lifo"))
