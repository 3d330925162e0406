"""Prometheus metrics: scraped over HTTP and parsed with prometheus_client's own parser.

A frontier of this process (`crawlq.metrics.serve`), a crawl running in
another process (``crawlq metrics``), and a real Scrapy crawl
(`MetricsExtension`); counters must match crawls of known size exactly.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import crawlq
import crawlq.metrics
from tests._child import child_environment

from ._watched_crawl import READY, Crawl
from .redis_server import StartServer
from .test_cli import crawlq_cli

ROOT = Path(__file__).parent.parent
SPIDER = ROOT / "tests" / "scrapy" / "metrics_spider.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample at ``127.0.0.1:port/metrics``: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    return parse(text)


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def crawl_figures(samples: dict, crawl: str) -> dict[str, float]:  # type: ignore[type-arg]
    """The crawl-wide series of one crawl, by name."""
    return {
        name: value for (name, labels), value in samples.items() if labels == (("crawl", crawl),)
    }


def test_a_frontier_serves_its_counters_gauges_and_call_latencies(tmp_path: Path) -> None:
    frontier = crawlq.open_frontier(str(tmp_path / "job"), host_delay=0.0)
    port = free_port()
    server = crawlq.metrics.serve(frontier, port, host_series=3)
    try:
        urls = [f"https://h{i % 5}.example/{i}" for i in range(50)]
        frontier.add_many(urls + urls[:7])
        pops = 0
        for step in range(30):
            request = frontier.pop()
            pops += 1
            assert request is not None
            if step < 20:
                frontier.ack(request)
            elif step < 25:
                frontier.release(request)
        frontier.block_host("h4.example", 60)
        samples = scrape(port)
    finally:
        server.shutdown()
        frontier.close()
    figures = crawl_figures(samples, "job")
    assert figures["crawlq_requests_accepted_total"] == 50
    assert figures["crawlq_requests_duplicate_total"] == 7
    assert figures["crawlq_requests_capped_total"] == 0
    assert figures["crawlq_requests_popped_total"] == 30
    assert figures["crawlq_requests_acked_total"] == 20
    assert figures["crawlq_requests_released_total"] == 5
    assert figures["crawlq_leases_expired_total"] == 0
    assert figures["crawlq_requests_queued"] == 25
    assert figures["crawlq_requests_leased"] == 5
    assert figures["crawlq_fingerprints_seen"] == 50
    assert figures["crawlq_hosts_busy"] == 5
    assert figures["crawlq_hosts_blocked"] == 1
    # Per-host series for the 3 busiest hosts only.
    hosts = {
        dict(labels)["host"]
        for (name, labels), _ in samples.items()
        if name == "crawlq_host_requests_queued"
    }
    assert len(hosts) == 3
    blocked = [
        value
        for (name, labels), value in samples.items()
        if name == "crawlq_host_blocked_seconds" and dict(labels)["host"] == "h4.example"
    ]
    assert blocked == [] or 50 < blocked[0] <= 60
    # Every pop was timed, and nothing else was called "pop".
    pop_count = samples[
        ("crawlq_store_call_seconds_count", (("crawl", "job"), ("operation", "pop")))
    ]
    assert pop_count == pops
    assert (
        samples[("crawlq_store_call_seconds_count", (("crawl", "job"), ("operation", "add")))] >= 1
    )


def test_crawlq_metrics_serves_a_crawl_running_in_another_process(
    crawl_url: str, crawl: Crawl
) -> None:
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable, "-c", "from crawlq.cli import main; main()",
            "metrics", crawl_url, "--port", str(port), "--crawl", "watched",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert f"http://127.0.0.1:{port}/metrics" in line, (
            server.stderr.read() if server.stderr else ""
        )
        figures = crawl_figures(scrape(port), "watched")
        assert figures["crawlq_requests_accepted_total"] == READY.accepted
        assert figures["crawlq_requests_duplicate_total"] == READY.duplicates
        assert figures["crawlq_requests_popped_total"] == READY.popped
        assert figures["crawlq_requests_acked_total"] == READY.acked
        assert figures["crawlq_requests_released_total"] == READY.released
        assert (figures["crawlq_requests_queued"], figures["crawlq_requests_leased"]) == (155, 5)
        assert figures["crawlq_hosts_busy"] == 10
        crawl.send("pop 20")
        crawl.expect("popped")
        figures = crawl_figures(scrape(port), "watched")
        assert figures["crawlq_requests_acked_total"] == READY.acked + 20
        assert figures["crawlq_requests_scheduled"] == 0
        assert "crawlq_next_due_seconds" not in figures
        crawl.send("later")
        crawl.expect("scheduled")
        figures = crawl_figures(scrape(port), "watched")
        assert figures["crawlq_requests_scheduled"] == 3  # read from outside the crawl
        assert figures["crawlq_requests_revisits"] == 1
        assert figures["crawlq_requests_refetched_total"] == 1
        # Three fewer waiting or out (a Redis worker's ack may lease one ahead).
        out = figures["crawlq_requests_queued"] + figures["crawlq_requests_leased"]
        assert out == 155 + 5 - 20 - 3
        assert 590 < figures["crawlq_next_due_seconds"] <= 600
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_crawlq_metrics_on_a_bad_job_fails_typed(tmp_path: Path) -> None:
    done = crawlq_cli("metrics", str(tmp_path / "nothing"), "--port", str(free_port()))
    assert done.returncode == 1
    assert done.stderr.startswith("error: there is no crawlq job"), done.stderr


def test_without_the_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    frontier = crawlq.open_frontier("memory://")
    with pytest.raises(crawlq.ConfigError, match=r"pip install 'crawlq\[metrics\]'"):
        crawlq.metrics.register(frontier)
    frontier.close()


def test_the_scrapy_extension_serves_a_running_crawl(tmp_path: Path) -> None:
    from .scrapy._flaky import FlakySite

    site = FlakySite("127.0.0.1")
    port = free_port()
    out = tmp_path / "scraped.txt"
    try:
        command = [
            sys.executable, "-m", "scrapy", "runspider", str(SPIDER),
            "-a", f"base={site.base}", "-a", "pages=12",
            "-a", f"metrics=http://127.0.0.1:{port}/metrics", "-a", f"out={out}",
            "-s", "SCHEDULER=crawlq.contrib.scrapy.Scheduler",
            "-s", "EXTENSIONS={\"crawlq.contrib.scrapy.MetricsExtension\": 500}",
            "-s", f"CRAWLQ_METRICS_PORT={port}", "-s", "CONCURRENT_REQUESTS=1",
            "-s", "LOG_LEVEL=INFO", "-s", "TELNETCONSOLE_ENABLED=False",
        ]  # fmt: skip
        environment = child_environment()
        done = subprocess.run(
            command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120
        )
    finally:
        site.close()
    assert done.returncode == 0 and out.exists(), done.stderr[-3000:]
    samples = parse(out.read_text())
    figures = crawl_figures(samples, "memory")
    # Scraped while the last page was parsed: all 12 accepted and handed out.
    assert figures["crawlq_requests_accepted_total"] == 12
    assert figures["crawlq_requests_popped_total"] == 12
    assert 10 <= figures["crawlq_requests_acked_total"] <= 11
    pops = samples[("crawlq_store_call_seconds_count", (("crawl", "memory"), ("operation", "pop")))]
    assert pops >= 12
    # The server stopped with the spider.
    time.sleep(0.2)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_the_grafana_dashboard_uses_only_metrics_crawlq_serves(tmp_path: Path) -> None:
    import json
    import re

    dashboard = json.loads((ROOT / "examples" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {
        re.sub(r"_(bucket|count|sum)$", "", m) for e in exprs for m in re.findall(r"crawlq_\w+", e)
    }
    frontier = crawlq.open_frontier("memory://")
    port = free_port()
    server = crawlq.metrics.serve(frontier, port)
    try:
        frontier.add(crawlq.Request("https://a.example/"))
        frontier.ack(frontier.pop())
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            families = {f.name for f in text_string_to_metric_families(response.read().decode())}
    finally:
        server.shutdown()
        frontier.close()
    served = {name for name in families} | {f"{name}_total" for name in families}
    assert used and used <= served, used - served
    assert {p["title"] for p in dashboard["panels"]} == {
        "Pages per second", "Queue", "Re-deliveries per second", "Duplicate ratio",
        "Hosts", "Busiest hosts", "Store call latency",
    }  # fmt: skip


def test_a_scrape_while_the_server_is_gone_says_so(redis_servers: StartServer) -> None:
    server = redis_servers()
    url = f"{server.url}?crawl=gone"
    with crawlq.open_frontier(url) as frontier:
        frontier.add_many(["https://a.example/1", "https://a.example/2"])
    port = free_port()
    exporter = crawlq.metrics.serve_url(url, port)
    try:
        figures = crawl_figures(scrape(port), "gone")
        assert figures["crawlq_store_up"] == 1 and figures["crawlq_requests_queued"] == 2
        server.stop()
        figures = crawl_figures(scrape(port), "gone")
        # Nothing stale is served: only the store being down.
        assert figures == {"crawlq_store_up": 0}
    finally:
        exporter.shutdown()


def test_scheduled_requests_and_the_next_due_time_are_served() -> None:
    frontier = crawlq.open_frontier("memory://")
    port = free_port()
    server = crawlq.metrics.serve(frontier, port)
    try:
        empty = crawl_figures(scrape(port), "memory")
        assert empty["crawlq_requests_scheduled"] == 0
        assert "crawlq_next_due_seconds" not in empty  # nothing scheduled: no series
        frontier.add(crawlq.Request("https://a.example/later", not_before=time.time() + 60))
        frontier.add_many(["https://b.example/page", "https://c.example/retry"])
        page, retry = frontier.pop(), frontier.pop()
        assert page is not None and retry is not None
        frontier.ack(page, refetch_after=3600)
        frontier.release(retry, delay=30)
        figures = crawl_figures(scrape(port), "memory")
    finally:
        server.shutdown()
        frontier.close()
    assert figures["crawlq_requests_scheduled"] == 3
    assert figures["crawlq_requests_revisits"] == 1
    assert figures["crawlq_requests_refetched_total"] == 1
    assert figures["crawlq_requests_queued"] == 0
    assert 25 < figures["crawlq_next_due_seconds"] <= 30
