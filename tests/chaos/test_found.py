"""Minimal reproductions of the bugs the chaos run found, kept as regression tests.

Both failed before their fixes: a pop retried across an outage served a
lease that had already ended (its staleness counted from the reply, not from
the call's first send), and opening a cluster crawl mid-failover raised
`StoreError` instead of waiting out the failover and raising
`StoreUnavailable`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import crawlq
from crawlq import Request
from crawlq.stores.redis import conn as conn_module
from tests.chaos.worker import LeaseLookup
from tests.redis_cluster import RedisCluster, _command
from tests.redis_server import StartServer


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """3 primaries with a replica each, shared by this module's tests (stopped by pid)."""
    nodes = RedisCluster(Path(tmp_path_factory.mktemp("chaos-found")), primaries=3, replicas=1)
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.stop()


def _in_sync(port: int) -> bool:
    return b"master_link_status:up" in _command(port, "INFO", "replication")


def _replica_of(cluster: RedisCluster, primary: int) -> int:
    return next(
        port
        for port in cluster.replica_ports()
        if b"master_port:%d\r\n" % primary in _command(port, "INFO", "replication")
    )


def test_a_pop_replayed_after_its_lease_ended_does_not_hand_the_request_out(
    redis_servers: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server runs a pop (the lease and the worker's outcome record reach
    the AOF), then crashes before the reply reaches the worker, and is back
    (AOF replayed) only after ``lease_timeout``. crawlq retries the call with
    its number; the function returns the first run's remembered outcome, and
    the store serves the request it names, although its lease has expired:
    another worker's pop takes it back and fetches it at the same time
    (``host_concurrency=1`` broken too). In the chaos run the same came from
    a cluster failover of 3 s with ``lease_timeout=3``. Expected: a request
    whose lease ended before the pop returned is not handed out (given back,
    or leased afresh)."""
    server = redis_servers(appendonly=True)
    url = f"{server.url}?crawl=replayed-pop"
    options = {"lease_timeout": 1.0, "host_concurrency": 1, "retry_timeout": 10, "ack_delay": 0}
    first = crawlq.open_frontier(url, **options)
    second = crawlq.open_frontier(url, **options)
    real = conn_module.round_trip
    crashed: list[threading.Timer] = []

    def crash_after_a_pop(conn: Any, packed: bytes, replies: int = 1) -> Any:
        reply = real(conn, packed, replies)
        if b"pop" in packed[:200] and not crashed:
            server.kill()  # the pop ran and is in the AOF; its reply is lost
            crashed.append(threading.Timer(1.5, server.start))
            crashed[0].start()
            raise redis.ConnectionError("connection lost (test)")
        return reply

    try:
        assert first.add(Request("https://one.example/page"))
        monkeypatch.setattr(conn_module, "round_trip", crash_after_a_pop)
        began = time.monotonic()
        mine = first.pop()
        waited = time.monotonic() - began
        returned = time.time()
        monkeypatch.undo()
        assert crashed, "no pop reached the server"
        crashed[0].join()
        assert mine is not None and waited > 1.0
        deadline = LeaseLookup(url).deadline(mine)
        # The other worker pops for half a second (a fresh lease would last 1 s).
        theirs = None
        until = time.monotonic() + 0.5
        while theirs is None and time.monotonic() < until:
            theirs = second.pop()
            time.sleep(0.02)
        assert theirs is None and float(deadline) > returned, (
            f"{mine.url} was handed out {returned - float(deadline):.2f} s after its lease "
            f"ended (the pop took {waited:.1f} s, lease_timeout 1 s); the other worker "
            f"got it too: {theirs}"
        )
    finally:
        monkeypatch.undo()
        first.close()
        second.close()


def test_opening_while_a_shard_has_no_serving_node_is_store_unavailable(
    cluster: RedisCluster,
) -> None:
    """A primary killed and its replica (SIGSTOPped) not yet promoted: the
    state every failover passes through, held open here so the test is
    deterministic. Its slots come back by themselves (the replica takes
    over), as when one server is down, which `open_frontier` reports as
    `StoreUnavailable`; here it raises a plain `StoreError` telling the
    operator to fix the cluster. The primary of the last slot range is
    the one killed, so the nodes asked first are alive and say so."""
    cluster.wait_until(
        lambda: all(_in_sync(p) for p in cluster.replica_ports()), "replicas in sync"
    )
    # CLUSTER NODES: "<id> <ip:port@bus> <flags> <primary> ... <link> <slots>...".
    ranges = []
    for line in _command(cluster.primary_ports()[0], "CLUSTER", "NODES").decode().splitlines():
        fields = line.split()
        if len(fields) > 8 and "master" in fields[2] and "fail" not in fields[2]:
            port = int(fields[1].partition("@")[0].rpartition(":")[2])
            ranges.append((int(fields[8].split("-")[0]), port))
    last = max(ranges)[1]
    replica = _replica_of(cluster, last)
    live = [p for p in cluster.primary_ports() if p != last]
    url = f"redis+cluster://{','.join(f'127.0.0.1:{p}' for p in live)}/?crawl=open-failover"
    server = cluster.server_on(last)
    cluster.pause(replica)
    server.kill()
    try:
        cluster.wait_until(
            lambda: b"cluster_slots_fail:0" not in _command(live[0], "CLUSTER", "INFO"),
            "the killed primary's slots marked failed",
        )
        with pytest.raises(crawlq.StoreUnavailable):
            crawlq.open_frontier(url, retry_timeout=1)
    finally:
        cluster.resume(replica)
        cluster.wait_until(lambda: replica in cluster.primary_ports(), "the replica promoted")
        server.start()
        cluster.wait_until(lambda: last in cluster.replica_ports(), "the old primary a replica")
        cluster.wait_until(lambda: _in_sync(last), "the old primary in sync")
