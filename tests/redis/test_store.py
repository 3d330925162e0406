"""Redis-only behaviour: shared state, prefetch, close, purge, inspect, Bloom dedup."""

from __future__ import annotations

import asyncio
import time

import pytest

import crawlq
from crawlq import Request
from crawlq.stores.redis import finishing as redis_finishing
from crawlq.stores.redis import store as redis_store
from tests._in_step import crawl_in_step
from tests.redis._wide import WIDE


def test_close_never_wipes_shared_data(url: str) -> None:
    with crawlq.open_frontier(url) as first:
        first.add_many([Request(f"https://h{i}.example/") for i in range(5)])
        popped = first.pop()
        assert popped is not None
        first.ack(popped)
        first.save_state({"pages": 1})
    with crawlq.open_frontier(url) as again:
        stats = again.stats()
        assert (stats.queued, stats.leased, stats.seen) == (4, 0, 5)
        assert again.load_state() == {"pages": 1}
        assert not again.add(Request("https://h0.example/"))


def test_workers_share_one_frontier(url: str) -> None:
    one, two = crawlq.open_frontier(url), crawlq.open_frontier(url)
    one.add_many([Request(f"https://h{i}.example/{i}") for i in range(6)])
    assert not two.add(Request("https://h3.example/3"))  # seen by the other worker
    # one's second pop leases a batch of two: one request stays prefetched.
    mine = [one.pop(), one.pop()]
    assert all(mine) and one.stats().extra["prefetched"] == 1
    got = [r.url for r in iter(two.pop, None)]
    assert len(got) == 3 and not {r.url for r in mine if r} & set(got)
    # The prefetched request is leased for everybody but its holder.
    assert (two.stats().queued, two.stats().leased) == (0, 6)
    assert (one.stats().queued, one.stats().leased) == (1, 5)
    one.close()  # gives its unserved prefetch back
    rest = [r.url for r in iter(two.pop, None)]
    assert len(rest) == 1
    everything = [r.url for r in mine if r] + got + rest
    assert sorted(everything) == sorted(f"https://h{i}.example/{i}" for i in range(6))
    two.close()


def test_prefetch_grows_while_drained_fast(url: str) -> None:
    frontier = crawlq.open_frontier(url, prefetch=16)
    frontier.add_many([Request(f"https://h{i}.example/") for i in range(100)])
    store = frontier._store
    sizes = []
    for _ in range(40):
        assert frontier.pop() is not None
        sizes.append(store._want)  # type: ignore[attr-defined]
    assert sizes[0] == 1 and max(sizes) == 16
    frontier.close()


def test_prefetched_requests_are_not_served_once_half_their_lease_passed(url: str) -> None:
    frontier = crawlq.open_frontier(url, lease_timeout=0.4, prefetch=8)
    frontier.add_many([Request(f"https://h{i}.example/") for i in range(4)])
    first = frontier.pop()
    second = frontier.pop()  # fetches a batch of 2: one stays prefetched
    assert first is not None and second is not None
    time.sleep(0.25)
    third = frontier.pop()  # the prefetched one is stale: given back, fetched afresh
    assert third is not None
    assert frontier.stats().leased == 3
    frontier.close()


def test_a_dead_workers_leases_come_back_after_they_expire(url: str) -> None:
    dead = crawlq.open_frontier(url, lease_timeout=0.5)
    dead.add_many([Request(f"https://h{i}.example/") for i in range(3)])
    taken = dead.pop()
    assert taken is not None
    # The worker dies: no close, no ack (its store object is simply dropped).
    other = crawlq.open_frontier(url, lease_timeout=30)
    first_round = [r.url for r in iter(other.pop, None)]
    assert taken.url not in first_round
    wait = other.next_ready_in()
    assert wait is not None and 0 < wait <= 0.5
    time.sleep(wait + 0.05)
    back = other.pop()
    assert back is not None and back.url == taken.url
    dead.ack(taken)  # too late: the lease is gone, nothing happens
    assert other.stats().leased == len(first_round) + 1
    other.close()


