"""A crawler worker of a chaos run, run as its own process (the orchestrator kills it).

    python -m tests.chaos.worker URL LOG --tree SPEC --options JSON [--feed START END FLAG]
                                 [--until FILE]... [--fetch MIN MAX] [--seed N]
                                 [--give-up SECONDS] [--scheduler N]

It opens the frontier at URL with the run's options and loops: pop, a
simulated fetch (a short sleep), then ``add_many(links, ack=page)`` with the
page's links (derived from its URL, `tests.chaos.tree.Tree`), or ``ack`` for
a page without links; with ``--scheduler N``, N coroutines do the same
through the asyncio `Scheduler` (`tests.chaos.scheduled`). With ``--feed``
it also adds the tree's seeds, spread evenly over the wall-clock window
START..END, and creates FLAG once all are added. A worker exits 0 once
every ``--until`` FILE exists (the orchestrator gives FLAG, and a file it
creates once the faults are over), nothing is queued or leased (``len()``)
and nothing pops.

The log
    One line per event, each written with one ``os.write`` on a file opened
    ``O_APPEND`` (a SIGKILL loses at most the line being written). Times are
    ``time.time()``: the clock Redis ``TIME`` reads on this machine, so times
    of the log and of the server compare directly. Fields::

        O <t> <pid> [scheduler <n>]      the frontier is open (a Scheduler worker: n coroutines)
        P <t call> <t back> <url> <dl>   pop returned <url>; <t call>: when the pop
                                         call began; <dl>: the lease's deadline as
                                         the Redis server holds it (seconds), or
                                         "-" (SQLite, or the lookup failed), "x"
                                         (the record was another lease's already)
        F <t> <url>                      the fetch is over (before the ack)
        a <t> <url>                      an attempt to ack <url> begins (with its links)
        K <t> <url> <bits>               that ack returned; <bits>, one per link:
                                         1 accepted, 0 duplicate ("-": no links)
        u <t> <n>                        (before a K, when n changed) the links
                                         refused by the frontier's recently-seen
                                         set that the store has not counted yet
                                         (it sends them once a second; a kill
                                         loses them from the duplicates counter)
        s <t> <first> <end>              an attempt to add seeds first..end-1 begins
        S <t> <first> <end> <bits>       it returned
        E <t> <step> <Type> <message>    a CrawlqError, caught; the step is retried
        L <t> <url> <message>            LeaseError on an ack (see below)
        FOREIGN <t> <step> <Type> <msg>  an exception that is not a CrawlqError,
        # <traceback line>...            then its traceback; the worker exits 2
        G <t> <step>                     retries gave up (--give-up): exit 3
        D <t>                            drained and closed: exit 0

Retries after an unknown outcome
    `crawlq.StoreUnavailable` (the store could not be reached; the call may
    or may not have taken effect) and `crawlq.StoreFull` (it did not) are
    logged, followed by a backoff (50 ms doubling to 1 s, with jitter), and
    the same step is made again until it returns (or ``--give-up`` seconds
    pass). That is safe for every step: a repeated add reports the links
    the first attempt stored as duplicates (dedup), a repeated ack of a
    lease the first attempt ended does nothing, and a repeated pop leases
    afresh (what a lost pop leased goes back with the next call, or at its
    lease's expiry). Any other `crawlq.CrawlqError` is logged the same way
    and retried too, but the checker counts it as unexpected: under these
    faults nothing else should reach a worker.

    An ack whose lease already ended (expired and handed out again, or
    acked) does nothing in crawlq: it never raises (`crawlq.LeaseError` is
    for a request this frontier never handed out). The checker therefore
    never needs to know whether an ack counted: a lease that ended without
    one shows in the log as a second ``P`` of the URL, which it judges. A
    LeaseError would be a bug: it is logged as ``L``, not retried (the
    request then comes back when its lease expires), and counted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit

import crawlq
from crawlq.stores.redis.cluster.shards import record_tags, shard_of
from tests.chaos.tree import Tree

T = TypeVar("T")

_SEED_CHUNK = 200


class Log:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._unsent = 0

    def __call__(self, tag: str, *fields: object) -> None:
        line = " ".join([tag, f"{time.time():.6f}", *map(str, fields)])
        os.write(self._fd, (line.replace("\n", " ") + "\n").encode())

    def raw(self, line: str) -> None:
        os.write(self._fd, (line + "\n").encode())

    def unsent(self, frontier: crawlq.Frontier) -> None:
        """Log a ``u`` line if the frontier's uncounted refusals changed.

        White-box on purpose: the count is the frontier's private state, and
        the checker needs it to bound the store's duplicates counter after a
        kill. Logged before the ``K`` line it covers, so a kill between the
        two only loosens the bound.
        """
        recent = frontier._recent
        count = 0 if recent is None else recent.hits
        if count != self._unsent:
            self._unsent = count
            self("u", count)


class GiveUp(Exception):
    pass


class Steps:
    """Runs each public call, retried as the module docstring says."""

    def __init__(self, log: Log, give_up: float, rng: random.Random) -> None:
        self.log = log
        self.give_up = give_up
        self.rng = rng

    def __call__(
        self, step: str, call: Callable[[], T], before: Callable[[], None] | None = None
    ) -> T:
        started = time.monotonic()
        pauses = self.pauses()
        while True:
            if before is not None:
                before()
            try:
                return call()
            except crawlq.LeaseError:
                raise
            except Exception as exc:
                self.failed(step, exc, started)
            time.sleep(next(pauses))

    def close(self, frontier: crawlq.Frontier) -> int:
        """Close the frontier at the end of a crawl (a CrawlqError is logged); exit code 0."""
        try:
            frontier.close()
            self.log.unsent(frontier)  # sent by the close
        except crawlq.CrawlqError as exc:
            self.log("E", "close", type(exc).__name__, one_line(exc))
        except Exception as exc:
            self.foreign("close", exc)
        self.log("D")
        return 0

    def pauses(self) -> Iterator[float]:
        """The waits between attempts: 50 ms doubling to 1 s, with jitter."""
        pause = 0.05
        while True:
            yield pause * (0.5 + self.rng.random())
            pause = min(1.0, pause * 2)

    def failed(self, step: str, exc: Exception, started: float) -> None:
        """Log an attempt's error; exit on a foreign one, raise `GiveUp` once it is time."""
        if not isinstance(exc, crawlq.CrawlqError):
            self.foreign(step, exc)
        self.log("E", step, type(exc).__name__, one_line(exc))
        if time.monotonic() - started > self.give_up:
            self.log("G", step)
            raise GiveUp(step)

    def foreign(self, step: str, exc: BaseException) -> NoReturn:
        self.log(
            "FOREIGN", step, type(exc).__module__ + "." + type(exc).__qualname__, one_line(exc)
        )
        for line in traceback.format_exception(exc):
            for part in line.rstrip("\n").split("\n"):
                self.log.raw("# " + part)
        os._exit(2)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500] or "-"


