"""Shared fixtures: every store the conformance suite runs against."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import crawlq

#: Store URLs the conformance suite runs against; later stores add theirs here.
STORES = ["memory://"]

OpenFrontier = Callable[..., crawlq.Frontier]


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_store(store_url: str) -> Iterator[OpenFrontier]:
    """Open a fresh frontier on the store under test; closed after the test."""
    opened: list[crawlq.Frontier] = []

    def open_(**options: Any) -> crawlq.Frontier:
        frontier = crawlq.open_frontier(store_url, **options)
        opened.append(frontier)
        return frontier

    yield open_
    for frontier in opened:
        frontier.close()
