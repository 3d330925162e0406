"""Redis Cluster failovers mid-crawl: with ``replicas=1`` nothing acked is lost.

A real cluster of 3 primaries, each with a replica; a primary fails over
while the crawl runs (SIGKILLed, SIGSTOPped past ``cluster-node-timeout``,
or handed over by ``CLUSTER FAILOVER``), the cluster promotes its replica,
and the crawl's calls follow the slots to it (MOVED, or a refreshed slot
map) and finish.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import pytest

import crawlq
from crawlq import Request
from tests.redis_cluster import StartCluster, fail_over

T = TypeVar("T")


def test_a_killed_primary_fails_over_and_loses_nothing_acked(
    redis_clusters: StartCluster,
) -> None:
    cluster = redis_clusters(primaries=3, replicas=1)
    primaries_before = set(cluster.primary_ports())
    url = cluster.url("failover", seeds=len(cluster.servers))
    frontier = crawlq.open_frontier(
        url, replicas=1, ack_delay=0, retry_timeout=30, lease_timeout=120
    )
    seeds = [Request(f"https://h{i % 60}.example/seed/{i}") for i in range(1500)]
    frontier.add_many(seeds)
    expected = {r.url for r in seeds}
    acked: list[str] = []
    killed: list[int] = []

    def kill_a_primary() -> None:
        while len(acked) < 500:
            time.sleep(0.001)
        # A primary that is not the first seed (any one works: every primary
        # serves some of the 16 shards).
        port = sorted(primaries_before)[-1]
        server = cluster.server_on(port)
        server.kill()
        killed.append(port)
        # Its replica takes over: writes to its shards wait (replicas=1)
        # until the new primary has a replica, which the killed node
        # becomes when it is back, as an operator would bring it back.
        deadline = time.monotonic() + 30
        while set(cluster.primary_ports()) == primaries_before - {port}:
            assert time.monotonic() < deadline, "no failover"
            time.sleep(0.1)
        server.start()

    killer = threading.Thread(target=kill_a_primary)
    killer.start()
    child = 0
    while True:
        request = frontier.pop()
        if request is None:
            if len(frontier) == 0:
                break
            time.sleep(0.01)
            continue
        if child < 1000 and "/seed/" in request.url:
            children = [
                Request(f"https://h{(child + k) % 60}.example/child/{child + k}") for k in range(2)
            ]
            frontier.add_many(children, ack=request)
            expected.update(r.url for r in children)
            child += 2
        else:
            frontier.ack(request)
        acked.append(request.url)
    killer.join()
    assert killed, "the primary was never killed"
    promoted = set(cluster.primary_ports()) - primaries_before
    assert len(promoted) == 1, "the killed primary's replica took over"
    assert killed[0] not in cluster.primary_ports(), "the killed node came back as a replica"
    # Every request was done; none acked came back.
    assert set(acked) == expected
    assert len(acked) == len(set(acked)), "an acked request came back after the failover"
    stats = frontier.stats()
    assert (stats.queued, stats.leased, stats.seen) == (0, 0, len(expected))
    assert stats.counters.accepted == len(expected) == stats.counters.acked
    frontier.close()


def test_replicas_that_the_cluster_lacks_are_refused_at_open(
    redis_cluster_url: str,
) -> None:
    with pytest.raises(crawlq.StoreError, match=r"replicas=1 makes every write wait"):
        crawlq.open_frontier(f"{redis_cluster_url}?crawl=no-replicas", replicas=1)
    with pytest.raises(crawlq.ConfigError, match="replicas must be"):
        crawlq.open_frontier(f"{redis_cluster_url}?crawl=no-replicas", replicas=-1)


# -- how replies are told apart ------------------------------------------------------------


def test_redirections_are_known_by_redis_pys_classes_and_wait_errors_mean_not_primary() -> None:
    """redis-py strips the code off MOVED & co.: they are still retried, and never leak."""
    from redis import exceptions as errors

    from crawlq.stores.redis.client import NotPrimary, is_transient, translate
    from crawlq.stores.redis.config import parse_url
    from crawlq.stores.redis.conn import Link

    location = parse_url("redis+cluster://u:pw-secret@127.0.0.1:7000/?crawl=x")
    redirections = [
        (errors.MovedError("2454 127.0.0.1:31004"), "MOVED 2454 127.0.0.1:31004"),
        (errors.AskError("2454 127.0.0.1:31004"), "ASK 2454"),
        (errors.TryAgainError("Multiple keys request during rehashing of slot"), "TRYAGAIN"),
        (errors.ClusterDownError("Hash slot not served"), "CLUSTERDOWN Hash slot"),
        (errors.MasterDownError("Link with MASTER is down"), "MASTERDOWN"),
        (errors.ReadOnlyError("You can't write against a read only replica."), "READONLY"),
        (errors.ResponseError("BUSY Redis is busy running a script"), "BUSY"),
        (NotPrimary("WAIT answered 'UNBLOCKED'"), "WAIT answered 'UNBLOCKED'"),
    ]
    for exc, says in redirections:
        assert is_transient(exc), exc
        error = translate(exc, location, "acking")
        assert isinstance(error, crawlq.StoreUnavailable) and says in str(error), error
        assert "pw-secret" not in str(error)
    for exc in [errors.ResponseError("ERR unknown command"), errors.ResponseError("BUSYKEY x")]:
        assert not is_transient(exc)
        assert not isinstance(translate(exc, location, "acking"), crawlq.StoreUnavailable)

    class Connection:  # answers WAIT with an error, as a demoted primary does
        def __init__(self) -> None:
            self._sock = None
            self._parser = None

        def send_packed_command(self, packed: Any, check_health: bool = True) -> None:
            pass

        def read_response(self) -> Any:
            raise errors.ResponseError("UNBLOCKED force unblock from blocking operation")

    link = Link(location, cast(Any, None), retry_timeout=5, replicas=1)
    for confirmed in [errors.ResponseError("UNBLOCKED force unblock"), 0]:
        with pytest.raises(NotPrimary):
            # A first WAIT error, or a shortfall then an error: never compared with an int.
            link._confirmed(Connection(), [b"reply", confirmed], "acking")
    assert link._confirmed(Connection(), [b"reply", 1], "acking") == b"reply"


# -- failovers mid-crawl, with workers running -------------------------------------------
#
# Three workers (threads, each with its own frontier) crawl a crawl of three
# shards with ``replicas=1`` while the cluster fails over in one of three
# ways: ``CLUSTER FAILOVER`` on every replica, one after another (each old
# primary stays up and becomes a replica), a primary SIGSTOPped past
# ``cluster-node-timeout`` (continued once its replica took over, it comes
# back as a replica), and a SIGKILLed primary (started again, as a replica).
# Each seed popped adds one child and acks the seed in one call; a child is
# acked. More seeds are added once the failover is over.
#
# The contract tested: no exception but `crawlq.StoreUnavailable` reaches a
# worker, and a StoreUnavailable only ever in passing: the same call, made
# again, succeeds (a worker gives up after 30 s of them; with retry_timeout
# 20 s none is expected). The workers go on after the failover and finish
# the crawl, the seeds added after it too; every URL accepted is acked
# exactly once, none is left queued or leased, and the counters agree.

_HOSTS = 40
_SEEDS = 1200  # added before the workers start
_LATE = 300  # added once the failover is over
_FAILOVER_AT = 200  # acks before the failover starts


class _Crawl:
    """What the workers did: acked URLs, and what reached them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: list[str] = []
        self.unavailable: list[crawlq.StoreUnavailable] = []
        self.errors: list[BaseException] = []
        # Set once no more seeds come: a worker then stops when nothing is left.
        self.all_added = threading.Event()


