"""A live slot migration mid-crawl on a real Redis Cluster: nothing acked lost, no lease twice.

A cluster of 3 primaries; worker processes (`tests.chaos.worker`) crawl a
known tree of URLs over 60 hosts (`tests.chaos.tree`): pop, a short
fetch, then ``add_many(links, ack=page)`` with the page's links, so adds
and acks run all along, and two of them feed the same seeds over the first
seconds, so half of those adds are duplicates. Meanwhile the test moves the
slot of the busiest shard to another primary by hand, as an operator would
(`tests.redis_cluster.RedisCluster.move_slot`: SETSLOT IMPORTING /
MIGRATING, MIGRATE in small batches with a pause after each, so the crawl's
calls meet the slot half moved, then SETSLOT NODE on every primary). The
shard's calls wait meanwhile (retried: see ``ASK`` in
`crawlq.stores.redis.client`), and so, within a few calls, does every
worker, each pop and most adds reaching every shard: the crawl stalls for
the move, about 1.5 s here, and goes on.

``redis-cli --cluster reshard`` cannot pick one slot: it moves a count of
slots from a node, so the steps it takes per slot are taken here.

What the checker of the chaos runs (`tests.chaos.checker`) judges on the
workers' logs: every URL of the tree was handed out and acked, no lease of a
URL or of a host overlapped another, pacing held, no exception but a crawlq
error reached a worker, and the final ``stats()`` agree with the logs. With
``lease_timeout`` far longer than the test and no worker killed, each URL
must be handed out exactly once, and nothing may reach a worker at all: the
redirections of a slot on the move are crawlq's to retry, within
``retry_timeout``. ``crawlq inspect`` must agree with ``stats()`` and show
the shard on its new node; one made while the slot is half moved, and a
worker opening the crawl then, wait for the move and go on.

Then two smaller moves: of the slot of a crawl's record while a frontier
opens it, and of a shard's slot away and back, its host policies changed
meanwhile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from typer.testing import CliRunner

import crawlq
from crawlq.cli import app
from crawlq.stores.redis.cluster import inspection
from crawlq.stores.redis.cluster.shards import shard_of, shard_tags
from tests.chaos.checker import Process, check
from tests.chaos.tree import Tree
from tests.redis_cluster import RedisCluster, SlotMove, StartCluster

ROOT = Path(__file__).resolve().parents[2]

_CRAWL = "moving"
_SHARDS = 16
#: 3,000 URLs over 60 hosts: 300 seeds, 3 links a page.
_TREE = Tree(size=3000, roots=300, fanout=3, hosts=60, run=_CRAWL)
_OPTIONS: dict[str, Any] = {
    "host_delay": 0.05,
    "host_concurrency": 1,
    # Far longer than the test: a URL handed out twice is a defect, not an expiry.
    "lease_timeout": 300.0,
    "ack_delay": 0,
    "retry_timeout": 20.0,
}
_WORKERS = 4
#: Deliveries logged before the slot starts to move.
_MOVE_AT = 500
#: Keys per MIGRATE, and seconds after each batch.
_BATCH, _PAUSE = 4, 0.25


def _spawn(url: str, log: Path, n: int, feeds: list[Path], over: Path) -> subprocess.Popen[bytes]:
    """One worker process of `tests.chaos.worker`; the first two also feed the seeds."""
    now = time.time()
    args = [
        sys.executable,
        "-m",
        "tests.chaos.worker",
        url,
        str(log),
        "--tree",
        *_TREE.args(),
        "--options",
        json.dumps(_OPTIONS),
        "--seed",
        str(n),
        "--give-up",
        "60",
        "--until",
        str(over),
    ]
    for flag in feeds:
        args += ["--until", str(flag)]
    if n < len(feeds):
        args += ["--feed", f"{now + 0.2:.6f}", f"{now + 3.0:.6f}", str(feeds[n])]
    with open(log.with_suffix(".err"), "wb") as err:
        return subprocess.Popen(
            args,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def _lines(logs: list[Path]) -> list[list[str]]:
    found = []
    for log in logs:
        if log.exists():
            found += [line.split(" ") for line in log.read_text().splitlines() if line]
    return found


def _shard(url: str) -> int:
    return shard_of((urlsplit(url).hostname or "").encode(), _SHARDS)


def test_a_slot_moved_mid_crawl_loses_nothing_and_leases_nothing_twice(
    redis_clusters: StartCluster, tmp_path: Path
) -> None:
    began = time.monotonic()
    cluster = redis_clusters(primaries=3)
    url = cluster.url(_CRAWL, seeds=3)
    # The busiest shard (most URLs of the tree), its slot and the node serving it.
    moving = Counter(_shard(_TREE.url(n)) for n in range(_TREE.size)).most_common(1)[0][0]
    with crawlq.open_frontier(url, shards=_SHARDS, **_OPTIONS) as frontier:
        assert len(frontier) == 0  # the crawl and its record are created
    tag = shard_tags(_CRAWL, _SHARDS)[moving]
    slot = cluster.key_slot(f"crawlq:{{{tag}}}:meta")
    source = cluster.slot_owner(slot)
    target = min(set(cluster.primary_ports()) - {source})

    (tmp_path / "logs").mkdir()
    feeds = [tmp_path / "fed-0", tmp_path / "fed-1"]
    moved = tmp_path / "moved"
    logs = [tmp_path / "logs" / f"w{n}.log" for n in range(_WORKERS + 1)]
    processes = [Process(n, log, 0.0, stderr=log.with_suffix(".err")) for n, log in enumerate(logs)]
    workers: list[subprocess.Popen[bytes]] = []

    def spawn(n: int) -> None:
        processes[n].started = time.time()
        workers.append(_spawn(url, logs[n], n, feeds, moved))

    watched: list[Any] = []

    def watch() -> None:
        try:
            watched.append(inspection.inspect(url, hosts=5))
        except BaseException as exc:  # asserted below
            watched.append(exc)

    watcher = threading.Thread(target=watch)

    def half_moved(move: SlotMove) -> None:
        if move.batches == 1:
            # A worker opens the crawl, and an operator inspects it, while
            # the slot is half moved.
            spawn(_WORKERS)
            watcher.start()

    move: SlotMove | None = None
    try:
        for n in range(_WORKERS):
            spawn(n)
        deadline = time.monotonic() + 30
        while sum(line[0] == "P" for line in _lines(logs)) < _MOVE_AT:
            assert time.monotonic() < deadline, "the crawl never got going"
            assert all(w.poll() is None for w in workers), "a worker exited early"
            time.sleep(0.05)
        move = cluster.move_slot(slot, target, batch=_BATCH, pause=_PAUSE, after_batch=half_moved)
        moved.write_text("moved\n")
        watcher.join(timeout=30)
        for worker, proc in zip(workers, processes, strict=True):
            proc.code = worker.wait(timeout=60)
            proc.died_at = time.time()
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    assert move is not None
    crawled = time.time() - processes[0].started
    with crawlq.open_frontier(url, **_OPTIONS) as frontier:
        stats = frontier.stats()
    found = check(
        processes,
        _TREE,
        backend="redis-cluster",
        lease_timeout=_OPTIONS["lease_timeout"],
        host_delay=_OPTIONS["host_delay"],
        stats=stats,
    )
    lines = _lines(logs)
    delivered = [(float(f[1]), float(f[2]), _shard(f[3])) for f in lines if f[0] == "P"]
    during = sum(move.began <= back <= move.ended for _, back, _ in delivered)
    print(
        f"slot {slot} (shard {moving}) moved {source} -> {target}: {move.keys} keys in "
        f"{move.batches} batches, ASK from {move.began - processes[0].started:.2f} s for "
        f"{move.ended - move.began:.2f} s of {crawled:.1f} s crawling; "
        f"{found.deliveries} deliveries ({during} while it moved); "
        f"{stats.counters}; {time.monotonic() - began:.1f} s in all"
    )

    # The move overlapped the crawl: the shard served before it, its keys sat
    # on both nodes while every worker had a call under way, the source
    # redirected crawlq's calls meanwhile, and the new owner served after it.
    assert move.batches >= 3 and move.last_batch - move.first_batch >= 2 * _PAUSE
    assert any(back < move.began and k == moving for _, back, k in delivered)
    assert any(called > move.ended and k == moving for called, _, k in delivered)
    for log in logs[:_WORKERS]:
        assert _under_way(log, move.first_batch, move.last_batch), f"{log.name} was idle"
    assert _errors(cluster, source, "ASK") > 0, "no call met the slot half moved"
    # No client followed an ASK into the half-moved slot: crawlq's functions
    # name one key and reach the shard's others, so run on the target (after
    # ASKING) they would see only the keys moved so far.
    assert "cmdstat_asking" not in cluster.node_info(target, "commandstats")

    # Every URL handed out once, acked; nothing reached a worker: no retry of
    # theirs, no exception that is not a crawlq error, every exit clean.
    assert found.ok, (found.samples, found.stats_mismatches)
    assert [p.code for p in processes] == [0] * len(processes)
    assert found.deliveries == found.acked_urls == _TREE.size
    assert not found.transient_errors and not found.unexpected_errors and found.foreign == 0
    counters = stats.counters
    assert (stats.queued, stats.leased, stats.seen) == (0, 0, _TREE.size)
    assert (counters.accepted, counters.acked, counters.popped) == (_TREE.size,) * 3
    # Both feeders added every seed: one of each pair was a duplicate.
    assert counters.duplicates == found.logged_duplicates == _TREE.roots
    assert (counters.released, counters.expired) == (0, 0)

    # The inspection made while the slot was half moved waited for the move.
    assert len(watched) == 1 and not isinstance(watched[0], BaseException), watched
    assert watched[0].exists and watched[0].seen >= _MOVE_AT
    assert watched[0].shards[moving].node == f"127.0.0.1:{target}"

    # crawlq inspect agrees, and finds the shard on its new node, its keys there.
    inspected = inspection.inspect(url, hosts=5)
    assert (inspected.queued, inspected.leased, inspected.seen) == (0, 0, _TREE.size)
    assert inspected.counters == counters
    assert inspected.shards[moving].node == f"127.0.0.1:{target}"
    shown = CliRunner().invoke(app, ["inspect", url])
    assert shown.exit_code == 0, shown.output
    assert f"shard {moving} on 127.0.0.1:{target}: 0 queued, 0 leased" in shown.output
    assert cluster.keys_in_slot(slot, source) == 0 < cluster.keys_in_slot(slot, target)


def _under_way(log: Path, start: float, end: float) -> bool:
    """Whether the worker of ``log`` had a call under way at some time in [start, end]."""
    began: float | None = None
    for fields in _lines([log]):
        tag, at = fields[0], float(fields[1])
        if tag == "P":
            began, at = at, float(fields[2])
            if began <= end and at >= start:
                return True
            began = None
        elif tag in ("a", "s"):
            began = at
        elif tag in ("K", "S") and began is not None:
            if began <= end and at >= start:
                return True
            began = None
    return began is not None and began <= end


def _errors(cluster: RedisCluster, port: int, code: str) -> int:
    """How many error replies ``code`` (ASK, MOVED...) the node on ``port`` gave."""
    stats = cluster.node_info(port, "errorstats").get(f"errorstat_{code}", {})
    return int(stats.get("count", 0))


def test_a_crawl_opens_while_the_slot_of_its_record_moves(redis_clusters: StartCluster) -> None:
    """Opening reads the crawl's record (``crawlq:{NAME}:cluster``) on the node it moves to."""
    cluster = redis_clusters(primaries=3)
    url = cluster.url("record-moving", seeds=3)
    crawlq.open_frontier(url, shards=4).close()  # the record is created
    slot = cluster.key_slot("crawlq:{record-moving}:cluster")
    target = min(set(cluster.primary_ports()) - {cluster.slot_owner(slot)})
    opened: list[Any] = []

    def open_crawl() -> None:
        try:
            with crawlq.open_frontier(url, retry_timeout=10) as frontier:
                opened.append(len(frontier))
        except BaseException as exc:  # asserted below
            opened.append(exc)

    opening = threading.Thread(target=open_crawl)
    # The record alone in its slot: moved in one batch, then the source
    # answers ASK for it for a second, until the slot is the target's.
    move = cluster.move_slot(
        slot, target, batch=1, pause=1.0, after_batch=lambda _: opening.start()
    )
    opening.join(timeout=30)
    assert move.keys == 1
    assert opened == [0]


