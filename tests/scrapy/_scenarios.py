"""Scheduler and queue scenarios, run in a child process by ``test_scenarios.py``.

Scrapy's ``Crawler`` wants its reactor installed, which must not happen
inside the pytest process (the rest of the suite runs asyncio tests there).
So ``python -m tests.scrapy._scenarios DIR`` runs every scenario here, each
with a fresh ``Crawler`` and engine (as ``benchmarks/peers.py`` builds them),
and prints one JSON line per scenario: its name, and the traceback if it
failed. ``python -m tests.scrapy._scenarios DIR push-forever KEY`` pushes
into a disk queue until killed, for the kill -9 test.

The engine is not started: a scenario plays the engine, calling
``next_request`` and then ``engine._slot.remove_request`` (a stand-in slot)
as the engine does when it is done with a request.
"""

from __future__ import annotations

import datetime
import decimal
import json
import logging
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import scrapy
from scrapy.crawler import Crawler
from scrapy.http import FormRequest, JsonRequest
from scrapy.http.request import NO_CALLBACK

import crawlq
from crawlq.contrib.scrapy import FifoDiskQueue, LifoDiskQueue, Scheduler
from crawlq.contrib.scrapy import engine as _scrapy_engine

SCENARIOS: dict[str, Callable[[Path], None]] = {}


def scenario(func: Callable[[Path], None]) -> Callable[[Path], None]:
    SCENARIOS[func.__name__] = func
    return func


class Item(scrapy.Item):
    name = scrapy.Field()
    tags = scrapy.Field()


class Spider(scrapy.Spider):
    name = "scenario"

    def parse(self, response: Any, **kwargs: Any) -> Any:
        return None

    def parse_item(self, response: Any, **kwargs: Any) -> Any:
        return None

    def on_error(self, failure: Any) -> None:
        return None


class StandInSlot:
    """What the scheduler needs of the engine's slot: remove_request and nextcall."""

    def __init__(self) -> None:
        self.removed: list[Any] = []
        self.wakes = 0
        self.nextcall = self

    def remove_request(self, request: Any) -> None:
        self.removed.append(request)

    def schedule(self, delay: float = 0) -> None:
        self.wakes += 1


_timers: list[tuple[float, Callable[[], None]]] = []


def _recording_call_later(delay: float, func: Callable[[], None]) -> Any:
    _timers.append((delay, func))

    class Timer:
        def cancel(self) -> None:
            pass

    return Timer()


_reactor_installed = False


def make_crawler(settings: dict[str, Any] | None = None) -> Crawler:
    global _reactor_installed
    base = {"LOG_ENABLED": False, "TELNETCONSOLE_ENABLED": False}
    crawler = Crawler(Spider, {**base, **(settings or {})}, init_reactor=not _reactor_installed)
    _reactor_installed = True
    crawler.spider = crawler._create_spider()
    crawler._apply_settings()
    crawler.engine = crawler._create_engine()
    crawler.engine._slot = StandInSlot()  # type: ignore[assignment]
    return crawler


_schedulers: list[Scheduler] = []


def open_scheduler(settings: dict[str, Any] | None = None) -> tuple[Scheduler, Crawler]:
    crawler = make_crawler(settings)
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(crawler.spider)
    _schedulers.append(scheduler)
    return scheduler, crawler


def finish(crawler: Crawler, request: scrapy.Request) -> None:
    """Do what the engine does when it is done with a request."""
    crawler.engine._slot.remove_request(request)  # type: ignore[union-attr]


def drain(scheduler: Scheduler, crawler: Crawler) -> list[scrapy.Request]:
    out = []
    while (request := scheduler.next_request()) is not None:
        out.append(request)
        finish(crawler, request)
    return out


def stat(crawler: Crawler, name: str) -> Any:
    for scheduler in _schedulers:
        scheduler._counts.flush()  # stats are handed over in batches
    return crawler.stats.get_value(name)


@scenario
def seen_ttl_lets_a_url_in_again(tmp: Path) -> None:
    """With ``seen_ttl`` a URL is new again once its fingerprint expired (incremental crawls).

    The scheduler's own set of recent fingerprints refused it for as long as
    it held it.
    """
    for url in ("memory://", f"sqlite:///{tmp / 'job'}"):
        scheduler, crawler = open_scheduler(
            {"CRAWLQ_URL": url, "CRAWLQ_OPTIONS": {"seen_ttl": 0.3}}
        )
        assert scheduler.enqueue_request(scrapy.Request("http://a.example/1"))
        request = scheduler.next_request()
        assert request is not None
        finish(crawler, request)
        assert scheduler.enqueue_request(scrapy.Request("http://a.example/1")) is False
        time.sleep(0.4)
        assert scheduler.enqueue_request(scrapy.Request("http://a.example/1")) is True, url
        request = scheduler.next_request()
        assert request is not None and request.url == "http://a.example/1", url
        finish(crawler, request)
        scheduler.close("finished")


