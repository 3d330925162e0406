"""Damaged jobs: an empty database file is refused, `crawlq check` finds damage."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import crawlq
from crawlq.stores.sqlite.file import JobLock


def crawlq_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh process."""
    code = "import sys; from crawlq.cli import main; sys.argv[0] = 'crawlq'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60, check=False
    )


def digest(job: Path) -> str:
    return hashlib.sha256((job / "crawlq.db").read_bytes()).hexdigest()


def make_job(job: Path, requests: int = 600) -> None:
    """A job with requests over 5 hosts, some acked, duplicates refused, a log unflushed."""
    pad = "p" * 300
    with crawlq.open_frontier(str(job)) as frontier:
        frontier.add_many(
            [
                crawlq.Request(f"https://h{i % 5}.example/{i}", meta={"pad": pad})
                for i in range(requests)
            ]
        )
        assert not frontier.add(crawlq.Request("https://h0.example/0"))
        for _ in range(50):
            request = frontier.pop()
            assert request is not None
            frontier.ack(request)


def test_an_empty_database_file_is_refused(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    database = job / "crawlq.db"
    database.write_bytes(b"")
    with pytest.raises(crawlq.CorruptStore, match=r"crawlq\.db is an empty file.*delete it"):
        crawlq.open_frontier(str(job))
    assert database.read_bytes() == b""  # not taken for a new job and written over
    # Another process creating the job holds its lock: that is a lock, not damage.
    lock = JobLock(database)
    lock.acquire()
    try:
        with pytest.raises(crawlq.JobLocked):
            crawlq.open_frontier(str(job))
    finally:
        lock.release()
    result = crawlq_cli("check", str(job))
    assert result.returncode == 1 and "empty file" in result.stderr


def test_check_finds_no_damage_in_a_sound_job_and_writes_nothing(tmp_path: Path) -> None:
    job = tmp_path / "job"
    make_job(job)
    before = digest(job)
    result = crawlq_cli("check", str(job))
    assert result.returncode == 0, result.stderr
    assert "no damage found (550 requests in 5 hosts, 0 scheduled" in result.stdout
    assert digest(job) == before
    # While a crawl holds the job, with part of it in the unapplied log.
    with crawlq.open_frontier(str(job)) as frontier:
        frontier.add(crawlq.Request("https://h9.example/new"))
        frontier.add(crawlq.Request("https://h9.example/later", not_before=time.time() + 600))
        result = crawlq_cli("check", f"sqlite:///{job / 'crawlq.db'}")
        assert result.returncode == 0, result.stderr
        assert "no damage found (551 requests in 6 hosts, 1 scheduled" in result.stdout


def test_check_reports_broken_invariants(tmp_path: Path) -> None:
    job = tmp_path / "job"
    make_job(job)
    db = sqlite3.connect(job / "crawlq.db")
    with db:
        db.execute("UPDATE hosts SET queued = queued + 3 WHERE name = 'h1.example'")
        db.execute("UPDATE requests SET payload = x'c1' WHERE id = (SELECT max(id) FROM requests)")
        db.execute("UPDATE counters SET value = 7 WHERE name = 'seen'")
    db.close()
    result = crawlq_cli("check", str(job))
    assert result.returncode == 1
    assert "host 'h1.example' counts 113 stored requests but has 110" in result.stdout
    assert "does not decode" not in result.stdout  # one: listed, not summed up
    assert re.search(r"request \d+: stored request is not a valid crawlq request", result.stdout)
    assert "the seen counter is 7 but 600 are stored" in result.stdout
    assert "is damaged (3 problems above)" in result.stderr


def test_damaged_pages_are_found_and_named_in_the_error(tmp_path: Path) -> None:
    job = tmp_path / "job"
    make_job(job, requests=3000)
    database = job / "crawlq.db"
    vacuum = sqlite3.connect(database)
    vacuum.execute("VACUUM")  # no free pages: every page damaged below is in use
    vacuum.close()
    data = bytearray(database.read_bytes())
    page = 4096
    pages = len(data) // page
    assert pages > 40
    for number in range(pages // 3, pages // 3 + 8):  # pages of the requests table
        data[number * page + 8 : number * page + page - 8] = b"\xa5" * (page - 16)
    database.write_bytes(bytes(data))
    result = crawlq_cli("check", str(job))
    assert result.returncode == 1
    assert "integrity_check" in result.stdout
    with (
        pytest.raises(crawlq.CorruptStore, match=r"crawlq check .*crawlq\.db"),
        crawlq.open_frontier(str(job)) as frontier,
    ):
        while (request := frontier.pop()) is not None:
            frontier.ack(request)
