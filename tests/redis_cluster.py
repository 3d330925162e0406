"""Real Redis Clusters for tests: a pytest plugin.

``redis_cluster`` (session scope) is one cluster of 3 primaries without
replicas for the whole run; ``redis_cluster_url`` its ``redis+cluster://``
URL (add ``?crawl=NAME``). ``redis_clusters`` starts a cluster for one test
(``start(primaries=3, replicas=1)``), whose nodes it can kill, and stops
them all by pid at the end.

Every node is a `tests.redis_server.RedisServer` started with
``--cluster-enabled yes`` on a free port of 127.0.0.1; ``redis-cli --cluster
create`` joins them, and the fixture waits until every node reports
``cluster_state:ok``. A test may fail a primary over (`RedisCluster.failover`),
pause one (`RedisCluster.pause`, SIGSTOP, until `RedisCluster.resume`) or
kill it. Missing ``redis-server`` or ``redis-cli`` fails the
test, never skips it.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .redis_server import INSTALL, RedisServer, redis_server_binary

__all__ = ["RedisCluster"]

_READY_TIMEOUT = 30.0
#: Milliseconds before a silent primary is failed over: short, for the tests.
NODE_TIMEOUT_MS = 1500


def _redis_cli() -> str:
    found = shutil.which("redis-cli")
    if found is None:
        pytest.fail(
            f"redis-cli is not installed; the Redis Cluster tests need it: {INSTALL}", pytrace=False
        )
    return found


def _free_cluster_port() -> int:
    """A free port of 127.0.0.1 whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        port = random.randrange(20000, 55535)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


