"""Release with an update (``Frontier.release(request, update=)``) on every store.

The request goes back with its fields replaced by the update's, in its
original place among the requests of its (new) priority; url, method, body
and download slot must stay; it counts as a release. Run against each store
in ``STORES`` like the rest of the conformance suite.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import crawlq
from crawlq import Counters, Request, Scheduler

from ..conftest import OpenFrontier
from ..sqlite._helpers import close_pipes, read_line, sigkill


def drain(frontier: crawlq.Frontier) -> list[Request]:
    out = []
    while (request := frontier.pop()) is not None:
        out.append(request)
        frontier.ack(request)
    return out


def paths(requests: list[Request]) -> list[str]:
    return [r.url.removeprefix("https://").replace(".example", "") for r in requests]


def pop(frontier: crawlq.Frontier) -> Request:
    request = frontier.pop()
    assert request is not None
    return request


def test_updated_fields_come_back_on_the_next_pop(open_store: OpenFrontier) -> None:
    frontier = open_store(ack_delay=0)
    frontier.add(Request("https://a.example/1", meta={"retries": 0, "keep": [1, 2]}, depth=1))
    request = pop(frontier)
    update = request.replace(
        meta={"retries": 1, "keep": [1, 2], "session": "s-2"},
        headers={"User-Agent": "rotated"},
        depth=4,
        priority=3,
        callback="parse_retry",
        errback="on_error",
        dont_filter=True,
    )
    frontier.release(request, update=update)
    again = pop(frontier)
    assert again == update  # every field (url, method, body kept)
    assert again.meta == {"retries": 1, "keep": [1, 2], "session": "s-2"}
    # The request handed out carries the new lease only: the update's object
    # (or the old request) cannot finish it.
    frontier.ack(request)  # its lease ended at the release: nothing
    assert frontier.stats().leased == 1
    frontier.ack(again)
    assert frontier.pop() is None and len(frontier) == 0


def test_the_request_itself_changed_in_place_is_an_update(open_store: OpenFrontier) -> None:
    frontier = open_store(ack_delay=0)
    frontier.add(Request("https://a.example/1"))
    request = pop(frontier)
    request.meta["retries"] = 1
    request.headers["X-Try"] = "2"
    frontier.release(request, update=request)
    again = pop(frontier)
    assert again.meta == {"retries": 1} and again.headers == {"X-Try": "2"}


# Golden order: one FIFO crawl, hosts h and b. The updated requests keep their
# sequence numbers (acceptance order) and are filed under their new priority.
#   accepted: h/1 0, h/2 0, b/1 3, h/3 0, h/4 5, h/5 5 (seq 1..6)
#   popped and held: h/4, h/5, b/1, h/1
#   released: h/1 -> priority 5, h/4 -> priority 0 (and meta), h/5 and b/1 plain
#   priority 5: h/1 (seq 1), h/5 (seq 6); priority 3: b/1;
#   priority 0: h/2 (seq 2), h/3 (seq 4), h/4 (seq 5)
_GOLDEN_AFTER_UPDATES = ["h/1", "h/5", "b/1", "h/2", "h/3", "h/4"]


def _golden_setup(frontier: crawlq.Frontier) -> dict[str, Request]:
    frontier.add_many(
        Request(f"https://{path.replace('/', '.example/')}", priority=priority)
        for path, priority in [
            ("h/1", 0),
            ("h/2", 0),
            ("b/1", 3),
            ("h/3", 0),
            ("h/4", 5),
            ("h/5", 5),
        ]
    )
    held = {paths([request])[0]: request for request in (pop(frontier) for _ in range(4))}
    assert list(held) == ["h/4", "h/5", "b/1", "h/1"]
    return held


def test_an_updated_request_keeps_its_place_among_its_priority(open_store: OpenFrontier) -> None:
    frontier = open_store(ack_delay=0)
    held = _golden_setup(frontier)
    frontier.release(held["b/1"])
    frontier.release(held["h/1"], update=held["h/1"].replace(priority=5))
    frontier.release(held["h/4"], update=held["h/4"].replace(priority=0, meta={"moved": True}))
    frontier.release(held["h/5"])
    out = drain(frontier)
    assert paths(out) == _GOLDEN_AFTER_UPDATES
    assert [r.priority for r in out] == [5, 5, 3, 0, 0, 0]
    assert out[-1].meta == {"moved": True}


def test_with_lifo_an_updated_request_keeps_its_place_too(open_store: OpenFrontier) -> None:
    # accepted h/1 0, h/2 0, h/3 5; newest first within a priority: h/3, h/2, h/1.
    # h/3 -> priority 0 (newer than h/1), h/2 -> priority 5.
    frontier = open_store(ack_delay=0, lifo=True)
    frontier.add_many(
        Request(f"https://h.example/{i}", priority=priority)
        for i, priority in [(1, 0), (2, 0), (3, 5)]
    )
    h3, h2 = pop(frontier), pop(frontier)
    assert paths([h3, h2]) == ["h/3", "h/2"]
    frontier.release(h3, update=h3.replace(priority=0))
    frontier.release(h2, update=h2.replace(priority=5))
    assert paths(drain(frontier)) == ["h/2", "h/3", "h/1"]


def test_release_many_takes_one_update_per_request(open_store: OpenFrontier) -> None:
    frontier = open_store(ack_delay=0)
    held = _golden_setup(frontier)
    requests = [held["b/1"], held["h/1"], held["h/4"], held["h/5"]]
    updates = [
        None,
        held["h/1"].replace(priority=5),
        held["h/4"].replace(priority=0, meta={"moved": True}),
        None,
    ]
    frontier.release_many(requests, updates=updates)
    assert frontier.stats().counters.released == 4
    assert paths(drain(frontier)) == _GOLDEN_AFTER_UPDATES


def test_a_changed_url_method_body_or_slot_raises_and_releases_nothing(
    open_store: OpenFrontier,
) -> None:
    frontier = open_store(ack_delay=0)
    frontier.add(Request("https://a.example/1", method="POST", body=b"q=1"))
    request = pop(frontier)
    bad = {
        "url": request.replace(url="https://a.example/2"),
        "method": request.replace(method="PUT"),
        "body": request.replace(body=b"q=2"),
        r"meta\['download_slot'\]": request.replace(meta={"download_slot": "elsewhere"}),
    }
    for field, update in bad.items():
        with pytest.raises(crawlq.InvalidRequest, match=f"changes the {field} "):
            frontier.release(request, update=update)
        with pytest.raises(crawlq.InvalidRequest, match=f"changes the {field} "):
            frontier.release_many([request], updates=[update])
    with pytest.raises(crawlq.InvalidRequest, match=r"crawlq\.Request"):
        frontier.release(request, update="https://a.example/1")  # type: ignore[arg-type]
    with pytest.raises(crawlq.SerializationError, match="when"):
        frontier.release(request, update=request.replace(meta={"when": {1, 2}}))
    with pytest.raises(crawlq.InvalidRequest, match="updates"):
        frontier.release_many([request], updates=[])
    with pytest.raises(crawlq.LeaseError):
        frontier.release(Request("https://a.example/1"), update=request.replace(depth=1))
    stats = frontier.stats()
    assert (stats.queued, stats.leased) == (0, 1)
    assert stats.counters == Counters(accepted=1, popped=1)
    assert frontier.pop() is None  # still leased: nothing was released
    frontier.ack(request)
    assert len(frontier) == 0


def test_one_bad_update_in_release_many_releases_none(open_store: OpenFrontier) -> None:
    frontier = open_store(ack_delay=0)
    frontier.add_many([Request("https://a.example/1"), Request("https://a.example/2")])
    first, second = pop(frontier), pop(frontier)
    with pytest.raises(crawlq.InvalidRequest, match="url"):
        frontier.release_many(
            [first, second], updates=[first.replace(depth=2), second.replace(url=first.url)]
        )
    assert frontier.stats().leased == 2 and frontier.stats().counters.released == 0


def test_counts_as_a_release_and_changes_no_count(open_store: OpenFrontier) -> None:
    frontier = open_store(ack_delay=0)
    frontier.add_many([Request(f"https://h{i}.example/") for i in range(3)])
    request = pop(frontier)
    before = frontier.stats()
    assert (len(frontier), before.queued, before.leased) == (3, 2, 1)
    frontier.release(request, update=request.replace(meta={"retries": 1}, priority=2))
    after = frontier.stats()
    assert (len(frontier), after.queued, after.leased, after.seen) == (3, 3, 0, before.seen)
    assert after.counters == Counters(accepted=3, popped=1, released=1)
    # The seen set is untouched: the URL is still a duplicate, nothing new is accepted.
    assert frontier.add(Request(request.url)) is False
    assert pop(frontier).meta == {"retries": 1}


def test_an_update_of_an_ended_lease_does_nothing(open_store: OpenFrontier) -> None:
    frontier = open_store(ack_delay=0)
    frontier.add(Request("https://a.example/1"))
    request = pop(frontier)
    frontier.ack(request)
    frontier.release(request, update=request.replace(meta={"late": True}))  # at-least-once
    assert frontier.pop() is None and len(frontier) == 0
    assert frontier.stats().counters.released == 0


def test_an_update_survives_close_and_reopen(open_store: OpenFrontier, store_url: str) -> None:
    if store_url.startswith("memory"):
        pytest.skip("the memory store keeps nothing across opens")
    frontier = open_store(ack_delay=0)
    held = _golden_setup(frontier)
    frontier.release(held["b/1"])
    frontier.release(held["h/1"], update=held["h/1"].replace(priority=5))
    frontier.release(held["h/4"], update=held["h/4"].replace(priority=0, meta={"moved": True}))
    frontier.release(held["h/5"])
    frontier.close()
    reopened = open_store(ack_delay=0)
    out = drain(reopened)
    assert paths(out) == _GOLDEN_AFTER_UPDATES
    assert out[-1].meta == {"moved": True}
    assert reopened.stats().counters.released == 4


def test_sqlite_updates_of_flushed_and_logged_rows(
    open_store: OpenFrontier, store_url: str
) -> None:
    """Rows in the tables and rows still in the log are updated, and stay so.

    A write flushes the log to the tables when the oldest logged row is a
    quarter second old: h/1 and h/2 reach the tables, h/3 and h/4 stay logged
    (until the second flush, for h/3).
    """
    if not store_url.startswith("sqlite"):
        pytest.skip("the SQLite job's log and tables")
    frontier = open_store(ack_delay=0)
    frontier.add_many([Request("https://h.example/1"), Request("https://h.example/2")])
    time.sleep(0.3)
    frontier.add(Request("https://g.example/x", priority=-9))  # flushes all three
    frontier.add(Request("https://h.example/3"))  # logged
    h1 = pop(frontier)
    frontier.release(h1, update=h1.replace(meta={"n": 1}))  # a row of the tables
    again = pop(frontier)  # from memory: the index holds the old row till the flush
    assert (again.url, again.meta) == (h1.url, {"n": 1})
    frontier.release(again)  # a plain release keeps the logged update
    again = pop(frontier)
    assert (again.url, again.meta) == (h1.url, {"n": 1})
    time.sleep(0.3)
    frontier.add(Request("https://z.example/1", priority=-20))  # flushes; h/1 stays leased
    frontier.add(Request("https://h.example/4"))  # logged
    assert paths([pop(frontier) for _ in range(3)]) == ["h/2", "h/3", "h/4"]
    assert frontier.pop() is not None and frontier.pop() is not None  # g/x, z/1
    assert frontier.pop() is None  # h/1 is leased: not handed out twice
    frontier.release_many(
        [again], updates=[again.replace(meta={"n": 2}, priority=-1)]
    )  # a row of the tables again
    stats = frontier.stats()
    assert (stats.queued, stats.leased) == (1, 5)
    frontier.close()
    out = drain(open_store(ack_delay=0))
    assert [(p, r.meta) for p, r in zip(paths(out), out, strict=True)] == [
        ("h/2", {}),
        ("h/3", {}),
        ("h/4", {}),
        ("h/1", {"n": 2}),
        ("g/x", {}),
        ("z/1", {}),
    ]


def test_sqlite_an_update_of_a_logged_row(open_store: OpenFrontier, store_url: str) -> None:
    if not store_url.startswith("sqlite"):
        pytest.skip("the SQLite job's log and tables")
    frontier = open_store(ack_delay=0)
    frontier.add_many([Request("https://h.example/1"), Request("https://h.example/2")])
    h1 = pop(frontier)
    frontier.release(h1, update=h1.replace(meta={"n": 1}, priority=-1))
    h2 = pop(frontier)
    assert h2.url == "https://h.example/2"
    frontier.release(h2, update=h2.replace(meta={"n": 2}))
    again = pop(frontier)
    assert (again.url, again.meta) == (h2.url, {"n": 2})
    frontier.release(again)
    assert [(r.url, r.meta) for r in drain(frontier)] == [(h2.url, {"n": 2}), (h1.url, {"n": 1})]


_CHILD = """
import sys, time
import crawlq
from crawlq import Request

