"""crawlq.contrib.crawlee.RequestManager: mapping, dedup, order, counts, pacing, purge, 429s.

Most tests drive the manager as crawlee's crawler does (add, fetch, mark
handled, reclaim, is_finished / is_empty); the last one runs crawlee's
HttpCrawler on it against the local two-host site.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import pytest
from crawlee import ConcurrencySettings, Request
from crawlee.crawlers import (
    BasicCrawler,
    BasicCrawlingContext,
    ParselCrawler,
    ParselCrawlingContext,
)
from crawlee.request_loaders import ThrottlingRequestManager
from crawlee.storage_clients import MemoryStorageClient

import crawlq
from crawlq.contrib.crawlee import RequestManager
from crawlq.contrib.crawlee.mapping import from_crawlq, to_crawlq

from .conftest import ADDRESSES, TwoHostSite

_names = itertools.count()
Opener = Callable[..., Awaitable[RequestManager]]


@pytest.fixture
async def opened() -> AsyncIterator[Opener]:
    """Open managers for the test; all are closed after it."""
    managers: list[RequestManager] = []

    async def open_manager(url: str = "memory://", **options: object) -> RequestManager:
        manager = await RequestManager.open(url, **options)
        managers.append(manager)
        return manager

    yield open_manager
    for manager in managers:
        await manager.close()


@pytest.fixture(params=["memory", "sqlite"])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A memory frontier and a SQLite job (the codec's round trip)."""
    return "memory://" if request.param == "memory" else str(tmp_path / "job")


def _full_request() -> Request:
    request = Request.from_url(
        "https://example.com/search?q=1&b=2#frag",
        method="POST",
        headers={"X-Token": "abc", "Accept": "text/html"},
        payload=b"\xff\xfe\x00 not utf-8",
        label="DETAIL",
        session_id="session-7",
        user_data={"nested": {"list": [1, 2.5, None, "x"], "flag": True}},
        max_retries=5,
        enqueue_strategy="same-domain",
        keep_url_fragment=True,
        use_extended_unique_key=True,
    )
    request.retry_count = 2
    request.no_retry = True
    request.session_rotation_count = 3
    request.crawl_depth = 4
    request.forefront = True
    return request


def _dump(request: Request) -> dict[str, object]:
    """Every field (crawlee's own JSON form cannot hold a payload that is not UTF-8)."""
    return {**request.model_dump(by_alias=True, exclude={"payload"}), "body": request.payload}


def test_mapping_round_trip_keeps_every_field() -> None:
    request = _full_request()
    stored = to_crawlq(request, forefront=True)
    assert stored.body == b"\xff\xfe\x00 not utf-8"
    assert stored.method == "POST" and stored.priority == 1 and stored.depth == 4
    assert stored.headers == {"x-token": "abc", "accept": "text/html"}
    back = from_crawlq(stored)
    assert _dump(back) == _dump(request)
    assert back.label == "DETAIL" and back.session_id == "session-7"
    assert back.max_retries == 5 and back.session_rotation_count == 3


@pytest.mark.parametrize("payload", [None, b"", b"a=1"])
def test_mapping_tells_no_payload_from_an_empty_one(payload: bytes | None) -> None:
    request = Request.from_url("https://example.com/", method="POST", payload=payload)
    assert from_crawlq(to_crawlq(request)).payload == payload


def test_a_request_not_from_the_adapter_is_a_serialization_error() -> None:
    with pytest.raises(crawlq.SerializationError, match="not added by crawlq's crawlee"):
        from_crawlq(crawlq.Request("https://example.com/"))


async def test_requests_come_back_whole_through_the_store(opened: Opener, any_url: str) -> None:
    manager = await opened(any_url)
    request = _full_request()
    await manager.add_request(request)
    fetched = await manager.fetch_next_request()
    assert fetched is not None
    assert _dump(fetched) == _dump(request)


