"""pytest plugin for Scrapy's own test suite: swap crawlq's Scheduler in.

Loaded with ``-p crawlq_scrapy_swap`` by ``tests/scrapy/test_scrapy_suite.py``
(and ``scripts/scrapy-suite``) in a pytest run over the tests of Scrapy's
sdist. pytest imports a ``-p`` plugin before any conftest or test module, so
the names are replaced before ``from scrapy.core.scheduler import Scheduler``
in a test file binds one:

- ``scrapy.core.scheduler.Scheduler`` (the class, and the target of the
  string ``"scrapy.core.scheduler.Scheduler"`` in settings);
- ``SCHEDULER`` in ``scrapy.settings.default_settings``.

With ``CRAWLQ_SWAP=0`` nothing is replaced (the baseline run). Either way, at
the end of the run it writes ``CRAWLQ_SWAP_REPORT`` (JSON): the outcome of
every test (``passed`` only if setup, call and teardown passed), the class
``scrapy.core.scheduler.Scheduler`` named, and how many schedulers of each
class were opened, so the caller can check that the swap took effect.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import pytest

SWAP = os.environ.get("CRAWLQ_SWAP", "1") != "0"
_opened: Counter[str] = Counter()
_outcomes: dict[str, str] = {}


def _count_opens(cls: Any) -> None:
    original = cls.open

    def open(self: Any, spider: Any) -> Any:
        _opened[f"{type(self).__module__}.{type(self).__qualname__}"] += 1
        return original(self, spider)

    cls.open = open


def _swap() -> None:
    import scrapy.core.scheduler
    import scrapy.settings.default_settings

    import crawlq.contrib.scrapy

    stock = scrapy.core.scheduler.Scheduler
    _count_opens(stock)
    _count_opens(crawlq.contrib.scrapy.Scheduler)
    if SWAP:
        scrapy.core.scheduler.Scheduler = crawlq.contrib.scrapy.Scheduler
        scrapy.settings.default_settings.SCHEDULER = "crawlq.contrib.scrapy.Scheduler"


_swap()


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        previous = _outcomes.get(report.nodeid)
        if previous is None or previous == "passed":
            _outcomes[report.nodeid] = report.outcome
    elif report.when == "setup":
        _outcomes.setdefault(report.nodeid, "passed")


def pytest_sessionfinish(session: pytest.Session) -> None:
    import scrapy.core.scheduler
    import scrapy.settings.default_settings

    path = os.environ.get("CRAWLQ_SWAP_REPORT")
    if not path:
        return
    import scrapy

    cls = scrapy.core.scheduler.Scheduler
    report = {
        "scrapy_version": scrapy.__version__,
        "swap": SWAP,
        "scheduler_name": f"{cls.__module__}.{cls.__qualname__}",
        "default_setting": scrapy.settings.default_settings.SCHEDULER,
        "opened": dict(_opened),
        "outcomes": _outcomes,
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, sort_keys=True)
