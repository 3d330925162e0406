"""Real redis-server processes for tests: a pytest plugin.

``redis_url`` (session scope) is one server for the whole run, without
persistence. ``redis_servers`` starts extra servers for a test (with
``appendonly yes``, a password...), which it can stop, kill and restart; all
are stopped by pid at the end of the test.

Each server listens on a free port of 127.0.0.1 with its own temporary
directory. When ``redis-server`` is missing the tests fail, never skip,
saying how to install it: Redis behaviour must be tested on a real server.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

__all__ = ["RedisServer", "redis_server_binary"]

INSTALL = "apt-get install -y redis-server"
_START_TIMEOUT = 15.0


def redis_server_binary() -> str:
    """Path of redis-server; fails the test (never skips) when it is missing."""
    found = shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if os.path.exists(p)), None
    )
    if found is None:
        pytest.fail(
            f"redis-server is not installed; the Redis tests need a real server: {INSTALL}"
            + (" (CI must install it in .ci/run)" if os.environ.get("CI") else ""),
            pytrace=False,
        )
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server process on 127.0.0.1, controlled by pid."""

    def __init__(
        self,
        directory: Path,
        *,
        appendonly: bool = False,
        password: str | None = None,
        extra: tuple[str, ...] = (),
        port: int | None = None,
    ) -> None:
        self.directory = directory
        self.appendonly = appendonly
        self.password = password
        self.extra = extra
        self.port = port or _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        """``redis://[:password@]127.0.0.1:PORT/0``."""
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> None:
        """Start (or restart, same port and directory) and wait until it answers."""
        args = [
            redis_server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(self.directory / "redis.log"),
            "--protected-mode",
            "no",
        ]
        if self.appendonly:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        args += list(self.extra)
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server exited at start: {err}{log}")
            if self._answers():
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server on port {self.port} did not answer in time")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                reply = sock.recv(64)
        except OSError:
            return False
        # -NOAUTH also means it is up; -LOADING means not yet.
        return reply.startswith((b"+PONG", b"-NOAUTH"))

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server by its pid (SIGTERM: a clean shutdown) and wait for it."""
        process = self.process
        if process is None:
            return
        self.process = None
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, sig)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        if process.stderr:
            process.stderr.close()

    def kill(self) -> None:
        """SIGKILL the server: a crash, nothing flushed beyond what fsync already did."""
        self.stop(signal.SIGKILL)

    def restart(self, *, crash: bool = False) -> None:
        """Stop (or kill, with ``crash``) and start again on the same port and data."""
        if crash:
            self.kill()
        else:
            self.stop()
        self.start()


@pytest.fixture(scope="session")
def redis_server_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server, without persistence, for the whole test session."""
    server = RedisServer(tmp_path_factory.mktemp("redis-session"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server_session: RedisServer) -> str:
    """``redis://127.0.0.1:PORT/0`` of the session's server (add ``?crawl=NAME``)."""
    return redis_server_session.url


StartServer = Callable[..., RedisServer]


@pytest.fixture
def redis_servers(tmp_path: Path) -> Iterator[StartServer]:
    """Start extra servers for one test: ``start(appendonly=True, password=...)``.

    Every server started is stopped by pid when the test ends.
    """
    started: list[RedisServer] = []

    def start(**options: object) -> RedisServer:
        server = RedisServer(tmp_path / f"redis-{len(started)}", **options)  # type: ignore[arg-type]
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.stop()
