"""redis-server under callgrind, instrumentation off, on a free 127.0.0.1 port.

`start_server` runs valgrind's callgrind on redis-server (no persistence,
``--hz 1``, ``--activerehashing no``, serverCron left out of the counts, the
caller's extra arguments last) and waits for its PING; `missing_tools` names
what this needs and the machine lacks.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.ir_ab import procs
from benchmarks.redis_servers import plain_server_args


def missing_tools(redis_bin: str, shim: bool) -> list[str]:
    """What is needed and absent: valgrind and vgdb, gcc (for the shim), redis-server."""
    missing = [tool for tool in ("valgrind", "vgdb") if shutil.which(tool) is None]
    if shim and shutil.which("gcc") is None:
        missing.append("gcc")
    if shutil.which(redis_bin) is None:
        missing.append(f"{redis_bin} (REDIS_BIN or --redis-bin)")
    return missing


#: redis-server arguments of a one-node Redis Cluster (`own_all_slots` gives it every slot).
CLUSTER_ARGS = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]


def own_all_slots(port: int) -> None:
    """Give the one-node cluster at ``port`` every slot and wait for ``cluster_state:ok``."""
    import redis

    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=60)
    try:
        client.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + 60
        while client.cluster("INFO").get("cluster_state") != "ok":  # (parsed by redis-py)
            # A new primary takes writes 2 s of wall clock after it starts; under the
            # shim's virtual clock (see fixseed.c) only TIME commands move that clock.
            pipe = client.pipeline(transaction=False)
            for _ in range(1000):
                pipe.time()
            pipe.execute()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster node on port {port} never reported state ok")
            time.sleep(0.05)
    finally:
        client.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(
    redis_bin: str,
    folder: Path,
    env: dict[str, str] | None = None,
    extra: list[str] | None = None,
) -> tuple[subprocess.Popen[Any], int, str]:
    """redis-server under callgrind (instrumentation off) answering PING: (proc, port, out),
    out being the prefix of its dumps (``out.1``, ``out.2``...)."""
    import redis

    folder.mkdir(parents=True, exist_ok=True)
    out = str(folder / "cg.out")
    for _ in range(3):  # a port taken between the check and the bind: another try
        port = _free_port()
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--toggle-collect=serverCron",
            "--collect-atstart=yes",
            f"--callgrind-out-file={out}",
            f"--log-file={folder}/valgrind.log",
            redis_bin,
            *plain_server_args(port, folder, log="redis.log"),
            "--hz",
            "1",
            "--activerehashing",
            "no",
            "--jemalloc-bg-thread",
            "no",
            *(extra or []),
        ]
        proc = procs.spawn(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    if client.ping():
                        return proc, port, out
                except redis.RedisError:
                    time.sleep(0.05)
        finally:
            client.close()
        procs.stop(proc)
    raise RuntimeError(f"redis-server under callgrind did not start (see {folder})")
