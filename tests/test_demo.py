"""`crawlq demo`: the generated site, the crawl checked from the server side, the CLI."""

from __future__ import annotations

import subprocess
import sys
from collections import deque

import pytest
from typer.testing import CliRunner

import crawlq
from crawlq._demo import DemoConfig, run_demo
from crawlq._demo.site import PageKey, generate_site
from crawlq.cli import DEMO_NEEDS_AIOHTTP, app

runner = CliRunner()


def test_site_is_deterministic_and_reachable() -> None:
    site = generate_site(500, 20, seed=7, latency=0.01)
    assert site == generate_site(500, 20, seed=7, latency=0.01)
    assert site != generate_site(500, 20, seed=8, latency=0.01)
    assert len(site.pages) == 500
    assert len({host for host, _ in site.pages}) == 20
    # Every page is reachable from the home pages (the crawl's seeds).
    reached: set[PageKey] = set()
    todo = deque((host, "/") for host in range(site.hosts))
    while todo:
        key = todo.popleft()
        if key in reached or key not in site.pages:
            continue
        reached.add(key)
        todo.extend((link.host, link.path) for link in site.pages[key].links)
    assert reached == set(site.pages)
    statuses = {page.status for page in site.pages.values()}
    assert statuses == {200, 500}
    assert site.broken
    suffixes = [link.suffix for page in site.pages.values() for link in page.links]
    assert "" in suffixes
    assert any(suffix.startswith("?utm_") for suffix in suffixes)
    assert any(suffix.startswith("#") for suffix in suffixes)


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="must not exceed pages"):
        DemoConfig(pages=10, hosts=20)
    with pytest.raises(ValueError, match="hosts"):
        DemoConfig(hosts=0)
    with pytest.raises(ValueError, match="delay"):
        DemoConfig(delay=-1)


async def test_small_crawl_fetches_every_page_exactly_once() -> None:
    config = DemoConfig(pages=300, hosts=20, delay=0, concurrency=2, workers=32, seed=3)
    snapshots = []
    result = await run_demo(config, on_progress=snapshots.append, progress_interval=0.02)

    assert result.complete, (result.missing, result.repeated)
    site = generate_site(300, 20, seed=3)
    assert result.site_pages == 300
    assert result.expected_fetches == 300 + len(site.broken)
    assert result.fetched == result.expected_fetches
    assert result.seen == result.expected_fetches
    assert result.hosts_crawled == 20
    assert not result.single_address
    assert len({url.rpartition(":")[0] for url in result.base_urls}) == 20
    # Tracking parameters, fragments and repeated links were all dropped by crawlq.
    assert result.duplicates > 0
    assert result.links == result.seen + result.duplicates
    failing = sum(page.status == 500 for page in site.pages.values())
    assert result.errors == {"404": len(site.broken), "500": failing}
    # Per-host concurrency is never exceeded, and is reached somewhere.
    assert max(result.max_concurrency) == config.concurrency
    # Progress was reported, ending with the final counts.
    assert snapshots
    assert snapshots[-1].fetched == result.fetched
    assert snapshots[-1].queued == snapshots[-1].in_flight == 0


async def test_concurrency_one_means_one_request_at_a_time_per_host() -> None:
    result = await run_demo(DemoConfig(pages=120, hosts=20, delay=0, concurrency=1, seed=1))
    assert result.complete
    assert set(result.max_concurrency) == {1}


async def test_per_host_delay_is_respected() -> None:
    # Few hosts, so that requests to different hosts rarely compete for the
    # event loop: the server-side gap then measures crawlq's pacing, plus a
    # few milliseconds of jitter between the pop and the request's arrival.
    delay = 0.03
    config = DemoConfig(pages=48, hosts=4, delay=delay, concurrency=2, seed=5)
    result = await run_demo(config)
    assert result.complete
    for gap in result.min_gap:
        assert gap is not None
        assert gap >= delay - 0.012
    assert result.elapsed >= (48 // 4 - 1) * delay


async def test_single_address_fallback_paces_by_port() -> None:
    config = DemoConfig(pages=100, hosts=20, delay=0, concurrency=1, single_address=True)
    result = await run_demo(config)
    assert result.single_address
    assert result.complete
    assert {url.rpartition(":")[0] for url in result.base_urls} == {"http://127.0.0.1"}
    assert len(set(result.base_urls)) == 20
    # One host name for all: only the download_slot keeps them paced apart.
    assert set(result.max_concurrency) == {1}


def test_cli_demo_prints_summary_and_exits_zero() -> None:
    result = runner.invoke(app, ["demo", "--pages", "200", "--hosts", "20"])
    assert result.exit_code == 0, result.output
    for text in ("Pages fetched", "Hosts", "Duplicates filtered", "Errors", "Elapsed", "Pages/s"):
        assert text in result.output
    assert "every one of the 200 pages was fetched exactly once" in result.output


def test_cli_demo_fails_when_a_page_is_fetched_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without ignoring utm_* parameters, tracking links refetch their pages:
    # the server-side check must catch it and the command must fail.
    import crawlq._demo.run as demo_run

    monkeypatch.setattr(demo_run, "Fingerprinter", lambda **options: crawlq.Fingerprinter())
    result = runner.invoke(app, ["demo", "--pages", "200", "--hosts", "20", "--delay", "0"])
    assert result.exit_code == 1, result.output
    assert "URLs fetched more than once" in result.output


def test_cli_rejects_more_hosts_than_pages() -> None:
    result = runner.invoke(app, ["demo", "--pages", "10", "--hosts", "20"])
    assert result.exit_code == 2
    assert "must not exceed pages" in result.output


def test_cli_demo_without_aiohttp() -> None:
    # A fresh interpreter in which importing aiohttp fails.
    code = (
        "import sys; sys.modules['aiohttp'] = None; sys.argv = ['crawlq', 'demo'];"
        "from crawlq.cli import main; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    assert DEMO_NEEDS_AIOHTTP in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_version_and_help() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"crawlq {crawlq.__version__}"
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "demo" in result.output
