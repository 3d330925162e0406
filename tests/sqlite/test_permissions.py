"""A job the crawler's user may not read or write: a crawlq error naming the fix.

Root reads and writes anything, so when the tests run as root each check runs
in a forked child that drops to ``nobody`` first: real permissions on a real
directory, no mocks.
"""

from __future__ import annotations

import encodings.ascii  # noqa: F401  (imported before the fork, as below)
import os
import shutil
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import crawlq
import crawlq.stores.sqlite  # imported before the fork: nobody may not read the venv
from crawlq.stores.sqlite import admin as _sqlite_inspect

NOBODY = 65534


def as_nobody(check: Callable[[], object]) -> str:
    """Run ``check`` in a child as ``nobody`` (when root); return what it raised.

    Returns ``"ClassName: message"`` for an exception, ``"ok"`` otherwise.
    """
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        status = 0
        try:
            os.close(read)
            if os.getuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            try:
                check()
                outcome = "ok"
            except BaseException as exc:
                outcome = f"{type(exc).__qualname__}: {exc}"
            os.write(write, outcome.encode())
        except BaseException:
            os.write(write, traceback.format_exc().encode())
            status = 1
        finally:
            os._exit(status)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode()
    assert os.waitstatus_to_exitcode(status) == 0, text
    return text


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory nobody can reach (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="crawlq-perm-"))
    path.chmod(0o755)
    yield path
    for inner in path.rglob("*"):
        if inner.is_dir():
            inner.chmod(0o755)
    shutil.rmtree(path)


def _open(url: str) -> None:
    crawlq.open_frontier(url).close()


def test_a_parent_that_cannot_be_searched(base: Path) -> None:
    locked = base / "locked"
    locked.mkdir(mode=0o000)
    locked.chmod(0o000)
    outcome = as_nobody(lambda: _open(str(locked / "job")))
    assert outcome.startswith("StoreError: "), outcome
    assert "permission denied" in outcome and "chmod" in outcome


def test_a_parent_that_cannot_be_written(base: Path) -> None:
    read_only = base / "ro"
    read_only.mkdir()
    read_only.chmod(0o555)
    outcome = as_nobody(lambda: _open(str(read_only / "deeper" / "job")))
    assert outcome.startswith("StoreError: "), outcome
    assert "permission denied" in outcome and "deeper" in outcome


def test_a_job_directory_that_cannot_be_written(base: Path) -> None:
    job = base / "job"
    _open(str(job))  # made by root: nobody may not write it
    outcome = as_nobody(lambda: _open(str(job)))
    assert outcome.startswith("StoreError: "), outcome
    assert "chown" in outcome


def test_a_read_only_database(base: Path) -> None:
    job = base / "job"
    with crawlq.open_frontier(str(job)) as frontier:
        frontier.add(crawlq.Request("https://a.example/"))
    for path in [job, *job.iterdir()]:
        os.chown(path, NOBODY, NOBODY)
    (job / "crawlq.db").chmod(0o444)

    def add() -> None:
        with crawlq.open_frontier(str(job)) as frontier:
            frontier.add(crawlq.Request("https://b.example/"))

    outcome = as_nobody(add)
    assert outcome.startswith("StoreError: "), outcome
    assert "cannot be written" in outcome and "chmod" in outcome and "crawlq.db" in outcome
    # Refused at open already, not at the first write of the crawl.
    assert as_nobody(lambda: crawlq.open_frontier(str(job))).startswith("StoreError: ")
    # Readable still: inspect works.
    assert as_nobody(lambda: _sqlite_inspect.inspect(str(job))) == "ok"