# -- the BaseScheduler contract ------------------------------------------------------


@scenario
def contract_memory(tmp: Path) -> None:
    scheduler, crawler = open_scheduler({"SCHEDULER": "crawlq.contrib.scrapy.Scheduler"})
    assert not scheduler.has_pending_requests() and len(scheduler) == 0
    assert scheduler.next_request() is None
    first = scrapy.Request("http://a.example/1")
    assert scheduler.enqueue_request(first) is True
    assert scheduler.enqueue_request(scrapy.Request("http://a.example/1#frag")) is False
    assert scheduler.enqueue_request(scrapy.Request("http://a.example/1", dont_filter=True))
    assert scheduler.enqueue_request(scrapy.Request("http://b.example/2", priority=5))
    assert len(scheduler) == 3 and scheduler.has_pending_requests()
    got = scheduler.next_request()
    assert got is not None and got.url == "http://b.example/2", got
    assert len(scheduler) == 2
    finish(crawler, got)
    rest = drain(scheduler, crawler)
    assert [r.url for r in rest] == ["http://a.example/1"] * 2
    # The memory store hands back the very objects it was given.
    assert rest[0] is first or rest[1] is first
    assert not scheduler.has_pending_requests() and len(scheduler) == 0
    assert stat(crawler, "scheduler/enqueued") == stat(crawler, "scheduler/enqueued/memory") == 3
    assert stat(crawler, "scheduler/dequeued") == 3
    assert stat(crawler, "dupefilter/filtered") == 1
    assert stat(crawler, "crawlq/acked") == 3
    scheduler.close("finished")


@scenario
def next_request_is_none_while_a_slot_waits_for_its_delay(tmp: Path) -> None:
    _timers.clear()
    scheduler, crawler = open_scheduler({"DOWNLOAD_DELAY": 0.3})
    for n in range(2):
        scheduler.enqueue_request(scrapy.Request(f"http://a.example/{n}"))
    first = scheduler.next_request()
    assert first is not None
    assert scheduler.next_request() is None
    assert scheduler.has_pending_requests() and len(scheduler) == 1
    # The engine is told to look again when the slot is ready, not in 5 s.
    assert _timers and 0.2 < _timers[-1][0] <= 0.3, _timers
    time.sleep(0.3)
    _timers[-1][1]()
    assert crawler.engine._slot.wakes == 1  # type: ignore[union-attr]
    assert scheduler.next_request() is not None
    scheduler.close("finished")


@scenario
def download_slots_follow_the_downloader(tmp: Path) -> None:
    scheduler, crawler = open_scheduler(
        {"CONCURRENT_REQUESTS_PER_DOMAIN": 1, "CONCURRENT_REQUESTS": 100}
    )
    requests = [
        scrapy.Request("http://a.example/1"),
        scrapy.Request("http://a.example/2"),
        scrapy.Request("http://b.example/1", meta={"download_slot": "shared"}),
        scrapy.Request("http://c.example/1", meta={"download_slot": "shared"}),
        scrapy.Request("data:,hello"),  # Scrapy's slot "" (no host)
    ]
    for request in requests:
        assert scheduler.enqueue_request(request)
    out = []
    while (request := scheduler.next_request()) is not None:
        out.append(request.url)
    # One per slot at a time: a.example, "shared", and the no-host slot.
    assert len(out) == 3, out
    assert {crawler.engine.downloader.get_slot_key(r) for r in requests} == {
        "a.example",
        "shared",
        "",
    }
    assert scheduler.has_pending_requests()
    scheduler.close("shutdown")


@scenario
def in_flight_is_capped_by_concurrent_requests(tmp: Path) -> None:
    # With a durable store: the cap bounds the re-fetches after a kill.
    scheduler, crawler = open_scheduler({"CONCURRENT_REQUESTS": 3, "JOBDIR": str(tmp / "job")})
    for n in range(10):
        scheduler.enqueue_request(scrapy.Request(f"http://h{n}.example/"))
    handed = [scheduler.next_request() for _ in range(3)]
    assert all(handed) and scheduler.next_request() is None
    finish(crawler, handed[0])
    assert scheduler.next_request() is not None
    scheduler.close("shutdown")


