"""Golden vectors for canonical URLs and fingerprints, and Scrapy compatibility."""

from __future__ import annotations

import pytest
import scrapy.http as scrapy_http
import scrapy.utils.request as scrapy_request_utils

import crawlq
from crawlq import Fingerprinter, Request

CANONICAL = [
    # scheme and host lower-cased, path case kept
    ("HTTP://Example.COM/Path/Page", "http://example.com/Path/Page"),
    ("https://WWW.Example.com/A?B=C", "https://www.example.com/A?B=C"),
    # default port dropped, other ports kept, leading zeros dropped
    ("http://example.com:80/", "http://example.com/"),
    ("https://example.com:443/x", "https://example.com/x"),
    ("http://example.com:443/x", "http://example.com:443/x"),
    ("https://example.com:8443/x", "https://example.com:8443/x"),
    ("http://example.com:0080/x", "http://example.com/x"),
    ("http://example.com:/x", "http://example.com/x"),
    # empty path is "/", empty query and fragment dropped
    ("http://example.com", "http://example.com/"),
    ("http://example.com?", "http://example.com/"),
    ("http://example.com/#", "http://example.com/"),
    ("http://example.com/p#section-2", "http://example.com/p"),
    # query sorted by name, stably: repeated names keep their order
    ("http://e.com/?c=3&b=5&b=2&a=50", "http://e.com/?a=50&b=5&b=2&c=3"),
    ("http://e.com/?b=&a", "http://e.com/?a&b="),
    ("http://e.com/?a=1&&b=2&", "http://e.com/?a=1&b=2"),
    ("http://e.com/?a1=x&a=y", "http://e.com/?a=y&a1=x"),
    # percent-encoding: unreserved decoded, others upper-cased, never double-encoded
    ("http://e.com/%7euser/%41%42", "http://e.com/~user/AB"),
    ("http://e.com/a%2fb%2Fc", "http://e.com/a%2Fb%2Fc"),
    ("http://e.com/?q=%26", "http://e.com/?q=%26"),
    ("http://e.com/?q=%2526", "http://e.com/?q=%2526"),
    ("http://e.com/?q=a%20b&r=a+b", "http://e.com/?q=a%20b&r=a+b"),
    ("http://e.com/100%", "http://e.com/100%25"),
    ("http://e.com/%zz", "http://e.com/%25zz"),
    ("http://e.com/a b", "http://e.com/a%20b"),
    ("http://e.com/r\u00e9sum\u00e9", "http://e.com/r%C3%A9sum%C3%A9"),
    ("http://e.com/r%c3%a9sum%C3%A9", "http://e.com/r%C3%A9sum%C3%A9"),
    ("http://e.com/?%7A=1&b=2", "http://e.com/?b=2&z=1"),
    ('http://e.com/<x>"{|}', "http://e.com/%3Cx%3E%22%7B%7C%7D"),
    # sub-delimiters and ':@' stay literal in the path
    ("http://e.com/a:b@c;d=e,f!$'()*+", "http://e.com/a:b@c;d=e,f!$'()*+"),
    # dot segments resolved
    ("http://e.com/a/./b/../c", "http://e.com/a/c"),
    ("http://e.com/a/b/..", "http://e.com/a/"),
    ("http://e.com/../a", "http://e.com/a"),
    # IDNA hosts, userinfo kept as is, IPv6
    ("http://B\u00fccher.example/", "http://xn--bcher-kva.example/"),
    ("http://User:Pw@Example.com:80/", "http://User:Pw@example.com/"),
    ("http://[2001:DB8::1]:80/x", "http://[2001:db8::1]/x"),
    ("http://[::1]:8080/", "http://[::1]:8080/"),
]


@pytest.mark.parametrize(("url", "expected"), CANONICAL)
def test_canonical_url(url: str, expected: str) -> None:
    assert Fingerprinter().canonical_url(url) == expected


@pytest.mark.parametrize(("url", "expected"), CANONICAL)
def test_canonical_url_is_idempotent(url: str, expected: str) -> None:
    assert Fingerprinter().canonical_url(expected) == expected


