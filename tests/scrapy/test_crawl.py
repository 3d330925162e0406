"""Real Scrapy crawls with crawlq as SCHEDULER, checked from the server side."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import scrapy

from crawlq.stores.redis.cluster import inspection as _redis_cluster_admin
from tests.redis_cluster import StartCluster, fail_over

from ._site import ServedSite
from .conftest import CONCURRENT_REQUESTS, SCHEDULER, Result

SCRAPY_VERSION = tuple(int(part) for part in scrapy.__version__.split(".")[:2])


def assert_exactly_once(site: ServedSite) -> Counter[tuple[int, str]]:
    fetches = site.fetches()
    expected = site.expected()
    assert set(fetches) == expected, (
        f"missing {len(expected - set(fetches))}, unexpected {len(set(fetches) - expected)}"
    )
    twice = {key: count for key, count in fetches.items() if count > 1}
    assert not twice, f"{len(twice)} URLs fetched more than once, e.g. {list(twice.items())[:5]}"
    return fetches


def assert_every_page_fetched(site: ServedSite, after: str) -> None:
    """Every page fetched (no request lost), at most CONCURRENT_REQUESTS of them twice."""
    fetches = site.fetches()
    assert set(fetches) == site.expected(), "a page was never fetched: a request was lost"
    refetched = sum(count - 1 for count in fetches.values())
    assert refetched <= CONCURRENT_REQUESTS, f"{refetched} re-fetches after {after}"


def assert_stopped_at_start(result: Result, site: ServedSite, *words: str) -> None:
    for word in words:
        assert word in result.stderr, result.stderr[-3000:]
    assert site.total() == 0
    # Scrapy 2.14 and later exit non-zero when the spider cannot open;
    # 2.13 logs the error and exits 0.
    if SCRAPY_VERSION >= (2, 14):
        assert result.returncode != 0


def assert_finished(result: Result) -> None:
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.data is not None and result.data["reason"] == "finished", result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]


def assert_crawled_once(result: Result, site: ServedSite, kept: str) -> dict[str, Any]:
    """A finished crawl: every page fetched once, counted under Scrapy's stat names.

    ``kept`` is where the scheduler kept requests ("memory" or "disk"). Every
    duplicate was refused (by enqueue_request, or by the write that found it)
    and request_dropped fired for each. Returns the stats.
    """
    assert_finished(result)
    assert_exactly_once(site)
    pages = len(site.expected())
    stats = result.stats
    assert stats["scheduler/enqueued"] == stats[f"scheduler/enqueued/{kept}"] == pages
    assert stats["scheduler/dequeued"] == stats[f"scheduler/dequeued/{kept}"] == pages
    assert stats["crawlq/acked"] == pages
    assert stats["dupefilter/filtered"] > 1000
    assert result.data is not None and result.data["dropped"] == stats["dupefilter/filtered"]
    return stats


def test_memory_crawl_fetches_every_page_once_with_scrapy_stat_names(
    site: ServedSite, make_crawl: Any
) -> None:
    stats = assert_crawled_once(make_crawl({"SCHEDULER": SCHEDULER}).run(), site, "memory")
    assert "scheduler/unserializable" not in stats


def test_kill_9_halfway_then_the_same_command_resumes(
    site: ServedSite, make_crawl: Any, tmp_path: Path
) -> None:
    crawl = make_crawl({"SCHEDULER": SCHEDULER, "JOBDIR": str(tmp_path / "job")})
    killed = crawl.interrupt_halfway(signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL
    before = sum(site.fetches().values())
    assert before < len(site.expected())

    resumed = crawl.run()
    assert_finished(resumed)
    assert resumed.stats["crawlq/resumed"] > 0
    assert_every_page_fetched(site, "kill -9")


def test_ctrl_c_then_the_same_command_resumes_without_refetching(
    site: ServedSite, make_crawl: Any, tmp_path: Path
) -> None:
    crawl = make_crawl({"SCHEDULER": SCHEDULER, "JOBDIR": str(tmp_path / "job")})
    stopped = crawl.interrupt_halfway(signal.SIGINT)
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert stopped.data is not None and stopped.data["reason"] == "shutdown"
    assert len(site.fetches()) < len(site.expected())

    resumed = crawl.run()
    assert_finished(resumed)
    assert resumed.stats["crawlq/resumed"] > 0
    # A graceful stop lets the engine finish what it holds, and each of those
    # requests is acknowledged: nothing is fetched twice.
    assert_exactly_once(site)


def test_jobdir_crawl_fetches_every_page_once_without_pickle(
    site: ServedSite, make_crawl: Any, tmp_path: Path
) -> None:
    # Some requests get a lambda callback or an object in meta: those stay in
    # memory, in their place among the stored ones.
    jobdir = tmp_path / "job"
    result = make_crawl(
        {"SCHEDULER": SCHEDULER, "JOBDIR": str(jobdir)}, mode="unserializable"
    ).run()
    assert_finished(result)
    assert_exactly_once(site)
    stats = result.stats
    pages = len(site.expected())
    assert stats["scheduler/enqueued"] == stats["scheduler/dequeued"] == pages
    assert stats["scheduler/enqueued/disk"] == stats["scheduler/dequeued/disk"] > pages // 2
    assert stats["scheduler/unserializable"] == stats["scheduler/enqueued/memory"] > 0
    assert result.stderr.count("Unable to serialize request") == 1
    assert (jobdir / "crawlq.db").exists()
    # Scrapy's pickle queue and fingerprint file are not used.
    assert not (jobdir / "requests.queue").exists()
    assert not (jobdir / "requests.seen").exists()


def test_an_invalid_crawlq_url_stops_the_crawl_at_start(site: ServedSite, make_crawl: Any) -> None:
    result = make_crawl({"SCHEDULER": SCHEDULER, "CRAWLQ_URL": "bogus://nowhere"}).run()
    assert_stopped_at_start(result, site, "CRAWLQ_URL", "bogus")


def test_a_job_locked_by_a_running_crawl_stops_the_second_at_start(
    site: ServedSite, make_crawl: Any, tmp_path: Path
) -> None:
    import crawlq

    jobdir = tmp_path / "job"
    holder = crawlq.open_frontier(str(jobdir), fingerprinter=crawlq.Fingerprinter(mode="scrapy"))
    try:
        result = make_crawl({"SCHEDULER": SCHEDULER, "JOBDIR": str(jobdir)}).run()
    finally:
        holder.close()
    assert_stopped_at_start(result, site, "CRAWLQ_URL", "locked by pid")


def test_a_crawl_on_a_redis_cluster_fetches_every_page_once(
    site: ServedSite, make_crawl: Any, redis_cluster_url: str
) -> None:
    """The drop-in scheduler over a crawl sharded by host over a real 3-primary cluster.

    Its shard count comes from the command line, as JSON text (``-s
    CRAWLQ_OPTIONS=...``), the way Scrapy reads its own dict settings there.
    """
    url = f"{redis_cluster_url}?crawl=scrapy-site-{id(site)}"
    settings = {"SCHEDULER": SCHEDULER, "CRAWLQ_URL": url, "CRAWLQ_OPTIONS": '{"shards": 5}'}
    result = make_crawl(settings).run()
    assert_finished(result)
    assert_exactly_once(site)
    pages = len(site.expected())
    assert result.stats["crawlq/acked"] == pages
    found = _redis_cluster_admin.inspect(url)
    assert (found.queued, found.leased, found.seen) == (0, 0, pages)
    assert len(found.shards) == 5
    assert sum(1 for shard in found.shards if shard.seen) > 1  # spread over shards
    _redis_cluster_admin.purge(url)


@pytest.mark.parametrize("how", ["cluster-failover", "sigkill"])
def test_a_crawl_on_a_redis_cluster_goes_on_through_a_failover(
    site: ServedSite, make_crawl: Any, redis_clusters: StartCluster, how: str
) -> None:
    # A quarter in, every shard's primary hands over to its replica
    # (CLUSTER FAILOVER), or one primary is killed and its replica promoted
    # after the node timeout: the crawl waits it out and finishes.
    cluster = redis_clusters(primaries=3, replicas=1)
    url = cluster.url(f"scrapy-{how}", seeds=len(cluster.servers))
    options = '{"replicas": 1, "shards": 3, "retry_timeout": 30}'
    crawl = make_crawl({"SCHEDULER": SCHEDULER, "CRAWLQ_URL": url, "CRAWLQ_OPTIONS": options})
    process = crawl.start_until(0.25)
    fail_over(cluster, how)
    assert process.poll() is None, "the crawl did not wait the failover out"
    result = crawl.finish(process)
    assert_finished(result)
    assert_every_page_fetched(site, "the failover")
