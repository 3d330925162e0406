"""Benchmark crawlq against its peers: ``python -m benchmarks [options]``.

Every measurement runs in a fresh process (``benchmarks.measure``); repeats
are interleaved (every measurement once, then every one again...) so that
noise on the machine spreads over all implementations. Writes the medians,
spreads and crawlq / peer ratios to ``benchmarks/RESULTS.md``, their chart to
``benchmarks/results.png`` and every raw result to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import report, workloads
from benchmarks.measure import PROGRESS_MARKER, RESULT_MARKER
from benchmarks.redis_servers import plain_server_args
from benchmarks.workloads import Spec

HERE = Path(__file__).resolve().parent
Result = dict[str, Any]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class RedisServer:
    """A redis-server on a free 127.0.0.1 port, no persistence; stopped by its pid."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            sys.exit("the Redis workloads need redis-server (apt-get install -y redis-server)")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="crawlq-bench-redis-")
        self.process = subprocess.Popen([binary, *plain_server_args(self.port, self.dir)])
        self.url = f"redis://127.0.0.1:{self.port}/0"
        for _ in range(500):
            try:
                self.command(b"PING")
                return
            except OSError:
                time.sleep(0.02)
        self.stop()
        sys.exit("redis-server did not start")

    def command(self, command: bytes) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(command + b"\r\n")
            if not sock.recv(64).startswith(b"+"):
                raise OSError(f"redis-server did not accept {command!r}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        shutil.rmtree(self.dir, ignore_errors=True)


def _reached(line: str, kill_at: int | None) -> bool:
    return kill_at is not None and int(line[len(PROGRESS_MARKER) :]) >= kill_at


class Runner:
    """Runs measurements in fresh processes on fresh directories."""

    def __init__(self, args: argparse.Namespace, root: Path, env: dict[str, str]) -> None:
        self.args, self.root, self.env = args, root, env
        self.redis: RedisServer | None = None
        self.filled: dict[str, Path] = {}
        self.fills: dict[str, Result] = {}

    def child(self, payload: Result, kill_at: int | None = None) -> Result:
        """One fresh process; with ``kill_at``, SIGKILL it once it reports that many."""
        command = [sys.executable, "-m", "benchmarks.measure", json.dumps(payload)]
        env = dict(self.env)
        if payload["backend"] == "redis" and self.redis is not None:
            env["CRAWLQ_BENCH_SERVER_PID"] = str(self.redis.process.pid)
        start = time.perf_counter()
        with tempfile.TemporaryFile("w+") as stderr:
            proc = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=env,
                cwd=HERE.parent,
            )
            timer = threading.Timer(self.args.timeout, proc.kill)
            timer.start()
            result: Result | None = None
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    if line.startswith(RESULT_MARKER):
                        result = json.loads(line[len(RESULT_MARKER) :])
                    elif line.startswith(PROGRESS_MARKER) and _reached(line, kill_at):
                        os.kill(proc.pid, signal.SIGKILL)
                        result = {"killed": True}
                proc.wait()
            finally:
                timer.cancel()
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            if result is None:
                stderr.seek(0)
                tail = stderr.read().strip().splitlines()[-3:]
                result = {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
        result["wall_s"] = time.perf_counter() - start
        return result

    def payload(self, spec: Spec, **extra: Any) -> Result:
        where = self.redis.url if spec.backend == "redis" and self.redis else ""
        if spec.backend == "sqlite" and spec.workload != "E2E":
            where = tempfile.mkdtemp(prefix=f"{spec.workload}-{spec.impl}-", dir=self.root)
        return {
            "workload": spec.workload,
            "backend": spec.backend,
            "impl": spec.impl,
            "params": spec.params,
            "where": where,
            **extra,
        }

    def copy_fill(self, spec: Spec) -> Result:
        """A copy of ``spec``'s job filled once (W4, W4K resumed), closed cleanly."""
        name = f"{spec.impl}:{spec.params['n']}"
        if name not in self.fills:
            where = tempfile.mkdtemp(prefix="fill-", dir=self.root)
            fill = {**self.payload(spec, op="fill"), "where": where}
            self.fills[name] = result = self.child(fill)
            log(f"  fill {name}: {result['wall_s']:.0f}s {result.get('error', 'ok')}")
            if "error" not in result:
                self.filled[name] = Path(fill["where"])
        payload = self.payload(spec)
        if name not in self.filled:
            raise RuntimeError(f"the fill of {name} failed")
        shutil.copytree(self.filled[name], payload["where"], dirs_exist_ok=True)
        return payload

    def run(self, spec: Spec) -> Result:
        if self.redis is not None and spec.backend == "redis":
            self.redis.command(b"FLUSHALL")
        try:
            if spec.workload == "W4":
                payload = self.copy_fill(spec)
                return self.child({**payload, "op": "reopen"})
            if spec.workload == "W4K":
                resumed = spec.params["case"] == "resumed"
                payload = self.copy_fill(spec) if resumed else self.payload(spec)
                payload["record"] = payload["where"] + ".record"
                drain = self.child({**payload, "op": "drain"}, kill_at=spec.params["n"] // 2)
                if not drain.get("killed"):
                    return {"error": f"the drain was not killed: {drain.get('error')}"}
                return self.child({**payload, "op": "count"})
            return self.child(self.payload(spec))
        except RuntimeError as exc:
            return {"error": str(exc)}
        finally:
            for path in self.root.glob(f"{spec.workload}-{spec.impl}-*"):
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="sizes divided by about 10")
    parser.add_argument(
        "--only", help=f"workloads, e.g. W1,W2 (of {','.join(workloads.WORKLOADS)})"
    )
    parser.add_argument("--backends", help="memory,sqlite,redis (default all)")
    parser.add_argument("--impls", help="implementations, e.g. crawlq,scrapy-spq (default all)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (default 3)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    parser.add_argument(
        "--no-freeze",
        action="store_true",
        help="import crawlq as installed, not a copy of src/ taken at start",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=HERE / "RESULTS.md",
        help="markdown report (default benchmarks/RESULTS.md; the chart goes beside it)",
    )
    parser.add_argument("--report", type=Path, help="only rewrite the report from this raw file")
    args = parser.parse_args(argv)
    for name in ("only", "backends", "impls"):
        value = getattr(args, name)
        setattr(args, name, None if value is None else {v.strip() for v in value.split(",")})
    if args.only:
        args.only = {w.upper() for w in args.only}
        if unknown := args.only - set(workloads.WORKLOADS):
            parser.error(f"unknown workload(s) {sorted(unknown)}: use {workloads.WORKLOADS}")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report:
        report.write(json.loads(args.report.read_text()), args.output)
        return 0
    sizes = workloads.QUICK if args.quick else workloads.FULL
    specs = [
        s
        for s in workloads.plan(sizes)
        if (not args.only or s.workload in args.only)
        and (not args.backends or s.backend in args.backends)
        and (not args.impls or s.impl in args.impls)
    ]
    if not specs:
        log("nothing to run: check --only, --backends and --impls")
        return 2
    started = dt.datetime.now(dt.UTC)
    runs: dict[str, list[Result]] = {s.key: [] for s in specs}
    with tempfile.TemporaryDirectory(prefix="crawlq-bench-") as tmp:
        root = Path(tmp)
        paths = [str(HERE.parent), os.environ.get("PYTHONPATH", "")]
        if not args.no_freeze and (HERE.parent / "src" / "crawlq").is_dir():
            shutil.copytree(
                HERE.parent / "src" / "crawlq",
                root / "src" / "crawlq",
                ignore=shutil.ignore_patterns("__pycache__"),
            )
            paths.insert(0, str(root / "src"))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        runner = Runner(args, root, env)
        try:
            if any(s.backend == "redis" for s in specs):
                runner.redis = RedisServer()
            total = args.repeat * len(specs)
            log(
                f"{total} runs: {len(specs)} measurements x {args.repeat}"
                f"{' [quick sizes]' if args.quick else ''}"
            )
            clock = time.perf_counter()
            for repeat in range(args.repeat):
                for index, spec in enumerate(specs, 1 + repeat * len(specs)):
                    result = runner.run(spec)
                    result["load1"] = os.getloadavg()[0]
                    runs[spec.key].append(result)
                    log(
                        f"[{index}/{total} {time.perf_counter() - clock:5.0f}s] {spec.group}: "
                        f"{spec.label}: {result['wall_s']:.1f}s {result.get('error', 'ok')}"
                    )
        finally:
            if runner.redis is not None:
                runner.redis.stop()
    raw = HERE / "results" / f"{started:%Y%m%d-%H%M%S}{'-quick' if args.quick else ''}.json"
    raw.parent.mkdir(exist_ok=True)
    document = {
        "started": started.isoformat(),
        "argv": sys.argv[1:],
        "quick": args.quick,
        "repeat": args.repeat,
        "specs": [vars(s) | {"key": s.key, "group": s.group} for s in specs],
        "runs": runs,
        "fills": runner.fills,
        "environment": report.environment(),
    }
    raw.write_text(json.dumps(document, indent=1, default=str) + "\n")
    report.write(document, args.output)
    log(f"wrote {args.output} and {report.chart_path(args.output)} (raw: {raw})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
