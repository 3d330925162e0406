"""Helpers shared by the SQLite store tests: child processes and raw reads of a job."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

CHILD = Path(__file__).with_name("_child.py")


def job_url(db: Path) -> str:
    """The ``sqlite:`` URL of the job database ``db`` (an absolute path)."""
    return f"sqlite:///{db.absolute()}"


def spawn(mode: str, *args: str) -> subprocess.Popen[str]:
    """Start ``_child.py MODE ARGS`` with pipes on stdin, stdout and stderr."""
    return subprocess.Popen(
        [sys.executable, str(CHILD), mode, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_line(child: subprocess.Popen[str]) -> str:
    """The child's next stdout line; fails with its stderr if it died instead."""
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:
        child.wait()
        assert child.stderr is not None
        raise AssertionError(f"child exited with {child.returncode}:\n{child.stderr.read()}")
    return line.rstrip("\n")


def sigkill(child: subprocess.Popen[str]) -> None:
    """SIGKILL the child (if still running) and reap it; fail if it had died by itself."""
    if child.poll() is None:
        os.kill(child.pid, signal.SIGKILL)
    child.wait()
    if child.returncode != -signal.SIGKILL:
        assert child.stderr is not None
        raise AssertionError(
            f"child exited with {child.returncode} before it was killed:\n{child.stderr.read()}"
        )
    close_pipes(child)


def close_pipes(child: subprocess.Popen[str]) -> None:
    for pipe in (child.stdin, child.stdout, child.stderr):
        if pipe is not None:
            pipe.close()


def file_state(path: Path) -> tuple[str, int, int]:
    """Digest, size and mtime of a file: equal before and after means untouched."""
    data = path.read_bytes()
    return hashlib.sha256(data).hexdigest(), len(data), path.stat().st_mtime_ns