def test_distinct_pages_stay_distinct() -> None:
    fingerprinter = Fingerprinter()
    distinct = [
        "http://e.com/Page",
        "http://e.com/page",
        "http://e.com/?q=%26",
        "http://e.com/?q=%2526",
        "http://e.com/?q=&",
        "http://e.com/a%2Fb",
        "http://e.com/a/b",
        "http://e.com/?a=1&a=2",
        "http://e.com/?a=2&a=1",
        "http://e.com/?q=a+b",
        "http://e.com/?q=a%20b",
        "https://e.com/",
        "http://e.com:8080/",
    ]
    canonical = [fingerprinter.canonical_url(u) for u in distinct]
    assert len(set(canonical)) == len(distinct)


def test_keep_fragments() -> None:
    fingerprinter = Fingerprinter(keep_fragments=True)
    assert fingerprinter.canonical_url("http://e.com/p#Sec%7e 2") == "http://e.com/p#Sec~%202"
    a = fingerprinter.fingerprint(Request("http://e.com/p#one"))
    b = fingerprinter.fingerprint(Request("http://e.com/p#two"))
    assert a != b


@pytest.mark.parametrize(
    ("patterns", "url", "expected"),
    [
        (["utm_*"], "http://e.com/?utm_source=x&id=1&utm_medium=y", "http://e.com/?id=1"),
        (["utm_*", "sid"], "http://e.com/?sid=9&UTM_x=1&a=2", "http://e.com/?UTM_x=1&a=2"),
        (["ref?"], "http://e.com/?ref1=a&ref=b&ref12=c", "http://e.com/?ref=b&ref12=c"),
        (["[ab]"], "http://e.com/?a=1&b=2&c=3", "http://e.com/?c=3"),
        (["utm_*"], "http://e.com/?utm_source=x", "http://e.com/"),
        (["utm_source"], "http://e.com/?utm%5Fsource=x&k=1", "http://e.com/?k=1"),
    ],
)
def test_ignore_query_params_with_globs(patterns: list[str], url: str, expected: str) -> None:
    assert Fingerprinter(ignore_query_params=patterns).canonical_url(url) == expected


def test_keep_query_params_with_globs() -> None:
    fingerprinter = Fingerprinter(keep_query_params=["id", "page*"])
    url = "http://e.com/list?sort=asc&page=2&id=7&pagesize=10&session=abc"
    assert fingerprinter.canonical_url(url) == "http://e.com/list?id=7&page=2&pagesize=10"
    assert Fingerprinter(keep_query_params=[]).canonical_url(url) == "http://e.com/list"


def test_ignore_and_keep_together_is_an_error() -> None:
    with pytest.raises(crawlq.ConfigError, match="not both"):
        Fingerprinter(ignore_query_params=["utm_*"], keep_query_params=["id"])


def test_bad_pattern_and_mode_are_errors() -> None:
    with pytest.raises(crawlq.ConfigError):
        Fingerprinter(ignore_query_params=[""])
    with pytest.raises(crawlq.ConfigError, match="mode"):
        Fingerprinter(mode="sha1")  # type: ignore[arg-type]


def test_fingerprint_golden_values() -> None:
    fingerprinter = Fingerprinter()
    # These bytes are part of crawlq's storage format: a change here breaks
    # every durable job and shared Redis frontier, so it needs a schema bump.
    assert (
        fingerprinter.fingerprint(Request("https://Example.com:443/a?b=1&a=2#x")).hex()
        == fingerprinter.fingerprint(Request("https://example.com/a?a=2&b=1")).hex()
        == "f931280ebf90d8856f4d794cf3ee07ef"
    )
    post = Request("https://example.com/a", method="POST", body=b"x=1")
    assert fingerprinter.fingerprint(post).hex() == "8add3bed81e45646cdb9114aecabcc3c"


def test_method_body_and_chosen_headers_count() -> None:
    plain = Fingerprinter()
    with_headers = Fingerprinter(include_headers=["Accept-Language"])
    base = Request("https://e.com/", headers={"accept-language": "en"})
    other_language = Request("https://e.com/", headers={"Accept-Language": "fr"})
    assert plain.fingerprint(base) == plain.fingerprint(other_language)
    assert with_headers.fingerprint(base) != with_headers.fingerprint(other_language)
    assert with_headers.fingerprint(base) == with_headers.fingerprint(
        Request("https://e.com/", headers={"ACCEPT-LANGUAGE": "en"})
    )
    assert plain.fingerprint(Request("https://e.com/", method="HEAD")) != plain.fingerprint(base)
    assert plain.fingerprint(Request("https://e.com/", method="POST", body=b"a")) != (
        plain.fingerprint(Request("https://e.com/", method="POST", body=b"b"))
    )
    # No ambiguity between method/url and body boundaries.
    assert plain.fingerprint(Request("https://e.com/a", method="POST", body=b"b")) != (
        plain.fingerprint(Request("https://e.com/ab", method="POST"))
    )


