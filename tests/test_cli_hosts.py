"""`crawlq hosts` on SQLite jobs: listing, changes to a job at rest, and to a running crawl."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import crawlq

from .test_cli import crawlq_cli, row


def make_job(path: Path) -> None:
    with crawlq.open_frontier(str(path), max_requests_per_host=4) as frontier:
        frontier.add_many([f"https://a.example/{n}" for n in range(6)] + ["https://b.example/1"])


def test_hosts_lists_queued_blocks_policies_and_accepted(tmp_path: Path) -> None:
    job = tmp_path / "job"
    make_job(job)
    listed = crawlq_cli("hosts", str(job))
    assert listed.returncode == 0, listed.stderr
    assert row(listed.stdout, "a.example")[:2] == ["a.example", "4"]
    assert row(listed.stdout, "a.example")[-1] == "4"  # accepted: the cap held the rest
    assert row(listed.stdout, "b.example")[1] == "1"

    changed = crawlq_cli(
        "hosts", str(job), "--block", "a.example", "30", "--delay", "c.example", "2.5"
    )
    assert changed.returncode == 0, changed.stderr
    assert "changed a.example" in changed.stdout and "changed c.example" in changed.stdout
    blocked_for = row(changed.stdout, "a.example")[2]
    assert blocked_for.endswith(" s") and 29 <= float(blocked_for[:-2]) <= 30
    assert row(changed.stdout, "c.example")[1:4] == ["0", "", "2.5 s"]
    with crawlq.open_frontier(str(job)) as frontier:
        assert frontier.host_policy("c.example") == crawlq.HostPolicy(2.5, None)
        assert [r.url for r in iter(frontier.pop, None)] == ["https://b.example/1"]

    crawlq_cli("hosts", str(job), "--unblock", "a.example", "--delay", "c.example", "default")
    with crawlq.open_frontier(str(job)) as frontier:
        assert frontier.host_policy("c.example") == crawlq.HostPolicy()
        assert len([r for r in iter(frontier.pop, None)]) == 5


def test_bad_hosts_input_is_a_clean_error(tmp_path: Path) -> None:
    job = tmp_path / "job"
    make_job(job)
    cases = [
        (["hosts", str(tmp_path / "none")], "there is no crawlq job at"),
        (["hosts", "memory://"], "memory:// frontier lives inside its process"),
        (["hosts", str(job), "--block", "a.example", "-1"], "--block takes HOST SECONDS"),
        (["hosts", str(job), "--delay", "a.example", "soon"], "--delay takes HOST SECONDS"),
    ]
    for args, message in cases:
        result = crawlq_cli(*args)
        assert result.returncode == 1, args
        assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert not (tmp_path / "none").exists()


CRAWLER = """
import sys, time
import crawlq

job, log = sys.argv[1], sys.argv[2]
with crawlq.open_frontier(job) as frontier, open(log, "a", buffering=1) as out:
    while True:
        request = frontier.pop()
        if request is None:
            if len(frontier) == 0:
                break
            time.sleep(0.01)
            continue
        out.write(f"{request.url} {time.time():.6f}\\n")
        time.sleep(0.01)
        frontier.ack(request)
"""


BLOCK = 4.0  # seconds


def test_a_block_reaches_a_running_crawl_through_its_own_writes(tmp_path: Path) -> None:
    job = tmp_path / "job"
    with crawlq.open_frontier(str(job)) as frontier:
        for host in ("a", "b"):
            frontier.add_many([f"https://{host}.example/{n}" for n in range(250)])
    log = tmp_path / "pops.log"
    script = tmp_path / "crawler.py"
    script.write_text(textwrap.dedent(CRAWLER))
    crawler = subprocess.Popen([sys.executable, str(script), str(job), str(log)])
    try:
        deadline = time.monotonic() + 30
        while not log.exists() or len(log.read_text().splitlines()) < 20:
            assert time.monotonic() < deadline and crawler.poll() is None
            time.sleep(0.02)
        asked = time.time()
        # Long enough that the CLI (a new process that waits for the crawler
        # to apply the change, up to a few seconds on a loaded machine)
        # returns well before the block ends.
        changed = crawlq_cli("hosts", str(job), "--block", "a.example", str(BLOCK))
        answered = time.time()
        assert changed.returncode == 0, changed.stderr
        assert "the running crawl applied it" in changed.stdout
        assert crawler.wait(timeout=60) == 0
    finally:
        if crawler.poll() is None:
            crawler.kill()
            crawler.wait()
    pops = [(float(at), url) for url, at in (line.split() for line in log.read_text().splitlines())]
    assert sorted(url for _, url in pops) == sorted(
        f"https://{host}.example/{n}" for host in ("a", "b") for n in range(250)
    )  # each once: nothing lost, nothing repeated
    a_pops = [at for at, url in pops if url.startswith("https://a.")]
    assert answered < asked + BLOCK - 0.5, "the CLI took longer than the block"
    assert not [at for at in a_pops if answered + 0.05 < at < asked + BLOCK - 0.05]
    assert any(at >= asked + BLOCK - 0.05 for at in a_pops)  # resumed after the block
    assert any(answered < at < asked + BLOCK for at, url in pops if url.startswith("https://b."))
    checked = crawlq_cli("check", str(job))
    assert checked.returncode == 0, checked.stdout + checked.stderr