class LeaseLookup:
    """Reads a Redis lease's deadline (its ``leases`` score) and record, bounded in time.

    Instrumentation, not crawl work: the checker judges pacing by when each
    lease began on the server (deadline minus ``lease_timeout``), which with
    prefetch is earlier than the pop that served it. A failed lookup (a
    fault) gives "-"; the checker then falls back to looser bounds.
    """

    def __init__(self, url: str) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self._redis = redis
        self._retry = Retry(NoBackoff(), 0)
        netloc = urlsplit(url).netloc.rpartition("@")[2]
        self._seeds = [(s.rpartition(":")[0], int(s.rpartition(":")[2])) for s in netloc.split(",")]
        self._clients: dict[tuple[str, int], Any] = {}
        self._node: dict[str, tuple[str, int]] = {}  # key prefix -> node serving it
        self._crawl = dict(p.split("=", 1) for p in urlsplit(url).query.split("&") if "=" in p)[
            "crawl"
        ]
        # A cluster crawl's shards' hash tags (None: not read yet).
        self._tags: list[str] | None = None if url.startswith("redis+cluster") else []

    def _client(self, node: tuple[str, int]) -> Any:
        client = self._clients.get(node)
        if client is None:
            client = self._clients[node] = self._redis.Redis(
                host=node[0],
                port=node[1],
                socket_timeout=0.3,
                socket_connect_timeout=0.3,
                retry=self._retry,
            )
        return client

    def _ask(self, prefix: str, *commands: tuple[str, ...]) -> list[Any] | None:
        """Run read commands on the node serving ``prefix`` (following MOVED); None on failure."""
        nodes = [self._node.get(prefix, self._seeds[0]), *self._seeds]
        for node in nodes[:4]:
            try:
                pipe = self._client(node).pipeline(transaction=False)
                for command in commands:
                    pipe.execute_command(*command)
                replies: list[Any] = pipe.execute()
            except self._redis.exceptions.ResponseError as exc:
                target = str(exc).split()[-1] if str(exc).split() else ""
                host, _, port = target.rpartition(":")
                if host and port.isdigit():
                    self._node[prefix] = (host, int(port))
                    nodes.insert(nodes.index(node) + 1, (host, int(port)))
                continue
            except Exception:
                return None
            self._node[prefix] = node
            return replies
        return None

    def _prefix(self, lease: Any) -> str | None:
        """The key prefix of the store (a cluster crawl's shard) that made ``lease``."""
        if self._tags is None:
            prefix = f"crawlq:{{{self._crawl}}}:"
            record = self._ask(prefix, ("HMGET", prefix + "cluster", "shards", "tags"))
            if record is None:
                return None
            count, tags = (v.decode() if v else "" for v in record[0])
            self._tags = [t or f"{self._crawl}:{k}" for k, t in enumerate(record_tags(count, tags))]
        if not self._tags:
            return str(lease[-1]).rpartition("#")[2]
        host = lease[2] if isinstance(lease[2], bytes) else str(lease[2]).encode()
        return f"crawlq:{{{self._tags[shard_of(host, len(self._tags))]}}}:"

    def deadline(self, request: crawlq.Request) -> str:
        lease = request._lease  # type: ignore[attr-defined]
        id_, token = lease[0], lease[1]
        prefix = self._prefix(lease)
        if prefix is None:
            return "-"
        replies = self._ask(
            prefix, ("HGET", prefix + "lease", id_), ("ZSCORE", prefix + "leases", id_)
        )
        if replies is None:
            return "-"
        record, score = replies
        if record is None or score is None or record.split(b" ", 1)[0] != token:
            return "x"
        return f"{float(score) / 1000:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("log")
    parser.add_argument("--tree", required=True)
    parser.add_argument("--options", default="{}")
    parser.add_argument("--feed", nargs=3, default=None, metavar=("START", "END", "FLAG"))
    parser.add_argument(
        "--until", action="append", default=[], help="exit only once this file exists too"
    )
    parser.add_argument("--fetch", nargs=2, type=float, default=(0.002, 0.010))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--give-up", type=float, default=90.0)
    parser.add_argument(
        "--scheduler", type=int, default=0, help="crawl with the asyncio Scheduler, N coroutines"
    )
    args = parser.parse_args()
    tree = Tree.from_arg(args.tree)
    options: dict[str, Any] = json.loads(args.options)
    rng = random.Random(args.seed)
    log = Log(args.log)
    steps = Steps(log, args.give_up, rng)
    lookup = LeaseLookup(args.url) if args.url.startswith("redis") else None
    try:
        if args.scheduler:
            from tests.chaos import scheduled

            code = scheduled.crawl(args, tree, options, rng, log, lookup)
        else:
            code = crawl(args, tree, options, rng, log, steps, lookup)
    except GiveUp:
        code = 3
    sys.stdout.flush()
    os._exit(code)


