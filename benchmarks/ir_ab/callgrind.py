"""Callgrind on one redis-server: its monitor commands (through vgdb) and its dumps.

The measuring child switches instrumentation on and zeroes the counters at the
start of its window, and dumps and switches it off at the end; a dump gives the
window's total Ir, the Ir inside Lua's collector (all of it with a
redis-server built with symbols; with a stripped one only Redis's lua_gc
calls, the one Lua function it exports), and a `CronLeak` when a serverCron
was counted.
"""

from __future__ import annotations

import os
import subprocess
import time


class CronLeak(RuntimeError):
    """A serverCron was counted (the window's start landed inside one): measure again."""


#: Functions only serverCron runs: Ir in them means a cron leaked into the window.
CRON_ONLY = ("serverCron", "clientsCron", "databasesCron", "cronUpdateMemoryStats")
#: Lua's garbage collector (every entry into it: allocation-driven steps and
#: Redis's lua_gc(LUA_GCSTEP, 50) every 50 FCALLs) and string-table growth: work
#: that comes in lumps whose place depends on the heap's whole history.
GC_ENTRIES = ("luaC_step", "luaC_fullgc", "lua_gc")
GC_EDGES = (("luaS_newlstr", "luaS_resize"),)


def parse_dump(path: str) -> tuple[int, dict[str, int], dict[tuple[str, str], int]]:
    """(totals, self Ir per function, inclusive Ir per call edge (caller, callee))."""
    names: dict[str, str] = {}
    own: dict[str, int] = {}
    edges: dict[tuple[str, str], int] = {}
    current, callee, in_call, total = "", "", False, 0

    def name_of(text: str) -> str:
        text = text.strip()
        if text.startswith("("):
            ref, _, rest = text.partition(")")
            ref += ")"
            if rest.strip():
                names[ref] = rest.strip()
            return names.get(ref, ref)
        return text

    with open(path) as f:
        for line in f:
            head = line[:1]
            if head.isdigit() or head in "+-*":
                parts = line.split()
                if len(parts) < 2:
                    continue
                cost = int(parts[-1])
                if in_call:  # the inclusive cost of the calls above: not the caller's own
                    edges[(current, callee)] = edges.get((current, callee), 0) + cost
                    in_call = False
                else:
                    own[current] = own.get(current, 0) + cost
            elif line.startswith("fn="):
                current = name_of(line[3:])
            elif line.startswith("cfn="):
                callee = name_of(line[4:])
            elif line.startswith("calls="):
                in_call = True
            elif line.startswith("totals:"):
                total = int(line.split()[1])
    return total, own, edges


def gc_cost(edges: dict[tuple[str, str], int]) -> int:
    """Ir spent in Lua's collector and string-table growth (see GC_ENTRIES)."""
    gc = sum(
        cost
        for (caller, callee), cost in edges.items()
        if callee in GC_ENTRIES and caller not in GC_ENTRIES
    )
    return gc + sum(edges.get(edge, 0) for edge in GC_EDGES)


class Callgrind:
    """Callgrind's monitor commands (through vgdb) on one server; its dumps."""

    def __init__(self, pid: int, out: str) -> None:
        self.pid, self.out, self.dumps = pid, out, 0

    def ctl(self, *commands: str) -> None:
        # --max-invoke-ms=1: vgdb forces the commands in at once (ptrace) while the
        # server sleeps in epoll_wait, rather than at its next wake-up (a serverCron).
        argv = ["vgdb", f"--pid={self.pid}", "--max-invoke-ms=1"]
        for command in commands:
            argv += ["-c", *command.split()]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"vgdb {commands}: {done.stdout} {done.stderr}")

    def on(self) -> None:
        self.ctl("instrumentation on", "zero")

    def dump(self) -> tuple[int, int, str, bool]:
        """Dump and stop counting: (Ir since `on`, its GC part, the dump file, whether
        Lua's own collector is named in it: a redis-server with symbols inside Lua)."""
        self.ctl("dump", "instrumentation off")
        self.dumps += 1
        path = f"{self.out}.{self.dumps}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if os.path.exists(path):
                with open(path) as f:
                    if any(line.startswith("totals:") for line in f):
                        break
            time.sleep(0.02)
        else:
            raise RuntimeError(f"no complete dump at {path}")
        total, own, edges = parse_dump(path)
        leaked = sum(own.get(name, 0) for name in CRON_ONLY)
        if leaked:
            raise CronLeak(f"{leaked:,} Ir of serverCron in {path}")
        return total, gc_cost(edges), path, "luaC_step" in own
