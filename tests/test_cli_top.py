"""`crawlq top`: a running crawl in another process, watched once (--once) and live (tmux)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from crawlq import Counters, HostCount
from crawlq._watch import History, Snapshot

from ._terminal import Tmux
from ._watched_crawl import HOSTS, READY, Crawl
from .redis_server import StartServer
from .test_cli import crawlq_cli

ROOT = Path(__file__).parent.parent


def top_json(url: str) -> dict[str, object]:
    done = crawlq_cli("top", url, "--once", "--json", "--interval", "0.2")
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_once_shows_the_counts_of_a_crawl_running_in_another_process(
    crawl: Crawl, crawl_url: str
) -> None:
    shown = top_json(crawl_url)
    assert shown["counters"] == vars_of(READY)
    assert (shown["queued"], shown["leased"], shown["seen"]) == (155, 5, 200)
    hosts = shown["hosts"]
    assert isinstance(hosts, list) and len(hosts) == HOSTS
    stored = sum(h["queued"] + h["leased"] for h in hosts)
    assert stored == 160  # queued and leased (a job counts its leased as queued per host)

    crawl.send("pop 40")
    crawl.expect("popped")
    shown = top_json(crawl_url)
    # A Redis worker may hold one request leased ahead (its prefetch, refilled
    # with its last acks): the server counts it as popped and leased.
    ahead = int(shown["leased"]) - 5  # type: ignore[call-overload]
    assert ahead == 0 or (ahead == 1 and crawl_url.startswith("redis"))
    expected = {**vars_of(READY), "popped": 90 + ahead, "acked": 80}
    assert shown["counters"] == expected
    assert shown["queued"] == 115 - ahead


def test_once_prints_a_frame(crawl: Crawl, crawl_url: str) -> None:
    done = crawlq_cli("top", crawl_url, "--once", "--interval", "0.2", "--hosts", "3")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "queued 155" in text and "leased 5" in text and "seen 200" in text
    assert "popped 50" in text and "acked 40" in text and "duplicates 20" in text
    assert "accepted/s" in text and "popped/s" in text
    assert sum(f"h{i}.example" in text for i in range(HOSTS)) == 3


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ("{tmp}/nothing", "there is no crawlq job"),
        ("memory://", "lives inside its process"),
        ("redis://127.0.0.1:1/0?crawl=x", "127.0.0.1:1"),
        ("ftp://example.com/job", "scheme"),
    ],
)
def test_bad_jobs_give_typed_errors(tmp_path: Path, job: str, message: str) -> None:
    done = crawlq_cli("top", job.format(tmp=tmp_path), "--once")
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_redis_crawl_that_does_not_exist(redis_url: str) -> None:
    done = crawlq_cli("top", redis_url + "?crawl=never-made", "--once")
    assert done.returncode == 1
    assert "there is no crawl 'never-made'" in done.stderr


def test_live_in_a_terminal_then_q(crawl: Crawl, crawl_url: str, tmux: Tmux) -> None:
    command = (
        f"cd {ROOT} && {sys.executable} -c 'from crawlq.cli import main; main()' "
        f"top '{crawl_url}' --interval 0.5"
    )
    tmux.start("top", f"{command}; echo exit=$?; sleep 600")
    screen = " ".join(tmux.wait_for("h0.example", 30).split())
    assert "queued 155" in screen and "popped 50" in screen
    crawl.send("pop 40")
    deadline = time.monotonic() + 30
    while "acked 80" not in (screen := " ".join(tmux.screen().split())):
        assert time.monotonic() < deadline, screen
        time.sleep(0.2)
    # (On Redis, with one request the worker leased ahead: see the test above.)
    assert "popped 90" in screen or ("popped 91" in screen and "leased 6" in screen)
    assert "popped/s" in screen
    crawl.expect("popped")
    tmux.run("send-keys", "-t", "top", "q")
    screen = tmux.wait_for("exit=", 30)
    assert "exit=0" in screen and "Traceback" not in screen


def test_the_view_says_when_the_server_goes_away(
    tmp_path: Path, redis_servers: StartServer, tmux: Tmux
) -> None:
    server = redis_servers()
    url = f"{server.url}?crawl=away"
    crawl = Crawl(url)
    crawl.stop()
    command = (
        f"cd {ROOT} && {sys.executable} -c 'from crawlq.cli import main; main()' "
        f"top '{url}' --interval 0.5"
    )
    tmux.start("top", f"{command}; echo exit=$?; sleep 600")
    tmux.wait_for("h0.example", 30)
    server.stop()
    screen = " ".join(tmux.wait_for("cannot read the crawl", 30).split())
    assert "trying again" in screen and "exit=" not in screen
    tmux.run("send-keys", "-t", "top", "q")
    assert "exit=0" in tmux.wait_for("exit=", 30)


# -- rates and warnings, from snapshots ---------------------------------------------


def snapshot(at: float, popped: int, expired: int = 0, queued: int = 100) -> Snapshot:
    counters = Counters(accepted=1000, duplicates=500, popped=popped, expired=expired)
    return Snapshot(queued, 0, 1000, counters, (HostCount("a.example", queued, 0),), at)


def test_rates_come_from_the_snapshots_within_their_window() -> None:
    history = History()
    assert history.rates(10.0) is None
    for second in range(61):
        history.add(snapshot(1000.0 + second, popped=second * 20))
    ten = history.rates(10.0)
    assert ten is not None and ten["popped"] == pytest.approx(20.0)
    assert ten["duplicate_ratio"] == 0.0  # nothing offered in the window
    assert history.popped_per_second(5) == [20.0] * 5
    assert history.warnings() == []


def test_warnings_for_expiring_leases_and_a_stalled_crawl() -> None:
    history = History()
    for second in range(61):
        history.add(snapshot(1000.0 + second, popped=100, expired=second))
    warnings = history.warnings()
    assert any("leases are expiring" in w for w in warnings), warnings
    assert any("no pops for 60 s while 100 requests are queued" in w for w in warnings)


def vars_of(counters: Counters) -> dict[str, int]:
    from dataclasses import asdict

    return asdict(counters)
