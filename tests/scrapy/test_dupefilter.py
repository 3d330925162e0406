"""`DupeFilter` opened on its own with ``JOBDIR`` remembers what it was asked across a reopen.

As Scrapy's ``RFPDupeFilter`` does with ``JOBDIR/requests.seen`` (Scrapy's
``test_dupefilter_path``), in ``JOBDIR/crawlq-requests.seen``; attached to
crawlq's scheduler it writes nothing (the frontier holds the seen set). No
``Crawler`` here: Scrapy's would install its reactor in the pytest process.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("scrapy")

import scrapy
from scrapy.settings import Settings
from scrapy.utils.request import RequestFingerprinter

from crawlq import CorruptStore
from crawlq.contrib.scrapy import DupeFilter

SEEN_FILE = "crawlq-requests.seen"


def _dupefilter(jobdir: Path | None) -> DupeFilter:
    """A `DupeFilter` built as Scrapy's scheduler builds it, from a crawler's settings."""
    settings = Settings({"JOBDIR": str(jobdir) if jobdir is not None else None})
    crawler: Any = SimpleNamespace(settings=settings, request_fingerprinter=RequestFingerprinter())
    return DupeFilter.from_crawler(crawler)


def _request(n: int) -> scrapy.Request:
    return scrapy.Request(f"http://scrapytest.org/{n}")


def test_remembers_across_close_and_reopen_in_the_same_jobdir(tmp_path: Path) -> None:
    jobdir = tmp_path / "job"
    df = _dupefilter(jobdir)
    df.open()
    assert not df.request_seen(_request(1))
    assert df.request_seen(_request(1))
    df.close("finished")

    again = _dupefilter(jobdir)
    assert again is not df
    again.open()
    assert again.request_seen(_request(1))  # remembered from the first run
    assert not again.request_seen(_request(2))
    assert again.request_seen(_request(2))
    again.close("shutdown")

    third = _dupefilter(jobdir)
    third.open()
    assert third.request_seen(_request(1)) and third.request_seen(_request(2))
    assert not third.request_seen(_request(3))
    third.close("finished")
    # crawlq's own file, not Scrapy's (whose format changes between releases).
    assert (jobdir / SEEN_FILE).exists()
    assert not (jobdir / "requests.seen").exists()

    fresh = _dupefilter(tmp_path / "other-job")
    fresh.open()
    assert not fresh.request_seen(_request(1))  # another JOBDIR: forgotten
    fresh.close("finished")


def test_without_jobdir_it_remembers_in_memory_only(tmp_path: Path) -> None:
    df = _dupefilter(None)
    df.open()
    assert not df.request_seen(_request(1))
    assert df.request_seen(_request(1))
    df.close("finished")
    again = _dupefilter(None)
    again.open()
    assert not again.request_seen(_request(1))
    again.close("finished")


def test_a_record_cut_short_is_dropped_and_the_file_stays_readable(tmp_path: Path) -> None:
    df = _dupefilter(tmp_path)
    df.open()
    assert not df.request_seen(_request(1))
    assert not df.request_seen(_request(2))
    df.close("shutdown")
    seen = tmp_path / SEEN_FILE
    seen.write_bytes(seen.read_bytes()[:-1])  # killed mid-write of the second record

    again = _dupefilter(tmp_path)
    again.open()
    assert again.request_seen(_request(1))
    assert not again.request_seen(_request(2))  # remembered again, after the cut
    assert not again.request_seen(_request(3))
    again.close("shutdown")

    third = _dupefilter(tmp_path)
    third.open()
    assert all(third.request_seen(_request(n)) for n in (1, 2, 3))
    assert not third.request_seen(_request(4))
    third.close("finished")


def test_attached_to_crawlq_scheduler_it_writes_no_file(tmp_path: Path) -> None:
    # crawlq's Scheduler attaches its frontier's seen set before it opens the
    # filter: the job's store holds what is seen, as before.
    asked: list[bytes] = []
    df = _dupefilter(tmp_path)
    df.attach(lambda fingerprint: asked.append(fingerprint) or False, lambda stat: None)
    df.open()
    assert not df.request_seen(_request(1))
    assert df.request_seen(_request(1))
    df.detach()
    df.close("finished")
    assert asked, "the frontier's seen set was not consulted"
    assert not (tmp_path / SEEN_FILE).exists()
    assert not (tmp_path / "requests.seen").exists()

    alone = _dupefilter(tmp_path)
    alone.open()
    assert not alone.request_seen(_request(1))
    alone.close("finished")


def test_a_file_that_is_not_its_own_is_refused(tmp_path: Path) -> None:
    (tmp_path / SEEN_FILE).write_bytes(b"0123456789abcdef\n")
    df = _dupefilter(tmp_path)
    with pytest.raises(CorruptStore, match=SEEN_FILE):
        df.open()
    assert (tmp_path / SEEN_FILE).read_bytes() == b"0123456789abcdef\n"  # left as it was
