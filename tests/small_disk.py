"""A small tmpfs for full-disk tests: mounted for one test, filled and freed by it.

Mounting needs root: without it the tests that use one skip, saying why
(CI runs them as root, `.ci/run`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["Disk", "mounted_disk"]


class Disk:
    """A small tmpfs mounted at ``path``, and a filler file to take its last bytes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.filler = path / "filler"

    def fill(self) -> None:
        """Write the filler until the file system has no byte left."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            chunk = b"\0" * 4096
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    if len(chunk) == 1:
                        return
                    chunk = chunk[: len(chunk) // 2]
        finally:
            os.close(fd)

    def free(self) -> None:
        """Delete the filler."""
        self.filler.unlink(missing_ok=True)

    def grow(self, size: str = "64m") -> None:
        """Remount the file system bigger; its files stay."""
        subprocess.run(["mount", "-o", f"remount,size={size}", str(self.path)], check=True)


@contextlib.contextmanager
def mounted_disk(path: Path, size: str = "3m") -> Iterator[Disk]:
    """Mount a tmpfs of ``size`` at ``path`` (made here) for the ``with`` block.

    Skips the test, saying why, without root or when the mount fails.
    """
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs these tests as root)")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield Disk(path)
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=True)  # a file still open