async def test_unique_key_decides_duplicates_as_crawlee_does(opened: Opener) -> None:
    manager = await opened()
    first = await manager.add_request("https://example.com/a")
    assert first is not None and not first.was_already_present
    # crawlee's unique_key normalises the URL: the same page twice.
    again = await manager.add_request(Request.from_url("https://EXAMPLE.com/a#x"))
    assert again is not None and again.was_already_present
    # The same URL under another unique_key is another request, and the
    # other way round.
    keyed = await manager.add_request(Request.from_url("https://example.com/a", unique_key="k"))
    assert keyed is not None and not keyed.was_already_present
    other = await manager.add_request(Request.from_url("https://example.com/b", unique_key="k"))
    assert other is not None and other.was_already_present
    # always_enqueue adds the same URL every time.
    for _ in range(2):
        forced = Request.from_url("https://example.com/a", always_enqueue=True)
        added = await manager.add_request(forced)
        assert added is not None and not added.was_already_present
    # A handled request stays seen.
    fetched = [await manager.fetch_next_request() for _ in range(4)]
    assert all(fetched)
    for request in fetched:
        assert request is not None
        await manager.mark_request_as_handled(request)
    again = await manager.add_request("https://example.com/a")
    assert again is not None and again.was_already_present
    assert await manager.get_total_count() == 4
    assert await manager.is_finished()


async def test_add_requests_drops_duplicates_within_a_batch(opened: Opener) -> None:
    manager = await opened()
    await manager.add_requests(["https://example.com/x", "https://example.com/x#y"] * 3)
    assert await manager.get_total_count() == 1


async def test_forefront_requests_come_first(opened: Opener, any_url: str) -> None:
    manager = await opened(any_url)
    await manager.add_requests([f"https://example.com/{n}" for n in range(3)])
    await manager.add_request("https://example.com/urgent", forefront=True)
    urls = []
    for _ in range(4):
        request = await manager.fetch_next_request()
        assert request is not None
        urls.append(request.url)
    assert urls == [
        "https://example.com/urgent",
        "https://example.com/0",
        "https://example.com/1",
        "https://example.com/2",
    ]


async def test_reclaim_keeps_crawlees_changes(opened: Opener, any_url: str) -> None:
    manager = await opened(any_url)
    await manager.add_request(Request.from_url("https://example.com/retry", label="L"))
    request = await manager.fetch_next_request()
    assert request is not None
    request.retry_count += 1
    request.session_rotation_count = 2
    request.user_data["note"] = "tried once"
    await manager.reclaim_request(request)
    again = await manager.fetch_next_request()
    assert again is not None
    assert again.retry_count == 1 and again.session_rotation_count == 2
    assert again.user_data["note"] == "tried once" and again.label == "L"
    await manager.mark_request_as_handled(again)
    assert await manager.is_finished()


async def test_reclaim_is_a_release_in_place(opened: Opener, any_url: str) -> None:
    manager = await opened(any_url)
    await manager.add_requests(["https://example.com/1", "https://example.com/2"])
    request = await manager.fetch_next_request()
    assert request is not None and request.url.endswith("/1")
    request.retry_count = 1
    await manager.reclaim_request(request)
    again = await manager.fetch_next_request()
    assert again is not None and again.url.endswith("/1") and again.retry_count == 1
    await manager.mark_request_as_handled(again)
    counters = (await asyncio.to_thread(manager.frontier.stats)).counters
    assert counters.accepted == 2 and counters.released == 1


async def test_counts_follow_the_crawl(opened: Opener, any_url: str) -> None:
    manager = await opened(any_url)
    assert await manager.get_total_count() == 0
    assert await manager.is_empty() and await manager.is_finished()
    await manager.add_requests([f"https://example.com/{n}" for n in range(3)])
    assert await manager.get_total_count() == 3
    assert not await manager.is_empty() and not await manager.is_finished()
    request = await manager.fetch_next_request()
    assert request is not None
    assert not await manager.is_finished()  # fetched, not handled
    assert await manager.mark_request_as_handled(request) is not None
    assert await manager.mark_request_as_handled(request) is None  # twice: not ours any more
    await asyncio.sleep(0.3)  # past the cache of a store that does I/O
    assert await manager.get_handled_count() == 1
    assert await manager.get_total_count() == 3


