"""open_frontier: URLs, options and the errors that name the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

import crawlq


def test_memory_is_the_default() -> None:
    with crawlq.open_frontier() as frontier:
        assert frontier.url == "memory://"
        assert repr(frontier) == "<Frontier memory:// open>"
    assert frontier.closed


@pytest.mark.parametrize("url", ["ftp://x", "mongodb://localhost/db", "redis:/localhost"])
def test_unknown_scheme_names_the_known_ones(url: str) -> None:
    with pytest.raises(crawlq.ConfigError, match="'memory://'"):
        crawlq.open_frontier(url)


def test_unknown_option_lists_the_valid_ones() -> None:
    with pytest.raises(crawlq.ConfigError, match=r"host_dealy.*valid options.*host_delay"):
        crawlq.open_frontier("memory://", host_dealy=1)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("host_delay", -1),
        ("host_delay", "1"),
        ("host_delay", float("nan")),
        ("host_concurrency", 0),
        ("host_concurrency", 1.5),
        ("lease_timeout", 0),
        ("lifo", "yes"),
        ("clock", 5),
        ("fingerprinter", "scrapy"),
    ],
)
def test_bad_option_values(option: str, value: object) -> None:
    with pytest.raises(crawlq.ConfigError, match=option):
        crawlq.open_frontier(**{option: value})


def test_memory_url_takes_no_path() -> None:
    with pytest.raises(crawlq.ConfigError, match="memory://"):
        crawlq.open_frontier("memory://somewhere")


def test_sqlite_url_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with crawlq.open_frontier("sqlite:///relative.db") as frontier:
        assert frontier.url == f"sqlite:///{tmp_path / 'relative.db'}"
    with crawlq.open_frontier(f"sqlite:///{tmp_path}/absolute.db") as frontier:
        assert frontier.url == f"sqlite:///{tmp_path / 'absolute.db'}"
    with crawlq.open_frontier("jobdir") as frontier:  # a plain path is a job directory
        assert frontier.url == f"sqlite:///{tmp_path / 'jobdir' / 'crawlq.db'}"
    with crawlq.open_frontier("sqlite:///jobdir") as frontier:  # ...in URL form too
        assert frontier.url == f"sqlite:///{tmp_path / 'jobdir' / 'crawlq.db'}"
    with pytest.raises(crawlq.ConfigError, match="three slashes"):
        crawlq.open_frontier("sqlite://relative.db")
    with pytest.raises(crawlq.ConfigError, match="does not exist"):
        crawlq.open_frontier("sqlite:///missing/dir/job.db")
    with pytest.raises(crawlq.ConfigError, match="synchronous"):
        crawlq.open_frontier("sqlite:///x.db", synchronous="off")


def test_fingerprinter_option_is_used() -> None:
    fingerprinter = crawlq.Fingerprinter(ignore_query_params=["utm_*"])
    frontier = crawlq.open_frontier(fingerprinter=fingerprinter)
    assert frontier.fingerprinter is fingerprinter
    assert frontier.add(crawlq.Request("https://a.example/?utm_source=x"))
    assert not frontier.add(crawlq.Request("https://a.example/"))


@pytest.mark.parametrize(
    ("url", "name", "durable", "shared"),
    [
        ("memory://", "memory", False, False),
        ("sqlite:///job.db", "sqlite", True, False),
        ("some/job/dir", "sqlite", True, False),
        ("redis://localhost:6379/0?crawl=c", "redis", True, True),
        ("rediss://localhost:6379/0?crawl=c", "redis", True, True),
        ("unix:///run/redis.sock?crawl=c", "redis", True, True),
    ],
)
def test_store_kind_reads_the_scheme_only(url: str, name: str, durable: bool, shared: bool) -> None:
    kind = crawlq.store_kind(url)
    assert (kind.name, kind.durable, kind.shared) == (name, durable, shared)


def test_store_kind_refuses_an_unknown_scheme() -> None:
    with pytest.raises(crawlq.ConfigError, match="'redis://'"):
        crawlq.store_kind("ftp://x")