def _again(crawl: _Crawl, call: Callable[[], T]) -> T:
    """``call()``, made again after each StoreUnavailable, for up to 30 s."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return call()
        except crawlq.StoreUnavailable as exc:
            with crawl.lock:
                crawl.unavailable.append(exc)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _worker(url: str, crawl: _Crawl, options: dict[str, Any]) -> None:
    try:
        frontier = crawlq.open_frontier(url, **options)
    except BaseException as exc:
        crawl.errors.append(exc)
        return
    try:
        while True:
            request = _again(crawl, frontier.pop)
            if request is None:
                if crawl.all_added.is_set() and _again(crawl, lambda: len(frontier)) == 0:
                    return
                time.sleep(0.005)
                continue
            if "/seed/" in request.url:
                n = int(request.url.rpartition("/")[2])
                child = Request(f"https://h{n % _HOSTS}.example/child/{n}")
                _again(crawl, lambda: frontier.add_many([child], ack=request))  # noqa: B023
            else:
                _again(crawl, lambda: frontier.ack(request))  # noqa: B023
            with crawl.lock:
                crawl.acked.append(request.url)
    except BaseException as exc:
        crawl.errors.append(exc)
    finally:
        frontier.close()


def _urls(seeds: range) -> set[str]:
    return {
        f"https://h{i % _HOSTS}.example/{kind}/{i}" for i in seeds for kind in ("seed", "child")
    }


@pytest.mark.parametrize("how", ["cluster-failover", "sigstop", "sigkill"])
def test_workers_go_on_through_a_failover_and_ack_everything_once(
    redis_clusters: StartCluster, how: str
) -> None:
    cluster = redis_clusters(primaries=3, replicas=1)
    url = cluster.url(f"failover-{how}", seeds=len(cluster.servers))
    options: dict[str, Any] = {
        "replicas": 1,
        "shards": 3,
        "ack_delay": 0,
        "retry_timeout": 20,
        "lease_timeout": 120,
    }
    admin = crawlq.open_frontier(url, **options)
    admin.add_many([Request(f"https://h{i % _HOSTS}.example/seed/{i}") for i in range(_SEEDS)])
    crawl = _Crawl()
    workers = [
        threading.Thread(target=_worker, args=(url, crawl, options), daemon=True) for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    while len(crawl.acked) < _FAILOVER_AT and not crawl.errors:
        time.sleep(0.002)
    fail_over(cluster, how)
    late = [
        Request(f"https://h{i % _HOSTS}.example/seed/{i}") for i in range(_SEEDS, _SEEDS + _LATE)
    ]
    _again(crawl, lambda: admin.add_many(late))
    crawl.all_added.set()
    for worker in workers:
        worker.join(timeout=40)
    assert not any(worker.is_alive() for worker in workers), "a worker is stuck"
    # Nothing but StoreUnavailable reached a worker, and each was passed by a retry.
    assert crawl.errors == []
    # Every URL accepted was acked, exactly once: those added after the failover too.
    expected = _urls(range(_SEEDS + _LATE))
    assert len(crawl.acked) == len(set(crawl.acked)), "an acked request came back"
    assert set(crawl.acked) == expected
    stats = admin.stats()
    assert (stats.queued, stats.leased, stats.seen) == (0, 0, len(expected))
    assert stats.counters.accepted == len(expected) == stats.counters.acked
    admin.close()
