"""``crawlq add CRAWL URL...``: feeds a crawl with the crawl's own settings."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import crawlq
from crawlq.cli import app

runner = CliRunner()


def scrapy_fingerprinter() -> crawlq.Fingerprinter:
    pytest.importorskip("w3lib")
    return crawlq.Fingerprinter(mode="scrapy")


def scrapy_job(path: Path, *urls: str) -> str:
    """A job made as the Scrapy adapter makes it: LIFO, Scrapy's fingerprints."""
    with crawlq.open_frontier(str(path), lifo=True, fingerprinter=scrapy_fingerprinter()) as f:
        f.add_many(list(urls))
    return str(path)


def queued_urls(job: str, fingerprinter: crawlq.Fingerprinter, lifo: bool) -> list[str]:
    with crawlq.open_frontier(job, lifo=lifo, fingerprinter=fingerprinter) as frontier:
        urls = []
        while (request := frontier.pop()) is not None:
            urls.append(request.url)
        return urls


def test_add_feeds_a_scrapy_job_with_its_own_settings(tmp_path: Path) -> None:
    job = scrapy_job(tmp_path / "job", "https://a.example/1")
    result = runner.invoke(
        app, ["add", job, "https://a.example/1", "https://a.example/2", "https://b.example/"]
    )
    assert result.exit_code == 0, result.output
    assert "added 2 new URLs (1 already seen) to " in result.output
    # Opened with the defaults (FIFO, crawlq's fingerprints) this job raises IncompatibleStore.
    assert sorted(queued_urls(job, scrapy_fingerprinter(), True)) == [
        "https://a.example/1",
        "https://a.example/2",
        "https://b.example/",
    ]


def test_add_reads_urls_from_stdin_skipping_blank_lines(tmp_path: Path) -> None:
    job = scrapy_job(tmp_path / "job")
    stdin = "https://a.example/1\n\n   \nhttps://a.example/2\r\nhttps://a.example/1\n"
    result = runner.invoke(app, ["add", job, "-"], input=stdin)
    assert result.exit_code == 0, result.output
    assert "added 2 new URLs (1 already seen)" in result.output


def test_bad_urls_are_listed_and_nothing_is_added(tmp_path: Path) -> None:
    job = scrapy_job(tmp_path / "job")
    result = runner.invoke(
        app, ["add", job, "https://a.example/1", "ftp://x/", "relative/path", "https://a.example/2"]
    )
    assert result.exit_code == 1
    assert "URL 2 ('ftp://x/')" in result.output
    assert "URL 3 ('relative/path')" in result.output
    assert "error: 2 of 4 URLs are invalid; nothing was added" in result.output
    assert queued_urls(job, scrapy_fingerprinter(), True) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["memory://", "https://a.example/"], "error: a memory:// frontier lives inside"),
        (["-"], "error: no URLs given; nothing was added"),
        (["https://a.example/", "-"], "error: give URLs as arguments, or - alone"),
    ],
)
def test_errors_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    job = scrapy_job(tmp_path / "job")
    if args[0] != "memory://":
        args = [job, *args]
    result = runner.invoke(app, ["add", *args], input="\n\n")
    assert result.exit_code == 1
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_job_that_does_not_exist_is_not_created(tmp_path: Path) -> None:
    result = runner.invoke(app, ["add", str(tmp_path / "none"), "https://a.example/"])
    assert result.exit_code == 1
    assert "error: there is no job at" in result.output
    assert not (tmp_path / "none").exists()


def test_a_job_in_use_fails_cleanly(tmp_path: Path) -> None:
    job = scrapy_job(tmp_path / "job")
    with crawlq.open_frontier(job, lifo=True, fingerprinter=scrapy_fingerprinter()):
        result = runner.invoke(app, ["add", job, "https://a.example/"])
    assert result.exit_code == 1
    assert result.output.startswith("error: ")


def test_a_redis_crawl_is_fed_with_its_order_and_recorded_fingerprints(redis_url: str) -> None:
    crawl = f"{redis_url}?crawl=cli-add-{os.getpid()}-{time.monotonic_ns()}"
    missing = runner.invoke(app, ["add", crawl, "https://a.example/"])
    assert missing.exit_code == 1
    assert "error: no crawl named " in missing.output
    fingerprinter = scrapy_fingerprinter()
    with crawlq.open_frontier(crawl, lifo=True, fingerprinter=fingerprinter) as frontier:
        frontier.add_many(["https://a.example/?b=2&a=1"])
    # The store recorded the fingerprinter it was opened with (as a Scrapy
    # worker opens it), so crawlq add fingerprints the URLs the same way.
    # Scrapy's fingerprints sort the query too, but keep the fragment's absence and
    # the trailing slash: a Scrapy duplicate is seen, a new URL is added, LIFO.
    result = runner.invoke(
        app, ["add", crawl, "https://a.example/?a=1&b=2", "https://a.example/new"]
    )
    assert result.exit_code == 0, result.output
    assert "added 1 new URLs (1 already seen)" in result.output
    try:
        assert queued_urls(crawl, fingerprinter, True)[0] == "https://a.example/new"
        with crawlq.open_frontier(crawl, lifo=True, fingerprinter=fingerprinter) as frontier:
            assert frontier.seen(crawlq.Request("https://a.example/new"))
    finally:
        assert runner.invoke(app, ["purge", crawl, "--yes"]).exit_code == 0


def test_import_into_a_redis_crawl_keeps_its_order_and_fingerprints(
    redis_url: str, tmp_path: Path
) -> None:
    """``crawlq import`` reads a Redis crawl's stored settings as ``crawlq add`` does."""
    crawl = f"{redis_url}?crawl=cli-import-{os.getpid()}-{time.monotonic_ns()}"
    fingerprinter = scrapy_fingerprinter()
    with crawlq.open_frontier(crawl, lifo=True, fingerprinter=fingerprinter) as frontier:
        frontier.add_many(["https://a.example/?b=2&a=1"])
    lines = tmp_path / "requests.jsonl"
    due = time.time() + 3600
    lines.write_text(
        '{"url":"https://a.example/?a=1&b=2"}\n'
        '{"url":"https://a.example/first"}\n'
        '{"url":"https://a.example/second"}\n'
        f'{{"url":"https://a.example/later","not_before":{due}}}\n'
    )
    try:
        result = runner.invoke(app, ["import", crawl, str(lines)])
        assert result.exit_code == 0, result.output
        assert "3 added, 1 duplicates" in result.output
        with crawlq.open_frontier(crawl, lifo=True, fingerprinter=fingerprinter) as frontier:
            assert frontier.stats().scheduled == 1  # the due time came along
        # LIFO, the crawl's own order: the newest first.
        assert queued_urls(crawl, fingerprinter, True) == [
            "https://a.example/second",
            "https://a.example/first",
            "https://a.example/?b=2&a=1",
        ]
    finally:
        assert runner.invoke(app, ["purge", crawl, "--yes"]).exit_code == 0
