"""The Redis Cluster store on a real cluster: sharding, order across shards, admin, errors.

The conformance suite runs on a cluster crawl too (``redis-cluster`` in
``STORES``); these test what only a cluster has. They use the session's
cluster of 3 primaries (``tests.redis_cluster``).
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from urllib.parse import urlsplit

import pytest
from redis.cluster import ClusterNode, RedisCluster
from typer.testing import CliRunner

import crawlq
from crawlq import Request
from crawlq.cli import app
from crawlq.stores.redis.cluster import inspection as admin
from crawlq.stores.redis.cluster.shards import shard_of
from crawlq.stores.redis.config import parse_url
from tests.redis._lost_reply import lose_next_reply
from tests.redis_cluster import RedisCluster as Cluster

_names = itertools.count()


def _crawl(cluster_url: str, name: str) -> str:
    return f"{cluster_url}?crawl={name}-{next(_names)}"


def _client(cluster: Cluster) -> RedisCluster:
    return RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", cluster.servers[0].port)])


def _keys_by_node(cluster: Cluster, crawl: str) -> dict[int, list[bytes]]:
    """Every key of a crawl, by the port of the node holding it."""
    client = _client(cluster)
    found: dict[int, list[bytes]] = {}
    for node in client.get_primaries():
        keys = list(node.redis_connection.scan_iter(match=f"crawlq:{{{crawl}*".encode()))
        found[int(node.port)] = keys
    client.close()
    return found


# -- the URL ---------------------------------------------------------------------------


def test_cluster_urls_parse_and_never_show_the_password() -> None:
    url = parse_url(
        "redis+cluster://user:s3cret@10.0.0.1:7000,[::1]:7001/?crawl=big&socket_timeout=2"
    )
    assert url.nodes == (("10.0.0.1", 7000), ("::1", 7001))
    assert (
        url.display
        == "redis+cluster://user:***@10.0.0.1:7000,[::1]:7001/?crawl=big&socket_timeout=2"
    )
    assert url.kwargs["password"] == "s3cret" and url.kwargs["socket_timeout"] == 2.0
    assert url.prefix == "crawlq:{big}:"
    assert url.of_shard(5, "10.0.0.2", 7002).prefix == "crawlq:{big:5}:"
    assert parse_url("rediss+cluster://h:1").kwargs["ssl"] is True
    for bad, says in [
        ("redis+cluster://h/?crawl=x", "not a host:port"),
        ("redis+cluster://h:1/2?crawl=x", "only database 0"),
        ("redis+cluster://:pw-secret@h:1/?crawl=a:b", "crawl name"),
        ("redis+cluster://h:1/?crawl=x&nope=1", "unknown parameter"),
    ]:
        with pytest.raises(crawlq.ConfigError, match=says) as caught:
            crawlq.open_frontier(bad)
        assert "pw-secret" not in str(caught.value)
    with pytest.raises(crawlq.ConfigError, match="shards must be"):
        crawlq.open_frontier("redis+cluster://127.0.0.1:1/?crawl=x", shards=0)


def test_a_server_that_is_no_cluster_node_is_refused(redis_url: str) -> None:
    port = urlsplit(redis_url).port
    with pytest.raises(crawlq.StoreUnavailable, match="cluster-enabled yes"):
        crawlq.open_frontier(f"redis+cluster://127.0.0.1:{port}/?crawl=x")


def test_no_seed_answering_is_unavailable() -> None:
    with pytest.raises(crawlq.StoreUnavailable, match="cannot reach the Redis Cluster"):
        crawlq.open_frontier("redis+cluster://:secret-pw@127.0.0.1:1/?crawl=x")


# -- sharding --------------------------------------------------------------------------


def test_the_shard_count_is_fixed_when_the_crawl_is_created(redis_cluster_url: str) -> None:
    url = _crawl(redis_cluster_url, "fixed")
    with crawlq.open_frontier(url, shards=4) as first:
        assert first.stats().extra["shards"] == 4
    with crawlq.open_frontier(url) as again:  # adopts the crawl's count
        assert again.stats().extra["shards"] == 4
    with pytest.raises(crawlq.IncompatibleStore, match="shards=4") as caught:
        crawlq.open_frontier(url, shards=8)
    assert caught.value.setting == "shards"
    with crawlq.open_frontier(_crawl(redis_cluster_url, "default")) as fresh:
        assert fresh.stats().extra["shards"] == 16


def test_each_host_lives_in_its_shard_and_shards_spread_evenly_over_the_primaries(
    redis_cluster: Cluster, redis_cluster_url: str
) -> None:
    url = _crawl(redis_cluster_url, "spread")
    crawl = parse_url(url).crawl
    hosts = [f"h{i}.example" for i in range(200)]
    with crawlq.open_frontier(url) as frontier:
        frontier.add_many([Request(f"https://{h}/{n}") for h in hosts for n in range(3)])
        assert len(frontier) == 600
    client = _client(redis_cluster)
    tags = client.hget(f"crawlq:{{{crawl}}}:cluster", "tags").decode().split(" ")
    client.close()
    assert len(tags) == 16 and all(t.startswith(f"{crawl}:{k}") for k, t in enumerate(tags))
    by_node = _keys_by_node(redis_cluster, crawl)
    shards_on: dict[int, set[int]] = defaultdict(set)
    for port, keys in by_node.items():
        for key in keys:
            tag = key.decode().split("{", 1)[1].split("}", 1)[0]
            if tag == crawl:
                continue  # the crawl's record
            k = tags.index(tag)
            shards_on[port].add(k)
            # A host's queue is in its host's shard.
            if b"}:q:" in key:
                host = key.decode().split("}:q:", 1)[1]
                assert k == shard_of(host.encode(), 16)
    assert set().union(*shards_on.values()) == set(range(16))
    assert sum(len(s) for s in shards_on.values()) == 16  # each shard on one node
    # Shard K's tag is in the K-th sixteenth of the slots, and the cluster
    # gave each primary a third of them: 6, 5 and 5 shards.
    assert sorted(len(s) for s in shards_on.values()) == [5, 5, 6]


def test_one_worker_gets_priorities_in_exact_order_across_shards(redis_cluster_url: str) -> None:
    """Priority order across shards is exact for one worker; FIFO within a host is
    exact; FIFO across hosts of one priority follows each shard's own numbering."""
    rng = random.Random(7)
    url = _crawl(redis_cluster_url, "order")
    requests = [
        Request(f"https://h{rng.randrange(300)}.example/{i}", priority=rng.randrange(-10, 11))
        for i in range(3000)
    ]
    with crawlq.open_frontier(url) as frontier:
        for start in range(0, len(requests), 100):
            frontier.add_many(requests[start : start + 100])
        popped = []
        while (request := frontier.pop()) is not None:
            popped.append(request)
            frontier.ack(request)
    assert sorted(r.url for r in popped) == sorted(r.url for r in requests)
    priorities = [r.priority for r in popped]
    assert priorities == sorted(priorities, reverse=True)
    order = {r.url: i for i, r in enumerate(requests)}
    per_host: dict[tuple[str, int], list[int]] = defaultdict(list)
    for request in popped:
        per_host[(urlsplit(request.url).hostname or "", request.priority)].append(
            order[request.url]
        )
    assert all(ranks == sorted(ranks) for ranks in per_host.values())