async def test_a_paced_host_idles_the_crawl_without_ending_it(opened: Opener, any_url: str) -> None:
    manager = await opened(any_url, host_delay=30.0)
    await manager.add_requests(["https://example.com/1", "https://example.com/2"])
    first = await manager.fetch_next_request()
    assert first is not None
    await manager.mark_request_as_handled(first)
    # The second waits 30 s for its host: nothing to fetch, the crawl not over.
    assert await manager.fetch_next_request() is None
    assert await manager.is_empty()
    assert not await manager.is_finished()


async def test_crawlee_idles_while_every_host_is_paced(tmp_path: Path, opened: Opener) -> None:
    manager = await opened(str(tmp_path / "job"), host_delay=2.5)
    handled: list[tuple[str, float]] = []
    crawler = BasicCrawler(
        request_manager=manager,
        storage_client=MemoryStorageClient(),
        configure_logging=False,
    )

    @crawler.router.default_handler
    async def handler(context: BasicCrawlingContext) -> None:
        handled.append((context.request.url, time.monotonic()))

    async def measure() -> float:
        while not handled:  # the first request went; the second waits 2.5 s
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        start = time.process_time()
        await asyncio.sleep(2.0)
        return time.process_time() - start

    run = asyncio.create_task(crawler.run(["https://a.invalid/1", "https://a.invalid/2"]))
    cpu = await measure()
    await asyncio.wait_for(run, 30)
    assert [url for url, _ in handled] == ["https://a.invalid/1", "https://a.invalid/2"]
    assert handled[1][1] - handled[0][1] >= 2.5 - 0.01
    assert cpu < 0.2, f"{cpu:.3f} s of CPU in 2 s while the only host was paced"


async def test_purge_refuses_to_wipe_a_durable_job(tmp_path: Path, opened: Opener) -> None:
    manager = await opened(str(tmp_path / "job"))
    await manager.add_request("https://example.com/kept")
    with pytest.raises(crawlq.ConfigError, match="purge_request_queue=False"):
        await manager.purge()
    with pytest.raises(crawlq.ConfigError, match="allow_purge=True"):
        await manager.drop()
    assert await manager.get_total_count() == 1
    assert not await manager.is_finished()


async def test_purge_refuses_to_wipe_a_shared_crawl(redis_url: str, opened: Opener) -> None:
    manager = await opened(f"{redis_url}?crawl=crawlee-purge-{next(_names)}")
    await manager.add_request("https://example.com/kept")
    with pytest.raises(crawlq.ConfigError, match="shared Redis crawl"):
        await manager.purge()
    assert not await manager.is_finished()


async def test_allow_purge_wipes_a_job_and_keeps_the_manager_usable(
    tmp_path: Path, opened: Opener
) -> None:
    manager = await opened(str(tmp_path / "job"), allow_purge=True)
    await manager.add_request("https://example.com/gone")
    await manager.purge()
    assert await manager.is_finished()
    assert await manager.get_total_count() == 0
    added = await manager.add_request("https://example.com/gone")  # seen set wiped too
    assert added is not None and not added.was_already_present


async def test_a_second_run_in_memory_purges(opened: Opener) -> None:
    manager = await opened()
    crawler = BasicCrawler(
        request_manager=manager, storage_client=MemoryStorageClient(), configure_logging=False
    )
    seen: list[str] = []

    @crawler.router.default_handler
    async def handler(context: BasicCrawlingContext) -> None:
        seen.append(context.request.url)

    await crawler.run(["https://a.invalid/1"])
    await crawler.run(["https://a.invalid/1"])  # purged: fetched again
    assert seen == ["https://a.invalid/1"] * 2