def test_host_delay_is_shared_between_workers(url: str) -> None:
    one = crawlq.open_frontier(url, host_delay=0.3)
    two = crawlq.open_frontier(url, host_delay=0.3)
    one.add_many([Request(f"https://a.example/{i}") for i in range(2)])
    start = time.monotonic()
    assert one.pop() is not None
    assert two.pop() is None  # a.example is pacing, for every worker
    while (second := two.pop()) is None:
        time.sleep(0.01)
    assert second.url == "https://a.example/1"
    assert time.monotonic() - start >= 0.29
    one.close()
    two.close()


def _lose_next_reply(
    frontier: crawlq.Frontier, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> list[object]:
    """Lose the next reply after the server sent it: the call sees ``error``.

    Returns the list the lost reply goes in (clear it to lose the next one).
    """
    from crawlq.stores.redis import conn as _redis_conn

    real_round_trip = _redis_conn.round_trip
    lost: list[object] = []

    def send_then_lose(conn: object, packed: bytes) -> object:
        reply = real_round_trip(conn, packed)
        if not lost:
            lost.append(reply)
            raise error
        return reply

    monkeypatch.setattr(_redis_conn, "round_trip", send_then_lose)
    return lost


def test_a_lost_reply_is_not_run_twice(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A retried add returns its first outcome instead of calling its requests duplicates."""
    import redis

    frontier = crawlq.open_frontier(url)
    frontier.add(Request("https://warm.example/"))  # connect
    lost = _lose_next_reply(
        frontier, monkeypatch, redis.ConnectionError("connection reset by peer (test)")
    )
    assert frontier.add_many([Request("https://a.example/1"), Request("https://a.example/1")]) == [
        True,
        False,
    ]
    assert lost  # the first reply was dropped, the retry replayed it
    assert len(frontier) == 2
    popped = frontier.pop()
    assert popped is not None
    lost.clear()
    frontier.ack(popped)  # a lost ack reply: the retry is harmless
    assert len(frontier) == 1
    frontier.close()


def test_connection_resets_are_retried(url: str, redis_url: str) -> None:
    import redis

    frontier = crawlq.open_frontier(url)
    frontier.add_many([Request(f"https://h{i}.example/") for i in range(20)])
    admin = redis.Redis.from_url(redis_url)
    done = 0
    for _ in range(20):
        admin.client_kill_filter(_type="normal", skipme=True)
        request = frontier.pop()
        assert request is not None
        frontier.ack(request)
        done += 1
    assert done == 20 and len(frontier) == 0
    admin.close()
    frontier.close()


def test_unreachable_mid_crawl_raises_and_never_reports_empty(
    redis_servers: pytest.FixtureRequest,
) -> None:
    server = redis_servers()  # type: ignore[operator]
    frontier = crawlq.open_frontier(server.url + "?crawl=gone", retry_timeout=0.3)
    frontier.add_many([Request(f"https://h{i}.example/") for i in range(3)])
    server.stop()
    start = time.monotonic()
    with pytest.raises(crawlq.StoreUnavailable, match="cannot reach Redis"):
        len(frontier)
    assert time.monotonic() - start < 3
    with pytest.raises(crawlq.StoreUnavailable):
        frontier.pop()
    with pytest.raises(crawlq.StoreUnavailable):
        frontier.add(Request("https://x.example/"))
    frontier.close()  # no raise: nothing to give back


def test_purge_removes_one_crawl_only(redis_url: str) -> None:
    keep, drop = f"{redis_url}?crawl=keep-me", f"{redis_url}?crawl=drop-me"
    for url in (keep, drop):
        with crawlq.open_frontier(url) as frontier:
            frontier.add_many([Request(f"https://h{i}.example/") for i in range(3)])
            frontier.pop()
    assert redis_store.purge(drop) >= 5
    assert redis_store.purge(drop) == 0
    with crawlq.open_frontier(drop) as fresh:
        assert len(fresh) == 0 and fresh.add(Request("https://h0.example/"))
    with crawlq.open_frontier(keep) as kept:
        assert len(kept) == 3
    redis_store.purge(keep)
    redis_store.purge(drop)


def test_inspect(url: str) -> None:
    worker = crawlq.open_frontier(url, host_concurrency=2)
    worker.add_many(
        [Request(f"https://big.example/{i}", priority=i % 3) for i in range(6)]
        + [Request("https://small.example/", priority=-1)]
    )
    popped = worker.pop()
    assert popped is not None
    report = redis_store.inspect(url, hosts=5)
    assert report.exists and report.crawl == url.rsplit("=", 1)[1]
    assert report.queued + report.leased == 7
    assert report.leased >= 1 and sum(report.leases_by_owner.values()) == report.leased
    assert report.hosts[0].host == "big.example"
    assert sum(count for _, count in report.priorities) == report.queued
    assert [p for p, _ in report.priorities] == sorted(
        {p for p, _ in report.priorities}, reverse=True
    )
    assert report.dedup == "exact" and report.seen == 7
    assert report.settings["last_host_concurrency"] == "2"
    assert report.as_dict()["hosts"][0]["host"] == "big.example"
    worker.close()
    assert not redis_store.inspect(url.replace("store-", "missing-")).exists


def test_bloom_dedup(url: str) -> None:
    frontier = crawlq.open_frontier(url, bloom_capacity=2000, bloom_error_rate=0.01)
    added = frontier.add_many([Request(f"https://h{i % 7}.example/{i}") for i in range(1000)])
    assert sum(added) >= 990  # a few false positives are allowed
    assert not any(frontier.add_many([Request(f"https://h{i % 7}.example/{i}") for i in range(50)]))
    extra = frontier.stats().extra
    assert 0.2 < extra["bloom_fill_ratio"] < 0.5
    assert 0 < extra["bloom_false_positive_rate"] < 0.01
    assert frontier.stats().seen == sum(added)
    # seen_many checks the same bits as add, without setting any.
    fingerprint = frontier.fingerprinter.fingerprint
    old = [fingerprint(Request(f"https://h{i % 7}.example/{i}")) for i in range(1000)]
    new = [fingerprint(Request(f"https://new.example/{i}")) for i in range(1000)]
    assert all(frontier.seen_many(old))
    assert sum(frontier.seen_many(new)) <= 30  # false positives only
    before = frontier.seen_many(new)
    added_new = frontier.add_many([Request(f"https://new.example/{i}") for i in range(1000)])
    assert not any(a and b for a, b in zip(added_new, before, strict=True))  # positives refused
    assert all(frontier.seen_many(new))
    frontier.close()
    # Later opens adopt the crawl's filter; a different one is refused.
    with crawlq.open_frontier(url) as again:
        assert not again.add(Request("https://h1.example/1"))
        assert again.stats().extra["bloom_capacity"] == 2000
    with pytest.raises(crawlq.IncompatibleStore, match="bloom_capacity=2000"):
        crawlq.open_frontier(url, bloom_capacity=5000)
    assert redis_store.inspect(url).dedup == "bloom"


def test_exact_dedup_keeps_11_raw_bytes_per_fingerprint(url: str, redis_url: str) -> None:
    import redis

    with crawlq.open_frontier(url) as frontier:
        frontier.add(Request("https://a.example/"))
        fingerprint = frontier.fingerprinter.fingerprint(Request("https://a.example/"))
    client = redis.Redis.from_url(redis_url)
    crawl = url.rsplit("=", 1)[1]
    bucket = client.hgetall(f"crawlq:{{{crawl}}}:s:0")
    client.close()
    assert bucket == {fingerprint[:11]: b""}  # 88 bits decide a duplicate


def test_no_pickle_in_redis(url: str, redis_url: str) -> None:
    import redis

    with crawlq.open_frontier(url) as frontier:
        frontier.add(Request("https://a.example/1", meta={"k": [1, 2]}))
        frontier.add(Request("https://a.example/2", meta={"k": [3]}))
    client = redis.Redis.from_url(redis_url)
    crawl = url.rsplit("=", 1)[1]
    entries = client.lrange(f"crawlq:{{{crawl}}}:l:0:a.example", 0, -1)
    head = client.hget(f"crawlq:{{{crawl}}}:hosts", "a.example")
    payloads = client.hgetall(f"crawlq:{{{crawl}}}:p")
    client.close()
    # A host's queued requests of one priority are a list of 15-digit id +
    # encoded request, in order; its record names the first, its head.
    assert isinstance(entries, list) and len(entries) == 2
    assert isinstance(head, bytes) and len(head) == 21 + 15 and entries[0][:15] == head[21:]
    assert payloads == {}  # "p" holds leased requests only
    for entry in entries:
        assert not entry[15:].startswith(b"\x80")  # no pickle protocol header: msgpack
    assert crawlq._request.decode_request(entries[0][15:]).meta == {"k": [1, 2]}
    assert crawlq._request.decode_request(entries[1][15:]).meta == {"k": [3]}


def test_finished_requests_leave_nothing_behind_but_their_fingerprints(
    url: str, redis_url: str
) -> None:
    import redis

    with crawlq.open_frontier(url) as frontier:
        frontier.add_many([Request(f"https://h{i % 3}.example/{i}") for i in range(50)])
        popped = [frontier.pop() for _ in range(50)]
        assert None not in popped
        frontier.release_many(popped[40:])  # type: ignore[arg-type]
        frontier.ack_many(popped[:40])  # type: ignore[arg-type]
        while (request := frontier.pop()) is not None:
            frontier.ack(request)
    client = redis.Redis.from_url(redis_url)
    crawl = url.rsplit("=", 1)[1]
    keys = {key.decode() for key in client.scan_iter(f"crawlq:{{{crawl}}}:*")}
    payloads = client.hlen(f"crawlq:{{{crawl}}}:p")
    assert payloads == 0
    names = {key.removeprefix(f"crawlq:{{{crawl}}}:") for key in keys}
    # No queue, payload, lease deadline or ready host is left: "ready" and
    # "leases" hold their wide entry alone (key format 9); "lease" may keep
    # this worker's last outcome (for a retried call), "hosts" pacing,
    # "accepted" one count per host (max_requests_per_host, stats); the 50
    # fingerprints are in two dedup buckets (48 each before a split);
    # "fingerprinter" the description the crawl was last opened with.
    buckets = {"s:0", "s:1"}
    wide = {"ready", "leases", "hosts", "lease"}
    assert (
        {"meta", "accepted", "fingerprinter"} | wide | buckets
        <= names
        <= {"meta", "accepted", "fingerprinter"} | wide | buckets
    )
    for key in ("ready", "leases"):
        assert client.zrange(f"crawlq:{{{crawl}}}:{key}", 0, -1) == [WIDE]
    accepted = client.hgetall(f"crawlq:{{{crawl}}}:accepted")
    client.close()
    assert accepted == {f"h{i}.example".encode(): b"17" if i < 2 else b"16" for i in range(3)}


def test_a_lost_pop_reply_returns_the_same_leases(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis

    frontier = crawlq.open_frontier(url)
    frontier.add_many([Request(f"https://h{i}.example/") for i in range(3)])
    lost = _lose_next_reply(frontier, monkeypatch, redis.TimeoutError("timeout reading (test)"))
    popped = frontier.pop()
    assert lost and popped is not None
    stats = frontier.stats()
    assert (stats.queued, stats.leased) == (2, 1)  # no lease orphaned by the retry
    frontier.ack(popped)
    assert [r.url for r in iter(frontier.pop, None)] == [
        "https://h1.example/",
        "https://h2.example/",
    ]
    frontier.close()


def test_a_server_that_lost_the_functions_gets_them_again(url: str, redis_url: str) -> None:
    import redis

    frontier = crawlq.open_frontier(url)
    frontier.add(Request("https://a.example/"))
    admin = redis.Redis.from_url(redis_url)
    admin.function_flush()
    assert frontier.add(Request("https://b.example/"))
    assert len(frontier) == 2
    admin.close()
    frontier.close()


def test_out_of_memory_is_store_full_and_changes_nothing(url: str, redis_url: str) -> None:
    import redis

    frontier = crawlq.open_frontier(url)
    frontier.add(Request("https://a.example/"))
    admin = redis.Redis.from_url(redis_url)
    admin.config_set("maxmemory", "1")
    try:
        with pytest.raises(crawlq.StoreFull, match=r"out of memory.*maxmemory"):
            frontier.add_many([Request(f"https://b.example/{i}") for i in range(10)])
        assert len(frontier) == 1  # reads still work
    finally:
        admin.config_set("maxmemory", "0")
        admin.close()
    assert frontier.add_many([Request(f"https://b.example/{i}") for i in range(10)]) == [True] * 10
    frontier.close()


def test_ack_many_of_thousands(url: str) -> None:
    frontier = crawlq.open_frontier(url, prefetch=1000)
    frontier.add_many([Request(f"https://h{i % 50}.example/{i}") for i in range(2500)])
    popped = [r for r in iter(frontier.pop, None)]
    assert len(popped) == 2500
    frontier.ack_many(popped)
    assert len(frontier) == 0
    frontier.close()


def test_children_then_their_parents_acks(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # One lease per call, so two of the three acks follow in later calls.
    monkeypatch.setattr(redis_finishing, "FINISH_CHUNK", 1)
    frontier = crawlq.open_frontier(url)
    frontier.add_many([Request(f"https://h{i}.example/") for i in range(3)])
    parents = [r for r in iter(frontier.pop, None)]
    store = frontier._store
    children = [Request(f"https://h{i}.example/child") for i in range(3)]
    handles = [p._lease for p in parents]
    assert store.add([frontier._entry(c) for c in children], handles) == [True] * 3
    stats = frontier.stats()
    assert (stats.queued, stats.leased) == (3, 0)
    frontier.close()


def test_keys_restored_behind_the_functions_back_are_reaped_within_a_second(
    url: str, redis_url: str
) -> None:
    """A restored backup holding an expired lease: its request comes back.

    Pops skip the expiry scan while a bound in the server's Lua state says
    nothing can be due; a bound is never set more than a second ahead, so keys
    the functions did not write are looked at within that second.
    """
    import redis

    client = redis.Redis.from_url(redis_url)
    crawl = url.rsplit("=", 1)[1]
    pattern = f"crawlq:{{{crawl}}}:*"
    with crawlq.open_frontier(url, lease_timeout=0.2, prefetch=1) as short:
        short.add(Request("https://a.example/backup"))
        assert short.pop() is not None  # leased, never acked: expires in 0.2 s
        backup = {key: client.dump(key) for key in client.scan_iter(pattern)}
    redis_store.purge(url)
    time.sleep(0.3)
    with crawlq.open_frontier(url, lease_timeout=60, prefetch=1) as frontier:
        frontier.add(Request("https://b.example/other"))
        other = frontier.pop()  # scans (nothing leased): the next scan is due in a second
        assert other is not None
        frontier.ack(other)
        for key in client.scan_iter(pattern):
            client.delete(key)
        for key, value in backup.items():
            client.restore(key, 0, value)  # the restored lease has expired
        came_back = None
        deadline = time.monotonic() + 3
        while came_back is None and time.monotonic() < deadline:
            time.sleep(0.05)
            came_back = frontier.pop()
        assert came_back is not None and came_back.url == "https://a.example/backup"
        frontier.ack(came_back)
    client.close()


def _at_phase(low: float, high: float) -> None:
    """Wait until the wall clock (the server's, on this machine) is in [low, high) of a ms."""
    while not low <= (time.time() * 1000) % 1 < high:
        pass


def test_a_host_delay_is_never_undercut(url: str) -> None:
    """Leases of one host by two workers come at least host_delay apart.

    The server leases each request between the pop's send and its reply, so
    the reply of a lease minus the send of the one before bounds their gap
    from above: that bound must reach the delay every time. Every other
    lease is taken late in a millisecond and the next early in one: a server
    clock rounded down to whole ms (as it once was) gave gaps up to 1 ms short.
    """
    delay = 0.05
    workers = [crawlq.open_frontier(url, host_delay=delay) for _ in range(2)]
    workers[0].add_many([Request(f"https://a.example/{i}") for i in range(20)])
    gaps = []
    last_sent = None
    for n in range(20):
        worker = workers[n % 2]
        while True:
            if n % 2 == 0:
                _at_phase(0.7, 0.9)
            else:
                _at_phase(0.0, 0.2)
            sent = time.monotonic()
            request = worker.pop()
            received = time.monotonic()
            if request is not None:
                break
        worker.ack(request)
        if last_sent is not None:
            gaps.append(received - last_sent)
        last_sent = sent
    assert min(gaps) >= delay, [round(gap * 1000, 2) for gap in gaps]
    for worker in workers:
        worker.close()


def _outage_after_next_reply(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The next call runs on the server, then the connection stays down.

    Every later round trip fails with a connection error until the returned
    list is cleared: the server's reply to that call is lost for good.
    """
    import redis

    from crawlq.stores.redis import conn as _redis_conn

    real_round_trip = _redis_conn.round_trip
    down: list[bool] = []
    lost: list[bool] = []

    def run_then_fail(conn: object, packed: bytes) -> object:
        if down:
            raise redis.ConnectionError("connection refused (test)")
        reply = real_round_trip(conn, packed)
        if not lost:
            lost.append(True)
            down.append(True)
            raise redis.ConnectionError("connection reset by peer (test)")
        return reply

    monkeypatch.setattr(_redis_conn, "round_trip", run_then_fail)
    return down


@pytest.mark.parametrize("next_call", ["pop", "stats_then_pop", "close"])
def test_the_leases_of_a_pop_lost_in_an_outage_come_back_at_once(
    url: str, monkeypatch: pytest.MonkeyPatch, next_call: str
) -> None:
    """A pop ran but its reply was lost and the retries gave up: its leases return.

    The lease timeout is long: only the next call can bring them back.
    """
    frontier = crawlq.open_frontier(url, retry_timeout=0.2, host_delay=60, prefetch=8)
    frontier.add_many([Request(f"https://h{i}.example/") for i in range(3)])
    assert frontier.pop() is not None  # h0: a batch of one, served
    down = _outage_after_next_reply(monkeypatch)
    with pytest.raises(crawlq.StoreUnavailable):
        frontier.pop()  # leased h1 (and started its delay) on the server
    with pytest.raises(crawlq.StoreUnavailable):
        frontier.pop()  # never reached the server
    down.clear()  # the server is back
    if next_call == "close":
        frontier.close()
        other = crawlq.open_frontier(url)
        assert (other.stats().queued, other.stats().leased) == (2, 1)
        other.close()
        return
    if next_call == "stats_then_pop":
        frontier.stats()
    again = frontier.pop()
    assert again is not None and again.url == "https://h1.example/"
    stats = frontier.stats()
    assert (stats.queued, stats.leased) == (1, 2)  # h2 queued (or prefetched)
    frontier.close()


def test_acks_ride_the_next_refill(url: str) -> None:
    """With ack_delay, pop + ack costs a call per prefetched batch, not per ack."""
    calls = {}
    for ack_delay in (0.0, 3600.0):
        crawl = url.replace("?crawl=", f"?crawl=ride-{int(ack_delay)}-")
        frontier = crawlq.open_frontier(crawl, ack_delay=ack_delay)
        frontier.add_many([Request(f"https://h{i % 10}.example/{i}") for i in range(200)])
        store = frontier._store
        before = store._calls  # type: ignore[attr-defined]
        done = 0
        while (request := frontier.pop()) is not None:
            frontier.ack(request)
            done += 1
        calls[ack_delay] = store._calls - before  # type: ignore[attr-defined]
        assert done == 200
        frontier.close()
        with crawlq.open_frontier(crawl) as again:
            assert (again.stats().queued, again.stats().leased) == (0, 0)  # close sent them
    assert calls[0.0] >= 200
    assert calls[3600.0] <= 20


@pytest.mark.parametrize("ack_delay", [0.0, 0.05])
def test_expected_pops_are_leased_behind_the_write_in_its_round_trip(
    url: str, ack_delay: float
) -> None:
    """A write told that pops follow leases them after its changes, in order, in one call."""
    frontier = crawlq.open_frontier(url, ack_delay=ack_delay)
    store = frontier._store
    assert isinstance(store, redis_store.RedisStore)
    frontier.add_many([Request(f"https://h{p}.example/", priority=p) for p in (5, 4, 3, 2, 1)])
    frontier._expect_pops(2)
    first = frontier.pop()  # leases two: 5, and 4 stays prefetched
    assert first is not None and first.priority == 5
    assert [r.priority for r, _ in store._buffer] == [4]
    # A child worse than every prefetched request: those stay, two more follow them.
    frontier._expect_pops(3)
    before = store._calls
    added = frontier._write([frontier._entry(Request("https://c.example/0", priority=0))], [])
    assert added == [True] and store._calls == before + 1
    assert [r.priority for r, _ in store._buffer] == [4, 3, 2]
    # A child at least as good as the last prefetched one, in the same call:
    # with ack_delay=0 the batch goes back and is leased again behind it; with
    # acks that wait (order between hosts of one priority approximate anyway)
    # it is leased on top and merged in by priority (a top-up, refill.lua).
    frontier._expect_pops(3)
    frontier._write([frontier._entry(Request("https://c.example/9", priority=9))], [])
    assert store._calls == before + 2
    held = [9, 4, 3] if ack_delay == 0 else [9, 4, 3, 2]
    assert [r.priority for r, _ in store._buffer] == held
    popped = [frontier.pop() for _ in range(len(held))]
    assert store._calls == before + 2  # served from the batch
    assert [r.priority for r in popped if r is not None] == held
    rest = [r.priority for r in iter(frontier.pop, None)]
    assert rest == [2, 1, 0][len(held) - 3 :]
    frontier.close()


def test_scheduler_leases_each_request_once_per_hand_out(url: str) -> None:
    """32 coroutines' get / add_many(ack=) loop: pops ride the batch's write, none leased twice.

    Leased ahead of a write that brings better requests, a batch would be
    given back and leased again (each request leased twice or more).
    """

    async def crawl() -> tuple[int, int, int]:
        async with crawlq.Scheduler(crawlq.open_frontier(url)) as scheduler:
            store = scheduler._frontier._store
            assert isinstance(store, redis_store.RedisStore)
            leased = 0
            take = store._take

            def counting_take(reply: list[object], started: float) -> None:
                nonlocal leased
                leased += (len(reply) - 2) // 4
                take(reply, started)  # type: ignore[arg-type]

            store._take = counting_take  # type: ignore[method-assign]
            await scheduler.add_many([Request(f"https://s{i}.example/") for i in range(64)])
            before = store._calls
            steps = await crawl_in_step(scheduler, 600, ack_with_links=True)
            return steps, leased, store._calls - before

    steps, leased, calls = asyncio.run(crawl())
    assert steps >= 600
    assert steps <= leased <= steps + 32  # a batch's getters take what it leased
    assert calls <= steps / 4  # batches of many coroutines


def test_a_host_at_its_limit_never_waits_on_acks_held_here(url: str) -> None:
    frontier = crawlq.open_frontier(url, host_concurrency=1, ack_delay=3600)
    frontier.add_many([Request(f"https://a.example/{i}") for i in range(3)])
    first = frontier.pop()
    assert first is not None
    assert frontier.pop() is None  # a.example is at its limit
    frontier.ack(first)  # waits here...
    assert frontier.next_ready_in() == 0.0  # ...but a look at the server sends it
    second = frontier.pop()
    assert second is not None and second.url == "https://a.example/1"
    frontier.ack(second)
    third = frontier.pop()  # the refill itself carries the waiting ack
    assert third is not None and third.url == "https://a.example/2"
    frontier.close()


def accepted_of(frontier: crawlq.Frontier, host: str) -> int:
    listed = frontier.stats(hosts=True).hosts or ()
    return next((h.accepted for h in listed if h.host == host), 0)


def test_without_a_cap_each_worker_sends_its_host_counts_within_a_second(url: str) -> None:
    first, second = crawlq.open_frontier(url), crawlq.open_frontier(url)
    try:
        first.add_many([f"https://a.example/{i}" for i in range(3)])
        # Stats only: the first worker holds its count until a second has passed...
        assert accepted_of(second, "a.example") == 0
        assert accepted_of(first, "a.example") == 3  # ...but counts its own when asked
        first.add_many([f"https://a.example/{i}" for i in range(3, 5)])
        assert accepted_of(second, "a.example") == 3
        time.sleep(1.1)
        first.add(Request("https://a.example/5"))  # the first add after a second sends them
        assert accepted_of(second, "a.example") == 6
        first.add(Request("https://a.example/6"))
    finally:
        first.close()  # sends what it holds
    assert accepted_of(second, "a.example") == 7
    second.close()


def test_with_a_cap_every_worker_sees_exact_host_counts(url: str) -> None:
    first = crawlq.open_frontier(url, max_requests_per_host=100)
    second = crawlq.open_frontier(url, max_requests_per_host=100)
    try:
        first.add_many([f"https://a.example/{i}" for i in range(3)])
        assert accepted_of(second, "a.example") == 3
    finally:
        first.close()
        second.close()
