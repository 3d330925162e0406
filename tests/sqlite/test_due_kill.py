"""Scheduled requests of a SQLite job survive kill -9: none lost, none handed out early.

A child process adds scheduled requests, makes a few due and acks some of
them, releases others with a delay (some with an update) and refetches the
rest, prints what it did, and is SIGKILLed. It dies either with all of that
only in the log ("logged") or after flushes moved it to the tables
("flushed"). The parent reads the killed job (``check``, ``export``), then
reopens it: every request is there, the scheduled ones are not handed out
before their time, then all come out, updated as they were released.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import crawlq
from crawlq.stores.sqlite import admin

from ._helpers import close_pipes, job_url, read_line, sigkill

#: Seconds until the scheduled requests are due, from the child's start.
LATE = 3.0

_CHILD = """
import json, sys, time
import crawlq
from crawlq import Request

job, mode, late_in = sys.argv[1], sys.argv[2], float(sys.argv[3])
frontier = crawlq.open_frontier(job, ack_delay=0)
start = time.time()
late = start + late_in


def flush():
    # A write 0.3 s after the last flush applies the log to the tables.
    if mode == "flushed":
        time.sleep(0.3)
        frontier.add(Request(f"https://x.example/{time.time()}", priority=-10))


added = [f"https://s{i % 5}.example/{i}" for i in range(50)]
frontier.add_many([Request(url, not_before=late) for url in added])
early = [f"https://e{i}.example/early" for i in range(5)]
frontier.add_many([Request(url, not_before=start + 0.6) for url in early])
frontier.add_many([Request(f"https://r{i % 3}.example/{i}", priority=i % 3) for i in range(30)])
popped = [frontier.pop() for _ in range(30)]
assert all(r is not None and r.url.startswith("https://r") for r in popped), popped
assert frontier.pop() is None  # the scheduled ones are not due
flush()
time.sleep(max(0.0, start + 0.65 - time.time()))
due = [frontier.pop() for _ in range(5)]
assert sorted(r.url for r in due) == sorted(early), due
frontier.ack_many(due[:3])  # durable (ack_delay=0), after the DUE records
frontier.release_many(popped[:10], delay=late_in)
for request in popped[10:15]:
    frontier.release(request, update=request.replace(meta={"try": 1}), delay=late_in)
frontier.ack_many(popped[15:], refetch_after=late_in)
flush()
stats = frontier.stats()
print("done", json.dumps({
    "late": late,
    "added": added,
    "acked": [r.url for r in due[:3]],
    "leased": [r.url for r in due[3:]],
    "delayed": [r.url for r in popped[:10]],
    "updated": [r.url for r in popped[10:15]],
    "refetched": [r.url for r in popped[15:]],
    "scheduled": stats.scheduled,
    "revisits": stats.revisits,
}), flush=True)
time.sleep(600)
"""


def _run_child(job: str, mode: str) -> dict[str, object]:
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_CHILD), job, mode, str(LATE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = read_line(child)
    finally:
        sigkill(child)
        close_pipes(child)
    word, _, data = line.partition(" ")
    assert word == "done", line
    result: dict[str, object] = json.loads(data)
    return result


@pytest.mark.parametrize("mode", ["logged", "flushed"])
def test_scheduled_requests_survive_kill_9(tmp_path: Path, mode: str) -> None:
    job = job_url(tmp_path / "job.db")
    done = _run_child(job, mode)
    late = float(done["late"])  # type: ignore[arg-type]
    urls = {key: list(value) for key, value in done.items() if isinstance(value, list)}
    scheduled = urls["added"] + urls["delayed"] + urls["updated"] + urls["refetched"]
    assert (done["scheduled"], done["revisits"]) == (80, 15)
    assert time.time() < late - 1.0, "the child took too long: nothing left to check early"

    # Read while killed: the log folded over the tables, nothing written.
    assert admin.check(job).problems == []
    exported = {request.url: request for request in admin.export(job)}
    due_at = {url: exported[url].not_before for url in scheduled}
    assert all(due is not None and due >= late - 0.01 for due in due_at.values()), due_at
    assert exported.keys() >= set(scheduled) | set(urls["leased"])
    assert not exported.keys() & set(urls["acked"])
    assert admin.inspect(job).counts["scheduled"] == 80
    assert admin.inspect(job).counts["revisits"] == 15

    with crawlq.open_frontier(job, ack_delay=0) as frontier:
        stats = frontier.stats()
        assert (stats.leased, stats.scheduled, stats.revisits) == (0, 80, 15)
        assert stats.counters.refetched == 15
        assert stats.next_due_in is not None and stats.next_due_in > 0.5
        # Now: only what was queued or leased at the kill, none scheduled.
        now = []
        while (request := frontier.pop()) is not None:
            now.append(request.url)
            frontier.ack(request)
        assert time.time() < late, "reopening took too long to check that none comes early"
        assert set(urls["leased"]) <= set(now)
        assert not set(now) & (set(scheduled) | set(urls["acked"]))
        assert all(url.startswith("https://x.example/") for url in set(now) - set(urls["leased"]))

        out: dict[str, crawlq.Request] = {}
        deadline = time.monotonic() + 15
        while len(out) < len(scheduled) and time.monotonic() < deadline:
            request = frontier.pop()
            if request is None:
                wait = frontier.next_ready_in()
                assert wait is not None
                time.sleep(min(max(wait, 0.01), 0.5))
                continue
            handed = time.time()
            due = due_at[request.url]
            assert due is not None and handed >= due - 0.01, (request.url, handed, due)
            assert request.url not in out, f"{request.url} came out twice"
            out[request.url] = request
            frontier.ack(request)
        assert sorted(out) == sorted(scheduled)
        assert all(out[url].meta == {"try": 1} for url in urls["updated"])
        assert all(out[url].meta == {} for url in urls["delayed"] + urls["refetched"])
        stats = frontier.stats()
        assert (len(frontier), stats.scheduled, stats.revisits) == (0, 0, 0)
        c = stats.counters
        assert c.popped == c.acked + c.released + c.expired
