"""The Redis Cluster benchmark: the W2 crawl step by worker processes, four setups, one run.

``python -m benchmarks.cluster [--quick] [--repeat N] [--workers N] [--output FILE]``

Measures the W2 step a user's loop makes (dequeue one request, offer its five
children from the W2 plan, half of them already seen, ack it) by ``--workers``
processes started together, on:

- crawlq on one plain redis-server (``redis://``),
- crawlq on a Redis Cluster of 1 primary (``redis+cluster://``, 16 shards),
- crawlq on a Redis Cluster of 3 primaries (16 shards),
- scrapy-redis on one plain redis-server (its PriorityQueue and RFPDupeFilter,
  as `benchmarks.peers.ScrapyRedis` drives it).

crawlq steps are ``pop()`` then ``add_many(children, ack=request)``;
scrapy-redis steps are ``next_request()`` then ``enqueue_request`` per child
(it has no ack). Every measurement gets fresh servers (no persistence,
127.0.0.1, free ports) stopped by their pids at its end; 1,000 seeds go in
untimed; each worker takes its own step indexes (``index``, ``index +
workers``...). The timed section runs from "go" to the last worker's end; the
servers' CPU is read from ``/proc`` around it. After it, the rest of the
queue is drained (untimed) and the run is checked: every seed and distinct
child dequeued exactly once, and crawlq's counters agree.

``src/crawlq`` is copied at start, so the whole run measures the same code.
Writes ``benchmarks/CLUSTER.md`` (also printed) and the raw results to
``benchmarks/results/cluster-<time>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import multiprocessing
import os
import platform
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from benchmarks import workloads
from benchmarks.cluster_report import SETUPS, SHARDS, Setup, render

HERE = Path(__file__).resolve().parent
Result = dict[str, Any]
perf = time.perf_counter

FANOUT = 5
SEEDS, HOSTS = workloads.FULL.w2_seeds, workloads.FULL.w1_hosts
STEPS = {"full": 20_000, "quick": 4_000}
_START_TIMEOUT = 30.0
_WORKER_TIMEOUT = 1800.0
#: Seconds a worker keeps asking for a ready request before it gives up.
_EMPTY_LIMIT = 30.0
_TICK = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- servers ---------------------------------------------------------------------------


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

    def __init__(self, directory: Path, cluster: bool) -> None:
        self.directory, self.cluster = directory, cluster
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.client: redis.Redis | None = None

    def start(self, attempts: int = 3) -> None:
        """Start on a free port and wait until it answers PING.

        A port taken between the check and the bind (other processes start
        servers too) costs another attempt. Raises RuntimeError when
        redis-server is missing or does not come up.
        """
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("this benchmark needs redis-server: apt-get install -y redis-server")
        self.directory.mkdir(parents=True, exist_ok=True)
        for attempt in range(attempts):
            self.port = _free_port(self.cluster)
            args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            args += ["--appendonly", "no", "--dir", str(self.directory), "--protected-mode", "no"]
            args += ["--logfile", str(self.directory / "log")]
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
def servers(primaries: int, directory: Path) -> Iterator[list[Node]]:
    """Fresh servers for one measurement: one plain redis-server (``primaries=0``) or a
    cluster of ``primaries`` primaries without replicas; all stopped by pid at the end."""
    nodes = [Node(directory / f"node-{i}", primaries > 0) for i in range(max(primaries, 1))]
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


def shard_spread(nodes: Sequence[Node], crawl: str) -> list[int]:
    """How many of the crawl's shards each node serves (by the slot of its hash tag)."""
    owner: dict[int, int] = {}
    for start, end, primary, *_ in nodes[0].command("CLUSTER", "SLOTS"):
        for slot in range(start, end + 1):
            owner[slot] = int(primary[1])
    counts = dict.fromkeys((n.port for n in nodes), 0)
    record = redis.RedisCluster(host="127.0.0.1", port=nodes[0].port)
    try:
        tags = record.hget(f"crawlq:{{{crawl}}}:cluster", "tags")
    finally:
        record.close()
    names = tags.decode().split(" ") if tags else [f"{crawl}:{k}" for k in range(SHARDS)]
    for tag in names:
        counts[owner[key_slot(f"crawlq:{{{tag}}}:meta".encode())]] += 1
    return sorted(counts.values(), reverse=True)