def test_host_policies_hold_after_a_shard_moves_away_and_back(redis_clusters: StartCluster) -> None:
    """A node's functions read a shard's host policies afresh when the shard comes back to it.

    Found by this module: a node kept each crawl's policies in its Lua state
    until the library reloaded, so a shard back on a node it had left was
    paced by the policies it had then. A node now reads them again once its
    copy is a second old (BOUND_MS in lua/shared.lua): the promise tested.
    """
    cluster = redis_clusters(primaries=3)
    url = cluster.url("policy-moving", seeds=3)
    host = "h1.example"
    with crawlq.open_frontier(url, shards=4, prefetch=1, ack_delay=0) as frontier:
        frontier.add_many([crawlq.Request(f"https://{host}/{i}") for i in range(3)])
        frontier.set_host_policy(host, concurrency=1)  # kept by the node's functions
        tag = shard_tags("policy-moving", 4)[shard_of(host.encode(), 4)]
        slot = cluster.key_slot(f"crawlq:{{{tag}}}:meta")
        home = cluster.slot_owner(slot)
        away = min(set(cluster.primary_ports()) - {home})
        cluster.move_slot(slot, away)
        frontier.set_host_policy(host)  # no limit: changed on the other node
        cluster.move_slot(slot, home)
        time.sleep(1.1)  # the bound: a copy read on this node over a second ago
        first, second = frontier.pop(), frontier.pop()
        assert first is not None and second is not None, "the old limit of 1 held"
