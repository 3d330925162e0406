"""Fixtures of the Redis-only tests."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from crawlq.stores.redis import store as redis_store

_names = itertools.count()


@pytest.fixture
def url(redis_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh crawl on the session server (named after the test module), purged afterwards."""
    module = request.module.__name__.rpartition(".")[2].removeprefix("test_")
    crawl_url = f"{redis_url}?crawl={module}-{next(_names)}"
    yield crawl_url
    redis_store.purge(crawl_url)
