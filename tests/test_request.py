"""Request validation and the versioned msgpack codec."""

from __future__ import annotations

import pickle

import msgspec
import pytest

import crawlq
from crawlq import Request
from crawlq._request import SCHEMA_VERSION, decode_request, encode_request


def full_request() -> Request:
    return Request(
        "https://a.example/p?q=1",
        method="put",
        headers={"X-A": "1", "Cookie": "s=\u00e9"},
        body="caf\u00e9",
        priority=-(2**31),
        meta={"list": [1, "2", None], "map": {"x": 1.25}, "blob": b"\x00", "flag": True},
        callback="parse",
        errback="failed",
        dont_filter=True,
        depth=9,
    )


def test_codec_round_trips_every_field() -> None:
    original = full_request()
    decoded = decode_request(encode_request(original))
    assert decoded == original
    assert decoded is not original
    assert decoded.method == "PUT"
    assert decoded.body == "caf\u00e9".encode()
    assert decoded._lease is None


def test_encoding_is_versioned_msgpack_not_pickle() -> None:
    data = encode_request(full_request())
    raw = msgspec.msgpack.decode(data)
    assert raw[0] == SCHEMA_VERSION
    assert raw[1] == "https://a.example/p?q=1"
    with pytest.raises(pickle.UnpicklingError):
        pickle.loads(data)


def test_newer_schema_is_refused_with_upgrade_advice() -> None:
    raw = msgspec.msgpack.decode(encode_request(full_request()))
    raw[0] = SCHEMA_VERSION + 1
    with pytest.raises(crawlq.StoreError, match="upgrade crawlq"):
        decode_request(msgspec.msgpack.encode(raw))


@pytest.mark.parametrize(
    "data",
    [
        b"\x80\x04\x95",  # a pickle header
        msgspec.msgpack.encode([SCHEMA_VERSION, "https://a/", "GET"]),  # truncated
        msgspec.msgpack.encode({"url": "https://a/"}),
        msgspec.msgpack.encode([SCHEMA_VERSION, 5, "GET", {}, b"", 0, {}, None, None, False, 0]),
    ],
)
def test_foreign_or_corrupt_data_is_a_store_error(data: bytes) -> None:
    with pytest.raises(crawlq.StoreError, match="corrupt"):
        decode_request(data)


def test_unencodable_meta_names_the_key() -> None:
    request = Request("https://a.example/", meta={"fine": 1, "bad": {1, object()}})
    with pytest.raises(crawlq.SerializationError, match="meta\\['bad'\\]"):
        encode_request(request)
    with pytest.raises(crawlq.SerializationError, match="not a str"):
        encode_request(Request("https://a.example/", meta={1: "x"}))  # type: ignore[dict-item]
    with pytest.raises(crawlq.SerializationError):
        encode_request(Request("https://a.example/", meta={"big": 2**70}))


@pytest.mark.parametrize(
    ("url", "advice"),
    [
        ("ftp://a.example/", "http"),
        ("mailto:x@a.example", "http"),
        ("/relative/path", "resolve relative links"),
        ("a.example/page", "http"),
        ("https://", "no host"),
        ("https:///path", "no host"),
        ("http://?q=1", "no host"),
        ("", "http"),
    ],
)
def test_bad_urls_are_refused_with_advice(url: str, advice: str) -> None:
    with pytest.raises(crawlq.InvalidRequest, match=advice):
        Request(url)


def test_url_must_be_a_string() -> None:
    with pytest.raises(crawlq.InvalidRequest, match="str"):
        Request(b"https://a.example/")  # type: ignore[arg-type]


def test_scheme_case_is_accepted_and_kept() -> None:
    assert Request("HTTPS://a.example/").url == "HTTPS://a.example/"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("priority", 1.5, "int"),
        ("priority", "3", "int"),
        ("priority", 2**31, "32-bit"),
        ("method", "GE T", "method"),
        ("method", 5, "method"),
        ("headers", {"a": b"1"}, "str"),
        ("headers", [("a", "b")], "mapping"),
        ("body", 5, "bytes"),
        ("meta", [1], "dict"),
        ("callback", print, "name"),
        ("errback", 1, "name"),
        ("depth", -1, "depth"),
    ],
)
def test_bad_fields_are_refused(field: str, value: object, message: str) -> None:
    with pytest.raises(crawlq.InvalidRequest, match=message):
        Request("https://a.example/", **{field: value})  # type: ignore[arg-type]


def test_errors_form_one_family() -> None:
    for name in crawlq.__all__:
        obj = getattr(crawlq, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, crawlq.CrawlqError), name
            assert obj.__doc__, name


def test_replace_makes_an_unleased_copy() -> None:
    request = full_request()
    copy = request.replace(priority=4)
    assert copy.priority == 4 and copy.url == request.url and copy.meta == request.meta
    assert copy.meta is not request.meta


# -- Request.from_link ------------------------------------------------------------

PAGE = "https://a.example/dir/page.html?x=1"


@pytest.mark.parametrize(
    ("href", "url"),
    [
        ("next.html", "https://a.example/dir/next.html"),
        ("../up.html", "https://a.example/up.html"),
        ("/root", "https://a.example/root"),
        ("?q=2", "https://a.example/dir/page.html?q=2"),
        ("//b.example/p", "https://b.example/p"),
        ("http://c.example/", "http://c.example/"),
        ("HTTPS://D.example/Q", "https://D.example/Q"),
        ("page.html#part", "https://a.example/dir/page.html#part"),
        ("  \n next.html\t ", "https://a.example/dir/next.html"),
        ("ne\nxt.\thtml", "https://a.example/dir/next.html"),
    ],
)
def test_from_link_resolves_against_the_page(href: str, url: str) -> None:
    request = Request.from_link(href, base=PAGE)
    assert request is not None
    assert request.url == url


@pytest.mark.parametrize(
    "href",
    [
        "",
        "   ",
        "#top",
        "#",
        "mailto:someone@a.example",
        "MAILTO:someone@a.example",
        "javascript:void(0)",
        " javascript:alert(1)",
        "tel:+1-555-0100",
        "data:text/html,<p>hi</p>",
        "ftp://files.a.example/x",
        "http://[::1",
        "http://",
        "http://@/x",
    ],
)
def test_from_link_returns_none_for_links_to_skip(href: str) -> None:
    assert Request.from_link(href, base=PAGE) is None


def test_from_link_passes_fields_and_raises_for_caller_mistakes() -> None:
    request = Request.from_link("next.html", base=PAGE, depth=3, priority=-3, meta={"k": 1})
    assert request == Request(
        "https://a.example/dir/next.html", depth=3, priority=-3, meta={"k": 1}
    )
    # A bad field is the caller's mistake, not the page's: it raises.
    with pytest.raises(crawlq.InvalidRequest, match="priority"):
        Request.from_link("next.html", base=PAGE, priority=1.5)
    # ... but a bad link with good fields is still skipped.
    assert Request.from_link("mailto:x@a.example", base=PAGE, depth=1) is None
    assert Request.from_link("http://", base=PAGE, depth=1) is None
    with pytest.raises(crawlq.InvalidRequest, match="absolute http"):
        Request.from_link("next.html", base="/dir/page.html")
    with pytest.raises(crawlq.InvalidRequest, match="href must be a str"):
        Request.from_link(b"next.html", base=PAGE)  # type: ignore[arg-type]
