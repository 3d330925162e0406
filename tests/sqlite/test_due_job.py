"""Due times in a SQLite job: what the conformance suite cannot see from outside.

Requests scheduled again while their row is still in the index (until the
flush moves it), batches taken from the ``scheduled`` table across flushes,
a job of schema 2 upgraded at open, and the admin functions (``export``,
``inspect``, ``check``, ``snapshot``) on scheduled requests.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from pathlib import Path

import msgspec

import crawlq
from crawlq._request import encode_request
from crawlq.stores.sqlite import admin
from crawlq.stores.sqlite.due import DUE_BATCH

from ._helpers import job_url

WAIT = 0.15


def _filled(path: Path, urls: list[str]) -> str:
    """A job holding ``urls`` in its tables (closed: flushed), priority 0."""
    url = job_url(path)
    with crawlq.open_frontier(url) as frontier:
        assert all(frontier.add_many(urls))
    return url


def _pop(frontier: crawlq.Frontier) -> crawlq.Request:
    request = frontier.pop()
    assert request is not None
    return request


def _pop_due(frontier: crawlq.Frontier) -> crawlq.Request:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        request = frontier.pop()
        if request is not None:
            return request
        time.sleep(0.01)
    raise AssertionError("nothing came due")


def _drain(frontier: crawlq.Frontier) -> list[str]:
    out = []
    while (request := frontier.pop()) is not None:
        out.append(request.url.rsplit("/", 1)[1])
        frontier.ack(request)
    return out


def test_a_delayed_row_made_due_before_the_flush_is_handed_out_once(tmp_path: Path) -> None:
    """Its index entry stays hidden until the flush, even once it is acked again.

    a/2 is delayed (its row stays in the index until the flush), comes due,
    is popped and acked under the key of that entry; releasing a/1 then
    makes the host read its index again from before both.
    """
    url = _filled(tmp_path / "job.db", [f"https://a.example/{i}" for i in (1, 2, 3)])
    with crawlq.open_frontier(url, ack_delay=0) as frontier:
        first, second = _pop(frontier), _pop(frontier)
        assert (first.url, second.url) == ("https://a.example/1", "https://a.example/2")
        frontier.release(second, delay=WAIT)
        time.sleep(WAIT + 0.05)
        again = _pop(frontier)  # due: it goes before a/3 (its seq is lower)
        assert again.url == "https://a.example/2"
        frontier.ack(again)
        frontier.release(first)
        assert _drain(frontier) == ["1", "3"]
        assert len(frontier) == 0
    with crawlq.open_frontier(url) as frontier:
        assert len(frontier) == 0


def test_a_delayed_row_leased_again_across_a_flush_stays_hidden(tmp_path: Path) -> None:
    """The flush moves it back into the index while it is leased: still hidden there."""
    url = _filled(tmp_path / "job.db", [f"https://a.example/{i}" for i in (1, 2, 3)])
    with crawlq.open_frontier(url, ack_delay=0) as frontier:
        first, second = _pop(frontier), _pop(frontier)
        frontier.release(second, delay=WAIT)
        time.sleep(WAIT + 0.05)
        again = _pop(frontier)
        assert again.url == "https://a.example/2"
        frontier._store._flush(time.time())  # type: ignore[attr-defined]
        frontier.release(first)  # the host reads its index from a/1 on
        out = []
        while (request := frontier.pop()) is not None:
            out.append(request.url.rsplit("/", 1)[1])
            frontier.ack(request)
        assert out == ["1", "3"]
        frontier.ack(again)
        assert len(frontier) == 0


def test_a_delayed_row_made_due_and_released_comes_out_once_more(tmp_path: Path) -> None:
    url = _filled(tmp_path / "job.db", [f"https://a.example/{i}" for i in (1, 2, 3)])
    with crawlq.open_frontier(url, ack_delay=0) as frontier:
        first, second = _pop(frontier), _pop(frontier)
        frontier.release(second, delay=WAIT, update=second.replace(meta={"n": 1}))
        time.sleep(WAIT + 0.05)
        again = _pop(frontier)
        assert (again.url, again.meta) == ("https://a.example/2", {"n": 1})
        frontier.release(again, update=again.replace(priority=-1, meta={"n": 2}))
        frontier.release(first)
        assert _drain(frontier) == ["1", "3", "2"]
        stats = frontier.stats()
        assert (stats.counters.released, stats.counters.acked) == (3, 3)
    with crawlq.open_frontier(url) as frontier:
        assert len(frontier) == 0


def test_a_row_delayed_twice_in_one_flush_window(tmp_path: Path) -> None:
    url = _filled(tmp_path / "job.db", ["https://a.example/1", "https://a.example/2"])
    with crawlq.open_frontier(url, ack_delay=0) as frontier:
        request = _pop(frontier)
        for n in range(3):
            frontier.release(request, delay=WAIT, update=request.replace(meta={"n": n}))
            request = _pop_due(frontier) if n else _pop(frontier)
            if n == 0:  # a/2 went first: a/1 was not due
                assert request.url == "https://a.example/2"
                frontier.ack(request)
                request = _pop_due(frontier)
            assert (request.url, request.meta) == ("https://a.example/1", {"n": n})
        frontier.release(request, delay=WAIT)
    with crawlq.open_frontier(url, ack_delay=0) as frontier:
        assert frontier.stats().scheduled == 1
        request = _pop_due(frontier)
        assert (request.url, request.meta) == ("https://a.example/1", {"n": 2})
        frontier.ack(request)
        assert len(frontier) == 0


def test_more_due_rows_than_a_batch_come_out_once_across_flushes(tmp_path: Path) -> None:
    """Rows taken from the table in batches, flushes in between, equal due times."""
    url = job_url(tmp_path / "job.db")
    count = 2 * DUE_BATCH + 500
    due = time.time() + 0.5
    with crawlq.open_frontier(url) as frontier:
        urls = [f"https://h{i % 7}.example/{i}" for i in range(count)]
        # Half at one due time (ties go by id), half spread after it.
        frontier.add_many(
            crawlq.Request(u, not_before=due if i % 2 else due + i / count)
            for i, u in enumerate(urls)
        )
    with crawlq.open_frontier(url, ack_delay=0) as frontier:  # all in the table now
        assert frontier.stats().scheduled == count and frontier.pop() is None
        time.sleep(max(0.0, due + 1.05 - time.time()))
        out: Counter[str] = Counter()
        released: set[str] = set()
        added = 0
        for _ in range(2):  # then again for those released with a delay
            while (request := frontier.pop()) is not None:
                out[request.url] += 1
                if sum(out.values()) % 3 == 0 and request.url not in released:
                    released.add(request.url)  # into the log, out again
                    frontier.release(request, delay=0.01)
                else:
                    frontier.ack(request)
                if sum(out.values()) % 1000 == 0:
                    added += 1
                    frontier.add(crawlq.Request(f"https://new.example/{added}"))
            time.sleep(0.05)
        new = [f"https://new.example/{n}" for n in range(1, added + 1)]
        assert out == Counter({u: 1 + (u in released) for u in [*urls, *new]})
        stats = frontier.stats()
        assert (len(frontier), stats.scheduled) == (0, 0)
        assert stats.counters.accepted == count + added
        c = stats.counters
        assert c.popped == c.acked + c.released + c.expired
    assert admin.check(url).problems == []


def test_a_job_of_schema_2_is_upgraded_when_opened(tmp_path: Path) -> None:
    """Its tables and a log record left by a kill come through; due times work after."""
    path = tmp_path / "job.db"
    url = _filled(path, ["https://a.example/1", "https://b.example/1"])
    db = sqlite3.connect(path)
    (next_id,) = db.execute("SELECT value FROM counters WHERE name = 'next_id'").fetchone()
    payload = encode_request(crawlq.Request("https://c.example/1"))
    record = [1, [[next_id, "c.example", 0, next_id, b"\x01" * 16, payload]], time.time()]
    db.executescript(
        "DROP TABLE scheduled;"
        " DELETE FROM counters WHERE name IN ('scheduled', 'revisits', 'refetched');"
        " PRAGMA user_version = 2;"
    )
    db.execute("INSERT INTO ops (data) VALUES (?)", (msgspec.msgpack.encode(record),))
    db.commit()
    db.close()
    # A reader leaves it as it is.
    report = admin.inspect(url)
    assert report.counts["scheduled"] == 0
    assert report.counts["requests stored (queued + leased)"] == 3
    assert report.settings["schema version"].startswith("2 ")
    assert [r.url for r in admin.export(url)][-1] == "https://c.example/1"
    with crawlq.open_frontier(url, ack_delay=0) as frontier:
        assert len(frontier) == 3
        frontier.add(crawlq.Request("https://d.example/1", not_before=time.time() + WAIT))
        request = _pop(frontier)
        frontier.ack(request, refetch_after=WAIT)
        stats = frontier.stats()
        assert (stats.queued, stats.scheduled, stats.revisits) == (2, 2, 1)
    assert admin.inspect(url).settings["schema version"].startswith("3 ")
    assert admin.check(url).problems == []
    with crawlq.open_frontier(url) as frontier:
        time.sleep(WAIT)
        assert sorted(_drain(frontier)) == ["1", "1", "1", "1"]


def test_admin_reads_scheduled_requests(tmp_path: Path) -> None:
    """export keeps due times (import schedules them again), inspect and snapshot count them."""
    url = job_url(tmp_path / "job.db")
    later = time.time() + 3600
    with crawlq.open_frontier(url, ack_delay=0) as frontier:
        frontier.add(crawlq.Request("https://a.example/added", not_before=later))
        frontier.add_many(["https://b.example/delayed", "https://c.example/page"])
        delayed, page = _pop(frontier), _pop(frontier)
        frontier.release(delayed, delay=1800)
        frontier.ack(page, refetch_after=7200)
        frontier.add(crawlq.Request("https://d.example/queued"))
        for stage in ("logged", "flushed"):
            if stage == "flushed":
                frontier._store._flush(time.time())  # type: ignore[attr-defined]
            exported = {r.url: r.not_before for r in admin.export(url)}
            assert exported["https://a.example/added"] == later
            assert abs(exported["https://b.example/delayed"] - (time.time() + 1800)) < 5  # type: ignore[operator]
            assert abs(exported["https://c.example/page"] - (time.time() + 7200)) < 5  # type: ignore[operator]
            assert exported["https://d.example/queued"] is None
            report = admin.inspect(url)
            assert (report.counts["scheduled"], report.counts["revisits"]) == (3, 1), stage
            assert report.counts["requests stored (queued + leased)"] == 1
            assert any("first is due in 1,7" in n or "1,800" in n for n in report.notes)
            counts, _ = admin.snapshot(url)
            assert (counts.queued, counts.leased) == (1, 0)
            assert (counts.scheduled, counts.revisits) == (3, 1), stage  # remote top, metrics
            assert counts.next_due_in is not None and 1790 < counts.next_due_in <= 1800
            counters = counts.counters
            assert (counters.accepted, counters.acked, counters.refetched) == (4, 1, 1)
            assert admin.check(url).problems == []
            assert admin.check(url).scheduled == 3
    copy = job_url(tmp_path / "copy.db")
    with crawlq.open_frontier(copy) as frontier:
        frontier.add_many(list(admin.export(url)))
        stats = frontier.stats()
        assert (stats.queued, stats.scheduled) == (1, 3)
        assert stats.next_due_in is not None and 1790 < stats.next_due_in <= 1800
