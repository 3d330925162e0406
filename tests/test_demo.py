"""`crawlq demo`: the generated site, the crawl checked from the server side, the CLI."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections import Counter, deque
from pathlib import Path

import pytest
from typer.testing import CliRunner

import crawlq
from crawlq.cli import DEMO_NEEDS_AIOHTTP, app
from crawlq.cli.demo import DemoConfig, DemoProgress, run_demo
from crawlq.cli.demo.site import PageKey, generate_site

runner = CliRunner()


def flat(text: str) -> str:
    """``text`` with rich's line wrapping undone."""
    return " ".join(text.split())


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
    snapshots: list[DemoProgress] = []
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


def test_cli_demo_prints_summary_and_exits_zero(tmp_path: Path) -> None:
    job = tmp_path / "job"
    result = runner.invoke(app, ["demo", "--pages", "200", "--hosts", "20", "--job", str(job)])
    assert result.exit_code == 0, result.output
    for text in ("Pages fetched", "Hosts", "Duplicates filtered", "Errors", "Elapsed", "Pages/s"):
        assert text in result.output
    assert "every one of the 200 pages was fetched exactly once" in result.output
    assert f"job: {job}" in result.output
    assert "(new)" in result.output
    # The same command again: nothing left to do.
    again = runner.invoke(app, ["demo", "--pages", "200", "--hosts", "20", "--job", str(job)])
    assert again.exit_code == 0, again.output
    assert "is already complete" in flat(again.output)
    assert "add --fresh" in flat(again.output)
    # --fresh starts over.
    fresh = runner.invoke(
        app, ["demo", "--pages", "200", "--hosts", "20", "--job", str(job), "--fresh"]
    )
    assert fresh.exit_code == 0, fresh.output
    assert "(new)" in fresh.output
    assert "every one of the 200 pages was fetched exactly once" in fresh.output


def test_cli_demo_fails_when_a_page_is_fetched_twice(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Without ignoring utm_* parameters, tracking links refetch their pages:
    # the server-side check must catch it and the command must fail.
    import crawlq.cli.demo.run as demo_run

    monkeypatch.setattr(demo_run, "Fingerprinter", lambda **options: crawlq.Fingerprinter())
    result = runner.invoke(
        app, ["demo", "--pages", "200", "--hosts", "20", "--delay", "0", "--job", str(tmp_path)]
    )
    assert result.exit_code == 1, result.output
    assert "URLs fetched more than once" in result.output


def test_cli_demo_refuses_another_site_in_the_job(tmp_path: Path) -> None:
    job = str(tmp_path / "job")
    first = runner.invoke(app, ["demo", "--pages", "100", "--hosts", "10", "--job", job])
    assert first.exit_code == 0, first.output
    other = runner.invoke(app, ["demo", "--pages", "120", "--hosts", "10", "--job", job])
    assert other.exit_code == 1
    assert other.stderr.startswith("error: ")
    assert "--pages 100 --hosts 10 --seed 0" in flat(other.stderr)
    assert "Traceback" not in other.output


def test_cli_demo_fresh_deletes_only_a_demo_job(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("precious")
    result = runner.invoke(app, ["demo", "--pages", "100", "--job", str(tmp_path), "--fresh"])
    assert result.exit_code == 1
    assert "holds files that are not part of a demo job (thesis.tex)" in flat(result.stderr)
    assert (tmp_path / "thesis.tex").read_text() == "precious"


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


# -- stopping and resuming ----------------------------------------------------


async def test_a_stopped_crawl_resumes_where_it_stopped(tmp_path: Path) -> None:
    config = DemoConfig(pages=400, hosts=10, delay=0.005, concurrency=2, workers=16, seed=2)
    stop = asyncio.Event()

    def stop_early(snapshot: DemoProgress) -> None:
        if snapshot.fetched >= 80:
            stop.set()

    first = await run_demo(
        config, job=tmp_path, stop=stop, on_progress=stop_early, progress_interval=0.01
    )
    assert first.interrupted and not first.complete
    assert 80 <= first.fetched < first.expected_fetches
    assert first.queued > 0
    assert first.runs == 1

    second = await run_demo(config, job=tmp_path)
    assert second.resumed and second.runs == 2
    assert not second.interrupted
    assert second.refetch_bound == first.in_flight_at_stop
    assert second.complete, (second.missing, second.repeated)
    assert second.refetches <= second.refetch_bound
    assert second.seen == second.expected_fetches
    # Seeds were not added again: every link counted once is new or a duplicate.
    assert second.links == second.seen + second.duplicates

    third = await run_demo(config, job=tmp_path)
    assert third.already_complete and third.complete
    assert third.fetched == second.fetched


def fetch_log(job: Path) -> Counter[tuple[int, str]]:
    counts: Counter[tuple[int, str]] = Counter()
    log = job / "demo-fetches.log"
    if log.exists():
        for line in log.read_bytes().splitlines():
            host, path = json.loads(line)
            counts[(host, path)] += 1
    return counts


def demo_process(job: Path, *options: str) -> subprocess.Popen[str]:
    code = "import sys; from crawlq.cli import main; sys.argv[0] = 'crawlq'; main()"
    args = ["demo", "--pages", "600", "--hosts", "10", "--delay", "0.05", "--job", str(job)]
    return subprocess.Popen(
        [sys.executable, "-c", code, *args, *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_fetches(job: Path, process: subprocess.Popen[str], count: int) -> None:
    deadline = time.monotonic() + 60
    while sum(fetch_log(job).values()) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the demo fetched too little"
        time.sleep(0.05)


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGKILL])
def test_cli_demo_resumes_after_ctrl_c_or_kill(tmp_path: Path, stop_signal: int) -> None:
    job = tmp_path / "job"
    process = demo_process(job)
    wait_for_fetches(job, process, 100)
    process.send_signal(stop_signal)
    out, err = process.communicate(timeout=60)
    if stop_signal == signal.SIGINT:
        assert process.returncode in (130, 0), (out, err)
        assert "Traceback" not in err
        if process.returncode == 130:
            assert "run the same command to resume" in flat(out)
    else:
        assert process.returncode == -signal.SIGKILL
    stopped_at = fetch_log(job)
    site = generate_site(600, 10, seed=0)
    assert 100 <= sum(stopped_at.values()) < site.expected_fetches

    again = demo_process(job)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, (out, err)
    assert "(resumed)" in out
    assert "Re-fetched after resume" in out
    fetches = fetch_log(job)
    assert set(site.pages) <= set(fetches)  # every page fetched at least once
    with crawlq.open_frontier(
        str(job), fingerprinter=crawlq.Fingerprinter(ignore_query_params=["utm_*"])
    ) as frontier:
        state = frontier.load_state()
        assert len(frontier) == 0
    refetches = sum(n - 1 for n in fetches.values())
    # Ctrl-C: the requests released at the stop; kill: at most one per worker.
    assert refetches <= state["refetch_bound"]
    if stop_signal == signal.SIGKILL:
        assert state["refetch_bound"] == 32
    assert state["runs"] == 2 and not state["running"]
