"""Due times in real Scrapy crawls: retries with backoff, delayed fetches, refetches.

Each crawl is ``scrapy runspider due_spider.py`` in a subprocess against a
`FlakySite` in this process, which logs when every request arrived (wall
clock, the clock of crawlq's due times): the delays are read at the server.
The retry and delay crawls run on every store (memory, a SQLite ``JOBDIR``,
Redis); a crawl killed with SIGKILL while its retries wait is resumed with
the same command.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("scrapy")

from crawlq.contrib.scrapy import backoff_delay
from tests._child import child_environment
from tests.test_readme import blocks

from ._flaky import FlakySite

ROOT = Path(__file__).resolve().parents[2]
SPIDER = Path(__file__).with_name("due_spider.py")
SECTION = "docs/scrapy.md: Retries with backoff and refetches"
#: The section's code samples: requests with due-time meta, the middleware
#: lines, an example settings block.
SAMPLES = [code for section, code in blocks("py") if section == SECTION]


def _namespace(code: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(code, SECTION, "exec"), namespace)
    return namespace


#: Scrapy's own RetryMiddleware swapped for crawlq's: the lines the docs give.
BACKOFF = json.dumps(_namespace(SAMPLES[1])["DOWNLOADER_MIDDLEWARES"])
SETTINGS = {
    "SCHEDULER": "crawlq.contrib.scrapy.Scheduler",
    "LOG_LEVEL": "INFO",
    "TELNETCONSOLE_ENABLED": "False",
    "ROBOTSTXT_OBEY": "False",
}
#: How late a due request may be fetched: the engine is woken when it is due
#: (its 5-second heartbeat would make it up to 5 s late).
LATE = 1.5
#: Slack for the clocks of two processes (both read time.time()).
EARLY = 0.05


@pytest.fixture
def flaky() -> Iterator[FlakySite]:
    site = FlakySite()
    yield site
    site.close()


@dataclass
class DueCrawl:
    """One crawl command, run (or started) the same way each time."""

    workdir: Path
    plan: dict[str, Any]
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def out(self) -> Path:
        return self.workdir / "result.json"

    def command(self) -> list[str]:
        plan = self.workdir / "plan.json"
        plan.write_text(json.dumps(self.plan))
        command = [
            sys.executable, "-m", "scrapy", "runspider", str(SPIDER),
            "-a", f"plan={plan}", "-a", f"out={self.out}",
        ]  # fmt: skip
        for name, value in {**SETTINGS, **self.settings}.items():
            command += ["-s", f"{name}={value}"]
        return command

    def start(self) -> subprocess.Popen[str]:
        self.out.unlink(missing_ok=True)
        environment = child_environment()
        return subprocess.Popen(
            self.command(),
            cwd=self.workdir,
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def finish(self, process: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
        try:
            _, stderr = process.communicate(timeout=timeout)
        except BaseException:
            process.kill()
            process.communicate()
            raise
        assert self.out.exists(), stderr[-3000:]
        data: dict[str, Any] = json.loads(self.out.read_text())
        data["log"] = stderr
        data["returncode"] = process.returncode
        return data

    def run(self, timeout: float = 120) -> dict[str, Any]:
        started = time.time()
        data = self.finish(self.start(), timeout)
        data["elapsed"] = time.time() - started
        return data


def store_settings(store: str, tmp_path: Path, redis_url: str | None = None) -> dict[str, str]:
    if store == "jobdir":
        return {"JOBDIR": str(tmp_path / "job")}
    if store == "redis":
        assert redis_url is not None
        return {"CRAWLQ_URL": f"{redis_url}?crawl=due-{os.getpid()}-{time.monotonic_ns()}"}
    return {}


def assert_finished(data: dict[str, Any]) -> None:
    assert data["reason"] == "finished", data["log"][-3000:]
    assert "Traceback" not in data["log"], data["log"][-3000:]


@pytest.fixture(params=["memory", "jobdir", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    redis_url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    return store_settings(request.param, tmp_path, redis_url)


def test_the_docs_samples_run_and_say_what_the_code_does() -> None:
    """The section's three samples: each runs, and its values are what crawlq reads."""
    from scrapy.settings import Settings

    from crawlq.contrib.scrapy import BackoffRetryMiddleware
    from crawlq.contrib.scrapy.due import due_of, refetch_after
    from crawlq.contrib.scrapy.settings import SchedulerConfig

    assert len(SAMPLES) == 3
    requests = _namespace(SAMPLES[0])
    now = time.time()
    assert due_of(requests["later"], now) == now + 600
    assert (
        due_of(requests["tonight"])
        == datetime.datetime(2030, 1, 1, 22, tzinfo=datetime.UTC).timestamp()
    )
    assert due_of(requests["hourly"]) is None
    assert refetch_after(requests["hourly"], None) == (3600.0, None)
    # The middleware lines are the ones the crawls below run with (BACKOFF).
    assert json.loads(BACKOFF) == {
        "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
        "crawlq.contrib.scrapy.BackoffRetryMiddleware": 550,
    }
    example = {k: v for k, v in _namespace(SAMPLES[2]).items() if k.isupper()}
    settings = Settings(example)
    config = SchedulerConfig.from_settings(settings)
    assert config.refetch_after == 3600 and config.wait_for_revisits and config.durable
    middleware = BackoffRetryMiddleware(settings)
    waits = [backoff_delay(n, middleware.base, middleware.maximum) for n in range(1, 6)]
    assert waits == [2, 4, 8, 16, 32] and example["RETRY_TIMES"] == 5
    for path in example["DOWNLOADER_MIDDLEWARES"]:
        module, _, name = path.rpartition(".")
        assert getattr(__import__(module, fromlist=[name]), name) is not None


