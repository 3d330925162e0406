"""Opening a Redis frontier fails fast, with a typed error that names the fix."""

from __future__ import annotations

import socket

import pytest

import crawlq
from crawlq.stores.redis import client as _redis_client
from crawlq.stores.redis import open as redis_open
from crawlq.stores.redis import store as redis_store
from tests.redis._wide import strip_wide
from tests.redis_server import StartServer


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_server(redis_servers: StartServer) -> None:
    url = f"redis://u:pw-secret@127.0.0.1:{_closed_port()}/0?crawl=x"
    with pytest.raises(crawlq.StoreUnavailable, match="cannot reach Redis") as info:
        crawlq.open_frontier(url)
    assert "pw-secret" not in str(info.value)
    assert "redis://u:***@127.0.0.1:" in str(info.value)


def test_wrong_password(redis_servers: StartServer) -> None:
    server = redis_servers(password="right-pass")
    wrong = f"redis://:wrong-pass@127.0.0.1:{server.port}/0?crawl=x"
    with pytest.raises(crawlq.StoreError, match="refused the credentials") as info:
        crawlq.open_frontier(wrong)
    assert "wrong-pass" not in str(info.value) and "right-pass" not in str(info.value)
    assert not isinstance(info.value, crawlq.StoreUnavailable)  # not worth retrying
    with pytest.raises(crawlq.StoreError, match="USER:PASSWORD"):
        crawlq.open_frontier(f"redis://127.0.0.1:{server.port}/0?crawl=x")  # none given
    with crawlq.open_frontier(server.url + "?crawl=x") as frontier:
        assert frontier.add(crawlq.Request("https://a.example/"))
        assert "right-pass" not in frontier.url and "right-pass" not in repr(frontier)
        assert "right-pass" not in str(frontier.stats())


def test_database_out_of_range(redis_url: str) -> None:
    with pytest.raises(crawlq.StoreError, match=r"no database 99.*databases") as info:
        crawlq.open_frontier(redis_url.rsplit("/", 1)[0] + "/99?crawl=x")
    assert "99" in str(info.value)


def test_other_databases_are_separate(redis_url: str) -> None:
    base = redis_url.rsplit("/", 1)[0]
    with crawlq.open_frontier(f"{base}/1?crawl=dbs") as one:
        one.add(crawlq.Request("https://a.example/"))
    with crawlq.open_frontier(f"{base}/2?crawl=dbs") as two:
        assert len(two) == 0
    assert redis_store.purge(f"{base}/1?crawl=dbs") > 0


def test_server_too_old(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_open, "server_version", lambda link: (6, 2, 14))
    with pytest.raises(crawlq.StoreError, match=r"version 6\.2\.14.*7\.0 or newer"):
        crawlq.open_frontier(redis_url + "?crawl=old")


class _Drifting(crawlq.Fingerprinter):
    """Fingerprints that change between two calls: what the self-check catches."""

    calls = 0

    def fingerprint(self, request: crawlq.Request) -> bytes:
        self.calls += 1
        return self.calls.to_bytes(16, "big")


def test_self_check_compares_fingerprints(redis_url: str) -> None:
    with pytest.raises(crawlq.StoreError, match="self-check failed"):
        crawlq.open_frontier(redis_url + "?crawl=drift", fingerprinter=_Drifting())


def test_self_check_leaves_no_keys(redis_url: str) -> None:
    import redis

    crawlq.open_frontier(redis_url + "?crawl=tidy").close()
    client = redis.Redis.from_url(redis_url)
    keys = sorted(k.decode() for k in client.scan_iter("crawlq:{tidy}:*"))
    client.close()
    # The crawl's settings, its opener's fingerprinter and the keys that hold
    # a wide entry from the start (shared.lua), nothing of the probe.
    names = ["fingerprinter", "hosts", "lease", "leases", "meta", "ready"]
    assert keys == [f"crawlq:{{tidy}}:{name}" for name in names]


