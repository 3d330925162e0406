"""The stores a chaos run crawls on, and the faults it injects into them.

Each `Backend` starts its store (a redis-server with AOF on a tmpfs, a Redis
Cluster of 3 primaries with a replica each, a SQLite job on a small tmpfs; a
tmpfs only as root, else no full-disk fault), names its
fault kinds, injects one on demand (`inject`, which returns once the store
is whole again: a fault is over when it returns) and stops everything it
started by pid (`stop`). Worker SIGKILLs are the orchestrator's
(`tests.chaos.run`), since it owns the workers.

Every random choice (which node, how long a pause) comes from the
``random.Random`` the orchestrator passes, seeded by the run's seed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.redis_cluster import RedisCluster, _command
from tests.redis_server import RedisServer

__all__ = ["BACKENDS", "Backend", "ClusterBackend", "RedisBackend", "SqliteBackend"]

#: Seconds a redis-server is SIGSTOPped (the previous manual run's range).
SERVER_PAUSE = (1.8, 2.4)
#: Seconds a full disk stays full.
DISK_FULL = (1.0, 2.5)
#: Seconds a SIGSTOPped cluster primary stays stopped after its replica took over.
PRIMARY_PAUSE_EXTRA = (0.2, 1.5)


def mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a tmpfs of ``size`` at ``path`` (made here); the reason it could not, or None."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return "mounting a small tmpfs needs root"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return f"cannot mount a tmpfs: {done.stderr.strip() or done.returncode}"
    return None


def unmount(path: Path) -> None:
    """Remove the filler and unmount ``path`` (lazily if a file is still open)."""
    (path / "filler").unlink(missing_ok=True)
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill_for(path: Path, seconds: float) -> int:
    """Fill the file system at ``path`` to its last byte for ``seconds``; bytes written."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    filled = 0
    try:
        chunk = b"\0" * (1 << 20)
        while True:
            try:
                filled += os.write(fd, chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
    finally:
        os.close(fd)
    try:
        time.sleep(seconds)
    finally:
        filler.unlink(missing_ok=True)
    return filled


@dataclass
class Fault:
    """One injected fault: its kind, when it began and ended (wall clock), what it hit."""

    kind: str
    start: float
    end: float = 0.0
    detail: str = ""


@dataclass
class Backend:
    """A store for a chaos run. Subclasses fill in the rest."""

    directory: Path
    name: str = ""
    #: Fault kinds this backend injects (besides the orchestrator's worker-sigkill).
    kinds: tuple[str, ...] = ()
    #: Fault kinds that cannot be injected here, with the reason.
    skipped: dict[str, str] = field(default_factory=dict)
    #: Worker processes at once.
    workers: int = 4

    @property
    def url(self) -> str:
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        return {}

    def start(self) -> None:
        raise NotImplementedError

    def inject(self, kind: str, rng: random.Random) -> str:
        """Inject one fault of ``kind``; return once it is over, with what it did."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def pids(self) -> list[int]:
        """Pids of the server processes running now."""
        return []


@dataclass
class RedisBackend(Backend):
    """One redis-server, ``appendonly yes`` with ``appendfsync always``, its files on a tmpfs.

    A full disk (``server-disk-full``, root only) makes such a server exit
    at its first failed append-only write (it cannot keep its fsync
    promise), leaving a cut-short command at the end of the file: the fault
    frees the disk and restarts it on that file, which Redis loads without
    the cut command (never answered, so never acknowledged).
    """

    name: str = "redis"
    kinds: tuple[str, ...] = ("server-sigstop", "server-kill9", "server-disk-full")
    server: RedisServer | None = None
    disk_size: str = "256m"
    mounted: Path | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"{self.server.url}?crawl=chaos"

    def start(self) -> None:
        path = self.directory / "disk"
        reason = mount_tmpfs(path, self.disk_size)
        if reason is None:
            self.mounted = path
        else:
            self.skipped["server-disk-full"] = reason
            self.kinds = tuple(k for k in self.kinds if k != "server-disk-full")
        self.server = RedisServer((self.mounted or self.directory) / "redis", appendonly=True)
        self.server.start()

    def inject(self, kind: str, rng: random.Random) -> str:
        server = self.server
        assert server is not None and server.pid is not None
        if kind == "server-sigstop":
            pause = rng.uniform(*SERVER_PAUSE)
            os.kill(server.pid, signal.SIGSTOP)
            try:
                time.sleep(pause)
            finally:
                os.kill(server.pid, signal.SIGCONT)
            return f"pid {server.pid} stopped {pause:.2f} s"
        if kind == "server-kill9":
            pid = server.pid
            server.kill()
            down = rng.uniform(0.2, 1.0)
            time.sleep(down)
            server.start()  # same port, same directory: the AOF is replayed
            return f"pid {pid} killed, down {down:.2f} s, restarted as pid {server.pid}"
        if kind == "server-disk-full" and self.mounted is not None:
            pid, hold = server.pid, rng.uniform(*DISK_FULL)
            filled = fill_for(self.mounted, hold)
            process = server.process
            if process is None or process.poll() is None:
                return f"{filled / 1e6:.1f} MB filler held {hold:.2f} s; pid {pid} kept running"
            server.stop()  # (reaps it)
            server.start()  # same port, its AOF: the cut-short command is dropped
            return (
                f"{filled / 1e6:.1f} MB filler held {hold:.2f} s; pid {pid} exited on its "
                f"AOF write error, restarted as pid {server.pid}"
            )
        raise ValueError(kind)

    def stop(self) -> None:
        if self.server is not None:
            if self.server.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.server.pid, signal.SIGCONT)
            self.server.stop()
        if self.mounted is not None:
            unmount(self.mounted)
            self.mounted = None

    def pids(self) -> list[int]:
        return [self.server.pid] if self.server and self.server.pid else []


@dataclass
class ClusterBackend(Backend):
    """3 primaries with a replica each; the crawl writes with ``replicas=1``."""

    name: str = "redis-cluster"
    kinds: tuple[str, ...] = ("cluster-failover", "primary-sigstop", "primary-sigkill")
    cluster: RedisCluster | None = None

    @property
    def url(self) -> str:
        assert self.cluster is not None
        return self.cluster.url("chaos", seeds=len(self.cluster.servers))

    def options(self) -> dict[str, Any]:
        return {"replicas": 1}

    def start(self) -> None:
        self.cluster = RedisCluster(self.directory / "cluster", primaries=3, replicas=1)
        self.cluster.start()

    def _in_sync(self, replica: int) -> bool:
        return b"master_link_status:up" in _command(replica, "INFO", "replication")

    def _replica_of(self, primary: int) -> int | None:
        assert self.cluster is not None
        for port in self.cluster.replica_ports():
            if b"master_port:%d\r\n" % primary in _command(port, "INFO", "replication"):
                return port
        return None

    def inject(self, kind: str, rng: random.Random) -> str:
        cluster = self.cluster
        assert cluster is not None
        # Every primary has a replica in sync before a fault: the previous
        # fault's node is back and synced (writes with replicas=1 wait for it).
        cluster.wait_until(
            lambda: (
                len(cluster.primary_ports()) == 3
                and all(self._in_sync(r) for r in cluster.replica_ports())
                and len(cluster.replica_ports()) == 3
            ),
            "three primaries, each with a replica in sync",
        )
        if kind == "cluster-failover":
            replica = rng.choice(sorted(cluster.replica_ports()))
            cluster.failover(replica)
            return f"replica {replica} promoted by CLUSTER FAILOVER"
        primary = rng.choice(sorted(cluster.primary_ports()))
        server = cluster.server_on(primary)
        replica = self._replica_of(primary)
        began = time.monotonic()
        if kind == "primary-sigstop":
            cluster.pause(primary)
        elif kind == "primary-sigkill":
            server.kill()
        else:
            raise ValueError(kind)
        try:
            cluster.wait_until(
                lambda: len(cluster.primary_ports()) == 3, "the replica of a lost primary promoted"
            )
            promoted = time.monotonic() - began
            if kind == "primary-sigstop":
                extra = rng.uniform(*PRIMARY_PAUSE_EXTRA)
                time.sleep(extra)
        finally:
            if kind == "primary-sigstop":
                cluster.resume(primary)
            else:
                server.start()
        cluster.wait_until(lambda: primary in cluster.replica_ports(), "the old primary a replica")
        cluster.wait_until(lambda: self._in_sync(primary), "the old primary in sync")
        what = "stopped" if kind == "primary-sigstop" else "killed"
        return (
            f"primary {primary} {what}, replica {replica} promoted after {promoted:.1f} s, "
            f"back as a replica after {time.monotonic() - began:.1f} s"
        )

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()

    def pids(self) -> list[int]:
        if self.cluster is None:
            return []
        return [s.pid for s in self.cluster.servers if s.pid is not None]


@dataclass
class SqliteBackend(Backend):
    """A SQLite job on a tmpfs of its own (root only; else no full-disk fault), one worker."""

    name: str = "sqlite"
    kinds: tuple[str, ...] = ("disk-full",)
    workers: int = 1
    #: Size of the tmpfs, e.g. "64m".
    disk_size: str = "64m"
    mounted: Path | None = None

    @property
    def job(self) -> Path:
        return (self.mounted or self.directory / "plain") / "job.db"

    @property
    def url(self) -> str:
        return f"sqlite:///{self.job.absolute()}"

    def start(self) -> None:
        path = self.directory / "disk"
        reason = mount_tmpfs(path, self.disk_size)
        if reason is None:
            self.mounted = path
        else:
            self.skipped["disk-full"] = reason
            self.kinds = ()
            (self.directory / "plain").mkdir(parents=True, exist_ok=True)

    def inject(self, kind: str, rng: random.Random) -> str:
        if kind != "disk-full" or self.mounted is None:
            raise ValueError(kind)
        hold = rng.uniform(*DISK_FULL)
        filled = fill_for(self.mounted, hold)
        return f"{filled / 1e6:.1f} MB filler held {hold:.2f} s on {self.disk_size} tmpfs"

    def stop(self) -> None:
        if self.mounted is not None:
            unmount(self.mounted)
            self.mounted = None


BACKENDS: dict[str, type[Backend]] = {
    "redis": RedisBackend,
    "redis-cluster": ClusterBackend,
    "sqlite": SqliteBackend,
}