def test_bad_settings_stop_the_crawl_at_start() -> None:
    from scrapy.settings import Settings

    from crawlq import ConfigError
    from crawlq.contrib.scrapy import BackoffRetryMiddleware
    from crawlq.contrib.scrapy.settings import SchedulerConfig

    for name, value in [("CRAWLQ_REFETCH_AFTER", "0"), ("CRAWLQ_REFETCH_AFTER", "-1")]:
        with pytest.raises(ConfigError, match=name):
            SchedulerConfig.from_settings(Settings({name: value}))
    with pytest.raises(ConfigError, match="CRAWLQ_WAIT_FOR_REVISITS"):
        SchedulerConfig.from_settings(Settings({"CRAWLQ_WAIT_FOR_REVISITS": "maybe"}))
    for name, value in [
        ("CRAWLQ_RETRY_BACKOFF_BASE", "0"),
        ("CRAWLQ_RETRY_BACKOFF_BASE", "nan"),
        ("CRAWLQ_RETRY_BACKOFF_MAX", "-1"),
        ("CRAWLQ_RETRY_BACKOFF_MAX", "soon"),
    ]:
        with pytest.raises(ConfigError, match=name):
            BackoffRetryMiddleware(Settings({name: value}))


def test_the_backoff_doubles_up_to_its_cap() -> None:
    assert [backoff_delay(n, 1.0, 300.0) for n in range(1, 6)] == [1, 2, 4, 8, 16]
    assert backoff_delay(10, 1.0, 300.0) == 300.0
    assert backoff_delay(0, 0.5, 300.0) == 0.5
    assert backoff_delay(5000, 1.0, 60.0) == 60.0


def test_a_page_failing_twice_is_retried_with_growing_delays(
    flaky: FlakySite, tmp_path: Path, store: dict[str, str]
) -> None:
    """503, 503, 200: the retries wait 1 s then 2 s in the frontier; the crawl waits for them.

    One request at a time (CONCURRENT_REQUESTS=1) and every page on one
    host: the pages due while the retry waits are fetched meanwhile, so
    the waiting retry holds no downloader slot.
    """
    plan = {
        "requests": [
            {"url": flaky.url("/fail/2/a")},
            *({"url": flaky.url(f"/page/{n}"), "meta": {"crawlq_delay": 0.5}} for n in range(3)),
        ]
    }
    settings = {
        "DOWNLOADER_MIDDLEWARES": BACKOFF,
        "RETRY_TIMES": "3",
        "CONCURRENT_REQUESTS": "1",
        "CRAWLQ_RETRY_BACKOFF_BASE": "1",
        **store,
    }
    data = DueCrawl(tmp_path, plan, settings).run()
    assert_finished(data)
    attempts = flaky.times("/fail/2/a")
    assert len(attempts) == 3, flaky.hits
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    for gap, backoff in zip(gaps, (1.0, 2.0), strict=True):
        assert backoff - EARLY <= gap < backoff + LATE, gaps
    # The other pages were fetched while the first retry waited.
    others = [at for n in range(3) for at in flaky.times(f"/page/{n}")]
    assert len(others) == 3
    assert all(attempts[0] < at < attempts[1] for at in others), (attempts, others)
    stats = data["stats"]
    assert stats["retry/count"] == 2
    assert stats["crawlq/retry/delayed"] == 2
    assert [page["url"] for page in data["parsed"]].count(flaky.url("/fail/2/a")) == 1
    # The engine was woken when the retries were due, not spinning meanwhile.
    assert data["empty"] < 60, data["empty"]


