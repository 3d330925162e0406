"""``crawlq export`` of a Redis crawl (one server and a cluster), and ``crawlq import`` of it.

Run as a user runs them: ``crawlq export URL > file.jsonl`` in a shell, then
``crawlq import OTHER_URL file.jsonl``, while the source crawl's worker
still holds leases. Every request not done comes across (queued, leased,
scheduled), scheduled ones keep their due times, and each host's requests
come out oldest first.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

import crawlq
from crawlq import Request, Revisit
from crawlq._exchange import decode_line
from crawlq.stores.redis import admin
from crawlq.stores.redis import export as redis_export
from crawlq.stores.redis import store as redis_store

_CRAWLQ = Path(sys.executable).parent / "crawlq"


def _shell(command: str) -> None:
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def _lines(path: Path) -> list[Request]:
    return [decode_line(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _key(request: Request) -> tuple[Any, ...]:
    return (request.url, request.priority, repr(request.meta), request.revisit_interval)


def _fill(url: str) -> tuple[crawlq.Frontier, dict[str, float]]:
    """A crawl holding every kind of request not done; returns its open worker and due times."""
    frontier = crawlq.open_frontier(
        url, ack_delay=0, prefetch=4, revisit=Revisit(initial=120, min=1, max=3600)
    )
    frontier.add_many(
        [Request(f"https://a.example/{i}", priority=i % 2, meta={"n": i}) for i in range(8)]
    )
    frontier.add_many([f"https://b.example/{i}" for i in range(5)])
    start = time.time()
    frontier.add(Request("https://c.example/later", not_before=start + 600))
    frontier.add(Request("https://c.example/soon", not_before=start + 0.2))
    released, refetched, held = frontier.pop(), frontier.pop(), frontier.pop()
    assert released is not None and refetched is not None and held is not None
    frontier.release(released, delay=300)
    frontier.ack(refetched, changed=False)  # a revisit in 120 s, revisit_interval kept
    time.sleep(0.3)  # c/soon is due: queued, though no pop moved it
    due = {
        "https://c.example/later": start + 600,
        released.url: time.time() + 300,
        refetched.url: time.time() + 120,
    }
    return frontier, due


def _check(source: str, copy: str, tmp_path: Path) -> None:
    frontier, due = _fill(source)
    counts = frontier.stats()
    assert counts.scheduled == 3 and counts.leased >= 1
    dump, again = tmp_path / "f.jsonl", tmp_path / "again.jsonl"
    # While the worker still holds its leases (its prefetched ones too).
    _shell(f"{shlex.quote(str(_CRAWLQ))} export {shlex.quote(source)} > {dump}")
    frontier.close()
    exported = _lines(dump)
    assert len(exported) == 15  # 13 added + 2 with a not_before; none done
    by_url = {request.url: request for request in exported}
    for url, when in due.items():
        assert by_url[url].not_before == pytest.approx(when, abs=2.0)
    assert [r.url for r in exported[-3:]] == sorted(due, key=due.__getitem__)  # soonest first
    revisit = next(r for r in exported if r.revisit_interval is not None)
    assert revisit.revisit_interval == 120
    # Each host's requests (not scheduled) oldest first.
    for host in ("a", "b"):
        mine = [r for r in exported[:-3] if r.url.startswith(f"https://{host}.")]
        assert mine == sorted(mine, key=lambda r: int(r.url.rpartition("/")[2]))

    _shell(f"{shlex.quote(str(_CRAWLQ))} import {shlex.quote(copy)} {dump}")
    with crawlq.open_frontier(copy) as imported:
        stats = imported.stats()
        assert (stats.queued, stats.leased, stats.scheduled) == (12, 0, 3)
        assert stats.next_due_in is not None and 110 < stats.next_due_in <= 120
    _shell(f"{shlex.quote(str(_CRAWLQ))} export {shlex.quote(copy)} > {again}")
    copied = _lines(again)
    assert sorted(map(_key, copied)) == sorted(map(_key, exported))
    for request in copied:
        assert request.not_before == pytest.approx(by_url[request.url].not_before, abs=0.01)
    # The same order: each host's requests, then the scheduled ones.
    hosts = ("https://a.", "https://b.", "https://c.")
    for host in hosts:
        assert [r.url for r in copied[:-3] if r.url.startswith(host)] == [
            r.url for r in exported[:-3] if r.url.startswith(host)
        ]
    assert [r.url for r in copied[-3:]] == [r.url for r in exported[-3:]]


def test_export_and_import_a_crawl(url: str, tmp_path: Path) -> None:
    copy = url + "-copy"
    try:
        _check(url, copy, tmp_path)
    finally:
        redis_store.purge(copy)


def test_export_and_import_a_cluster_crawl(redis_cluster_url: str, tmp_path: Path) -> None:
    from crawlq.stores.redis.cluster import inspection as cluster_inspection

    name = f"export-{time.monotonic_ns()}"
    source, copy = f"{redis_cluster_url}?crawl={name}", f"{redis_cluster_url}?crawl={name}-copy"
    try:
        _check(source, copy, tmp_path)
    finally:
        cluster_inspection.purge(source)
        cluster_inspection.purge(copy)


@pytest.mark.parametrize("lifo", [False, True], ids=["fifo", "lifo"])
def test_a_deep_host_comes_out_oldest_first(
    url: str, lifo: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lists read in pages (from their end in LIFO lanes), merged with r:HOST and the leases."""
    monkeypatch.setattr(redis_export, "PAGE", 37)
    frontier = crawlq.open_frontier(url, lifo=lifo, ack_delay=0, prefetch=1)
    frontier.add_many([f"https://d.example/{i}" for i in range(300)])
    due = time.time() + 0.3
    frontier.add_many([Request(f"https://d.example/{300 + k}", not_before=due) for k in range(5)])
    frontier.add_many([f"https://d.example/{i}" for i in range(305, 600)])
    frontier.add_many([Request(f"https://e.example/{k}", not_before=due + 60) for k in range(80)])
    time.sleep(0.35)
    leased = frontier.pop()  # moves the 5 due ones deep into the lane (r:HOST)
    assert leased is not None
    client = redis.Redis.from_url(url.partition("?")[0])
    assert client.zcard(f"crawlq:{{{url.rpartition('=')[2]}}}:r:d.example") == 5
    client.close()
    out = list(admin.export(url))
    assert [r.url for r in out[:600]] == [f"https://d.example/{i}" for i in range(600)]
    # 80 of one due time: paged by score without losing or repeating any.
    # (Equal due times in id order: oldest first in a FIFO crawl, newest in a LIFO one.)
    ties = [f"https://e.example/{k}" for k in range(80)]
    assert [r.url for r in out[600:]] == (ties[::-1] if lifo else ties)
    assert all(r.not_before == pytest.approx(due + 60, abs=0.01) for r in out[600:])
    frontier.close()


def test_export_of_no_crawl_says_so(redis_url: str) -> None:
    with pytest.raises(crawlq.StoreError, match="there is no crawl"):
        list(admin.export(f"{redis_url}?crawl=never-made"))