def _command(port: int, *args: str, timeout: float = 2.0) -> bytes:
    """Send one inline command to a node and return its raw reply (b"" if none)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall((" ".join(args) + "\r\n").encode())
            data = b""
            sock.settimeout(timeout)
            while True:
                chunk = sock.recv(65536)
                data += chunk
                if not chunk or _complete(data):
                    return data
    except OSError:
        return b""


def _complete(data: bytes) -> bool:
    if data.startswith(b"$"):
        size, _, rest = data[1:].partition(b"\r\n")
        return int(size) < 0 or len(rest) >= int(size) + 2
    return data.endswith(b"\r\n")


class RedisCluster:
    """A Redis Cluster of real redis-server processes on 127.0.0.1."""

    def __init__(self, directory: Path, primaries: int = 3, replicas: int = 0) -> None:
        redis_server_binary()
        self.directory = directory
        self.primaries = primaries
        self.replicas = replicas
        self.servers = [
            RedisServer(
                directory / f"node-{i}",
                extra=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    str(NODE_TIMEOUT_MS),
                    # A test kills primaries: keep serving the slots that remain.
                    "--cluster-require-full-coverage",
                    "no",
                    # A node back as a replica syncs at once, not 5 s later
                    # (writes with replicas=1 wait for it).
                    "--repl-diskless-sync-delay",
                    "0",
                ),
                port=_free_cluster_port(),
            )
            for i in range(primaries * (1 + replicas))
        ]
        # Ports of the nodes SIGSTOPped now (`pause`): not asked anything.
        self.paused: set[int] = set()

    def url(self, crawl: str, *, seeds: int = 2) -> str:
        """``redis+cluster://`` naming the first ``seeds`` nodes, for crawl ``crawl``."""
        nodes = ",".join(f"127.0.0.1:{s.port}" for s in self.servers[:seeds])
        return f"redis+cluster://{nodes}/?crawl={crawl}"

    def start(self) -> None:
        """Start every node, create the cluster, and wait until it serves every slot.

        On any failure every node already started is stopped before the error
        goes on: nothing is left running.
        """
        try:
            for server in self.servers:
                server.start()
            args = [_redis_cli(), "--cluster", "create"]
            args += [f"127.0.0.1:{s.port}" for s in self.servers]
            args += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
            done = subprocess.run(args, capture_output=True, timeout=60, check=False)
            if done.returncode != 0:
                raise RuntimeError(
                    f"redis-cli --cluster create failed: {done.stdout!r}{done.stderr!r}"
                )
            self.wait_ok()
        except BaseException:
            self.stop()
            raise

    def wait_ok(self, timeout: float = _READY_TIMEOUT) -> None:
        """Wait until every running node says ``cluster_state:ok`` and knows every node."""
        deadline = time.monotonic() + timeout
        running = [s for s in self.servers if s.process is not None and s.port not in self.paused]
        while time.monotonic() < deadline:
            infos = [_command(s.port, "CLUSTER", "INFO") for s in running]
            known = b"cluster_known_nodes:%d" % len(self.servers)
            if all(b"cluster_state:ok" in info and known in info for info in infos):
                return
            time.sleep(0.05)
        raise RuntimeError("the Redis Cluster did not reach cluster_state:ok in time")

    def primary_ports(self) -> list[int]:
        """Ports of the nodes that are primaries now (asked of each running node)."""
        return self._with_role(b"master")

    def replica_ports(self) -> list[int]:
        """Ports of the running nodes that are replicas now."""
        return self._with_role(b"slave")

    def _with_role(self, role: bytes) -> list[int]:
        ports = []
        for server in self.servers:
            if server.process is None or server.port in self.paused:
                continue
            if role in _command(server.port, "ROLE")[:40]:
                ports.append(server.port)
        return ports

    def failover(self, replica: int, timeout: float = 30.0) -> None:
        """``CLUSTER FAILOVER`` on a replica; return once it is a primary (its own stays up).

        A manual failover waits for the replica to catch up with its
        primary, and gives up silently after 5 s (or loses an election that
        another one won): a replica not promoted within 3 s is asked again.
        """
        self.wait_until(
            lambda: b"master_link_status:up" in _command(replica, "INFO", "replication"),
            f"replica {replica} in sync",
        )
        deadline = time.monotonic() + timeout
        while True:
            reply = _command(replica, "CLUSTER", "FAILOVER")
            if not reply.startswith(b"+OK"):
                raise RuntimeError(f"CLUSTER FAILOVER on {replica} answered {reply!r}")
            asked = time.monotonic()
            while time.monotonic() - asked < 3.0:
                if replica in self.primary_ports():
                    return
                time.sleep(0.02)
            if time.monotonic() > deadline:
                raise AssertionError(f"CLUSTER FAILOVER never promoted {replica}")

    def pause(self, port: int) -> None:
        """SIGSTOP a node (by pid): it stays alive but silent until `resume`."""
        pid = self.server_on(port).pid
        assert pid is not None
        self.paused.add(port)
        os.kill(pid, signal.SIGSTOP)

    def resume(self, port: int) -> None:
        """SIGCONT a node that `pause` stopped."""
        pid = self.server_on(port).pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.paused.discard(port)

    def wait_until(self, check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
        """Poll ``check`` every 50 ms until it is true; fail naming ``what`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster never got there: {what}")
            time.sleep(0.05)

    def server_on(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def stop(self) -> None:
        """Stop every node by its pid (a paused one is continued first, so it can exit)."""
        for port in list(self.paused):
            self.resume(port)
        for server in self.servers:
            server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """One Redis Cluster of 3 primaries (no replicas) for the whole test session."""
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(redis_cluster: RedisCluster) -> str:
    """``redis+cluster://127.0.0.1:P1,127.0.0.1:P2/`` of the session's cluster (add ``?crawl=``)."""
    return redis_cluster.url("x").partition("?")[0]


StartCluster = Callable[..., RedisCluster]


@pytest.fixture
def redis_clusters(tmp_path: Path) -> Iterator[StartCluster]:
    """Start clusters for one test: ``start(primaries=3, replicas=1)``; stopped at its end."""
    started: list[RedisCluster] = []

    def start(primaries: int = 3, replicas: int = 0) -> RedisCluster:
        cluster = RedisCluster(tmp_path / f"cluster-{len(started)}", primaries, replicas)
        started.append(cluster)
        cluster.start()
        return cluster

    yield start
    for cluster in started:
        cluster.stop()
