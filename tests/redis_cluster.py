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
kill it, or move one slot to another primary while clients use it
(`RedisCluster.move_slot`: the documented manual resharding steps, in
batches, so a test runs its crawl while the slot is half moved). Missing
``redis-server`` or ``redis-cli`` fails the test, never skips it.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .redis_server import INSTALL, RedisServer, redis_server_binary

__all__ = ["RedisCluster", "SlotMove"]

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


@dataclass
class SlotMove:
    """What `RedisCluster.move_slot` did, with wall-clock times (``time.time()``)."""

    slot: int
    source: int  # port of the primary that served the slot
    target: int  # port of the primary that serves it now
    keys: int = 0  # keys moved
    batches: int = 0  # MIGRATE calls
    #: The source answers for the slot with ASK from here (SETSLOT MIGRATING)...
    began: float = 0.0
    #: ...keys sit on both nodes from the first MIGRATE to the end of the last...
    first_batch: float = 0.0
    last_batch: float = 0.0
    #: ...and every primary has been told the slot's new owner here (SETSLOT NODE).
    ended: float = 0.0


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
        # A redis-py client per node, for `move_slot` and its helpers.
        self._clients: dict[int, Any] = {}

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
        states = {
            s.port: [
                line
                for line in _command(s.port, "CLUSTER", "INFO").decode(errors="replace").split()
                if line.startswith(("cluster_state:", "cluster_known_nodes:"))
            ]
            for s in running
        }
        raise RuntimeError(f"the Redis Cluster did not reach cluster_state:ok in time: {states}")

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

    def node_id(self, port: int) -> str:
        """The cluster node id of the node on ``port`` (``CLUSTER MYID``)."""
        return bytes(self._client(port).execute_command("CLUSTER", "MYID")).decode()

    def key_slot(self, key: str) -> int:
        """The slot of ``key``, as the cluster computes it (``CLUSTER KEYSLOT``)."""
        port = self.primary_ports()[0]
        return int(self._client(port).execute_command("CLUSTER", "KEYSLOT", key))

    def slot_owner(self, slot: int, asked: int | None = None) -> int:
        """Port of the primary serving ``slot``, as node ``asked`` (default: any) sees it."""
        port = asked if asked is not None else self.primary_ports()[0]
        nodes = bytes(self._client(port).execute_command("CLUSTER", "NODES")).decode()
        for line in nodes.splitlines():
            fields = line.split()
            if "master" not in fields[2].split(","):
                continue
            for part in fields[8:]:
                if part.startswith("["):
                    continue  # a slot being imported or migrated, not served
                low, _, high = part.partition("-")
                if int(low) <= slot <= int(high or low):
                    return int(fields[1].partition("@")[0].rpartition(":")[2])
        raise AssertionError(f"no primary serves slot {slot} (asked {port})")

    def move_slot(
        self,
        slot: int,
        target: int,
        *,
        batch: int = 10,
        pause: float = 0.0,
        after_batch: Callable[[SlotMove], None] | None = None,
    ) -> SlotMove:
        """Move ``slot`` to the primary on ``target`` as an operator would, by hand.

        The steps of the Redis Cluster specification ("Live reconfiguration",
        what ``redis-cli --cluster reshard`` does per slot): ``CLUSTER
        SETSLOT slot IMPORTING`` on the target, ``MIGRATING`` on the source,
        then ``MIGRATE ... KEYS`` ``batch`` keys at a time, ``pause``
        seconds after each batch (clients keep running while the slot is
        half moved: the source answers ASK for keys it no longer has, and
        the target TRYAGAIN to multi-key commands it has only part of), until
        the source has none left; then ``CLUSTER SETSLOT slot NODE target``
        on the target, the source and every other primary. ``after_batch``
        is called after each batch, before its pause. Returns once every
        running node agrees on the new owner.
        """
        source = self.slot_owner(slot)
        if source == target:
            raise ValueError(f"slot {slot} is on {target} already")
        src, dst = self._client(source), self._client(target)
        src_id, dst_id = self.node_id(source), self.node_id(target)
        move = SlotMove(slot, source, target)
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        move.began = time.time()
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        while True:
            keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch)
            if not keys:
                break
            if not move.batches:
                move.first_batch = time.time()
            src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 10_000, "KEYS", *keys)
            move.last_batch = time.time()
            move.keys += len(keys)
            move.batches += 1
            if after_batch is not None:
                after_batch(move)
            time.sleep(pause)
        # The target first, so that once the source redirects (MOVED) for the
        # slot, its new owner serves it; then every other primary.
        others = [p for p in self.primary_ports() if p not in (source, target)]
        for port in [target, source, *others]:
            self._client(port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        move.ended = time.time()
        self.wait_until(
            lambda: all(self.slot_owner(slot, asked=p) == target for p in self.primary_ports()),
            f"every primary sees slot {slot} on {target}",
        )
        return move

    def keys_in_slot(self, slot: int, port: int) -> int:
        """How many keys of ``slot`` the node on ``port`` holds (``CLUSTER COUNTKEYSINSLOT``)."""
        return int(self._client(port).execute_command("CLUSTER", "COUNTKEYSINSLOT", slot))

    def node_info(self, port: int, section: str) -> dict[str, Any]:
        """``INFO section`` of the node on ``port``, as redis-py parses it."""
        return dict(self._client(port).info(section))

    def _client(self, port: int) -> Any:
        """A plain redis-py client of one node (keys are bytes), closed by `stop`."""
        import redis

        if port not in self._clients:
            self._clients[port] = redis.Redis(host="127.0.0.1", port=port, socket_timeout=10)
        return self._clients[port]

    def server_on(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def stop(self) -> None:
        """Stop every node by its pid (a paused one is continued first, so it can exit)."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        for port in list(self.paused):
            self.resume(port)
        for server in self.servers:
            server.stop()


def fail_over(cluster: RedisCluster, how: str) -> None:
    """Fail ``cluster`` over: ``how`` is cluster-failover, sigstop or sigkill.

    cluster-failover: ``CLUSTER FAILOVER`` on every replica in turn (the old
    primaries stay up, as replicas); sigstop / sigkill: the last primary
    paused past the node timeout, or killed and started again. Returns once
    the failed node is a replica.
    """
    primaries = set(cluster.primary_ports())
    if how == "cluster-failover":
        replicas = set(cluster.replica_ports())
        for port in sorted(replicas):
            cluster.failover(port)
        cluster.wait_until(
            lambda: set(cluster.replica_ports()) == primaries, "old primaries are replicas"
        )
        return
    port = sorted(primaries)[-1]
    server = cluster.server_on(port)
    if how == "sigstop":
        cluster.pause(port)
    else:
        server.kill()
    cluster.wait_until(
        lambda: len(cluster.primary_ports()) == len(primaries), "its replica promoted"
    )
    if how == "sigstop":
        cluster.resume(port)
    else:
        server.start()
    cluster.wait_until(lambda: port in cluster.replica_ports(), "it is back as a replica")


def started_cluster(directory: Path, primaries: int = 3, replicas: int = 0) -> RedisCluster:
    """A started `RedisCluster` in ``directory``; a second try, on fresh ports, if the first fails.

    Creating a cluster of real nodes on a busy machine once did not reach
    ``cluster_state:ok`` in 30 s (a node's port or bus port taken between
    its pick and its start is one way): that is the test machine, not what
    a test checks, so it gets one more try before the test fails with both
    errors.
    """
    errors: list[str] = []
    for attempt in range(2):
        cluster = RedisCluster(directory / f"try-{attempt}", primaries, replicas)
        try:
            cluster.start()
        except RuntimeError as exc:  # (start stopped every node it started)
            errors.append(str(exc))
            continue
        return cluster
    raise RuntimeError(f"a Redis Cluster did not start, twice: {errors}")


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """One Redis Cluster of 3 primaries (no replicas) for the whole test session."""
    cluster = started_cluster(tmp_path_factory.mktemp("redis-cluster"))
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
        cluster = started_cluster(tmp_path / f"cluster-{len(started)}", primaries, replicas)
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        cluster.stop()