def test_a_retry_waits_for_a_longer_retry_after(flaky: FlakySite, tmp_path: Path) -> None:
    plan = {"requests": [{"url": flaky.url("/fail/1/b/2")}]}
    settings = {"DOWNLOADER_MIDDLEWARES": BACKOFF, "CRAWLQ_RETRY_BACKOFF_BASE": "0.2"}
    data = DueCrawl(tmp_path, plan, settings).run()
    assert_finished(data)
    first, second = flaky.times("/fail/1/b/2")
    assert 2 - EARLY <= second - first < 2 + LATE


def test_meta_delay_and_not_before_delay_a_fetch(
    flaky: FlakySite, tmp_path: Path, store: dict[str, str]
) -> None:
    now = time.time()
    aware = datetime.datetime.fromtimestamp(now + 2.5, datetime.UTC)
    metas = {
        "now": {},
        "delay": {"crawlq_delay": 2},
        "timestamp": {"crawlq_not_before": now + 3},
        "datetime": {"crawlq_not_before": {"aware": aware.isoformat()}},
        "past": {"crawlq_not_before": now - 60},
    }
    plan = {"requests": [{"url": flaky.url(f"/page/{k}"), "meta": m} for k, m in metas.items()]}
    data = DueCrawl(tmp_path, plan, store).run()
    assert_finished(data)
    (fetched_now,) = flaky.times("/page/now")
    (delayed,) = flaky.times("/page/delay")
    (timestamp,) = flaky.times("/page/timestamp")
    (dated,) = flaky.times("/page/datetime")
    (past,) = flaky.times("/page/past")
    assert fetched_now < now + 2 and past < now + 2
    # The delay counts from enqueue_request, which wrote the due time it came
    # to in meta, in place of the delay (applied once).
    parsed = {page["url"].rsplit("/", 1)[1]: page for page in data["parsed"]}
    assert parsed["delay"]["delay"] is None
    due = parsed["delay"]["not_before"]
    assert now + 2 <= due < fetched_now + 2 + EARLY
    assert due - EARLY <= delayed < due + LATE
    assert now + 3 - EARLY <= timestamp < now + 3 + LATE
    assert now + 2.5 - EARLY <= dated < now + 2.5 + LATE
    assert data["empty"] < 60, data["empty"]


def test_bad_due_values_are_refused_at_enqueue_and_logged(
    flaky: FlakySite, tmp_path: Path, store: dict[str, str]
) -> None:
    """Each bad value raises InvalidRequest from enqueue_request: logged, counted, never fetched."""
    bad = {
        "naive": {"crawlq_not_before": {"naive": "2030-01-01T00:00:00"}},
        "nan": {"crawlq_delay": float("nan")},
        "negative": {"crawlq_delay": -1},
        "text": {"crawlq_delay": "soon"},
        "before-1970": {"crawlq_not_before": -5},
        "refetch": {"crawlq_refetch_after": -3},
    }
    children = [{"url": flaky.url(f"/page/bad-{name}"), "meta": meta} for name, meta in bad.items()]
    children.append({"url": flaky.url("/page/good"), "meta": {"crawlq_delay": 0.2}})
    plan = {"requests": [{"url": flaky.url("/page/parent")}], "children": children}
    data = DueCrawl(tmp_path, plan, store).run()
    assert data["reason"] == "finished", data["log"][-3000:]
    assert data["stats"]["crawlq/invalid"] == len(bad)
    log = data["log"]
    # Scrapy logs each with its traceback (2.13 twice: CRITICAL, then unhandled).
    refused = set(re.findall(r"InvalidRequest: meta\[.*?/page/bad-([a-z0-9-]+)", log))
    assert refused == set(bad), log[-5000:]
    for words in ("naive datetime", "'crawlq_delay'", "before 1970", "'crawlq_refetch_after'"):
        assert words in log, words
    counts = flaky.counts()
    assert not [path for path in counts if "/bad-" in path], counts
    assert counts["/page/good"] == 1 and counts["/page/parent"] == 1