@scenario
def in_memory_only_the_engine_caps_what_is_in_flight(tmp: Path) -> None:
    # Nothing is fetched again after a kill: requests go out when Scrapy's
    # own scheduler would hand them out (the engine backs out by itself).
    scheduler, _ = open_scheduler({"CONCURRENT_REQUESTS": 3})
    for n in range(10):
        scheduler.enqueue_request(scrapy.Request(f"http://h{n}.example/"))
    handed = [scheduler.next_request() for _ in range(10)]
    assert all(handed) and scheduler.next_request() is None
    scheduler.close("shutdown")
    capped, crawler = open_scheduler({"CONCURRENT_REQUESTS": 3, "CRAWLQ_MAX_IN_FLIGHT": 2})
    for n in range(10):
        capped.enqueue_request(scrapy.Request(f"http://h{n}.example/"))
    handed = [capped.next_request() for _ in range(2)]
    assert all(handed) and capped.next_request() is None
    finish(crawler, handed[0])
    assert capped.next_request() is not None
    capped.close("shutdown")


@scenario
def df_answers_from_the_job_and_its_marks_refuse_requests(tmp: Path) -> None:
    from scrapy.dupefilters import RFPDupeFilter

    jobdir = tmp / "job"
    scheduler, crawler = open_scheduler({"JOBDIR": str(jobdir)})
    assert isinstance(scheduler.df, RFPDupeFilter)
    assert scheduler.enqueue_request(scrapy.Request("http://a.example/1"))
    assert scheduler.df.request_seen(scrapy.Request("http://a.example/1"))
    # A request only asked about is remembered: the scheduler refuses it too.
    assert not scheduler.df.request_seen(scrapy.Request("http://a.example/2"))
    assert scheduler.df.request_seen(scrapy.Request("http://a.example/2"))
    assert not scheduler.enqueue_request(scrapy.Request("http://a.example/2"))
    assert stat(crawler, "dupefilter/filtered") == 1
    scheduler.close("shutdown")
    # Resumed: the job's seen set answers; no Scrapy requests.seen file is written.
    resumed, _ = open_scheduler({"JOBDIR": str(jobdir)})
    assert resumed.df.request_seen(scrapy.Request("http://a.example/1"))
    assert not resumed.df.request_seen(scrapy.Request("http://a.example/3"))
    resumed.close("finished")
    assert not (jobdir / "requests.seen").exists()


class NoNumbersDupeFilter:
    """A DUPEFILTER_CLASS that refuses URLs ending in a digit, and logs what it refuses."""

    logged: list[str] = []  # noqa: RUF012

    def request_seen(self, request: scrapy.Request) -> bool:
        return request.url[-1].isdigit()

    def open(self) -> None:
        pass

    def close(self, reason: str) -> None:
        pass

    def log(self, request: scrapy.Request, spider: Any) -> None:
        self.logged.append(request.url)


@scenario
def another_dupefilter_class_decides(tmp: Path) -> None:
    scheduler, _ = open_scheduler(
        {"DUPEFILTER_CLASS": NoNumbersDupeFilter, "JOBDIR": str(tmp / "job")}
    )
    assert isinstance(scheduler.df, NoNumbersDupeFilter)
    assert not scheduler.enqueue_request(scrapy.Request("http://a.example/1"))
    assert NoNumbersDupeFilter.logged == ["http://a.example/1"]
    # It lets identical requests through: the frontier keeps both.
    assert scheduler.enqueue_request(scrapy.Request("http://a.example/x"))
    assert scheduler.enqueue_request(scrapy.Request("http://a.example/x"))
    assert scheduler.enqueue_request(scrapy.Request("http://a.example/1", dont_filter=True))
    assert len(scheduler) == 3
    scheduler.close("finished")


@scenario
def scheduler_built_directly_like_scrapys(tmp: Path) -> None:
    from scrapy.dupefilters import BaseDupeFilter

    crawler = make_crawler()
    jobdir = tmp / "direct"
    scheduler = Scheduler(BaseDupeFilter(), jobdir=str(jobdir), crawler=crawler)
    scheduler.open(crawler.spider)
    assert scheduler.enqueue_request(scrapy.Request("http://a.example/1"))
    scheduler.close("shutdown")
    assert (jobdir / "crawlq.db").exists()
    assert Scheduler(BaseDupeFilter()).crawler is None


@scenario
def lifo_start_queue_sends_start_requests_newest_first(tmp: Path) -> None:
    settings = {
        "CONCURRENT_REQUESTS_PER_DOMAIN": 0,
        "SCHEDULER_START_MEMORY_QUEUE": "scrapy.squeues.LifoMemoryQueue",
    }
    scheduler, crawler = open_scheduler(settings)
    for n in (1, 2, 3):
        scheduler.enqueue_request(
            scrapy.Request(f"http://a.example/s{n}", meta={"is_start_request": True})
        )
    scheduler.enqueue_request(scrapy.Request("http://a.example/n"))
    order = [r.url.rsplit("/", 1)[1] for r in drain(scheduler, crawler)]
    assert order == ["n", "s3", "s2", "s1"], order
    scheduler.close("finished")


