"""A server that loses its last writes: the crawl heals, as it does without crawlq's caches.

Redis may lose the last writes it acknowledged: a crash with ``appendfsync
everysec`` (up to a second), a failover to a replica that had not received
them (asynchronous replication), a restart from an older snapshot. The crawl
is then as it was a moment earlier: a page whose ack was lost comes back,
and its fetch offers its links again, which stores them. A worker must not
refuse those links from what it remembers the lost state held (its
recently-seen set, ``crawlq._recent``): a fault on its connection drops that
memory, so the links go to the server again.

The test makes the loss exact: a snapshot (SAVE), then a pop and the page's
add of links with its ack, then the server killed and started again on the
snapshot.
"""

from __future__ import annotations

import asyncio
import threading
import time

import redis

import crawlq
from crawlq import Request
from tests.redis_cluster import RedisCluster, StartCluster
from tests.redis_server import StartServer

LINKS = [Request(f"https://b{i}.example/page") for i in range(5)]


def test_links_lost_with_their_page_ack_are_stored_when_the_page_comes_back(
    redis_servers: StartServer,
) -> None:
    server = redis_servers()
    url = f"{server.url}?crawl=lost-writes&socket_timeout=1"
    with crawlq.open_frontier(url, host_delay=0.0, ack_delay=0.0) as frontier:
        frontier.add(Request("https://a.example/"))
        redis.Redis.from_url(server.url).save()  # the state the server will come back to
        page = frontier.pop()
        assert page is not None
        assert frontier.add_many(LINKS, ack=page) == [True] * 5
        server.restart(crash=True)  # back to the snapshot: no pop, no ack, no links

        # The crawl goes on: the page comes back (after what the worker had
        # leased ahead in the lost state), and its links with it.
        fetched = []
        while (request := frontier.pop()) is not None:
            fetched.append(request.url)
            if request.url == page.url:
                frontier.add_many(LINKS, ack=request)
            else:
                frontier.ack(request)
        assert page.url in fetched
        missing = {link.url for link in LINKS} - set(fetched)
        assert not missing, f"links never fetched again: {sorted(missing)}"
        stats = frontier.stats()
        assert (stats.queued, stats.leased, stats.seen) == (0, 0, 6)


def test_requests_held_from_a_lost_state_go_back_rather_than_out_twice(
    redis_servers: StartServer,
) -> None:
    # A worker holds a prefetched batch; the server comes back without its
    # leases, and another worker pops those requests. The first worker's
    # next call meets the fault (a lost connection): its batch goes back
    # (its leases are gone) and it leases afresh, rather than serving
    # requests the other worker holds.
    server = redis_servers()
    url = f"{server.url}?crawl=lost-held&socket_timeout=1"
    pages = [Request(f"https://h{i}.example/") for i in range(10)]
    with crawlq.open_frontier(url, ack_delay=0.0) as first:
        first.add_many(pages)
        redis.Redis.from_url(server.url).save()  # queued, none leased
        first._expect_pops(5)
        head = first.pop()  # leases five, holds four
        assert head is not None and len(first._store._buffer) == 4  # type: ignore[attr-defined]
        server.restart(crash=True)
        with crawlq.open_frontier(url, ack_delay=0.0) as second:
            second._expect_pops(5)  # (and no more: the other five stay queued)
            taken = [second.pop() for _ in range(5)]
            assert all(taken)
            first.ack(head)  # meets the fault, retried, answered
            later = [first.pop() for _ in range(5)]
        assert all(later)
        twice = {r.url for r in taken if r} & {r.url for r in later if r}
        assert not twice, f"handed out by both workers: {sorted(twice)}"