def test_refetch_after_with_wait_for_revisits_fetches_pages_again(
    flaky: FlakySite, tmp_path: Path, store: dict[str, str]
) -> None:
    """Every page once more after CRAWLQ_REFETCH_AFTER (or its own meta), then the crawl ends.

    The spider sets ``meta["crawlq_refetch_after"] = None`` on a page's
    second fetch. A page that failed once is refetched once, not once per
    attempt: its retry is not refetched, the request it retried is.
    """
    plan = {
        "requests": [
            *({"url": flaky.url(f"/page/r{n}")} for n in range(3)),
            {"url": flaky.url("/page/own"), "meta": {"crawlq_refetch_after": 0.5}},
            {"url": flaky.url("/page/once"), "meta": {"crawlq_refetch_after": None}},
            {"url": flaky.url("/fail/1/retried")},
        ],
        "fetches": 2,
    }
    settings = {
        "CRAWLQ_REFETCH_AFTER": "2",
        "CRAWLQ_WAIT_FOR_REVISITS": "True",
        "DOWNLOADER_MIDDLEWARES": BACKOFF,
        "CRAWLQ_RETRY_BACKOFF_BASE": "0.2",
        **store,
    }
    data = DueCrawl(tmp_path, plan, settings).run()
    assert_finished(data)
    for path, every in [*((f"/page/r{n}", 2.0) for n in range(3)), ("/page/own", 0.5)]:
        first, second = flaky.times(path)
        assert every - EARLY <= second - first < every + LATE, path
    assert len(flaky.times("/page/once")) == 1
    # 503, its retry (200), then the refetch of the first request (200).
    failed, retried, refetched = flaky.times("/fail/1/retried")
    assert 0.2 - EARLY <= retried - failed < 0.2 + LATE
    assert 2 - EARLY <= refetched - failed < 2 + LATE
    assert data["stats"]["crawlq/refetch_scheduled"] == 5


def test_without_wait_for_revisits_the_crawl_ends_without_waiting(
    flaky: FlakySite, tmp_path: Path
) -> None:
    plan = {"requests": [{"url": flaky.url(f"/page/r{n}")} for n in range(3)]}
    data = DueCrawl(tmp_path, plan, {"CRAWLQ_REFETCH_AFTER": "30"}).run()
    assert_finished(data)
    assert data["duration"] < 5
    assert data["stats"]["crawlq/refetch_scheduled"] == 3
    assert all(count == 1 for count in flaky.counts().values())


def test_a_one_shot_jobdir_crawl_leaves_revisits_for_its_next_run(
    flaky: FlakySite, tmp_path: Path
) -> None:
    """Without CRAWLQ_WAIT_FOR_REVISITS the crawl ends; the same command later refetches."""
    plan = {"requests": [{"url": flaky.url(f"/page/r{n}")} for n in range(3)]}
    crawl = DueCrawl(tmp_path, plan, {"CRAWLQ_REFETCH_AFTER": "2", "JOBDIR": str(tmp_path / "job")})
    first = crawl.run()
    assert_finished(first)
    assert first["duration"] < 2
    assert all(count == 1 for count in flaky.counts().values())
    time.sleep(max(0.0, max(at for at, _ in flaky.hits) + 2.2 - time.time()))
    again = crawl.run()
    assert_finished(again)
    assert again["stats"]["crawlq/resumed"] == 3
    counts = flaky.counts()
    assert sorted(counts.values()) == [2, 2, 2], counts
    for n in range(3):
        first_at, second_at = flaky.times(f"/page/r{n}")
        assert second_at - first_at >= 2 - EARLY


def test_retries_waiting_at_a_kill_9_still_wait_after_the_same_command(
    flaky: FlakySite, tmp_path: Path
) -> None:
    """Killed while its retries wait out their backoff, resumed: they wait on, then are fetched."""
    pages = [f"/fail/2/k{n}" for n in range(4)]
    plan = {"requests": [{"url": flaky.url(path)} for path in pages]}
    settings = {
        "DOWNLOADER_MIDDLEWARES": BACKOFF,
        "RETRY_TIMES": "3",
        "CRAWLQ_RETRY_BACKOFF_BASE": "3",
        "JOBDIR": str(tmp_path / "job"),
    }
    crawl = DueCrawl(tmp_path, plan, settings)
    process = crawl.start()
    deadline = time.monotonic() + 60
    while not all(flaky.times(path) for path in pages):
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the first attempts did not come"
        time.sleep(0.01)
    time.sleep(0.7)  # the retries are stored, with the acks of what they retry
    process.send_signal(signal.SIGKILL)
    process.communicate()
    assert process.returncode == -signal.SIGKILL
    assert all(len(flaky.times(path)) == 1 for path in pages)

    resumed = crawl.run()
    assert_finished(resumed)
    assert resumed["stats"]["crawlq/resumed"] == len(pages)
    for path in pages:
        attempts = flaky.times(path)
        assert len(attempts) == 3, (path, attempts)  # not lost, not fetched again at once
        first, second = (b - a for a, b in itertools.pairwise(attempts))
        # The first retry was due while no crawl ran: fetched once the
        # resumed one started (a few seconds at most), never before.
        assert 3 - EARLY <= first < 3 + LATE + 3, (path, attempts)
        assert 6 - EARLY <= second < 6 + LATE, (path, attempts)