def test_one_worker_acking_at_once_gets_exact_fifo_across_shards(redis_cluster_url: str) -> None:
    """Each shard numbers a worker's adds after the highest number it knows of, in
    any shard: with acks written at once (``ack_delay=0``) one worker gets first
    in, first out across 16 shards, batch by batch and within a batch."""
    rng = random.Random(11)
    urls = [f"https://h{rng.randrange(300)}.example/{i}" for i in range(3000)]
    with crawlq.open_frontier(_crawl(redis_cluster_url, "fifo"), ack_delay=0) as frontier:
        for start in range(0, len(urls), 50):
            frontier.add_many(urls[start : start + 50])
        popped = []
        while (request := frontier.pop()) is not None:
            popped.append(request.url)
            frontier.ack(request)
    assert popped == urls


def test_a_new_higher_priority_request_on_another_shard_comes_next(redis_cluster_url: str) -> None:
    url = _crawl(redis_cluster_url, "jump")
    a, b = (
        "a.example",
        next(
            f"b{i}.example"
            for i in itertools.count()
            if shard_of(f"b{i}.example".encode(), 16) != shard_of(b"a.example", 16)
        ),
    )
    with crawlq.open_frontier(url) as frontier:
        frontier.add_many([Request(f"https://{a}/{n}") for n in range(50)])
        first = frontier.pop()
        assert first is not None and first.url == f"https://{a}/0"
        frontier.add(Request(f"https://{b}/urgent", priority=5))
        assert frontier.pop().url == f"https://{b}/urgent"  # type: ignore[union-attr]