# -- the workers -------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """What every worker of one measurement needs (pickled to spawned processes)."""

    impl: str
    url: str
    options: dict[str, Any]  # open_frontier's, for crawlq
    seeds: int
    steps: int
    hosts: int
    workers: int

    def plan(self) -> workloads.W2Plan:
        return workloads.w2_plan(self.seeds, self.steps, self.hosts)


class Session:
    """One process's connection to the frontier under test."""

    pop: Callable[[], Any]
    empty = 0  # pops that found nothing ready (other workers' adds not in yet)

    def requests(self, items: Sequence[tuple[str, int]]) -> list[Any]:
        raise NotImplementedError

    def add(self, requests: list[Any]) -> None:
        """Offer ``requests`` untimed (the seeds)."""
        raise NotImplementedError

    def steps(self, batches: list[list[Any]]) -> list[Any]:
        """The timed loop: one step per batch of children; returns what it dequeued."""
        raise NotImplementedError

    def drain(self) -> list[str]:
        """Dequeue (and ack) everything left; return its URLs."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the connection (crawlq gives back its unserved prefetch)."""

    def wait_pop(self) -> Any:
        """Pop until a request comes, counting the empty pops in ``empty``.

        Raises RuntimeError after ``_EMPTY_LIMIT`` seconds without one.
        """
        deadline = perf() + _EMPTY_LIMIT
        while (request := self.pop()) is None:
            self.empty += 1
            if perf() > deadline:
                raise RuntimeError(f"no request ready for {_EMPTY_LIMIT:.0f} s")
            time.sleep(0.001)
        return request


class Crawlq(Session):
    """crawlq's Frontier: ``pop()``, then ``add_many(children, ack=request)``."""

    def __init__(self, job: Job) -> None:
        import crawlq

        self.make = crawlq.Request
        self.frontier = crawlq.open_frontier(
            job.url, host_delay=0.0, host_concurrency=None, **job.options
        )
        self.pop = self.frontier.pop

    def requests(self, items: Sequence[tuple[str, int]]) -> list[Any]:
        make = self.make
        return [make(url, priority=priority) for url, priority in items]

    def add(self, requests: list[Any]) -> None:
        for start in range(0, len(requests), 100):
            self.frontier.add_many(requests[start : start + 100])

    def steps(self, batches: list[list[Any]]) -> list[Any]:
        pop, add_many = self.frontier.pop, self.frontier.add_many
        dequeued: list[Any] = []
        append = dequeued.append
        for batch in batches:
            request = pop()
            if request is None:
                request = self.wait_pop()
            add_many(batch, ack=request)
            append(request)
        return dequeued

    def drain(self) -> list[str]:
        pop, ack = self.frontier.pop, self.frontier.ack
        urls: list[str] = []
        for _ in range(5):  # a shard found empty is asked again after half a second
            while (request := pop()) is not None:
                ack(request)
                urls.append(str(request.url))
            if not len(self.frontier):
                break
            time.sleep(0.6)
        self.frontier.flush()
        return urls

    def close(self) -> None:
        self.frontier.close()


