"""Scrapy's stock scheduler with crawlq's Redis queues, in real crawls on a real redis-server."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.redis_server import RedisServer, StartServer
from tests.small_disk import mounted_disk

from ._site import ServedSite
from .conftest import CONCURRENT_REQUESTS
from .test_crawl import assert_exactly_once, assert_finished

DOWNLOADER_AWARE = "scrapy.pqueues.DownloaderAwarePriorityQueue"
SCRAPY_PRIORITY = "scrapy.pqueues.ScrapyPriorityQueue"
EVERYSEC = ("--appendfsync", "everysec")


def _settings(url: str, jobdir: Path, priority_queue: str) -> dict[str, str]:
    return {
        "JOBDIR": str(jobdir),
        "CRAWLQ_URL": url,
        "SCHEDULER_PRIORITY_QUEUE": priority_queue,
        "SCHEDULER_DISK_QUEUE": "crawlq.contrib.scrapy.RedisLifoQueue",
        "SCHEDULER_START_DISK_QUEUE": "crawlq.contrib.scrapy.RedisFifoQueue",
    }


def _crawlq_keys(url: str) -> list[bytes]:
    client = redis.Redis.from_url(url.partition("?")[0])
    try:
        return sorted(client.scan_iter(match="crawlq:*"))
    finally:
        client.close()


@pytest.mark.parametrize("priority_queue", [DOWNLOADER_AWARE, SCRAPY_PRIORITY])
def test_redis_queues_fetch_every_page_once(
    site: ServedSite,
    make_crawl: Any,
    tmp_path: Path,
    redis_servers: StartServer,
    priority_queue: str,
) -> None:
    server = redis_servers()
    result = make_crawl(_settings(server.url, tmp_path / "job", priority_queue)).run()
    assert_finished(result)
    assert result.stats["scheduler/enqueued/disk"] > 100
    assert result.stats.get("scheduler/enqueued/memory", 0) == 0
    assert "crawlq/redis_queue/pop_unavailable" not in result.stats
    assert_exactly_once(site)
    assert _crawlq_keys(server.url) == []  # every queue drained; the self-check left nothing


def test_redis_queues_resume_after_ctrl_c(
    site: ServedSite, make_crawl: Any, tmp_path: Path, redis_servers: StartServer
) -> None:
    server = redis_servers()
    jobdir = tmp_path / "job"
    crawl = make_crawl(_settings(server.url, jobdir, SCRAPY_PRIORITY))
    stopped = crawl.interrupt_halfway(signal.SIGINT)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    keys = _crawlq_keys(server.url)
    assert any(b":squeue:requests.queue/" in key for key in keys), keys
    assert not list((jobdir / "requests.queue").rglob("q0*"))  # no pickle queue files

    resumed = crawl.run()
    assert_finished(resumed)
    assert resumed.stats["scheduler/dequeued/disk"] > 0
    assert_exactly_once(site)


def _assert_refused(result: Any, site: ServedSite, *words: str) -> None:
    assert site.total() == 0, "the crawl fetched pages although its queues cannot work"
    for word in words:
        assert word in result.stderr, result.stderr[-3000:]
    assert "QueueCheckFailed" in result.stderr, result.stderr[-3000:]


def test_self_check_refuses_a_wrong_password(
    site: ServedSite, make_crawl: Any, tmp_path: Path, redis_servers: StartServer
) -> None:
    server = redis_servers(password="right-secret")
    url = f"redis://:wrong-secret@127.0.0.1:{server.port}/0"
    started = time.monotonic()
    result = make_crawl(_settings(url, tmp_path / "job", SCRAPY_PRIORITY)).run(timeout=60)
    assert time.monotonic() - started < 60
    _assert_refused(result, site, "credentials", "redis://:***@127.0.0.1")
    assert "wrong-secret" not in result.stderr


def test_self_check_refuses_an_unreachable_server(
    site: ServedSite, make_crawl: Any, tmp_path: Path, redis_servers: StartServer
) -> None:
    server = redis_servers()
    server.stop()
    result = make_crawl(_settings(server.url, tmp_path / "job", SCRAPY_PRIORITY)).run(timeout=60)
    _assert_refused(result, site, "cannot reach Redis", f"127.0.0.1:{server.port}")


def test_self_check_refuses_a_server_older_than_7(redis_servers: StartServer) -> None:
    # No redis-server 6 is installed: the version the check reads is replaced.
    from scrapy.utils.test import get_crawler

    from crawlq.contrib.scrapy import QueueCheckFailed, RedisFifoQueue
    from crawlq.contrib.scrapy import redis_queues as queues

    server = redis_servers()
    crawler = get_crawler(settings_dict={"CRAWLQ_URL": server.url + "?crawl=old"})
    original = queues.server_version
    queues.server_version = lambda link: (6, 2, 14)
    try:
        with pytest.raises(QueueCheckFailed, match=r"Redis 6\.2\.14; crawlq needs Redis 7\.0"):
            RedisFifoQueue.from_crawler(crawler, "requests.queue/0")
    finally:
        queues.server_version = original
    assert not queues._Server.servers  # nothing half-open is kept for the next try


def test_self_check_leaves_a_non_empty_queue_untouched(redis_servers: StartServer) -> None:
    import scrapy
    from scrapy.utils.test import get_crawler

    from crawlq.contrib.scrapy import RedisLifoQueue
    from crawlq.contrib.scrapy import redis_queues as queues

    server = redis_servers()
    url = server.url + "?crawl=kept"
    first = RedisLifoQueue.from_crawler(get_crawler(settings_dict={"CRAWLQ_URL": url}), "q/0")
    for n in range(3):
        first.push(scrapy.Request(f"http://example.com/{n}"))
    first.close()
    client = redis.Redis.from_url(server.url)
    before = client.lrange(b"crawlq:{kept}:squeue:q/0", 0, -1)
    queues._Server.servers.pop(next(iter(queues._Server.servers))).drop()  # a fresh process

    again = RedisLifoQueue.from_crawler(get_crawler(settings_dict={"CRAWLQ_URL": url}), "q/0")
    assert client.lrange(b"crawlq:{kept}:squeue:q/0", 0, -1) == before
    assert len(again) == 3
    assert [again.pop().url for _ in range(3)] == [  # type: ignore[union-attr]
        "http://example.com/2",
        "http://example.com/1",
        "http://example.com/0",
    ]
    assert len(again) == 0
    again.close()
    assert client.keys("crawlq:*") == []
    client.close()
    for server_ in list(queues._Server.servers.values()):
        server_.drop()


def test_paused_server_falls_back_to_memory_and_the_crawl_finishes(
    site: ServedSite, make_crawl: Any, tmp_path: Path, redis_servers: StartServer
) -> None:
    server: RedisServer = redis_servers()
    url = server.url + "?socket_timeout=0.3&socket_connect_timeout=0.3"
    crawl = make_crawl(_settings(url, tmp_path / "job", SCRAPY_PRIORITY))
    assert server.pid is not None
    process = crawl.start_until(0.25)
    try:
        os.kill(server.pid, signal.SIGSTOP)
        time.sleep(3)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    result = crawl.finish(process)
    assert_finished(result)
    # Pushes during the pause went to memory, and the crawl still got everything.
    assert result.stats.get("scheduler/enqueued/memory", 0) > 0, result.stats
    assert result.stats["crawlq/redis_queue/push_unavailable"] > 0, result.stats
    assert result.stats["crawlq/redis_queue/pop_unavailable"] > 0, result.stats
    assert set(site.fetches()) == site.expected()


def test_a_full_disk_falls_back_to_memory_and_the_crawl_finishes(
    site: ServedSite, make_crawl: Any, tmp_path: Path
) -> None:
    # The server's files on a small tmpfs, its append-only file written once
    # a second: a full disk makes it refuse every write (MISCONF).
    with mounted_disk(tmp_path / "disk") as disk:
        server = RedisServer(disk.path / "redis", appendonly=True, extra=EVERYSEC)
        server.start()
        try:
            crawl = make_crawl(_settings(server.url, tmp_path / "job", SCRAPY_PRIORITY))
            process = crawl.start_until(0.25)
            disk.fill()
            time.sleep(3)
            disk.free()
            result = crawl.finish(process)
        finally:
            server.stop()
    assert_finished(result)
    assert result.stats.get("scheduler/enqueued/memory", 0) > 0, result.stats
    assert result.stats["crawlq/redis_queue/push_unavailable"] > 0, result.stats
    assert set(site.fetches()) == site.expected()


def test_redis_queues_resume_after_kill_9(
    site: ServedSite, make_crawl: Any, tmp_path: Path, redis_servers: StartServer
) -> None:
    # active.json (which queues to reopen) is kept current by the queues, as
    # with crawlq's SQLite disk queues: only what was in the engine is lost.
    server = redis_servers()
    crawl = make_crawl(_settings(server.url, tmp_path / "job", DOWNLOADER_AWARE))
    killed = crawl.interrupt_halfway(signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    fetched_before = len(site.fetches())

    resumed = crawl.run()
    assert_finished(resumed)
    assert resumed.stats["scheduler/dequeued/disk"] > 0
    missing = site.expected() - set(site.fetches())
    assert len(missing) <= CONCURRENT_REQUESTS, f"{len(missing)} pages lost"
    assert len(site.fetches()) > fetched_before + 100


def test_a_push_and_a_pop_whose_replies_were_lost_are_undone_and_handed_out_again(
    redis_servers: StartServer,
) -> None:
    # A paused server may still run what was sent once it resumes: the pop
    # that timed out may have taken a request, the push may have stored one.
    import scrapy
    from scrapy.utils.test import get_crawler

    from crawlq.contrib.scrapy import RedisFifoQueue, TransientError
    from crawlq.contrib.scrapy import redis_queues as queues

    server = redis_servers()
    assert server.pid is not None
    url = server.url + "?crawl=lost&socket_timeout=0.3"
    queue = RedisFifoQueue.from_crawler(get_crawler(settings_dict={"CRAWLQ_URL": url}), "q/0")
    try:
        queue.push(scrapy.Request("http://example.com/a"))
        queue.push(scrapy.Request("http://example.com/b"))
        os.kill(server.pid, signal.SIGSTOP)
        try:
            assert queue.pop() is None  # sent, no reply
            assert len(queue) == 2  # the last known length, never 0
            assert queue.pop() is None  # not sent: the server is left alone for a while
            time.sleep(queues._PAUSE + 0.1)
            with pytest.raises(TransientError):
                queue.push(scrapy.Request("http://example.com/c"))  # sent, no reply
        finally:
            os.kill(server.pid, signal.SIGCONT)
        time.sleep(queues._PAUSE + 0.3)  # the server runs both; the pause ends
        client = redis.Redis.from_url(server.url)
        stored = client.lrange(b"crawlq:{lost}:squeue:q/0", 0, -1)
        assert 1 <= len(stored) <= 3, stored  # b at least; a unless taken; c if stored
        first = queue.pop()
        assert first is not None and first.url == "http://example.com/a"
        second = queue.pop()
        assert second is not None and second.url == "http://example.com/b"
        assert queue.pop() is None  # c undone if it was stored
        assert len(queue) == 0
        assert client.llen(b"crawlq:{lost}:squeue:q/0") == 0
        client.close()
    finally:
        queue.close()
        for shared in list(queues._Server.servers.values()):
            shared.drop()
