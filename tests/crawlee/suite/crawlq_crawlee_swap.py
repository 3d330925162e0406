"""pytest plugin for crawlee's own tests: swap crawlq's RequestManager in.

Loaded with ``-p crawlq_crawlee_swap`` (and ``--noconftest``) by
``tests/crawlee/_suite.py`` in a pytest run over test files of crawlee's
source. It stands in for crawlee's ``tests/unit/conftest.py`` and
``tests/unit/storages/conftest.py`` (which import crawlee's HTTP clients,
test server, proxy and fakeredis, none of which these files use): the
autouse isolation of crawlee's conftest (``CRAWLEE_STORAGE_DIR`` in the
test's tmp dir, a fresh service locator) and a ``storage_client`` fixture
that is crawlee's own ``MemoryStorageClient``.

With ``CRAWLQ_SWAP=0`` nothing else changes: the baseline, crawlee's own
memory request queue. With ``CRAWLQ_SWAP=memory`` (a ``memory://`` crawlq
frontier) or ``CRAWLQ_SWAP=sqlite`` (a SQLite job in the test's tmp dir),
what a test uses as its request manager is
``await crawlq.contrib.crawlee.RequestManager.open(url, allow_purge=True)``
(one store per run: crawlee's parametrized inputs are mutable and shared):

- ``test_request_queue.py``: its ``rq`` fixture (crawlee's default
  ``RequestQueue``) becomes a crawlq manager, dropped after the test as the
  original is; the tests of that file that do not use ``rq`` open queues by
  id, name or alias over storage clients, which a request manager has no
  notion of: they are deselected.
- ``test_request_manager_tandem.py``: ``RequestQueue.open()``, the tandem's
  manager, opens a crawlq manager.

At the end of the run it writes ``CRAWLQ_SWAP_REPORT`` (JSON): every test's
outcome (``passed`` only if setup, call and teardown passed), the tests
deselected, and how many crawlq managers the tests opened, so the caller can
check that the swap took effect.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

#: "0": the baseline; "memory" or "sqlite": crawlq on a memory:// frontier or a SQLite job.
STORE = os.environ.get("CRAWLQ_SWAP", "memory")
SWAP = STORE != "0"
#: Test file name -> the name in it that becomes crawlq ("rq": a fixture; "RequestQueue": a class).
SWAPPED = {
    "test_request_queue.py": "rq",
    "test_request_manager_tandem.py": "RequestQueue",
}

_opened: Counter[str] = Counter()
_outcomes: dict[str, str] = {}
_deselected: list[str] = []
_store_url: list[str] = []  # the current test's crawlq URL (one test at a time)
_managers: list[Any] = []  # crawlq managers the current test opened


async def open_crawlq_manager() -> Any:
    """A crawlq request manager on the current test's store (counted, closed after it)."""
    from crawlq.contrib.crawlee import RequestManager

    manager = await RequestManager.open(_store_url[0], allow_purge=True)
    _opened[f"{type(manager).__module__}.{type(manager).__qualname__}"] += 1
    _managers.append(manager)
    return manager


@pytest.fixture
async def rq() -> AsyncIterator[Any]:
    """crawlq's manager where the test file's ``rq`` fixture opens crawlee's default queue."""
    manager = await open_crawlq_manager()
    yield manager
    await manager.drop()


class CrawlqRequestQueue:
    """Stands for ``crawlee.storages.RequestQueue`` where a test uses it as its request manager."""

    @staticmethod
    async def open(**kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(f"a crawlq request manager has no {sorted(kwargs)}")
        return await open_crawlq_manager()


def pytest_collectstart(collector: pytest.Collector) -> None:
    if SWAP and isinstance(collector, pytest.Module) and collector.path.name in SWAPPED:
        name = SWAPPED[collector.path.name]
        setattr(collector.obj, name, rq if name == "rq" else CrawlqRequestQueue)


async def _close_leftovers() -> None:
    leftover = [manager for manager in _managers if repr(manager).endswith(" open>")]
    _managers.clear()
    for manager in leftover:
        await manager.close()


@pytest.fixture(autouse=True)
async def _crawlq_store(tmp_path: Path) -> AsyncIterator[None]:
    """The test's crawlq store (swapped runs): ``memory://``, or a SQLite job in its tmp dir."""
    _store_url[:] = ["memory://" if STORE == "memory" else str(tmp_path / "job")]
    yield
    await _close_leftovers()


@pytest.fixture(autouse=True)
def _isolate_test_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """What crawlee's ``tests/unit/conftest.py`` does before each test."""
    from crawlee import service_locator
    from crawlee.crawlers import BasicCrawler
    from crawlee.statistics import Statistics
    from crawlee.storages import KeyValueStore

    monkeypatch.setenv("CRAWLEE_STORAGE_DIR", str(tmp_path))
    service_locator._configuration = None
    service_locator._event_manager = None
    service_locator._storage_client = None
    service_locator.storage_instance_manager.clear_cache()
    KeyValueStore._autosaved_values = {}
    Statistics._Statistics__next_id = 0  # type: ignore[attr-defined]
    BasicCrawler._BasicCrawler__next_id = 0  # type: ignore[attr-defined]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


@pytest.fixture
def storage_client() -> Any:
    """crawlee's own memory storage client (crawlee's fixture also has file, SQL and Redis ones)."""
    from crawlee import service_locator
    from crawlee.storage_clients import MemoryStorageClient

    client = MemoryStorageClient()
    service_locator.set_storage_client(client)
    return client


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not SWAP:
        return
    keep, drop = [], []
    for item in items:
        swapped = SWAPPED.get(item.path.name)
        uses = getattr(item, "fixturenames", ())
        if swapped is None or (swapped == "rq" and "rq" not in uses):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        _deselected.extend(item.nodeid for item in drop)
        items[:] = keep


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        previous = _outcomes.get(report.nodeid)
        if previous is None or previous == "passed":
            _outcomes[report.nodeid] = report.outcome
    elif report.when == "setup":
        _outcomes.setdefault(report.nodeid, "passed")


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("CRAWLQ_SWAP_REPORT")
    if not path:
        return
    import crawlee

    report = {
        "crawlee_version": crawlee.__version__,
        "swap": STORE,
        "opened": dict(_opened),
        "outcomes": _outcomes,
        "deselected": _deselected,
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, sort_keys=True)