async def test_a_second_run_on_a_job_says_how_to_go_on(tmp_path: Path, opened: Opener) -> None:
    manager = await opened(str(tmp_path / "job"))
    crawler = BasicCrawler(
        request_manager=manager, storage_client=MemoryStorageClient(), configure_logging=False
    )

    @crawler.router.default_handler
    async def handler(context: BasicCrawlingContext) -> None:
        pass

    await crawler.run(["https://a.invalid/1"])
    with pytest.raises(crawlq.ConfigError, match="purge_request_queue=False"):
        await crawler.run(["https://a.invalid/2"])
    await crawler.run(["https://a.invalid/2"], purge_request_queue=False)
    assert await manager.get_handled_count() == 2


async def test_a_429_blocks_the_host_for_every_worker(redis_url: str, opened: Opener) -> None:
    url = f"{redis_url}?crawl=crawlee-429-{next(_names)}"
    worker = await opened(url)
    other = await opened(url)
    assert isinstance(worker, ThrottlingRequestManager)
    await worker.add_requests(["https://slow.example/1", "https://slow.example/2"])
    request = await worker.fetch_next_request()
    assert request is not None
    assert worker.record_domain_delay(request.url, retry_after=timedelta(seconds=30))
    assert worker.is_throttled(request.url)
    assert not worker.is_throttled("https://fast.example/")
    await worker.reclaim_request(request)  # after the block is written
    await other.add_request("https://fast.example/1")
    # As crawlee's pool does: None means "nothing due now", ask again.
    deadline = time.monotonic() + 5
    while (fetched := await other.fetch_next_request()) is None and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert fetched is not None and fetched.url == "https://fast.example/1"
    await other.mark_request_as_handled(fetched)
    assert await other.fetch_next_request() is None  # slow.example is blocked
    hosts = {
        count.host: count
        for count in (await asyncio.to_thread(other.frontier.stats, hosts=True)).hosts or ()
    }
    blocked_for = hosts["slow.example"].blocked_for
    assert blocked_for is not None and 25 < blocked_for <= 30
    assert not await other.is_finished()


async def test_429_backoff_doubles_per_burst_without_retry_after(opened: Opener) -> None:
    manager = await opened(base_delay=0.2, max_delay=0.3)
    url = "https://busy.example/"
    manager.record_domain_delay(url)
    first = manager.frontier.stats(hosts=True).hosts
    assert first is not None and first[0].blocked_for is not None
    assert manager.record_domain_delay(url)  # same burst: nothing changes
    await asyncio.sleep(0.25)
    manager.record_domain_delay(url)  # a new 429 after the block: 0.4 s, capped at 0.3
    blocked = manager.frontier.stats(hosts=True).hosts
    assert blocked is not None and blocked[0].blocked_for is not None
    assert 0.2 < blocked[0].blocked_for <= 0.3


async def test_robots_crawl_delay_becomes_the_hosts_delay(redis_url: str, opened: Opener) -> None:
    url = f"{redis_url}?crawl=crawlee-robots-{next(_names)}"
    manager = await opened(url, host_delay=0.5)
    other = await opened(url)
    manager.set_crawl_delay("https://polite.example/x", 3)
    manager.set_crawl_delay("https://polite.example/y", 1)  # the first sticks
    manager.set_crawl_delay("https://eager.example/x", 0)  # never below host_delay
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        policy = await asyncio.to_thread(other.frontier.host_policy, "polite.example")
        eager = await asyncio.to_thread(other.frontier.host_policy, "eager.example")
        if policy.delay is not None and eager.delay is not None:
            break
        await asyncio.sleep(0.05)
    assert policy.delay == 3.0
    assert eager.delay == 0.5


def test_importing_without_crawlee_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['crawlee'] = None\n"
        "import crawlq\n"
        "try:\n"
        "    import crawlq.contrib.crawlee\n"
        "except crawlq.ConfigError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install 'crawlq[crawlee]'" in done.stdout


