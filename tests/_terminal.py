"""A real terminal for tests: a tmux server of its own, driven by key presses."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

INSTALL_TMUX = "apt-get install -y tmux"


class Tmux:
    """A tmux server of its own (``-S socket``) with one session at a time; stopped at the end."""

    def __init__(self, socket: Path) -> None:
        binary = shutil.which("tmux")
        if binary is None:
            pytest.fail(f"tmux is not installed; the terminal tests need it: {INSTALL_TMUX}")
        self.base = [binary, "-S", str(socket)]
        self.session = ""

    def run(self, *args: str) -> str:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    def start(self, name: str, command: str) -> None:
        """Run ``command`` in a new 220x60 session ``name`` (the previous one is closed)."""
        # The new session first: killing the server's last session stops the
        # server, and a new-session racing with that exit fails.
        self.run("new-session", "-d", "-s", name, "-x", "220", "-y", "60", command)
        if self.session:
            self.run("kill-session", "-t", self.session)
        self.session = name

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-J", "-S", "-1000", "-t", self.session)

    def wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if text in screen:
                return screen
            assert time.monotonic() < deadline, f"{text!r} never appeared:\n{screen}"
            time.sleep(0.2)

    def stop(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, timeout=30)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    terminal = Tmux(tmp_path / "tmux.sock")
    try:
        yield terminal
    finally:
        terminal.stop()