@scenario
def base_dupefilter_turns_deduplication_off(tmp: Path) -> None:
    scheduler, _ = open_scheduler({"DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter"})
    assert scheduler.enqueue_request(scrapy.Request("http://a.example/"))
    assert scheduler.enqueue_request(scrapy.Request("http://a.example/"))
    scheduler.close("finished")


# -- order ------------------------------------------------------------------------------


def _order_requests() -> list[scrapy.Request]:
    def start(url: str, priority: int = 0) -> scrapy.Request:
        return scrapy.Request(url, priority=priority, meta={"is_start_request": True})

    return [
        start("http://a.example/s1"),
        start("http://a.example/s2"),
        scrapy.Request("http://a.example/n1"),
        start("http://a.example/s3"),
        scrapy.Request("http://a.example/n2"),
        start("http://a.example/s-high", priority=1),
        scrapy.Request("http://a.example/low", priority=-1),
        scrapy.Request("http://a.example/n3"),
        scrapy.Request("http://a.example/huge", priority=2**40),
    ]


def _order(settings: dict[str, Any], stock: bool) -> list[str]:
    base = {"CONCURRENT_REQUESTS_PER_DOMAIN": 0, "CONCURRENT_REQUESTS": 0, **settings}
    if stock:
        crawler = make_crawler(
            {**base, "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue"}
        )
        from scrapy.core.scheduler import Scheduler as StockScheduler

        stock_scheduler = StockScheduler.from_crawler(crawler)
        stock_scheduler.open(crawler.spider)
        for request in _order_requests():
            stock_scheduler.enqueue_request(request)
        out = []
        while (request := stock_scheduler.next_request()) is not None:
            out.append(request.url.rsplit("/", 1)[1])
        stock_scheduler.close("finished")
        return out
    scheduler, crawler = open_scheduler(base)
    for request in _order_requests():
        scheduler.enqueue_request(request)
    order = [r.url.rsplit("/", 1)[1] for r in drain(scheduler, crawler)]
    scheduler.close("finished")
    return order


@scenario
def order_matches_scrapy_fifo(tmp: Path) -> None:
    fifo = {
        "SCHEDULER_MEMORY_QUEUE": "scrapy.squeues.FifoMemoryQueue",
        "SCHEDULER_DISK_QUEUE": "scrapy.squeues.PickleFifoDiskQueue",
    }
    ours, theirs = _order(fifo, stock=False), _order(fifo, stock=True)
    assert ours == theirs, (ours, theirs)
    assert ours == ["huge", "s-high", "n1", "n2", "n3", "s1", "s2", "s3", "low"], ours


@scenario
def order_matches_scrapy_lifo(tmp: Path) -> None:
    theirs = _order({}, stock=True)
    assert theirs == ["huge", "s-high", "n3", "n2", "n1", "s1", "s2", "s3", "low"], theirs
    # Start requests keep the order they were yielded in, in memory and on disk.
    assert _order({}, stock=False) == theirs
    assert _order({"JOBDIR": str(tmp / "job")}, stock=False) == theirs


@scenario
def start_requests_like_others_when_start_queues_are_none(tmp: Path) -> None:
    order = _order({"SCHEDULER_START_MEMORY_QUEUE": None, "CRAWLQ_LIFO": False}, stock=False)
    assert order == ["huge", "s-high", "s1", "s2", "n1", "s3", "n2", "n3", "low"], order


# -- storage ----------------------------------------------------------------------------


def _odd_requests(spider: Spider) -> list[scrapy.Request]:
    return [
        scrapy.Request(
            "http://a.example/item?id=1",
            callback=spider.parse_item,
            errback=spider.on_error,
            method="PUT",
            headers={"X-Token": "abc", "Accept": ["text/html", "application/json"]},
            body=b"\x00\x01 body",
            cookies={"session": "s1"},
            meta={
                "tuple": (1, "two", b"3"),
                "set": {1, 2},
                "frozen": frozenset({"x"}),
                "when": datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.UTC),
                "naive": datetime.datetime(2024, 5, 6, 7, 8, 9),
                "day": datetime.date(2024, 5, 6),
                "price": decimal.Decimal("12.50"),
                "by_int": {1: "one", (2, 3): "tuple key"},
                "item": Item(name="n", tags=["a", "b"]),
                "nested": [{"a": (1, 2)}, None, 1.5, True],
                "big": 2**63,
            },
            encoding="latin-1",
            priority=2**40,
            dont_filter=True,
            flags=["f1"],
            cb_kwargs={"page": 3, "key": ("k",)},
        ),
        FormRequest("http://b.example/login", formdata={"user": "u", "pw": "p"}),
        JsonRequest("http://c.example/api", data={"q": [1, 2]}, dumps_kwargs={"indent": 2}),
        scrapy.Request("data:,hello%20world", callback=spider.parse),
        scrapy.Request("http://d.example/none", callback=NO_CALLBACK),
        scrapy.Request("http://:80/no-host"),  # Scrapy takes it, crawlq cannot file it
    ]


