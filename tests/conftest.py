"""Shared fixtures: every store the conformance suite runs against."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import crawlq

from ._watched_crawl import Crawl

pytest_plugins = ["tests.redis_server", "tests.redis_cluster", "tests._terminal"]

#: Stores the conformance suite runs against; a new store adds its name here
#: and a branch in `store_url`.
STORES = ["memory", "sqlite", "redis", "redis-cluster"]

OpenFrontier = Callable[..., crawlq.Frontier]
_names = itertools.count()


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a fresh, empty frontier on the store under test."""
    name = request.param
    if name == "memory":
        return "memory://"
    if name == "sqlite":
        return f"sqlite:///{tmp_path / 'job.db'}"
    if name == "redis":
        server_url = str(request.getfixturevalue("redis_url"))
        return f"{server_url}?crawl=conformance-{next(_names)}"
    if name == "redis-cluster":
        cluster_url = str(request.getfixturevalue("redis_cluster_url"))
        return f"{cluster_url}?crawl=conformance-{next(_names)}"
    raise AssertionError(f"no URL for store {name!r}")


@pytest.fixture
def open_store(store_url: str, request: pytest.FixtureRequest) -> Iterator[OpenFrontier]:
    """Open frontiers on the store under test; all are closed after the test.

    Opening twice with the same options reopens the same store (for durable
    stores), which is how resume is tested. A test marked ``one_shard``
    checks dedup across pacing slots, which a cluster crawl keeps per shard:
    on ``redis-cluster`` it runs on a crawl of one shard, and
    ``tests/redis/test_cluster.py`` tests what 16 shards do instead.
    """
    opened: list[crawlq.Frontier] = []
    defaults: dict[str, Any] = {}
    if request.node.get_closest_marker("one_shard") and store_url.startswith("redis+cluster"):
        defaults["shards"] = 1

    def open_(**options: Any) -> crawlq.Frontier:
        frontier = crawlq.open_frontier(store_url, **{**defaults, **options})
        opened.append(frontier)
        return frontier

    yield open_
    for frontier in opened:
        frontier.close()


_watched = itertools.count()


@pytest.fixture(params=["sqlite", "redis"])
def crawl_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite job or a Redis crawl for `tests._watched_crawl` (``crawlq top``, metrics)."""
    if request.param == "sqlite":
        return str(tmp_path / "job")
    server_url = str(request.getfixturevalue("redis_url"))
    return f"{server_url}?crawl=watched-{next(_watched)}"


@pytest.fixture
def crawl(crawl_url: str) -> Iterator[Crawl]:
    """`tests._watched_crawl` running on ``crawl_url`` in a child process, "ready"."""
    running = Crawl(crawl_url)
    try:
        yield running
    finally:
        running.stop()
