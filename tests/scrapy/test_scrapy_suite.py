"""Scrapy's own scheduler, dupefilter, engine, signal and crawl tests pass with crawlq's.

Runs the test files of the installed Scrapy's sdist (see ``_suite``) with
``crawlq.contrib.scrapy.Scheduler`` swapped in for Scrapy's scheduler: every
test that passes with Scrapy's own scheduler passes with crawlq's, except
those listed, with a reason each, in ``suite/exclusions.txt``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("scrapy")

from ._suite import CRAWLQ_SCHEDULER, STOCK_SCHEDULER, exclusions, run_suite


@pytest.mark.timeout(1200)
def test_scrapy_own_tests_pass_with_crawlq_scheduler() -> None:
    import scrapy

    result = run_suite()
    report = result.crawlq
    assert report["scrapy_version"] == scrapy.__version__
    # The swap took effect: the name and the default setting are crawlq's, and
    # only crawlq's scheduler was opened, by many tests.
    assert report["swap"] is True
    assert report["scheduler_name"] == CRAWLQ_SCHEDULER
    assert report["default_setting"] == "crawlq.contrib.scrapy.Scheduler"
    assert report["opened"].get(STOCK_SCHEDULER, 0) == 0, report["opened"]
    assert report["opened"].get(CRAWLQ_SCHEDULER, 0) >= 100, report["opened"]
    # The files were collected and run (Scrapy 2.19's hold 166 tests).
    assert len(result.passed()) >= 150, report["output"][-3000:]
    assert result.regressions() == [], report["output"][-6000:]
    # Each exclusion still fails with crawlq's scheduler (else remove it).
    assert result.stale_exclusions() == []
    assert len(set(exclusions()) & set(report["outcomes"])) >= 4