def _comparable(request: scrapy.Request, spider: Spider) -> dict[str, Any]:
    if request.callback is NO_CALLBACK:  # Scrapy's to_dict cannot name it
        request = request.replace(callback=None)
    data = request.to_dict(spider=spider)
    data["headers"] = {k: list(v) for k, v in data["headers"].items()}
    return data


@scenario
def requests_survive_the_sqlite_file_exactly(tmp: Path) -> None:
    jobdir = tmp / "job"
    scheduler, crawler = open_scheduler({"JOBDIR": str(jobdir)})
    originals = _odd_requests(crawler.spider)  # type: ignore[arg-type]
    for request in originals:
        assert scheduler.enqueue_request(request), request
    assert stat(crawler, "scheduler/enqueued/disk") == len(originals)
    scheduler.close("shutdown")

    scheduler, crawler = open_scheduler({"JOBDIR": str(jobdir)})
    assert stat(crawler, "crawlq/resumed") == len(originals)
    back = drain(scheduler, crawler)
    spider = crawler.spider
    by_url = {r.url: r for r in back}
    assert len(back) == len(originals)
    for original in originals:
        copy = by_url[original.url]
        assert type(copy) is type(original), (type(copy), type(original))
        assert _comparable(copy, spider) == _comparable(original, spider), original.url  # type: ignore[arg-type]
        if original.callback is NO_CALLBACK:
            assert copy.callback is NO_CALLBACK
    odd = by_url["http://a.example/item?id=1"]
    assert odd.callback == spider.parse_item and odd.errback == spider.on_error  # type: ignore[attr-defined]
    assert type(odd.meta["item"]) is Item and odd.meta["tuple"] == (1, "two", b"3")
    assert odd.meta["naive"].tzinfo is None and odd.meta["by_int"][(2, 3)] == "tuple key"
    assert odd.priority == 2**40
    scheduler.close("finished")


@scenario
def stored_data_cannot_make_the_crawler_import_other_modules(tmp: Path) -> None:
    from crawlq.contrib.scrapy.codec import RequestCodec

    codec = RequestCodec(None)
    data = codec.encode(scrapy.Request("http://a.example/"))
    import msgspec

    payload = msgspec.msgpack.decode(data)
    for path in ("antigravity.Request", "json.JSONDecoder", "scrapy.Spider"):
        forged = msgspec.msgpack.encode({**payload, "_class": path})
        try:
            codec.decode(forged, "http://a.example/")
        except ValueError as exc:
            assert path in str(exc), str(exc)
        else:
            raise AssertionError(f"decoded a payload naming {path}")
    assert "antigravity" not in sys.modules


@scenario
def unserializable_requests_keep_their_place_and_are_dropped_on_resume(tmp: Path) -> None:
    jobdir = tmp / "job"
    scheduler, crawler = open_scheduler({"JOBDIR": str(jobdir)})
    enqueue = scheduler.enqueue_request
    assert enqueue(scrapy.Request("http://a.example/1", priority=1))
    assert enqueue(scrapy.Request("http://a.example/lambda", priority=5, callback=lambda r: None))
    assert enqueue(scrapy.Request("http://a.example/object", priority=3, meta={"x": object()}))
    assert enqueue(scrapy.Request("http://a.example/10", priority=10))
    # Deduplicated against stored requests, both ways round.
    assert not enqueue(scrapy.Request("http://a.example/lambda"))
    assert not enqueue(scrapy.Request("http://a.example/1", callback=lambda r: None))
    assert stat(crawler, "scheduler/unserializable") == 2
    assert stat(crawler, "scheduler/enqueued/memory") == 2
    first = scheduler.next_request()
    assert first is not None and first.url.endswith("/10")
    finish(crawler, first)
    scheduler.close("shutdown")

    scheduler, crawler = open_scheduler({"JOBDIR": str(jobdir)})
    assert [r.url.rsplit("/", 1)[1] for r in drain(scheduler, crawler)] == ["1"]
    assert stat(crawler, "crawlq/unserializable_lost") == 2
    scheduler.close("finished")