def test_the_crawl_records_its_openers_fingerprinter(redis_url: str) -> None:
    """For crawlq add: the settings a fed URL needs, read through the admin interface."""
    from crawlq.stores.redis import admin

    url = redis_url + "?crawl=recorded"
    assert admin.crawl_settings(url) is None
    fingerprinter = crawlq.Fingerprinter(ignore_query_params=["utm_*"])
    crawlq.open_frontier(url, lifo=True, fingerprinter=fingerprinter).close()
    settings = admin.crawl_settings(url)
    assert settings == {"lifo": True, "fingerprint": fingerprinter.describe()}
    admin.purge(url)


def test_missing_redis_py_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_redis(name: str, *args: object, **kwargs: object) -> object:
        if name == "redis" or name.startswith("redis."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_redis)
    with pytest.raises(crawlq.ConfigError, match=r"pip install 'crawlq\[redis\]'"):
        crawlq.open_frontier("redis://127.0.0.1:1/0")


def test_one_client_per_url(redis_url: str) -> None:
    url_a, url_b = redis_url + "?crawl=share", redis_url + "?crawl=share&client_name=b"
    first, second = crawlq.open_frontier(url_a), crawlq.open_frontier(url_a)
    other = crawlq.open_frontier(url_b)
    clients = _redis_client._clients
    assert clients[url_a][1] == 2 and clients[url_b][1] == 1
    assert first._store._link.client is second._store._link.client  # type: ignore[attr-defined]
    assert other._store._link.client is not first._store._link.client  # type: ignore[attr-defined]
    for frontier in (first, second, other):
        frontier.close()
    assert url_a not in clients and url_b not in clients


def test_crawl_settings_that_cannot_change(redis_url: str) -> None:
    url = redis_url + "?crawl=fixed"
    crawlq.open_frontier(url, lifo=True).close()
    with pytest.raises(crawlq.IncompatibleStore, match="lifo=True"):
        crawlq.open_frontier(url)
    crawlq.open_frontier(url, lifo=True).close()
    with pytest.raises(crawlq.IncompatibleStore, match="exact dedup"):
        crawlq.open_frontier(url, lifo=True, bloom_capacity=1000)
    redis_store.purge(url)


def test_foreign_data_under_the_prefix(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    client.set("crawlq:{foreign}:meta", "not a hash")
    client.close()
    with pytest.raises(crawlq.IncompatibleStore, match="another crawl name"):
        crawlq.open_frontier(redis_url + "?crawl=foreign")
    assert redis_store.purge(redis_url + "?crawl=foreign") == 1


def test_a_crawl_of_key_format_3_is_upgraded_in_place(redis_url: str) -> None:
    """Format 3 kept the queue's size in meta's ``queued``; format 4 on counts from it."""
    import redis

    url = redis_url + "?crawl=format3"
    frontier = crawlq.open_frontier(url)
    frontier.add_many([f"https://a.example/{i}" for i in range(5)])
    frontier.close()
    client = redis.Redis.from_url(redis_url)
    meta = "crawlq:{format3}:meta"
    # What crawlq with key format 3 left: the count in `queued`, no counters.
    client.hset(meta, mapping={"format": "3", "queued": "5"})
    strip_wide(client, "crawlq:{format3}:")
    client.hdel(meta, "accepted", "popped", "released", "expired")
    frontier = crawlq.open_frontier(url)
    assert client.hget(meta, "format") == b"%d" % redis_open.FORMAT
    assert frontier.add_many(["https://a.example/0", "https://a.example/5"]) == [False, True]
    stats = frontier.stats()
    assert (stats.queued, stats.leased) == (6, 0)
    # Counted from the upgrade on.
    assert stats.counters == crawlq.Counters(accepted=1, duplicates=1)
    request = frontier.pop()
    assert request is not None
    frontier.ack(request)
    frontier.flush()
    assert len(frontier) == 5
    frontier.close()
    # A crawlq of format 3 must not read a queue it would count wrong, nor
    # one of format 4 a format-5 crawl's buckets; a newer one is refused.
    client.hset(meta, "format", str(redis_open.FORMAT + 1))
    with pytest.raises(crawlq.IncompatibleStore, match="newer than this crawlq"):
        crawlq.open_frontier(url)
    client.close()
    redis_store.purge(url)
