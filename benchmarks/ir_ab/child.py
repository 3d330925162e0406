"""One shape on one callgrind-controlled server, in this (fresh) process.

``python -m benchmarks.ir_ab.child SPEC`` (started by ``benchmarks.ir_ab.runner``
with PYTHONPATH=<copy of a variant's src>:<copy of benchmarks>) checks that
crawlq comes from the variant's copy, makes crawlq deterministic (a virtual
monotonic clock, a fixed pid, seeded random tokens), runs the shape from
``benchmarks.redis_cost_shapes`` (or ``benchmarks.cluster_a1``'s worker for
``a1``) with an `IrWindow` in place of its timing window, and prints one JSON
line after ``@@IRAB@@`` (or ``@@IRAB-RETRY@@`` when a serverCron leaked in).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import itertools
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.ir_ab.callgrind import Callgrind, CronLeak

RESULT = "@@IRAB@@ "
RETRY = "@@IRAB-RETRY@@ "
CLOCK_STEP = 1e-5  # seconds per reading of crawlq's virtual monotonic clock
Result = dict[str, Any]


class IrWindow:
    """Stands in for redis_cost_shapes.Window: the Ir and commands of the timed calls."""

    def __init__(self, port: int, cg: Callgrind) -> None:
        import redis

        self.client = redis.Redis(host="127.0.0.1", port=port)
        self.cg = cg

    def commands(self) -> dict[str, int]:
        found = {}
        for name, value in self.client.info("commandstats").items():
            name = name.removeprefix("cmdstat_")
            if name not in ("config|resetstat", "info"):
                found[name] = int(value["calls"])
        return found

    def start(self) -> None:
        self.client.execute_command("CONFIG", "RESETSTAT")
        self.cg.on()

    def stop(self) -> Result:
        ir, gc, path, named = self.cg.dump()
        return {"ir": ir, "gc": gc, "gc_named": named, "dump": path, "commands": self.commands()}

    def run(self, calls: Callable[[], Any]) -> Result:
        self.start()
        out = calls()
        return {"out": out, **self.stop()}


class _Proxy:
    """A module as crawlq's modules see it: some functions replaced, the rest forwarded."""

    def __init__(self, real: Any, **replaced: Any) -> None:
        self._real = real
        self.__dict__.update(replaced)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def determinise() -> list[str]:
    """crawlq's modules (all imported now, contrib and cli aside) get a virtual clock, a
    fixed pid and seeded random tokens: what it sends depends on neither time nor chance."""
    import importlib
    import pkgutil
    import random
    import secrets

    import crawlq

    for info in pkgutil.walk_packages(crawlq.__path__, "crawlq."):
        if info.name.startswith(("crawlq.contrib", "crawlq.cli")):
            continue
        with contextlib.suppress(Exception):  # optional parts
            importlib.import_module(info.name)
    ticks = itertools.count(1)
    base = time.monotonic()
    chance = random.Random(2024)
    fakes = {
        "time": (time, _Proxy(time, monotonic=lambda: base + next(ticks) * CLOCK_STEP)),
        "os": (os, _Proxy(os, getpid=lambda: 424242)),
        "secrets": (
            secrets,
            _Proxy(
                secrets,
                token_hex=lambda n=32: chance.randbytes(n).hex(),
                token_bytes=lambda n=32: chance.randbytes(n),
            ),
        ),
    }
    patched = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("crawlq"):
            continue
        for attr, (real, fake) in fakes.items():
            if getattr(module, attr, None) is real:
                setattr(module, attr, fake)
                patched.append(f"{name}.{attr}")
    return sorted(patched)


def run(spec: Result) -> None:
    """Measure spec's shape and print its result line."""
    import crawlq
    from crawlq.stores.redis.library import library

    where = os.path.realpath(crawlq.__file__)
    if not where.startswith(os.path.realpath(spec["src"]) + os.sep):
        raise SystemExit(f"crawlq came from {where}, not from {spec['src']}")
    patched = [] if spec["real_clock"] else determinise()
    window = IrWindow(spec["port"], Callgrind(spec["pid"], spec["cg_out"]))
    try:
        result = _a1(spec, window) if spec["shape"] in ("a1", "a1c") else _shape(spec, window)
    except CronLeak as exc:
        print(RETRY + str(exc), flush=True)
        return
    result.pop("out", None)
    result.update(crawlq=where, library=library().name, patched=len(patched))
    print(RESULT + json.dumps(result), flush=True)


def _shape(spec: Result, window: IrWindow) -> Result:
    from benchmarks import redis_cost_shapes as rcs

    rspec = {
        "shape": spec["shape"],
        "k": spec["k"],
        "calls": spec["calls"],
        "warmup": spec["warmup"],
        "url": spec["url"],
        "ports": [spec["port"]],
        "pids": [spec["pid"]],
        "cluster": False,
        "core": 0,
    }
    if spec["shape"] in rcs.FLOORS:
        return rcs.floor_shape(rspec, window)
    return rcs.crawlq_shape(rspec, window)


def _a1(spec: Result, window: IrWindow) -> Result:
    """cluster_a1's worker, its "ready" / "done" handshake turned into the Ir window."""
    from benchmarks import cluster_a1

    state: Result = {}

    def say(line: str) -> None:
        word, *rest = line.split()
        if word == "ready":
            window.start()
        elif word == "done":
            state.update(window.stop(), steps=int(rest[0]))
        elif word == "left":
            state["left"], state["want"] = int(rest[0]), int(rest[1])

    cluster_a1.say = say
    sys.stdin = io.StringIO("go\ncheck\n")
    steps = spec["calls"]
    # Older benchmarks (--bench-root) have no shards parameter.
    has_shards = "shards" in inspect.signature(cluster_a1.child).parameters
    shards = spec["k"] if spec["shape"] == "a1c" else 16  # (a1: not a cluster URL)
    options = {"shards": shards} if has_shards else {}
    cluster_a1.child(spec["url"], steps, steps + 1, **options)  # mark > steps: no marks
    if state.get("left") != state.get("want"):
        raise RuntimeError(f"A1 left {state.get('left')} requests, not {state.get('want')}")
    return {
        "ir": state["ir"],
        "gc": state["gc"],
        "gc_named": state["gc_named"],
        "dump": state["dump"],
        "commands": state["commands"],
        "design": {"steps": state["steps"]},
    }


def main(argv: list[str]) -> int:
    run(json.loads(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
