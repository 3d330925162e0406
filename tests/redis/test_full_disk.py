"""A redis-server whose disk fills up: `StoreFull` from every change, nothing lost.

A Redis that cannot write its append-only file (``appendfsync everysec``,
the usual setting) or its snapshot (``stop-writes-on-bgsave-error``, on by
default) answers every write with MISCONF until a write succeeds again. A
crawlq call then retries for ``retry_timeout`` and raises `StoreFull` naming
the fix; once there is room the same calls go through, and everything
accepted is there exactly once. (With ``appendfsync always`` the server
exits instead: a crash, which the outage and chaos tests cover.)

Each test runs the server's ``dir`` on a tmpfs of 3 MiB mounted for it (root
only: the tests skip, saying why, otherwise; CI runs them as root).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

import crawlq
from crawlq import Request
from tests.redis_cluster import started_cluster
from tests.redis_server import RedisServer
from tests.small_disk import Disk, mounted_disk

T = TypeVar("T")

RETRY = 0.5  # the frontier's retry_timeout
BIG = "x" * 3000  # a request that makes its write to the AOF fail on a full disk


@pytest.fixture(params=["aof", "rdb"])
def full_server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[RedisServer, Disk]]:
    """A redis-server keeping its files on a small tmpfs: AOF (everysec) or snapshots."""
    with mounted_disk(tmp_path / "disk") as disk:
        if request.param == "aof":
            server = RedisServer(
                disk.path / "redis", appendonly=True, extra=("--appendfsync", "everysec")
            )
        else:  # snapshots: stop-writes-on-bgsave-error needs a save point
            server = RedisServer(disk.path / "redis", extra=("--save", "3600 1"))
        server.start()
        try:
            yield server, disk
        finally:
            server.stop()


def fill(server: RedisServer, disk: Disk) -> None:
    """Fill the disk; with snapshots only, have a snapshot fail on it."""
    disk.fill()
    if server.appendonly:
        return  # the next write to the AOF fails
    client = redis.Redis(port=server.port)
    try:
        client.bgsave()
        deadline = time.monotonic() + 10
        while client.info("persistence")["rdb_last_bgsave_status"] != "err":
            assert time.monotonic() < deadline, "the snapshot did not fail on a full disk"
            time.sleep(0.05)
    finally:
        client.close()


def make_room(server: RedisServer, disk: Disk) -> None:
    """Free the disk; with snapshots only, take one (the AOF is written again by itself)."""
    disk.free()
    if not server.appendonly:
        client = redis.Redis(port=server.port)
        try:
            client.bgsave()
        finally:
            client.close()


def full_error(call: Callable[[], Any]) -> crawlq.StoreFull:
    """The `StoreFull` ``call`` raises, after crawlq's retries."""
    started = time.monotonic()
    with pytest.raises(crawlq.StoreFull) as raised:
        call()
    assert time.monotonic() - started >= RETRY / 2, "raised without retrying"
    return raised.value