class ScrapyRedis(Session):
    """scrapy-redis's Scheduler: ``next_request()``, then ``enqueue_request`` per child."""

    def __init__(self, job: Job) -> None:
        from scrapy.exceptions import ScrapyDeprecationWarning

        from benchmarks.peers import ScrapyRedis as Adapter

        self.adapter = Adapter("redis", job.url)
        with warnings.catch_warnings():  # its open() calls the deprecated Spider.log
            warnings.simplefilter("ignore", ScrapyDeprecationWarning)
            self.adapter.open()
        self.pop = self.adapter.pop

    def requests(self, items: Sequence[tuple[str, int]]) -> list[Any]:
        return self.adapter.requests(items)

    def add(self, requests: list[Any]) -> None:
        for request in requests:
            self.adapter.add(request)

    def steps(self, batches: list[list[Any]]) -> list[Any]:
        pop, add = self.adapter.pop, self.adapter.add
        dequeued: list[Any] = []
        append = dequeued.append
        for batch in batches:
            request = pop()
            if request is None:
                request = self.wait_pop()
            for child in batch:
                add(child)
            append(request)
        return dequeued

    def drain(self) -> list[str]:
        urls: list[str] = []
        while (request := self.pop()) is not None:
            urls.append(str(request.url))
        return urls


def session(job: Job) -> Session:
    return Crawlq(job) if job.impl == "crawlq" else ScrapyRedis(job)


def _worker(job: Job, index: int, ready: Any, go: Any, finish: Any, out: Any) -> None:
    """One worker process: its steps (``index``, ``index + workers``...), timed from "go".

    Puts two messages on ``out``: ("done", index, result or error) when its
    steps are done, then ("closed", index, error or None) after ``finish`` is
    set, once the servers' CPU was read, when it has closed its frontier.
    """
    released, opened = False, None
    try:
        try:
            plan = job.plan()
            mine = range(index, plan.steps, job.workers)
            opened = session(job)
            items = list(zip(plan.child_urls, plan.child_priorities, strict=True))
            batches = [opened.requests(items[FANOUT * s : FANOUT * (s + 1)]) for s in mine]
            ready.release()
            released = True
            go.wait()
            cpu = time.process_time()
            dequeued = opened.steps(batches)
            end = perf()
            cpu = time.process_time() - cpu
            urls = [str(r.url) for r in dequeued]
            result = {"steps": len(batches), "end": end, "cpu": cpu, "empty": opened.empty}
            out.put(("done", index, {**result, "urls": urls}))
        except Exception as exc:  # report what the frontier does, whatever it is
            out.put(("done", index, {"error": f"worker {index}: {type(exc).__name__}: {exc}"}))
            if not released:
                ready.release()
        finish.wait()
    finally:
        error = None
        try:
            if opened is not None:
                opened.close()
        except Exception as exc:
            error = f"worker {index} close: {type(exc).__name__}: {exc}"
        out.put(("closed", index, error))


def _collect(out: Any, kind: str, count: int) -> list[Any]:
    """``count`` messages of ``kind`` from the workers, in any order."""
    found = []
    for _ in range(count):
        try:
            got, _, payload = out.get(timeout=_WORKER_TIMEOUT)
        except queue.Empty:
            raise RuntimeError(f"a worker died or hung: no {kind!r} message") from None
        if got != kind:
            raise RuntimeError(f"worker message {got!r} where {kind!r} was expected")
        found.append(payload)
    return found


def timed(job: Job, nodes: Sequence[Node]) -> Result:
    """Start the workers together (spawn), time their steps, read the servers' CPU around.

    The servers' command statistics are reset before and read after the
    timed section (outside the CPU readings): calls and microseconds of
    each command per step, all primaries summed.
    """
    context = multiprocessing.get_context("spawn")
    ready, go, finish, out = context.Semaphore(0), context.Event(), context.Event(), context.Queue()
    workers = [
        context.Process(target=_worker, args=(job, i, ready, go, finish, out))
        for i in range(job.workers)
    ]
    for worker in workers:
        worker.start()
    try:
        for _ in workers:
            if not ready.acquire(timeout=300):
                raise RuntimeError("a worker did not get ready in 300 s")
        for node in nodes:
            node.command("CONFIG", "RESETSTAT")
        before = [node.cpu() for node in nodes]
        start = perf()
        go.set()
        done = _collect(out, "done", len(workers))
        after = [node.cpu() for node in nodes]
        commands = [node.commands() for node in nodes]
        finish.set()
        closed = [error for error in _collect(out, "closed", len(workers)) if error]
    finally:
        go.set()
        finish.set()
        for worker in workers:
            worker.join(timeout=60)
            if worker.is_alive():
                worker.terminate()
                worker.join()
    if errors := [r["error"] for r in done if "error" in r] + closed:
        return {"error": " | ".join(errors)[:2000]}
    steps = sum(r["steps"] for r in done)
    spent = [b - a for a, b in zip(before, after, strict=True)]
    per_step: dict[str, list[float]] = {}
    for stats in commands:
        for name, (calls, usec) in stats.items():
            if name in ("config|resetstat", "info"):  # the benchmark's own
                continue
            total = per_step.setdefault(name, [0.0, 0.0])
            total[0] += calls / steps
            total[1] += usec / steps
    return {
        "steps": steps,
        "steps_rate": steps / (max(r["end"] for r in done) - start),
        "server_us": 1e6 * sum(spent) / steps,
        "busiest_us": 1e6 * max(spent) / steps,
        "primary_us": [1e6 * s / steps for s in spent],
        "client_us": 1e6 * sum(r["cpu"] for r in done) / steps,
        "empty_pops": sum(r["empty"] for r in done),
        "commands": per_step,
        "urls": [url for r in done for url in r["urls"]],
    }