frontier = crawlq.open_frontier(sys.argv[1], ack_delay=0)
frontier.add_many(
    [Request("https://a.example/1", priority=2), Request("https://b.example/1", priority=1)]
)
time.sleep(0.3)
frontier.add(Request("https://x.example/0", priority=-5))  # flushes a/1, b/1, x/0 to the tables
frontier.add(Request("https://c.example/1"))  # logged
a, b, c = frontier.pop(), frontier.pop(), frontier.pop()
assert [r.url for r in (a, b, c)] == ["https://a.example/1", "https://b.example/1", "https://c.example/1"]
frontier.release(a, update=a.replace(priority=-1, meta={"n": 1}))
frontier.release(b)
frontier.release(c, update=c.replace(priority=5, meta={"n": 2}, headers={"X-Try": "2"}))
print("released", flush=True)
time.sleep(600)
"""


def test_sqlite_an_update_survives_kill_9(tmp_path: Path) -> None:
    job = f"sqlite:///{tmp_path / 'job.db'}"
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_CHILD), job],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert read_line(child) == "released"
    finally:
        sigkill(child)
        close_pipes(child)
    with crawlq.open_frontier(job, ack_delay=0) as frontier:
        out = drain(frontier)
        assert [(paths([r])[0], r.priority, r.meta) for r in out] == [
            ("c/1", 5, {"n": 2}),
            ("b/1", 1, {}),
            ("a/1", -1, {"n": 1}),
            ("x/0", -5, {}),
        ]
        assert out[0].headers == {"X-Try": "2"}


async def test_scheduler_release_with_an_update(open_store: OpenFrontier) -> None:
    async with Scheduler(open_store(ack_delay=0)) as scheduler:
        await scheduler.add_many(
            [Request("https://a.example/1"), Request("https://a.example/2", priority=1)]
        )
        first = await asyncio.wait_for(scheduler.get(), 5)
        assert first.url == "https://a.example/2"
        with pytest.raises(crawlq.InvalidRequest, match="url"):
            scheduler.release(first, update=first.replace(url="https://a.example/3"))
        scheduler.release(first, update=first.replace(priority=-1, meta={"retries": 1}))
        second = await asyncio.wait_for(scheduler.get(), 5)
        assert second.url == "https://a.example/1"
        scheduler.task_done(second)
        third = await asyncio.wait_for(scheduler.get(), 5)
        assert (third.url, third.priority, third.meta) == (
            "https://a.example/2",
            -1,
            {"retries": 1},
        )
        scheduler.task_done(third)
        await asyncio.wait_for(scheduler.join(), 5)
        assert scheduler.frontier.stats().counters.released == 1