def when_room(call: Callable[[], T], seconds: float = 15.0) -> T:
    """``call()``, again while it raises `StoreFull`, as a patient worker would."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except crawlq.StoreFull:
            assert time.monotonic() < deadline, "the server never took writes again"
            time.sleep(0.1)


def drain(frontier: crawlq.Frontier) -> list[str]:
    """Pop and ack until nothing is ready; the URLs handed out, in order."""
    drained: list[str] = []
    while (request := frontier.pop()) is not None:
        drained.append(request.url)
        frontier.ack(request)
    frontier.flush()
    return drained


def test_a_full_disk_refuses_every_change_with_store_full_and_loses_nothing(
    full_server: tuple[RedisServer, Disk],
) -> None:
    server, disk = full_server
    url = f"{server.url}?crawl=full"
    accepted = [f"https://h{n % 5}.test/{n}" for n in range(40)]
    with crawlq.open_frontier(url, retry_timeout=RETRY, host_delay=0.0) as frontier:
        assert frontier.add_many(accepted) == [True] * 40
        held = [frontier.pop() for _ in range(4)]
        assert None not in held
        frontier.ack(held[0])
        fill(server, disk)
        # Adds until one is refused: with an AOF, the write that finds the
        # disk full has already run (it is kept, as Redis keeps it).
        for n in range(20):
            try:
                if frontier.add_many([Request(f"https://h9.test/big/{n}", meta={"pad": BIG})]):
                    accepted.append(f"https://h9.test/big/{n}")
            except crawlq.StoreFull as exc:
                error = exc
                break
        else:
            raise AssertionError("no add was refused on a full disk")
        assert type(error) is crawlq.StoreFull
        message = str(error)
        assert "cannot write to its disk" in message and "CONFIG GET dir" in message, message
        assert server.url in message and "MISCONF" in message, message

        # Everything that changes the crawl is refused, and is not lost.
        assert "while popping" in str(full_error(frontier.pop))
        links = [Request(f"https://h7.test/link/{n}") for n in range(3)]
        full_error(lambda: frontier.add_many(links, ack=held[1]))
        # An ack waits (ack_delay) unless others waited long enough: it raises
        # then, or the flush that sends it does.
        full_error(lambda: (frontier.ack(held[2]), frontier.flush()))

        make_room(server, disk)
        # The same calls again, as the docs' `patiently` makes them.
        assert when_room(lambda: frontier.add_many(links, ack=held[1])) == [True] * 3
        accepted += [link.url for link in links]
        frontier.flush()
        frontier.ack(held[3])
        drained = drain(frontier)
        stats = frontier.stats()
    assert sorted(drained + [r.url for r in held if r is not None]) == sorted(accepted)
    assert (stats.queued, stats.leased, stats.seen) == (0, 0, len(accepted))
    assert stats.counters.acked == len(accepted)


def test_opening_a_crawl_on_a_full_disk_raises_store_full(
    full_server: tuple[RedisServer, Disk],
) -> None:
    server, disk = full_server
    url = f"{server.url}?crawl=opened"
    with crawlq.open_frontier(url, host_delay=0.0) as frontier:
        frontier.add_many(["https://a.test/", "https://b.test/"])
    fill(server, disk)
    # Opening writes (the self-check's probe): with an AOF the first write
    # may still go through, so open until one is refused.
    for _ in range(5):
        try:
            frontier = crawlq.open_frontier(url, retry_timeout=RETRY)
        except crawlq.StoreFull as exc:
            assert "cannot write to its disk" in str(exc), exc
            break
        frontier.add_many([Request("https://c.test/", meta={"pad": BIG})])
        frontier.close()
    else:
        raise AssertionError("opening never failed on a full disk")
    make_room(server, disk)
    with when_room(lambda: crawlq.open_frontier(url, retry_timeout=RETRY)) as frontier:
        assert frontier.stats().queued >= 2


def test_on_a_cluster_one_primarys_full_disk_refuses_its_writes_and_loses_nothing(
    tmp_path: Path,
) -> None:
    # Three primaries, one of them keeping an append-only file (everysec) on
    # a disk that fills: writes to its shards are refused with StoreFull; a
    # batch over every shard raises, and once there is room the same batch
    # again stores what it had not (what it had is refused as a duplicate).
    # Every request offered is then handed out exactly once.
    with mounted_disk(tmp_path / "disk", size="24m") as disk:
        cluster = started_cluster(disk.path / "cluster", primaries=3)
        try:
            port = cluster.primary_ports()[1]
            node = redis.Redis(port=port)
            node.config_set("appendfsync", "everysec")
            node.config_set("appendonly", "yes")
            deadline = time.monotonic() + 10
            while node.info("persistence")["aof_rewrite_in_progress"]:
                assert time.monotonic() < deadline, "the append-only file was never written"
                time.sleep(0.05)
            node.close()
            url = cluster.url("full")
            offered = [f"https://h{n}.test/" for n in range(48)]  # on every shard
            with crawlq.open_frontier(url, retry_timeout=RETRY, host_delay=0.0) as frontier:
                assert frontier.add_many(offered) == [True] * 48
                disk.fill()
                for n in range(20):
                    batch = [
                        Request(f"https://h{h}.test/big/{n}", meta={"pad": BIG}) for h in range(48)
                    ]
                    offered += [request.url for request in batch]
                    try:
                        frontier.add_many(batch)
                    except crawlq.StoreFull as exc:
                        error = exc
                        break
                else:
                    raise AssertionError("no add was refused on a full disk")
                message = str(error)
                assert "cannot write to its disk" in message and f":{port}" in message, message

                disk.free()  # the append-only file is written again by itself
                when_room(lambda: frontier.add_many(batch))
                drained = drain(frontier)
                stats = frontier.stats()
            assert len(drained) == len(set(drained)), "a request handed out twice"
            assert set(drained) == set(offered)
            assert (stats.queued, stats.leased, stats.seen) == (0, 0, len(offered))
        finally:
            cluster.stop()
