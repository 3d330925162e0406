"""crawlq's SpiderState: ``spider.state`` kept in the crawl's store, msgpack, no pickle."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import msgspec
import redis

from tests.redis_server import StartServer

from ._site import ServedSite
from .conftest import SCHEDULER, Crawl

STATE_SPIDER = Path(__file__).with_name("state_spider.py")
SWAP = '{"scrapy.extensions.spiderstate.SpiderState": null, "crawlq.contrib.scrapy.SpiderState": 0}'


class StateCrawl(Crawl):
    """A `Crawl` of state_spider.py instead of site_spider.py."""

    bad: bool = False

    def command(self) -> list[str]:
        command = [
            str(STATE_SPIDER) if part.endswith("site_spider.py") else part
            for part in super().command()
        ]
        return [*command, "-a", f"bad={'1' if self.bad else ''}", "-s", f"EXTENSIONS={SWAP}"]


def _state_crawl(site: ServedSite, tmp_path: Path, settings: dict[str, str]) -> StateCrawl:
    return StateCrawl(site, tmp_path, {"CLOSESPIDER_PAGECOUNT": "5", **settings})


def _run(crawl: StateCrawl) -> dict[str, Any]:
    result = crawl.run()
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.data is not None, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.data


def _is_pickle(data: bytes) -> bool:
    if data.startswith(b"\x80"):  # protocol 2 and later
        return True
    try:
        pickle.loads(data)  # files this test's own crawl wrote
    except Exception:
        return False
    return True


def _assert_no_pickle(jobdir: Path) -> None:
    files = [path for path in jobdir.rglob("*") if path.is_file()]
    assert files
    assert not (jobdir / "spider.state").exists()
    pickles = [path for path in files if _is_pickle(path.read_bytes())]
    assert not pickles, pickles


def _assert_state_kept(crawl: StateCrawl) -> None:
    first = _run(crawl)
    assert first["loaded"] == {}
    second = _run(crawl)
    loaded = second["loaded"]
    assert loaded["runs"] == 1
    assert loaded["blob"] == repr(b"\x00\x80pickle-free")
    assert len(loaded["pages"]) >= 5
    third = _run(crawl)
    assert third["loaded"]["runs"] == 2


def test_state_in_crawlq_schedulers_sqlite_job_and_no_pickle_in_jobdir(
    site: ServedSite, tmp_path: Path
) -> None:
    jobdir = tmp_path / "job"
    crawl = _state_crawl(site, tmp_path, {"JOBDIR": str(jobdir), "SCHEDULER": SCHEDULER})
    _assert_state_kept(crawl)
    assert not (jobdir / "crawlq-spider.state").exists()  # it is in crawlq.db
    _assert_no_pickle(jobdir)


def test_state_with_the_stock_scheduler_and_crawlq_disk_queues_no_pickle(
    site: ServedSite, tmp_path: Path
) -> None:
    jobdir = tmp_path / "job"
    crawl = _state_crawl(
        site,
        tmp_path,
        {
            "JOBDIR": str(jobdir),
            "SCHEDULER_DISK_QUEUE": "crawlq.contrib.scrapy.LifoDiskQueue",
            "SCHEDULER_START_DISK_QUEUE": "crawlq.contrib.scrapy.FifoDiskQueue",
        },
    )
    _assert_state_kept(crawl)
    assert msgspec.msgpack.decode((jobdir / "crawlq-spider.state").read_bytes())["runs"] == 3
    _assert_no_pickle(jobdir)


def test_state_in_redis_with_crawlq_redis_queues(
    site: ServedSite, tmp_path: Path, redis_servers: StartServer
) -> None:
    server = redis_servers()
    jobdir = tmp_path / "job"
    crawl = _state_crawl(
        site,
        tmp_path,
        {
            "JOBDIR": str(jobdir),
            "CRAWLQ_URL": server.url,
            "SCHEDULER_DISK_QUEUE": "crawlq.contrib.scrapy.RedisLifoQueue",
            "SCHEDULER_START_DISK_QUEUE": "crawlq.contrib.scrapy.RedisFifoQueue",
        },
    )
    _assert_state_kept(crawl)
    client = redis.Redis.from_url(server.url)
    stored = client.get(b"crawlq:{state}:spider-state")
    client.close()
    assert stored is not None and msgspec.msgpack.decode(stored)["runs"] == 3
    assert not (jobdir / "crawlq-spider.state").exists()
    _assert_no_pickle(jobdir)


def test_a_value_msgpack_cannot_store_is_refused_by_name_and_the_old_state_kept(
    site: ServedSite, tmp_path: Path
) -> None:
    crawl = _state_crawl(site, tmp_path, {"JOBDIR": str(tmp_path / "job")})
    assert _run(crawl)["loaded"] == {}
    crawl.bad = True
    result = crawl.run()
    assert "SerializationError" in result.stderr, result.stderr[-3000:]
    assert "spider.state['opaque'] cannot be stored" in result.stderr, result.stderr[-3000:]
    crawl.bad = False
    assert _run(crawl)["loaded"]["runs"] == 1


def test_the_docs_settings_blocks_name_real_classes() -> None:
    # The Scrapy page's settings snippets (```py): every dotted class path
    # they set must import, so a rename cannot leave the docs behind.
    import importlib

    from tests.test_readme import blocks

    snippets = [code for section, code in blocks("py") if section == "docs/scrapy.md: Scrapy"]
    assert len(snippets) == 2
    paths: list[str] = []
    for code in snippets:
        namespace: dict[str, Any] = {}
        exec(code, namespace)
        for name, value in namespace.items():
            if name.isupper() and isinstance(value, str) and value.count(".") >= 2:
                paths.append(value)
            if name == "EXTENSIONS":
                paths += list(value)
                assert value["crawlq.contrib.scrapy.SpiderState"] is not None
                assert value["scrapy.extensions.spiderstate.SpiderState"] is None
    assert "crawlq.contrib.scrapy.RedisLifoQueue" in paths
    for path in paths:
        module, _, name = path.rpartition(".")
        assert getattr(importlib.import_module(module), name) is not None, path