@scenario
def a_shared_store_merges_memory_requests_by_priority(tmp: Path) -> None:
    from crawlq.contrib.scrapy.settings import SchedulerConfig

    # A SQLite job standing in for a shared store (Redis): it may not hold
    # tokens of objects that live in this process.
    scheduler, crawler = open_scheduler({"JOBDIR": str(tmp / "job")})
    config = SchedulerConfig(**{**_fields(scheduler.config), "shared": True})
    frontiers = scheduler._frontiers
    assert frontiers is not None
    scheduler.config = frontiers.config = config
    frontiers.seen_many = None
    enqueue = scheduler.enqueue_request
    for priority in (1, 7, 3):
        assert enqueue(scrapy.Request(f"http://a.example/{priority}", priority=priority))
    for priority in (5, 9, 3):
        url = f"http://b.example/m{priority}"
        assert enqueue(scrapy.Request(url, priority=priority, callback=lambda r: None))
    order = [r.url.rsplit("/", 1)[1] for r in drain(scheduler, crawler)]
    # Memory first at equal priority, as in Scrapy.
    assert order == ["m9", "7", "m5", "m3", "3", "1"], order
    assert stat(crawler, "scheduler/dequeued/memory") == 3
    scheduler.close("finished")


def _fields(config: Any) -> dict[str, Any]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


@scenario
def a_request_never_finished_comes_back_after_a_restart(tmp: Path) -> None:
    jobdir = tmp / "job"
    scheduler, crawler = open_scheduler({"JOBDIR": str(jobdir)})
    for n in range(3):
        scheduler.enqueue_request(scrapy.Request(f"http://a{n}.example/"))
    done, unfinished = scheduler.next_request(), scheduler.next_request()
    assert done is not None and unfinished is not None
    finish(crawler, done)
    # The engine asks for the next request at once; the ack is written by
    # then (with the next add, or before the next pop).
    assert scheduler.next_request() is not None
    _kill(scheduler)  # no close: as after kill -9, only what was written counts

    scheduler, crawler = open_scheduler({"JOBDIR": str(jobdir)})
    urls = {r.url for r in drain(scheduler, crawler)}
    assert urls == {"http://a0.example/", "http://a1.example/", "http://a2.example/"} - {
        done.url
    }, urls
    scheduler.close("finished")


def _kill(scheduler: Scheduler) -> None:
    """Leave the job as kill -9 would: nothing more is written, the lock goes."""
    scheduler.frontier._store._lock.release()  # type: ignore[attr-defined]
    scheduler.frontier._store._db.close()  # type: ignore[attr-defined]


def _record_writes(scheduler: Scheduler) -> list[tuple[int, int]]:
    """Record (requests, acks) of every write the store gets from now on."""
    store = scheduler.frontier._store  # type: ignore[attr-defined]
    writes: list[tuple[int, int]] = []
    add, ack = store.add, store.ack

    def recording_add(entries: Any, finished: Any = (), **options: Any) -> Any:
        writes.append((len(entries), len(finished)))
        return add(entries, finished, **options)

    def recording_ack(leases: Any) -> None:
        writes.append((0, len(leases)))
        ack(leases)

    store.add, store.ack = recording_add, recording_ack
    return writes


@scenario
def a_pages_links_and_its_ack_are_written_in_one_commit(tmp: Path) -> None:
    scheduler, crawler = open_scheduler({"JOBDIR": str(tmp / "job")})
    writes = _record_writes(scheduler)
    assert scheduler.enqueue_request(scrapy.Request("http://a.example/"))
    assert writes == [(1, 0)]  # nothing in flight: written at once
    page = scheduler.next_request()
    assert page is not None
    links = ["http://b.example/1", "http://b.example/2", "http://b.example/1", "http://a.example/"]
    added = [scheduler.enqueue_request(scrapy.Request(url)) for url in links]
    assert added == [True, True, False, False]  # held ones and stored ones are duplicates
    assert scheduler.enqueue_request(scrapy.Request("http://b.example/1", dont_filter=True))
    assert len(scheduler) == 3 and scheduler.has_pending_requests()
    assert writes == [(1, 0)]
    finish(crawler, page)
    assert writes == [(1, 0)]
    nxt = scheduler.next_request()
    assert writes == [(1, 0), (3, 1)]  # the links, then the page's ack: one commit
    assert nxt is not None and nxt.url == "http://b.example/1"
    assert stat(crawler, "dupefilter/filtered") == 2
    assert stat(crawler, "scheduler/enqueued") == 4
    finish(crawler, nxt)
    rest = [r.url for r in drain(scheduler, crawler)]
    assert sorted(rest) == ["http://b.example/1", "http://b.example/2"], rest
    scheduler.close("finished")
    assert writes[-1] == (0, 1)  # the last ack, at close


@scenario
def start_requests_are_written_together(tmp: Path) -> None:
    scheduler, _ = open_scheduler({"JOBDIR": str(tmp / "job")})
    writes = _record_writes(scheduler)
    for n in range(3):
        start = scrapy.Request(f"http://s{n}.example/", meta={"is_start_request": True})
        assert scheduler.enqueue_request(start)
    # The spider yields start requests again on resume: they may wait.
    assert writes == [] and len(scheduler) == 3
    first = scheduler.next_request()
    assert writes == [(3, 0)]
    assert first is not None and first.url == "http://s0.example/"
    assert scheduler.enqueue_request(scrapy.Request("http://other.example/"))
    assert writes == [(3, 0)]  # held: s0 is in flight, and would yield it again
    scheduler.close("finished")