# -- one measurement ---------------------------------------------------------------------


def check(job: Job, dequeued: list[str]) -> str:
    """Drain what is left, then "ok" or what is wrong: every seed and distinct child
    dequeued exactly once; for crawlq also its counters (accepted == acked == popped,
    nothing queued, leased, released or expired, duplicates as offered)."""
    opened = session(job)
    try:
        dequeued = dequeued + opened.drain()
    finally:
        opened.close()
    plan = job.plan()
    distinct = {*plan.seed_urls, *plan.child_urls}
    got = set(dequeued)
    problems = [
        f"{what}: {count}"
        for what, count in (
            ("dequeued twice", len(dequeued) - len(got)),
            ("never dequeued", len(distinct - got)),
            ("not offered", len(got - distinct)),
        )
        if count
    ]
    if job.impl == "crawlq":
        reopened = Crawlq(job)
        try:
            stats = reopened.frontier.stats()
        finally:
            reopened.close()
        c, offered = stats.counters, len(plan.seed_urls) + len(plan.child_urls)
        expected = {
            "accepted": (c.accepted, len(distinct)),
            "acked": (c.acked, c.accepted),
            "popped": (c.popped, c.acked),
            "duplicates": (c.duplicates, offered - c.accepted),
            "released": (c.released, 0),
            "expired": (c.expired, 0),
            "queued": (stats.queued, 0),
            "leased": (stats.leased, 0),
        }
        problems += [f"{k} {v} (expected {e})" for k, (v, e) in expected.items() if v != e]
    return "; ".join(problems) or "ok"


def measure(setup: Setup, args: argparse.Namespace, steps: int, run: int, root: Path) -> Result:
    """One fresh measurement: fresh servers, the seeds, the timed workers, then the check.

    The crawl is named "bench" every time (the servers are new), so its shards
    sit on the same primaries in every run.
    """
    crawl = "bench"
    with servers(setup.primaries, root / f"{setup.key}-{run}") as nodes:
        where = ",".join(f"127.0.0.1:{n.port}" for n in nodes[:2])
        if setup.primaries:
            url, options = f"redis+cluster://{where}/?crawl={crawl}", {"shards": SHARDS}
        elif setup.impl == "crawlq":
            url, options = f"redis://{where}/0?crawl={crawl}", {}
        else:
            url, options = f"redis://{where}/0", {}
        job = Job(setup.impl, url, options, SEEDS, steps, HOSTS, args.workers)
        plan = job.plan()
        seeder = session(job)
        try:
            seeder.add(
                seeder.requests(list(zip(plan.seed_urls, plan.seed_priorities, strict=True)))
            )
        finally:
            seeder.close()
        result = timed(job, nodes)
        if "error" not in result:
            result["check"] = check(job, result.pop("urls"))
        if setup.primaries:
            result["shards_per_primary"] = shard_spread(nodes, crawl)
    return result