def test_dedup_is_per_shard_so_a_fingerprint_in_two_download_slots_is_taken_twice(
    redis_cluster_url: str,
) -> None:
    """Documented: dedup lives in the shard of a request's pacing slot.

    The worker that met the fingerprint refuses it itself for a while (its
    recently seen set, crawlq._recent), whatever the slot; another worker asks
    the shard of the new slot, which has not seen it.
    """
    one = "slot-0"
    other = next(
        f"slot-{i}"
        for i in itertools.count(1)
        if shard_of(f"slot-{i}".encode(), 16) != shard_of(one.encode(), 16)
    )
    same = next(
        f"slot-{i}"
        for i in itertools.count(1)
        if f"slot-{i}" != one and shard_of(f"slot-{i}".encode(), 16) == shard_of(one.encode(), 16)
    )
    url = _crawl(redis_cluster_url, "dedup")
    with crawlq.open_frontier(url) as frontier, crawlq.open_frontier(url) as another:
        assert frontier.add(Request("https://a.example/x", meta={"download_slot": one}))
        assert not frontier.add(Request("https://a.example/x", meta={"download_slot": other}))
        assert another.add(Request("https://a.example/x", meta={"download_slot": other}))
        with crawlq.open_frontier(url) as third:  # the shard of `one` answers
            assert not third.add(Request("https://a.example/x", meta={"download_slot": same}))
        assert frontier.seen(Request("https://a.example/x"))
        assert frontier.stats().counters.accepted == 2


def test_children_across_shards_are_stored_before_the_parents_ack(redis_cluster_url: str) -> None:
    url = _crawl(redis_cluster_url, "children")
    with crawlq.open_frontier(url, ack_delay=0) as frontier:
        frontier.add(Request("https://parent.example/"))
        parent = frontier.pop()
        assert parent is not None
        children = [Request(f"https://c{i}.example/") for i in range(20)]
        assert frontier.add_many(children, ack=parent) == [True] * 20
        stats = frontier.stats()
        assert (stats.queued, stats.leased, stats.counters.acked) == (20, 0, 1)


def test_a_parents_ack_waits_in_its_shard_for_that_shards_next_call(
    redis_cluster: Cluster, redis_cluster_url: str
) -> None:
    """Under `expect_pops` (the Scheduler's) with ``ack_delay``, a write's acks cost no call."""
    url = _crawl(redis_cluster_url, "waiting")

    def fcalls() -> int:
        return sum(
            redis_cluster.node_info(port, "commandstats").get("cmdstat_fcall", {}).get("calls", 0)
            for port in redis_cluster.primary_ports()
        )

    with crawlq.open_frontier(url, ack_delay=30) as frontier, crawlq.open_frontier(url) as other:
        frontier.add(Request("https://parent.example/"))
        parent = frontier.pop()
        assert parent is not None
        home = shard_of(b"parent.example", 16)
        hosts = [
            h for h in (f"c{i}.example" for i in range(40)) if shard_of(h.encode(), 16) != home
        ]
        children = [Request(f"https://{host}/") for host in hosts[:12]]
        shards = {shard_of(host.encode(), 16) for host in hosts[:12]}
        before = fcalls()
        frontier._expect_pops(0)  # what the Scheduler says before a write no getter waits on
        assert frontier.add_many(children, ack=parent) == [True] * 12
        assert fcalls() - before == len(shards)  # the children's shards; none for the ack
        # Stored: another worker sees the children, and the parent still leased.
        stats = other.stats()
        assert (stats.queued, stats.leased, stats.counters.acked) == (12, 1, 0)
        frontier.flush()
        stats = other.stats()
        assert (stats.queued, stats.leased, stats.counters.acked) == (12, 0, 1)


# -- reading and removing a crawl ------------------------------------------------------


def test_inspect_hosts_top_and_purge_cover_every_shard(
    redis_cluster: Cluster, redis_cluster_url: str
) -> None:
    url = _crawl(redis_cluster_url, "admin")
    crawl = parse_url(url).crawl
    with crawlq.open_frontier(url, prefetch=1) as frontier:
        frontier.add_many(
            [Request(f"https://h{i % 40}.example/{i}", priority=i % 3) for i in range(400)]
        )
        held = frontier.pop()
        assert held is not None
        found = admin.inspect(url, hosts=5)
        # Seen from outside, the worker's prefetched requests are leased: one
        # per shard (all 16 hold some of the 40 hosts), the one popped among them.
        assert found.exists and (found.queued, found.leased, found.seen) == (384, 16, 400)
        assert len(found.shards) == 16 and sum(s.queued for s in found.shards) == 384
        assert all(s.leased == 1 for s in found.shards)
        assert {s.node for s in found.shards} == {
            f"127.0.0.1:{p}" for p in redis_cluster.primary_ports()
        }
        # The 16 prefetched are the best of each shard: priority 2.
        assert dict(found.priorities) == {2: 133 - 16, 1: 133, 0: 134}
        assert found.host_total == 40 and len(found.hosts) == 5
        (queued, leased, seen, counters, *_), busiest = admin.snapshot(url, top=3)
        assert (queued, leased, seen, counters.accepted) == (384, 16, 400, 400)
        assert busiest.busy == 40 and len(busiest) == 3

        runner = CliRunner()
        shown = runner.invoke(app, ["inspect", url])
        assert shown.exit_code == 0, shown.output
        assert "shard 15 on 127.0.0.1:" in shown.output and "384" in shown.output
        blocked = runner.invoke(app, ["hosts", url, "--block", "h1.example", "60"])
        assert blocked.exit_code == 0, blocked.output
        assert {h.host for h in frontier.stats(hosts=100).hosts or () if h.blocked_for} == {
            "h1.example"
        }
        frontier.ack(held)
    gone = CliRunner().invoke(app, ["purge", url, "--yes"])
    assert gone.exit_code == 0, gone.output
    assert not any(_keys_by_node(redis_cluster, crawl).values())
    assert not admin.inspect(url).exists


