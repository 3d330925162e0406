"""Fresh redis-server processes for one measurement: a plain server or a Redis Cluster.

Used by the Redis Cluster benchmarks (``benchmarks.cluster``,
``benchmarks.cluster_a1``), the bytes per URL benchmark
(``benchmarks.memory_per_url``), ``benchmarks.redis_cost`` and ``benchmarks.due``
(and ``cpu_seconds`` by others). Holds ``Node`` (one
redis-server on a free 127.0.0.1 port, no persistence, stopped by its pid),
``servers`` (the nodes of one measurement, joined into a cluster when asked),
``make_cluster``, ``crawl_tags`` (a cluster crawl's shards' hash tags, as many
as the shards it was created with), ``shard_spread`` (how many of them each
primary serves; ``shards_per_node`` the same in node order), ``placement``
(where ``redis-cli --cluster create`` would put them on N primaries) and
``cpu_seconds`` (a process's CPU time, from ``/proc``). Nodes may be pinned
to CPUs (``taskset -c``), all threads of the server included. For a trial,
``CRAWLQ_BENCH_REDIS_ARGS`` adds options to every server's command line (e.g.
``"--zset-max-listpack-entries 0"``: which encodings cost what).
"""

from __future__ import annotations

import math
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

_START_TIMEOUT = 30.0
_TICK = os.sysconf("SC_CLK_TCK")


def plain_server_args(port: int, directory: Path | str, log: str = "log") -> list[str]:
    """redis-server's options for a benchmark server: 127.0.0.1:``port``, no persistence.

    Its files and its log (``log``, a name inside ``directory``) go to ``directory``.
    """
    network = ["--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "no"]
    files = ["--dir", str(directory), "--logfile", f"{directory}/{log}"]
    return [*network, "--save", "", "--appendonly", "no", *files]


def _free_port(cluster: bool) -> int:
    """A free 127.0.0.1 port; for a cluster node its bus port (+10000) is free too."""
    for _ in range(200):
        port = random.randrange(20000, 55535)
        try:
            with socket.socket() as one, socket.socket() as bus:
                one.bind(("127.0.0.1", port))
                if cluster:
                    bus.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port (pair) on 127.0.0.1")


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used, from /proc (10 ms ticks)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


class Node:
    """One redis-server on 127.0.0.1, without persistence, stopped by its pid."""

    def __init__(self, directory: Path, cluster: bool, cpus: Collection[int] | None = None) -> None:
        self.directory, self.cluster = directory, cluster
        self.cpus = sorted(cpus) if cpus else None  # None: wherever the kernel puts it
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.client: redis.Redis | None = None

    def start(self, attempts: int = 3) -> None:
        """Start on a free port and wait until it answers PING.

        A port taken between the check and the bind (other processes start
        servers too) costs another attempt. With ``cpus``, the server starts
        under ``taskset -c`` (it execs, so the pid is the server's and its
        threads inherit the affinity). Raises RuntimeError when redis-server
        (or taskset) is missing or does not come up.
        """
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("this benchmark needs redis-server: apt-get install -y redis-server")
        pin: list[str] = []
        if self.cpus:
            taskset = shutil.which("taskset")
            if taskset is None:
                raise RuntimeError("pinning needs taskset: apt-get install -y util-linux")
            pin = [taskset, "-c", ",".join(map(str, self.cpus))]
        self.directory.mkdir(parents=True, exist_ok=True)
        for attempt in range(attempts):
            self.port = _free_port(self.cluster)
            args = [*pin, binary, *plain_server_args(self.port, self.directory)]
            args += os.environ.get("CRAWLQ_BENCH_REDIS_ARGS", "").split()
            if self.cluster:
                args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL)
            self.client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)
            if self._wait_answer():
                return
            self.stop()
            if attempt == attempts - 1:
                tail = (self.directory / "log").read_text(errors="replace")[-500:]
                raise RuntimeError(f"redis-server did not start: {tail}")

    def _wait_answer(self) -> bool:
        """True once the server answers PING; False if it exits or times out."""
        deadline = time.monotonic() + _START_TIMEOUT
        assert self.process is not None and self.client is not None
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                if self.client.ping():
                    return True
            except redis.RedisError:
                time.sleep(0.02)
        return False

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def command(self, *args: Any) -> Any:
        """One command; its raw reply (bytes, lists) when the name is split from its
        subcommand ("CLUSTER", "INFO"), which redis-py's reply parsers do not match."""
        assert self.client is not None
        return self.client.execute_command(*args)

    def commands(self) -> dict[str, tuple[int, int]]:
        """Calls and microseconds per command since the last CONFIG RESETSTAT."""
        assert self.client is not None
        stats = self.client.info("commandstats")
        return {
            name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
            for name, v in stats.items()
        }

    def stop(self) -> None:
        """SIGTERM by pid, then wait (SIGKILL after 15 s)."""
        if self.client is not None:
            self.client.close()
            self.client = None
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