async def test_parsel_crawler_on_two_hosts_fetches_once_at_the_hosts_pace(
    site: TwoHostSite,
) -> None:
    delay = 0.15
    manager = await RequestManager.open("memory://", host_delay=delay, host_concurrency=1)
    crawler = ParselCrawler(
        request_manager=manager,
        storage_client=MemoryStorageClient(),
        concurrency_settings=ConcurrencySettings(max_concurrency=8, desired_concurrency=8),
        configure_logging=False,
    )

    @crawler.router.default_handler
    async def handler(context: ParselCrawlingContext) -> None:
        if context.request.label != "warm-up":
            await context.enqueue_links(strategy="all")

    # The frontier promises the pace of its handouts; a fetch reaches the
    # site some time after its handout (longer when the loop is busy), so
    # the handout times are kept to judge the arrivals by.
    handouts: dict[str, float] = {}
    fetch_next = manager.fetch_next_request

    async def fetch_and_note() -> Request | None:
        request = await fetch_next()
        if request is not None:
            handouts[request.url] = time.monotonic()
        return request

    manager.fetch_next_request = fetch_and_note  # type: ignore[method-assign]
    try:
        # A first run warms crawlee up (its first fetch goes out ~50 ms after
        # it was handed out, later ones within a millisecond); the second run
        # purges the memory frontier and crawls the site.
        await crawler.run([Request.from_url(site.url(1, "/page/5"), label="warm-up")])
        site.arrivals.clear()
        await crawler.run([site.url(0, "/page/0")])
    finally:
        await manager.close()
    counts = site.fetches()
    assert set(counts) == site.expected()
    assert max(counts.values()) == 1
    for index, host in enumerate(ADDRESSES):
        handed = sorted(handouts[site.url(index, path)] for h, path in counts if h == host)
        gaps = [later - earlier for earlier, later in itertools.pairwise(handed)]
        assert min(gaps) >= delay - 0.005, (host, "handouts", gaps)
        # A fetch arrives no earlier than its handout, so two arrivals are at
        # least the delay apart less the earlier one's lag behind its handout.
        arrived = [
            (at, handouts[site.url(index, path)])
            for h, path, at in site.arrivals
            if h == host and path != "/robots.txt"
        ]
        for (earlier, handed_out), (later, _) in itertools.pairwise(arrived):
            lag = earlier - handed_out
            assert later - earlier >= delay - lag - 0.005, (host, earlier, later, lag)


# Found by crawlee's own request-queue tests (./scripts/crawlee-suite).


async def test_adding_leaves_the_callers_request_as_it_was(opened: Opener) -> None:
    """crawlee's test_request_with_noascii_chars: the added request's user_data is not filled in."""
    manager = await opened()
    request = Request.from_url("https://crawlee.dev", user_data={"record": "記録三"})
    before = request.model_dump()
    await manager.add_request(request)
    assert request.model_dump() == before
    fetched = await manager.fetch_next_request()
    assert fetched is not None
    assert fetched.user_data == request.user_data


async def test_a_request_just_added_is_seen_at_once(opened: Opener, any_url: str) -> None:
    """crawlee's test_is_empty_and_is_finished and the tandem's: no stale "nothing queued"."""
    manager = await opened(any_url)
    assert await manager.is_empty() is True
    await manager.add_request("https://example.com/")
    assert await manager.is_empty() is False
    await manager.add_request("https://example.org/")
    fetched = [await manager.fetch_next_request(), await manager.fetch_next_request()]
    assert sorted(r.url for r in fetched if r is not None) == [
        "https://example.com/",
        "https://example.org/",
    ]


async def test_drop_and_purge_with_requests_in_flight(opened: Opener, any_url: str) -> None:
    """crawlee's queues drop and purge with fetched requests unfinished; so does crawlq."""
    manager = await opened(any_url, allow_purge=True)
    await manager.add_requests(["https://example.com/a", "https://example.com/b"])
    first = await manager.fetch_next_request()
    assert first is not None
    await manager.purge()
    assert await manager.mark_request_as_handled(first) is None
    assert await manager.is_finished() is True
    await manager.add_request("https://example.com/c")
    assert await manager.fetch_next_request() is not None
    await manager.drop()
    assert await manager.is_finished() is True