def test_fingerprinter_names_the_host() -> None:
    fingerprint, host = Fingerprinter().fingerprint_and_host(Request("https://u:p@Sub.E.com:81/"))
    assert host == "sub.e.com"
    assert len(fingerprint) == 16


@pytest.mark.parametrize(
    "url",
    ["http://e.com:99999/", "http://e.com:8x/", "http://:80/", "http://@/"],
)
def test_bad_authority_is_invalid(url: str) -> None:
    with pytest.raises(crawlq.InvalidRequest):
        Fingerprinter().canonical_url(url)


# -- Scrapy compatibility ---------------------------------------------------------

SCRAPY_URLS = [
    "http://www.example.com/do?c=3&b=5&b=2&a=50",
    "https://example.com/r\u00e9sum\u00e9?q=caf\u00e9#frag",
    "http://Example.COM:80/a/../b/%7euser?x=%2526&y=a+b&z=a%20b",
    "https://example.com/search?q=crawl&utm_source=x&page=2",
    "http://example.com",
    "http://example.com/p?a=1&&b=&c",
]


@pytest.mark.parametrize("url", SCRAPY_URLS)
@pytest.mark.parametrize(
    ("method", "body", "headers"),
    [
        ("GET", b"", {}),
        ("POST", b"a=1&b=\xff", {"Content-Type": "application/x-www-form-urlencoded"}),
    ],
)
def test_scrapy_mode_is_byte_identical_to_scrapy(
    url: str, method: str, body: bytes, headers: dict[str, str]
) -> None:
    ours = Fingerprinter(mode="scrapy")
    theirs = scrapy_http.Request(url, method=method, body=body, headers=headers)
    mine = Request(theirs.url, method=method, body=body, headers=headers)
    assert ours.fingerprint(mine) == scrapy_request_utils.RequestFingerprinter().fingerprint(theirs)
    assert ours.fingerprint(mine) == scrapy_request_utils.fingerprint(theirs)


def test_scrapy_mode_with_headers_and_fragments_matches_scrapy() -> None:
    theirs = scrapy_http.Request("https://e.com/p#x", headers={"Accept-Language": "fr"})
    mine = Request(theirs.url, headers={"Accept-Language": "fr"})
    ours = Fingerprinter(mode="scrapy", include_headers=["accept-language"], keep_fragments=True)
    expected = scrapy_request_utils.fingerprint(
        theirs, include_headers=["Accept-Language"], keep_fragments=True
    )
    assert ours.fingerprint(mine) == expected


def test_scrapy_mode_refuses_param_rules() -> None:
    with pytest.raises(crawlq.ConfigError, match="scrapy"):
        Fingerprinter(mode="scrapy", ignore_query_params=["utm_*"])


@pytest.mark.parametrize(
    "fingerprinter",
    [
        Fingerprinter(),
        Fingerprinter(keep_fragments=True, ignore_query_params=["utm_*", "sid", "ref?"]),
        Fingerprinter(keep_query_params=["id", "page[0-9]"], include_headers=["Accept"]),
        Fingerprinter(mode="scrapy", include_headers=["cookie"]),
    ],
)
def test_description_rebuilds_an_equal_fingerprinter(fingerprinter: Fingerprinter) -> None:
    description = fingerprinter.describe()
    rebuilt = Fingerprinter.from_description(description)
    assert rebuilt.describe() == description
    request = Request("https://e.com/a?utm_x=1&id=2&page3=4&sid=5#f", headers={"Accept": "x"})
    assert rebuilt.fingerprint(request) == fingerprinter.fingerprint(request)


def test_bad_description_is_a_config_error() -> None:
    with pytest.raises(crawlq.ConfigError):
        Fingerprinter.from_description({"mode": "crawlq"})
