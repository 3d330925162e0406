"""Redis frontier URLs: parsing, the crawl name, and passwords that never show."""

from __future__ import annotations

import pytest

import crawlq
from crawlq.stores.redis.config import parse_url


def test_tcp_url_with_everything() -> None:
    location = parse_url("redis://alice:s3cret@cache.example:6380/3?crawl=shop-1")
    assert location.kwargs["host"] == "cache.example"
    assert location.kwargs["port"] == 6380
    assert location.kwargs["db"] == 3
    assert location.kwargs["username"] == "alice"
    assert location.kwargs["password"] == "s3cret"
    assert location.crawl == "shop-1"
    assert location.prefix == "crawlq:{shop-1}:"
    assert location.display == "redis://alice:***@cache.example:6380/3?crawl=shop-1"


def test_defaults() -> None:
    location = parse_url("redis://localhost")
    assert (location.kwargs["port"], location.db, location.crawl) == (6379, 0, "default")
    assert location.display == "redis://localhost:6379/0?crawl=default"


def test_password_only_forms_are_masked() -> None:
    for url in ("redis://:hunter22@h:1/0", "redis://hunter22@h:1/0"):
        location = parse_url(url)
        assert location.kwargs["password"] == "hunter22"
        assert "hunter22" not in location.display
        assert "hunter22" not in repr(location)
        assert location.display.startswith("redis://:***@h:1/0")


def test_percent_encoded_password() -> None:
    location = parse_url("redis://u:p%40ss%2Fword@h/0")
    assert location.kwargs["password"] == "p@ss/word"
    assert "p@ss" not in location.display and "p%40ss" not in location.display
    assert location.scrub("server said p@ss/word") == "server said ***"


def test_tls_and_unix() -> None:
    tls = parse_url("rediss://h:6390/1?crawl=c&ssl_cert_reqs=required")
    assert tls.kwargs["ssl"] is True and tls.kwargs["ssl_cert_reqs"] == "required"
    assert tls.display == "rediss://h:6390/1?crawl=c&ssl_cert_reqs=required"
    unix = parse_url("unix:///run/redis.sock?db=2&crawl=c")
    assert unix.kwargs["unix_socket_path"] == "/run/redis.sock"
    assert unix.db == 2
    assert unix.display == "unix:///run/redis.sock?db=2&crawl=c"


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("redis://h/0?crawl=a b", "crawl name"),
        ("redis://h/0?crawl={x}", "crawl name"),
        ("redis://h/0?crawl=", "crawl name"),
        ("redis://h/x", "database"),
        ("redis://h/-1", "database"),
        ("redis://h/0?db=1", "twice"),
        ("redis://h:99999/0", "malformed"),
        ("redis:///0", "no host"),
        ("unix://", "no socket"),
        ("redis:/localhost", "lacks '//'"),
        ("redis://h/0?colour=blue", "unknown parameter 'colour'"),
        ("redis://h/0?socket_timeout=soon", "socket_timeout"),
    ],
)
def test_bad_urls_name_the_fix(url: str, match: str) -> None:
    with pytest.raises(crawlq.ConfigError, match=match):
        parse_url(url)


def test_errors_never_show_the_password() -> None:
    with pytest.raises(crawlq.ConfigError) as info:
        parse_url("redis://u:topsecret@h:99999/0")
    assert "topsecret" not in str(info.value)
    with pytest.raises(crawlq.ConfigError) as info:
        crawlq.open_frontier("redis://u:topsecret@h/0", prefetch=0)
    assert "topsecret" not in str(info.value)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("prefetch", 0),
        ("prefetch", 1.5),
        ("bloom_capacity", 0),
        ("bloom_capacity", True),
        ("bloom_error_rate", 0.01),  # without a capacity
        ("retry_timeout", -1),
    ],
)
def test_bad_options(option: str, value: object) -> None:
    with pytest.raises(crawlq.ConfigError, match=option):
        crawlq.open_frontier("redis://127.0.0.1:1/0", **{option: value})


def test_bloom_too_big_for_a_string() -> None:
    with pytest.raises(crawlq.ConfigError, match="512 MB"):
        crawlq.open_frontier(
            "redis://127.0.0.1:1/0", bloom_capacity=10**10, bloom_error_rate=0.0001
        )