def test_a_lost_reply_is_not_run_twice_on_a_shard(
    redis_cluster_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retried add returns its first outcome, numbered for the cluster, on one
    shard (a call) and across shards (calls sent together, replies read after)."""
    import redis

    from .test_store import _lose_next_reply

    frontier = crawlq.open_frontier(_crawl(redis_cluster_url, "lost"))
    frontier.add(Request("https://warm.example/"))
    lost = _lose_next_reply(frontier, monkeypatch, redis.ConnectionError("reset (test)"))
    same_host = [Request("https://a.example/1"), Request("https://a.example/1")]
    assert frontier.add_many(same_host) == [True, False]
    assert lost
    monkeypatch.undo()

    dropped = lose_next_reply(monkeypatch)
    spread = [Request(f"https://spread{i}.example/") for i in range(40)]
    assert frontier.add_many(spread + spread[:3]) == [True] * 40 + [False] * 3
    assert dropped
    monkeypatch.undo()
    stats = frontier.stats()
    assert (stats.queued, stats.counters.accepted, stats.counters.duplicates) == (42, 42, 4)
    frontier.close()


def test_a_shard_failing_to_send_leaves_the_calls_sent_before_it_in_step(
    redis_cluster_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write across shards sends every shard's call before reading any reply. When a
    later shard cannot send (its node went away: the chaos run met it in a failover),
    the replies of the calls already sent are still read: left unread, the next command
    on that connection took one for its own (an add read an INFO reply as its outcome
    and failed with a ValueError, a foreign exception)."""
    frontier = crawlq.open_frontier(_crawl(redis_cluster_url, "send-fails"))
    store = frontier._store
    first, second = "https://first.example/", "https://second.example/"
    k, j = store._shard_index(b"first.example"), store._shard_index(b"second.example")
    assert k != j

    def node_gone(*args: object, **kwargs: object) -> None:
        raise crawlq.StoreUnavailable("the node stopped answering (test)")

    monkeypatch.setattr(store._shards[j], "add_start", node_gone)
    with pytest.raises(crawlq.StoreUnavailable):
        frontier.add_many([Request(first + "1"), Request(second + "1")])
    monkeypatch.undo()
    # The first shard's call ran; its connection is in step for what follows.
    again = [Request(first + "1"), Request(first + "2"), Request(second + "1")]
    assert frontier.add_many(again) == [False, True, True]
    assert sorted(r.url for r in iter(frontier.pop, None)) == [
        first + "1",
        first + "2",
        second + "1",
    ]
    frontier.close()


def test_a_crawl_recorded_without_tags_keeps_its_shard_keys(
    redis_cluster: Cluster, redis_cluster_url: str
) -> None:
    """A record from before it kept hash tags: its shards stay under NAME:K."""
    url = _crawl(redis_cluster_url, "untagged")
    crawl = parse_url(url).crawl
    client = _client(redis_cluster)
    client.hset(f"crawlq:{{{crawl}}}:cluster", mapping={"format": "1", "shards": "4"})
    client.close()
    with crawlq.open_frontier(url) as frontier:
        frontier.add_many([f"https://h{i}.example/" for i in range(40)])
        assert frontier.stats().extra["shards"] == 4
    keys = [key for keys in _keys_by_node(redis_cluster, crawl).values() for key in keys]
    tags = {key.decode().split("{", 1)[1].split("}", 1)[0] for key in keys}
    assert tags == {crawl, *(f"{crawl}:{k}" for k in range(4))}
    assert admin.inspect(url).queued == 40


def test_crawl_settings_of_a_cluster_crawl(redis_cluster_url: str) -> None:
    """crawlq add reads a cluster crawl's order and fingerprinter through its admin."""
    from crawlq.stores.redis.cluster import admin as cluster_admin

    url = _crawl(redis_cluster_url, "settings")
    assert cluster_admin.crawl_settings(url) is None
    fingerprinter = crawlq.Fingerprinter(ignore_query_params=["utm_*"])
    crawlq.open_frontier(url, lifo=True, fingerprinter=fingerprinter).close()
    assert cluster_admin.crawl_settings(url) == {
        "lifo": True,
        "fingerprint": fingerprinter.describe(),
    }
    cluster_admin.purge(url)