@scenario
def links_held_for_a_write_are_not_lost_by_a_kill(tmp: Path) -> None:
    jobdir = str(tmp / "job")
    scheduler, crawler = open_scheduler({"JOBDIR": jobdir})
    scheduler.enqueue_request(scrapy.Request("http://a.example/"))
    page = scheduler.next_request()
    assert page is not None
    scheduler.enqueue_request(scrapy.Request("http://b.example/1"))
    finish(crawler, page)
    _kill(scheduler)  # the link and the ack were never written
    scheduler, crawler = open_scheduler({"JOBDIR": jobdir})
    again = scheduler.next_request()
    assert again is not None and again.url == "http://a.example/"  # so the link comes again
    assert scheduler.enqueue_request(scrapy.Request("http://b.example/1"))
    finish(crawler, again)
    assert [r.url for r in drain(scheduler, crawler)] == ["http://b.example/1"]
    scheduler.close("finished")


@scenario
def links_held_when_the_store_fails_go_on_from_memory(tmp: Path) -> None:
    jobdir = str(tmp / "job")
    scheduler, crawler = open_scheduler({"JOBDIR": jobdir})
    closed: list[str] = []
    crawler.engine.close_spider_async = lambda reason: closed.append(reason)  # type: ignore[method-assign,assignment,misc]
    scheduler.enqueue_request(scrapy.Request("http://a.example/"))
    page = scheduler.next_request()
    assert page is not None
    db = scheduler.frontier._store._db  # type: ignore[attr-defined]
    db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
    links = [f"http://b{n % 7}.example/{n}" for n in range(300)]
    for url in links:  # held: about 600 kB the full disk cannot take
        assert scheduler.enqueue_request(scrapy.Request(url, meta={"pad": "x" * 2000}))
    finish(crawler, page)
    assert scheduler.next_request() is None  # the write failed: StoreFull
    assert closed == ["crawlq_store_error"]
    assert len(scheduler) == 300
    got = drain(scheduler, crawler)
    assert sorted(r.url for r in got) == sorted(links)
    assert all(r.meta["pad"] == "x" * 2000 for r in got)
    scheduler.close("crawlq_store_error")
    # Nothing of it was written, the page was not acked: it comes back.
    scheduler, crawler = open_scheduler({"JOBDIR": jobdir})
    assert [r.url for r in drain(scheduler, crawler)] == ["http://a.example/"]
    scheduler.close("finished")


@scenario
def bad_settings_are_refused_naming_the_setting(tmp: Path) -> None:
    cases = [
        ("CRAWLQ_URL", "bogus://x"),
        ("CRAWLQ_LEASE_TIMEOUT", "-1"),
        ("CRAWLQ_HOST_DELAY", "soon"),
        ("CRAWLQ_LIFO", "maybe"),
        ("CRAWLQ_OPTIONS", {"nonsense": 1}),
        # JSON text, as ``-s CRAWLQ_OPTIONS=...`` gives it: it must parse.
        ("CRAWLQ_OPTIONS", "{shards: 3}"),
    ]
    for name, value in cases:
        try:
            open_scheduler({name: value})
        except crawlq.ConfigError as exc:
            assert name in str(exc), (name, str(exc))
        else:
            raise AssertionError(f"{name}={value!r} was accepted")


@scenario
def a_changed_order_setting_is_refused_on_resume(tmp: Path) -> None:
    jobdir = tmp / "job"
    scheduler, _ = open_scheduler({"JOBDIR": str(jobdir)})
    scheduler.close("finished")
    try:
        open_scheduler({"JOBDIR": str(jobdir), "CRAWLQ_LIFO": False})
    except crawlq.IncompatibleStore as exc:
        assert "CRAWLQ_LIFO" in str(exc), str(exc)
    else:
        raise AssertionError("resumed with another order")


# -- disk queues for the stock scheduler --------------------------------------------------------


def _queue(cls: type[Any], crawler: Crawler, key: Path) -> Any:
    return cls.from_crawler(crawler, str(key))