@contextmanager
def servers(
    primaries: int, directory: Path, cpus: Collection[int] | None = None
) -> Iterator[list[Node]]:
    """Fresh servers for one measurement: one plain redis-server (``primaries=0``) or a
    cluster of ``primaries`` primaries without replicas; all stopped by pid at the end.

    ``cpus``: pin every server to these CPUs (default: not pinned)."""
    count = max(primaries, 1)
    nodes = [Node(directory / f"node-{i}", primaries > 0, cpus) for i in range(count)]
    try:
        for node in nodes:
            node.start()
        if primaries:
            make_cluster(nodes)
        yield nodes
    finally:
        for node in nodes:
            node.stop()
        shutil.rmtree(directory, ignore_errors=True)


def make_cluster(nodes: Sequence[Node]) -> None:
    """Join ``nodes`` into one cluster and wait until every node says cluster_state:ok.

    ``redis-cli --cluster create`` joins three nodes or more; it refuses
    fewer, so a single node is given every slot with CLUSTER ADDSLOTSRANGE.
    """
    if len(nodes) == 1:
        nodes[0].command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
    else:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("this benchmark needs redis-cli: apt-get install -y redis-tools")
        args = [cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes)]
        args += ["--cluster-replicas", "0", "--cluster-yes"]
        done = subprocess.run(args, capture_output=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout[-500:]!r}")
    deadline = time.monotonic() + _START_TIMEOUT
    want = (b"cluster_state:ok", b"cluster_known_nodes:%d" % len(nodes))
    while time.monotonic() < deadline:
        infos = [n.command("CLUSTER", "INFO") for n in nodes]
        if all(all(w in info for w in want) for info in infos):
            return
        time.sleep(0.05)
    raise RuntimeError("the Redis Cluster did not reach cluster_state:ok in time")


def crawl_tags(nodes: Sequence[Node], crawl: str) -> list[str]:
    """The hash tags of the crawl's shards, from its record: as many as the shards it
    was created with (``NAME:K`` each for a crawl recorded before tags were)."""
    record = redis.RedisCluster(host="127.0.0.1", port=nodes[0].port)
    try:
        shards, tags = record.hmget(f"crawlq:{{{crawl}}}:cluster", ["shards", "tags"])
    finally:
        record.close()
    if tags:
        return list(tags.decode().split(" ") if isinstance(tags, bytes) else tags.split(" "))
    if shards is None:
        raise RuntimeError(f"no Redis Cluster crawl {crawl!r} on these nodes")
    return [f"{crawl}:{k}" for k in range(int(shards))]


def _shard_slot(tag: str) -> int:
    return key_slot(f"crawlq:{{{tag}}}:meta".encode())


def shards_per_node(nodes: Sequence[Node], tags: Sequence[str]) -> list[int]:
    """How many of the shards with hash tags ``tags`` (`crawl_tags`) each node serves,
    in the order of ``nodes``."""
    owner: dict[int, int] = {}
    for start, end, primary, *_ in nodes[0].command("CLUSTER", "SLOTS"):
        for slot in range(start, end + 1):
            owner[slot] = int(primary[1])
    counts = dict.fromkeys((n.port for n in nodes), 0)
    for tag in tags:
        counts[owner[_shard_slot(tag)]] += 1
    return [counts[n.port] for n in nodes]


def shard_spread(nodes: Sequence[Node], tags: Sequence[str]) -> list[int]:
    """How many of the shards with hash tags ``tags`` each node serves (by the slot of
    its hash tag), busiest first."""
    return sorted(shards_per_node(nodes, tags), reverse=True)


def slot_ranges(primaries: int) -> list[tuple[int, int]]:
    """The slots ``redis-cli --cluster create`` gives each of ``primaries`` primaries
    (first, last), as its clusterManagerCommandCreate splits them (``lround``)."""
    per_node, cursor, first, ranges = 16384 / primaries, 0.0, 0, []
    for i in range(primaries):
        last = 16383 if i == primaries - 1 else min(math.floor(cursor + per_node - 0.5), 16384)
        last = max(last, first)
        ranges.append((first, last))
        first, cursor = last + 1, cursor + per_node
    return ranges


def placement(tags: Sequence[str], primaries: int) -> list[int]:
    """Shards per primary, busiest first, had ``redis-cli --cluster create`` made a
    cluster of ``primaries`` for a crawl with these shard hash tags."""
    ranges = slot_ranges(primaries)
    counts = [0] * primaries
    for tag in tags:
        slot = _shard_slot(tag)
        counts[next(i for i, (a, b) in enumerate(ranges) if a <= slot <= b)] += 1
    return sorted(counts, reverse=True)
