"""One frontier shared by many threads (``open_frontier(..., threads=True)``), on every store.

Calls made at once are combined into shared store calls; each caller still
gets its own result or its own error, and nothing is lost or handed out
twice. On Redis the combining is seen in the server's own call counts.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest
import redis

import crawlq
from crawlq import Request

from ..conftest import OpenFrontier

THREADS = 8


def crawl_with_threads(
    frontier: crawlq.Frontier, pages: int, own: Callable[[], crawlq.Frontier] | None = None
) -> Counter[str]:
    """Threads crawl ``THREADS`` trees of ``pages`` pages (5 links each), acking pages with links.

    The threads share ``frontier``, or each opens its own with ``own``.
    """
    fetched: Counter[str] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []
    assert frontier.add_many([f"https://h{i}.example/0" for i in range(THREADS)]) == [True] * 8

    def work() -> None:
        mine = frontier if own is None else own()
        try:
            idle = 0
            while idle < 50:
                request = mine.pop()
                if request is None:
                    idle += 1
                    threading.Event().wait(0.005)
                    continue
                idle = 0
                with lock:
                    fetched[request.url] += 1
                host, number = request.url.removeprefix("https://").split("/")
                n = int(number)
                links = [f"https://{host}/{5 * n + k}" for k in range(1, 6) if 5 * n + k < pages]
                added = mine.add_many(links, ack=request)
                assert added == [True] * len(links)  # each caller gets its own slice
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    return fetched


def test_threads_share_one_frontier_and_fetch_every_page_once(open_store: OpenFrontier) -> None:
    frontier = open_store(threads=True, ack_delay=0)
    fetched = crawl_with_threads(frontier, pages=60)
    assert len(fetched) == THREADS * 60
    assert set(fetched.values()) == {1}
    stats = frontier.stats()
    assert (stats.queued, stats.leased, len(frontier)) == (0, 0, 0)
    c = stats.counters
    assert (c.accepted, c.popped, c.acked, c.duplicates) == (480, 480, 480, 0)


def test_each_caller_gets_its_own_result_and_error(open_store: OpenFrontier) -> None:
    frontier = open_store(threads=True)
    frontier.add(Request("https://a.example/seen"))
    results: dict[int, object] = {}
    start = threading.Barrier(THREADS)

    def call(index: int) -> None:
        start.wait()
        try:
            if index % 2:
                results[index] = frontier.add_many(
                    [f"https://a.example/{index}", "https://a.example/seen"]
                )
            else:
                frontier.ack(Request(f"https://a.example/never-popped-{index}"))
        except crawlq.LeaseError as exc:
            results[index] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for index in range(THREADS):
        if index % 2:
            assert results[index] == [True, False]
        else:
            assert isinstance(results[index], crawlq.LeaseError)
    assert frontier.stats().queued == 1 + THREADS // 2


def test_threads_must_be_a_bool(store_url: str) -> None:
    with pytest.raises(crawlq.ConfigError, match="threads"):
        crawlq.open_frontier(store_url, threads="yes")


def test_on_redis_threads_share_function_calls(open_store: OpenFrontier, store_url: str) -> None:
    if not store_url.startswith("redis://"):
        pytest.skip("counted with the one Redis server's INFO commandstats")
    server = redis.Redis.from_url(store_url.split("?")[0])

    def fcalls() -> int:
        stats = server.info("commandstats")
        return int(stats.get("cmdstat_fcall", {}).get("calls", 0))

    separate = open_store(ack_delay=0)
    before = fcalls()
    crawl_with_threads(separate, pages=60, own=lambda: open_store(ack_delay=0))
    alone = fcalls() - before
    shared = crawlq.open_frontier(store_url + "-shared", threads=True, ack_delay=0)
    try:
        before = fcalls()
        crawl_with_threads(shared, pages=60)
        combined = fcalls() - before
    finally:
        shared.close()
    # The same crawl with a frontier per thread makes about 1.9 function
    # calls a page; sharing one, calls made at once share one (about 1.3).
    assert combined < 0.85 * alone, (combined, alone)