def test_requests_the_scheduler_leased_ahead_in_a_lost_state_go_back(
    redis_servers: StartServer,
) -> None:
    # The same for a request the asyncio Scheduler leased with a worker's
    # write: once a store call meets the fault, it goes back, not out.
    server = redis_servers()
    url = f"{server.url}?crawl=lost-ahead&socket_timeout=1"
    pages = [Request(f"https://h{i}.example/") for i in range(10)]

    async def crawl() -> tuple[list[str], list[str]]:
        async with crawlq.Scheduler(crawlq.open_frontier(url, ack_delay=0.0)) as scheduler:
            await scheduler.add_many(pages)
            redis.Redis.from_url(server.url).save()
            page = await scheduler.get()
            await scheduler.add_many([], ack=page)  # leases this worker's next one
            ahead = [request.url for request, _ in scheduler._ahead]
            assert len(ahead) == 1
            server.restart(crash=True)
            with crawlq.open_frontier(url, ack_delay=0.0) as second:
                second._expect_pops(5)
                taken = [request.url for _ in range(5) if (request := second.pop())]
                assert set(ahead) <= set(taken)
                await scheduler.add_many([Request("https://new.example/")])  # meets the fault
                later = [(await scheduler.get()).url for _ in range(5)]
        return taken, later

    taken, later = asyncio.run(crawl())
    twice = set(taken) & set(later)
    assert not twice, f"handed out by both workers: {sorted(twice)}"


def test_on_a_cluster_a_fault_on_any_shard_sends_known_links_to_the_server_again(
    redis_clusters: StartCluster,
) -> None:
    # The crawl's recently-seen set lives with its first shard; a node that
    # stops answering (a failover's first sign) serves other shards too.
    cluster = redis_clusters()
    url = cluster.url("lost-writes") + "&socket_timeout=0.3"
    links = [Request(f"https://h{i}.example/") for i in range(48)]
    with crawlq.open_frontier(url, host_delay=0.0, retry_timeout=20) as frontier:
        assert frontier.add_many(links) == [True] * 48
        before = _fcalls(cluster)
        assert frontier.add_many(links) == [False] * 48
        assert _fcalls(cluster) == before  # refused from memory: no call

        first = frontier._store._shards[0]._link.client  # type: ignore[attr-defined]
        port = next(p for p in cluster.primary_ports() if p != _port(first))
        cluster.pause(port)
        try:
            # New hosts on every shard: the calls to the paused node time out.
            adding = threading.Thread(
                target=frontier.add_many,
                args=([Request(f"https://new{i}.example/") for i in range(48)],),
            )
            adding.start()
            time.sleep(1.0)
        finally:
            cluster.resume(port)
        adding.join(30)
        assert not adding.is_alive()

        before = _fcalls(cluster)
        assert frontier.add_many(links) == [False] * 48  # the server's answer
        assert _fcalls(cluster) > before


def test_on_a_cluster_one_dropped_connection_is_a_fault_too(
    redis_clusters: StartCluster,
) -> None:
    # A failover's first sign may be a single reset, answered at once on
    # the retry: a write spread over shards reads it, and must count it.
    cluster = redis_clusters()
    links = [Request(f"https://h{i}.example/") for i in range(48)]
    with crawlq.open_frontier(cluster.url("dropped"), host_delay=0.0) as frontier:
        assert frontier.add_many(links) == [True] * 48
        first = frontier._store._shards[0]._link.client  # type: ignore[attr-defined]
        port = next(p for p in cluster.primary_ports() if p != _port(first))
        killer = redis.Redis(port=port)
        killer.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        killer.close()
        assert (
            frontier.add_many([Request(f"https://new{i}.example/") for i in range(48)])
            == [True] * 48
        )
        before = _fcalls(cluster)
        assert frontier.add_many(links) == [False] * 48
        assert _fcalls(cluster) > before


def _port(client: redis.Redis) -> int:
    return int(client.connection_pool.connection_kwargs["port"])


def _fcalls(cluster: RedisCluster) -> int:
    return sum(
        int(cluster.node_info(port, "commandstats").get("cmdstat_fcall", {}).get("calls", 0))
        for port in cluster.primary_ports()
    )
