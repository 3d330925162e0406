"""``crawlq add CRAWL URL...``: feed URLs to a crawl, with the crawl's own settings.

Registered on the app by `crawlq.cli.app`. The crawl must exist (its
workers, or an earlier crawl, created it): it is opened with the order and
fingerprinter it was created with, so the URLs are deduplicated against what
the crawl has seen, and a Scrapy crawl (``lifo=True``, Scrapy's
fingerprints) opens without `IncompatibleStore`. A SQLite job records both;
a Redis crawl records its order, and the fingerprinter its Scrapy
scheduler last opened it with (``last_fingerprint``, see
``crawlq.contrib.scrapy.fed``); without one, crawlq's default.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, Final, cast

import typer

from .._errors import ConfigError, InvalidRequest, StoreError
from .._exchange import JobReport
from .._fingerprint import Fingerprinter
from .._open import open_frontier, store_kind
from .._request import Request
from .options import clean_errors, fail, note_default_crawl, store_function

__all__ = ["FINGERPRINT_FIELD", "add"]

#: Bad URLs listed before summing up the rest.
_MAX_BAD: Final = 20
#: ``crawlq.contrib.scrapy.fed.FINGERPRINT_FIELD`` (that module needs Scrapy).
FINGERPRINT_FIELD: Final = "last_fingerprint"


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
        frontier = open_frontier(crawl, fingerprinter=fingerprinter, lifo=lifo)
        try:
            added = frontier.add_many(requests)
            where = frontier.url
        finally:
            frontier.close()
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
    kind = store_kind(crawl).name
    if kind == "sqlite":
        from ..stores.sqlite.admin import job_settings

        settings: dict[str, Any] | None = job_settings(crawl)
        if not settings:
            raise ConfigError(
                f"there is no job at {crawl}: crawlq add feeds an existing crawl; start its "
                "crawler first, or create the job with crawlq import"
            )
        fingerprint = settings.get("fingerprint")
        lifo = bool(settings.get("lifo", False))
    elif kind == "redis":
        fingerprint, lifo = _redis_options(crawl)
    elif kind == "redis+cluster":
        report = cast(JobReport, store_function(crawl, "inspect")(crawl, top=1))
        lifo = report.settings.get("lifo") == "1"
        stored = report.settings.get("last_fingerprint")
        fingerprint = json.loads(stored) if stored else None
    else:
        raise ConfigError(
            f"a {kind}:// frontier lives inside its process: crawlq add feeds a SQLite job "
            "or a Redis crawl"
        )
    fingerprinter = Fingerprinter.from_description(fingerprint) if fingerprint else Fingerprinter()
    return fingerprinter, lifo


def _redis_options(crawl: str) -> tuple[dict[str, Any] | None, bool]:
    """A Redis crawl's stored fingerprinter description (or None) and ``lifo``."""
    from ..stores.redis.client import acquire_client, redis_module, release_client
    from ..stores.redis.config import parse_url
    from ..stores.redis.conn import Link

    location = parse_url(crawl)
    redis_module()
    link = Link(location, acquire_client(location), retry_timeout=5.0)
    try:
        lifo, fingerprint = link.command(
            b"HMGET",
            (location.prefix + "meta").encode(),
            "lifo",
            FINGERPRINT_FIELD,
            doing="reading the crawl's settings",
        )
    finally:
        link.close()
        release_client(location)
    if lifo is None:
        raise StoreError(
            f"no crawl named {location.crawl!r} exists on {location.display}: crawlq add "
            "feeds an existing crawl; start a worker on it first (check the ?crawl=NAME)"
        )
    try:
        description = json.loads(fingerprint) if fingerprint else None
    except ValueError:
        description = None
    return description, lifo == b"1"