def crawl(
    args: argparse.Namespace,
    tree: Tree,
    options: dict[str, Any],
    rng: random.Random,
    log: Log,
    steps: Steps,
    lookup: LeaseLookup | None,
) -> int:
    frontier = steps("open", lambda: crawlq.open_frontier(args.url, **options))
    log("O", os.getpid())
    feed_flag = Path(args.feed[2]) if args.feed else None
    feed_start, feed_end = (float(args.feed[0]), float(args.feed[1])) if args.feed else (0.0, 0.0)
    fed = 0  # seeds this process added
    until = [Path(name) for name in args.until]

    def feed() -> None:
        nonlocal fed
        if feed_flag is None or fed >= tree.roots:
            return
        if fed == 0 and feed_flag.exists():
            fed = tree.roots  # an earlier process of this role added them all
            return
        now = time.time()
        share = 1.0 if now >= feed_end else max(0.0, (now - feed_start) / (feed_end - feed_start))
        due = min(tree.roots, int(share * tree.roots))
        while fed < due:
            first, end = fed, min(due, fed + _SEED_CHUNK)
            batch = [crawlq.Request(tree.url(n)) for n in range(first, end)]
            added = steps(
                "seed", lambda b=batch: frontier.add_many(b), lambda f=first, e=end: log("s", f, e)
            )
            log("S", first, end, "".join("1" if ok else "0" for ok in added))
            fed = end
        if fed >= tree.roots:
            feed_flag.write_text("fed\n")

    def done() -> bool:
        """All seeds are in and nothing is queued or leased (asked twice, 0.2 s apart)."""
        if not all(path.exists() for path in until):
            return False
        for attempt in range(2):
            if attempt:
                time.sleep(0.2)
            if steps("len", lambda: len(frontier)) != 0:
                return False
        return True

    while True:
        feed()
        called = time.time()
        request = steps("pop", frontier.pop)
        if request is None:
            if not done():
                time.sleep(0.01)
                continue
            called = time.time()  # a last pop: nothing may come after len() said 0
            request = steps("pop", frontier.pop)
            if request is None:
                break
        back = time.time()
        deadline = lookup.deadline(request) if lookup is not None else "-"
        log.raw(f"P {called:.6f} {back:.6f} {request.url} {deadline}")
        time.sleep(rng.uniform(*args.fetch))
        log("F", request.url)
        links = [crawlq.Request(tree.url(c)) for c in tree.children(tree.node(request.url))]
        url = request.url
        try:
            if links:
                added = steps(
                    "ack",
                    lambda r=request, c=links: frontier.add_many(c, ack=r),
                    lambda u=url: log("a", u),
                )
                log.unsent(frontier)
                log("K", url, "".join("1" if ok else "0" for ok in added))
            else:
                steps("ack", lambda r=request: frontier.ack(r), lambda u=url: log("a", u))
                log("K", url, "-")
        except crawlq.LeaseError as exc:
            log("L", url, one_line(exc))
    return steps.close(frontier)


if __name__ == "__main__":
    main()