@scenario
def disk_queues_keep_their_order_and_survive_reopening(tmp: Path) -> None:
    crawler = make_crawler({"JOBDIR": str(tmp / "job")})
    for cls, expected in ((FifoDiskQueue, [0, 1, 2, 3]), (LifoDiskQueue, [3, 2, 1, 0])):
        key = tmp / cls.__name__
        queue = _queue(cls, crawler, key)
        assert len(queue) == 0 and queue.pop() is None and queue.peek() is None
        for n in range(4):
            queue.push(scrapy.Request(f"http://a.example/{n}", callback=crawler.spider.parse))  # type: ignore[union-attr]
        assert len(queue) == 4
        queue.close()
        queue = _queue(cls, crawler, key)
        assert len(queue) == 4
        peeked = queue.peek()
        assert peeked is not None and peeked.url.endswith(f"/{expected[0]}")
        assert len(queue) == 4
        got = []
        while (request := queue.pop()) is not None:
            got.append(int(request.url.rsplit("/", 1)[1]))
        assert got == expected, (cls, got)
        assert request is None and len(queue) == 0
        queue.close()
        assert not key.exists(), "an empty queue leaves no files, like Scrapy's"


@scenario
def disk_queue_refuses_what_it_cannot_store_with_a_value_error(tmp: Path) -> None:
    crawler = make_crawler()
    queue = _queue(FifoDiskQueue, crawler, tmp / "q")
    try:
        queue.push(scrapy.Request("http://a.example/", callback=lambda r: None))
    except ValueError as exc:  # the stock scheduler falls back to memory on ValueError
        assert "callback" in str(exc)
    else:
        raise AssertionError("pushed a lambda callback")
    assert len(queue) == 0
    queue.close()


@scenario
def disk_queue_fails_at_from_crawler_when_its_store_cannot_open(tmp: Path) -> None:
    crawler = make_crawler()
    key = tmp / "q"
    holder = _queue(FifoDiskQueue, crawler, key)
    try:
        _queue(FifoDiskQueue, crawler, key)
    except crawlq.JobLocked as exc:
        assert "SCHEDULER_DISK_QUEUE" in str(exc) and str(key) in str(exc), str(exc)
    else:
        raise AssertionError("opened a locked queue")
    holder.close()
    foreign = tmp / "foreign"
    foreign.mkdir()
    (foreign / "crawlq.db").write_bytes(b"not a database at all")
    try:
        _queue(LifoDiskQueue, crawler, foreign)
    except crawlq.IncompatibleStore as exc:
        assert "SCHEDULER_DISK_QUEUE" in str(exc)
    else:
        raise AssertionError("opened a foreign file")


@scenario
def disk_queues_keep_active_json_listing_their_priorities(tmp: Path) -> None:
    jobdir = tmp / "job"
    crawler = make_crawler({"JOBDIR": str(jobdir)})
    queues = jobdir / "requests.queue"
    queues.mkdir(parents=True)
    active = queues / "active.json"
    spq = _queue(LifoDiskQueue, crawler, queues / "-3")
    spq.push(scrapy.Request("http://a.example/"))
    assert json.loads(active.read_text()) == [-3]
    assert spq.pop() is not None
    spq.close()
    assert json.loads(active.read_text()) == []

    from scrapy.pqueues import _path_safe

    crawler = make_crawler({"JOBDIR": str(tmp / "job2")})
    queues = tmp / "job2" / "requests.queue"
    queues.mkdir(parents=True)
    per_slot = _queue(LifoDiskQueue, crawler, queues / _path_safe("b.example") / "0")
    per_slot.push(scrapy.Request("http://b.example/x"))
    assert json.loads((queues / "active.json").read_text()) == {"b.example": [0]}
    per_slot.close()
    assert json.loads((queues / "active.json").read_text()) == {"b.example": [0]}


def push_forever(key: str) -> None:
    crawler = make_crawler()
    queue = FifoDiskQueue.from_crawler(crawler, key)
    n = 0
    while True:
        queue.push(scrapy.Request(f"http://a.example/{n}"))
        n += 1
        print(n, flush=True)


def count_queue(key: str) -> None:
    crawler = make_crawler()
    queue = FifoDiskQueue.from_crawler(crawler, key)
    numbers = []
    while (request := queue.pop()) is not None:
        numbers.append(int(request.url.rsplit("/", 1)[1]))
    print(json.dumps(numbers))


def main() -> None:
    logging.disable(logging.CRITICAL)
    _scrapy_engine._call_later = _recording_call_later  # type: ignore[assignment]
    directory = Path(sys.argv[1])
    if len(sys.argv) > 3:
        {"push-forever": push_forever, "count": count_queue}[sys.argv[2]](sys.argv[3])
        return
    for name, func in SCENARIOS.items():
        tmp = Path(tempfile.mkdtemp(prefix=name[:20] + "-", dir=directory))
        try:
            func(tmp)
        except BaseException:
            print(json.dumps({"name": name, "error": traceback.format_exc()}), flush=True)
        else:
            print(json.dumps({"name": name, "error": None}), flush=True)


if __name__ == "__main__":
    main()
