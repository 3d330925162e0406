"""The LD_PRELOAD shim that makes redis-server deterministic: built at run time.

`server_env` compiles ``fixseed.c`` (beside this module; see its comment for
what it fixes) with gcc into the run folder, writes the fixed bytes it serves
for /dev/urandom, and returns the environment a server runs with: the shim,
its settings, and jemalloc without time-driven purging.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

SOURCE = Path(__file__).resolve().with_name("fixseed.c")


def build(folder: Path) -> Path:
    """Compile the shim into ``folder``: the .so's path."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "fixseed.so"
    command = ["gcc", "-O2", "-shared", "-fPIC", "-o", str(shim), str(SOURCE), "-ldl"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"gcc could not build {SOURCE}:\n{done.stderr}")
    return shim


def server_env(folder: Path, clock_step_us: int) -> dict[str, str]:
    """The environment of a deterministic redis-server (the shim built into ``folder``);
    ``clock_step_us``: how far its virtual wall clock moves per TIME command (0: real)."""
    shim = build(folder)
    seed = folder / "seed.bin"
    seed.write_bytes(bytes(range(64)))
    env = {
        "LD_PRELOAD": str(shim),
        "IR_AB_SEED_FILE": str(seed),
        # jemalloc (Redis's own, prefixed je_, or a system one): no time-driven
        # purging (Lua's heap is libc malloc's in Redis's own build)
        "JE_MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1",
        "MALLOC_CONF": "background_thread:false,dirty_decay_ms:-1,muzzy_decay_ms:-1",
    }
    if clock_step_us:
        env["IR_AB_TIME_STEP_US"] = str(clock_step_us)
    return env
