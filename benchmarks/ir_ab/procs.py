"""The processes one run starts (servers, children): tracked, and stopped by their pid.

Each is started through ``setpriv --pdeathsig TERM`` when setpriv is there (it
execs: the same pid), so it gets SIGTERM if the thread that started it ends
or this process dies; `stop_all` stops every one still running (on an error,
Ctrl-C or SIGTERM) and refuses new ones from then on.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from typing import Any

_LIVE: dict[int, subprocess.Popen[Any]] = {}  # pid -> process still to stop
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()
_DEATHSIG = ["setpriv", "--pdeathsig", "TERM", "--"] if shutil.which("setpriv") else []


def spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """Start argv (subprocess.Popen's keywords) and track it until `stop`."""
    with _LIVE_LOCK:
        if _STOPPING.is_set():
            raise RuntimeError("stopping")
        proc = subprocess.Popen([*_DEATHSIG, *argv], **kwargs)
        _LIVE[proc.pid] = proc
    return proc


def stop(proc: subprocess.Popen[Any], wait: float = 30.0) -> None:
    """SIGTERM by pid, then SIGKILL if it lingers."""
    with _LIVE_LOCK:
        _LIVE.pop(proc.pid, None)
    if proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    except ProcessLookupError:
        pass


def stop_all() -> None:
    """Stop every tracked process; no new ones start after this."""
    _STOPPING.set()
    with _LIVE_LOCK:
        procs = list(_LIVE.values())
    for proc in procs:
        stop(proc, 5.0)


def interrupt(signum: int, frame: object) -> None:
    """A SIGTERM handler: unwind as Ctrl-C does (the run then stops what it started)."""
    raise KeyboardInterrupt(f"signal {signum}")