def freeze(root: Path) -> str:
    """Import crawlq from a copy of ``src/crawlq`` taken now (workers inherit sys.path)."""
    source = HERE.parent / "src" / "crawlq"
    if source.is_dir():
        shutil.copytree(
            source, root / "src" / "crawlq", ignore=shutil.ignore_patterns("__pycache__")
        )
        sys.path.insert(0, str(root / "src"))
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(root / "src"), str(HERE.parent), os.environ.get("PYTHONPATH")) if p
        )
    import crawlq

    return str(Path(crawlq.__file__).parent)


# -- the run -----------------------------------------------------------------------------


def environment() -> str:
    """The commit (and whether src/ differs from it), Python, CPUs and versions, in one line."""

    def run(*args: str) -> str:
        done = subprocess.run(args, capture_output=True, text=True, check=False, cwd=HERE.parent)
        return done.stdout.strip()

    dirty = " + uncommitted changes in src/" if run("git", "status", "--porcelain", "src") else ""
    versions = []
    for name in ("crawlq", "scrapy", "scrapy-redis", "redis"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions.append(f"{name} {metadata.version(name)}")
    server = run("redis-server", "--version").partition(" v=")[2].partition(" ")[0]
    return (
        f"crawlq commit {run('git', 'rev-parse', '--short', 'HEAD')}{dirty}, copied at the "
        f"start; Python {platform.python_version()}, {os.cpu_count()} CPUs; redis-server "
        f"{server}; {', '.join(versions)}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help=f"{STEPS['quick']:,} steps, not {STEPS['full']:,}"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per setup (default 3)")
    parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
    parser.add_argument(
        "--output",
        type=Path,
        default=HERE / "CLUSTER.md",
        help="markdown report (default benchmarks/CLUSTER.md)",
    )
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.workers < 1:
        parser.error("--repeat and --workers must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    steps = STEPS["quick" if args.quick else "full"]
    started, clock = dt.datetime.now(dt.UTC), perf()
    load_start = os.getloadavg()[0]
    runs: dict[str, list[Result]] = {s.key: [] for s in SETUPS}
    with tempfile.TemporaryDirectory(prefix="crawlq-bench-cluster-") as tmp:
        root = Path(tmp)
        log(f"crawlq from {freeze(root)}; {args.repeat} x {len(SETUPS)} runs of {steps:,} steps")
        where = environment()
        for repeat in range(args.repeat):
            for n, setup in enumerate(SETUPS, 1 + repeat * len(SETUPS)):
                begin = perf()
                try:
                    result = measure(setup, args, steps, n, root)
                except Exception as exc:  # keep going: the report shows the error
                    result = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
                result["wall_s"] = perf() - begin
                result["load1"] = os.getloadavg()[0]
                runs[setup.key].append(result)
                outcome = result.get("error") or result.get("check")
                rate = result.get("steps_rate", 0.0)
                log(
                    f"[{n}/{args.repeat * len(SETUPS)} {perf() - clock:5.0f}s] {setup.label}: "
                    f"{rate:,.0f} steps/s, {result.get('server_us', 0):.1f} us/step server, "
                    f"{result['wall_s']:.0f}s: {outcome}"
                )
    document = {
        "started": started.isoformat(),
        "argv": sys.argv[1:] if argv is None else argv,
        "quick": args.quick,
        "repeat": args.repeat,
        "workers": args.workers,
        "steps": steps,
        "seeds": SEEDS,
        "seconds": perf() - clock,
        "load_start": load_start,
        "setups": [asdict(s) for s in SETUPS],
        "runs": runs,
        "environment": where,
    }
    raw = HERE / "results" / f"cluster-{started:%Y%m%d-%H%M%S}{'-quick' if args.quick else ''}.json"
    raw.parent.mkdir(exist_ok=True)
    raw.write_text(json.dumps(document, indent=1) + "\n")
    text = render(document)
    args.output.write_text(text)
    print(text)
    log(f"wrote {args.output} (raw: {raw})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
