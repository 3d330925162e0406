"""The child process of the SQLite crash and lock tests, run as a script.

``python _child.py MODE JOB [ARGS...]``. Every mode opens the job, does its
work, reports on stdout (one line, flushed) and then waits to be killed. The
parent only ever stops it with SIGKILL (or, for ``hold``, by closing stdin).

Modes:

``loop JOB LOG RUN SEED SYNCHRONOUS [ACK_DELAY]``
    Adds, pops, acks and releases at random until killed, appending one line
    per completed step to LOG (opened O_APPEND, one ``os.write`` per line):
    ``I <url> <url>...`` before an add, then ``A <url>`` per accepted URL
    (``D <url>`` if a new URL was called a duplicate) after it returned;
    ``P <url>`` after a pop; ``k <url>...`` before an ack and ``K <url>`` per
    request after it returned; ``R <url>`` after a release. A line after a
    call ends with ``@START @END``, the call's wall-clock times. URLs embed
    RUN, so every run adds URLs nobody added before. ACK_DELAY (default 0:
    every ack durable when it returns) is the frontier's ``ack_delay``.
``add JOB`` / ``add_many JOB``
    Add one request (or a batch of 100), print ``added``.
``ack JOB``
    Add two requests, pop both, ack the first, print ``acked <url>``.
``release JOB``
    Add a request, pop it, release it, print ``released``.
``lease JOB SPEC``
    SPEC is a JSON file ``{"requests": [[url, priority], ...], "pop": n,
    "ack": [i, ...], "host_delay": d}``: add the requests, pop ``n``, ack the
    popped ones at positions ``ack``, print the popped URLs as JSON.
``hold JOB``
    Open the job, print ``holding <pid>``, close it when stdin closes.
``die-creating JOB``
    Open a new job, SIGKILL itself in the middle of creating the schema.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import sys
import time

import crawlq


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _wait_forever() -> None:
    while True:
        time.sleep(60)


def _loop(job: str, log: str, run: int, seed: int, synchronous: str, ack_delay: float) -> None:
    rng = random.Random(seed)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    start = 0.0  # when the call being logged began

    def write(line: str) -> None:
        if line[0] in "ADPKR":
            line += f" @{start!r} @{time.time()!r}"
        os.write(fd, (line + "\n").encode())

    frontier = crawlq.open_frontier(
        job, lease_timeout=3600, synchronous=synchronous, ack_delay=ack_delay
    )
    write(f"O {run} {os.getpid()}")
    counter = 0
    held: list[crawlq.Request] = []
    while True:
        roll = rng.random()
        if roll < 0.27:
            kind = rng.random()
            if kind < 0.2:
                size = 1
            elif kind < 0.95:
                size = rng.randint(2, 20)
            else:
                size = rng.randint(100, 300)
            urls = []
            for _ in range(size):
                urls.append(f"http://h{rng.randrange(50)}.test/{run}/{counter}")
                counter += 1
            requests = [crawlq.Request(url, priority=rng.randint(-2, 2)) for url in urls]
            write("I " + " ".join(urls))
            start = time.time()
            if size == 1 and rng.random() < 0.5:
                results = [frontier.add(requests[0])]
            else:
                results = frontier.add_many(requests)
            for url, ok in zip(urls, results, strict=True):
                write(("A " if ok else "D ") + url)
        elif roll < 0.72 or not held:
            for _ in range(rng.randint(1, 16)):
                start = time.time()
                request = frontier.pop()
                if request is None:
                    break
                write("P " + request.url)
                held.append(request)
        else:
            rng.shuffle(held)
            count = rng.randint(1, len(held))
            done, held = held[:count], held[count:]
            releases = [request for request in done if rng.random() < 0.15]
            release_ids = {id(request) for request in releases}
            acks = [request for request in done if id(request) not in release_ids]
            if len(acks) > 1 and rng.random() < 0.5:
                write("k " + " ".join(request.url for request in acks))
                start = time.time()
                frontier.ack_many(acks)
                for request in acks:
                    write("K " + request.url)
            else:
                for request in acks:
                    write("k " + request.url)
                    start = time.time()
                    frontier.ack(request)
                    write("K " + request.url)
            for request in releases:
                start = time.time()
                frontier.release(request)
                write("R " + request.url)


def _die_creating(job: str) -> None:
    """SIGKILL this process inside the schema script of a new job's first open."""
    from crawlq.stores.sqlite import file as _sqlite_file

    class Dying(sqlite3.Connection):
        def executescript(self, script: str) -> sqlite3.Cursor:
            os.kill(os.getpid(), signal.SIGKILL)
            raise AssertionError("unreachable")

    real_connect = sqlite3.connect

    class PatchedSqlite3:
        def __getattr__(self, name: str) -> object:
            return getattr(sqlite3, name)

        @staticmethod
        def connect(*args: object, **kwargs: object) -> sqlite3.Connection:
            return real_connect(*args, factory=Dying, **kwargs)  # type: ignore[call-overload, no-any-return]

    _sqlite_file.sqlite3 = PatchedSqlite3()  # type: ignore[assignment, attr-defined]
    crawlq.open_frontier(job)
    raise AssertionError("the job was opened without creating its schema")


def main(argv: list[str]) -> None:
    mode, job, *args = argv
    if mode == "loop":
        log, run, seed, synchronous, *ack_delay = args
        _loop(job, log, int(run), int(seed), synchronous, float(ack_delay[0] if ack_delay else 0))
    elif mode in ("add", "add_many"):
        frontier = crawlq.open_frontier(job)
        if mode == "add":
            assert frontier.add(crawlq.Request("http://a.test/added", priority=3))
        else:
            batch = [
                crawlq.Request(f"http://h{i % 7}.test/{i}", priority=i % 5) for i in range(100)
            ]
            assert all(frontier.add_many(batch))
        _say("added")
        _wait_forever()
    elif mode == "ack":
        # then: "" (ack_delay=0, durable on return), or with the default
        # ack_delay: "wait" (nothing more), "flush", "add" (a write follows),
        # "delay" (a call after the delay is up).
        then = args[0] if args else ""
        frontier = crawlq.open_frontier(job, ack_delay=0 if not then else 0.05)
        batch = [crawlq.Request("http://a.test/1"), crawlq.Request("http://a.test/2")]
        assert all(frontier.add_many(batch))
        first, second = frontier.pop(), frontier.pop()
        assert first is not None and second is not None
        frontier.ack(first)
        if then == "flush":
            frontier.flush()
        elif then == "add":
            assert frontier.add(crawlq.Request("http://b.test/1"))
        elif then == "delay":
            time.sleep(0.1)
            assert frontier.pop() is None  # any call writes the acks whose delay is up
        _say(f"acked {first.url}")
        _wait_forever()
    elif mode == "release":
        frontier = crawlq.open_frontier(job)
        assert frontier.add(crawlq.Request("http://a.test/released"))
        request = frontier.pop()
        assert request is not None
        frontier.release(request)
        _say("released")
        _wait_forever()
    elif mode == "lease":
        with open(args[0]) as file:
            spec = json.load(file)
        frontier = crawlq.open_frontier(
            job, host_delay=spec.get("host_delay", 0), ack_delay=spec.get("ack_delay", 0)
        )
        frontier.add_many(
            crawlq.Request(url, priority=priority) for url, priority in spec["requests"]
        )
        popped = []
        for _ in range(spec["pop"]):
            request = frontier.pop()
            assert request is not None
            popped.append(request)
        frontier.ack_many([popped[i] for i in spec["ack"]])
        _say(json.dumps([request.url for request in popped]))
        _wait_forever()
    elif mode == "hold":
        frontier = crawlq.open_frontier(job)
        _say(f"holding {os.getpid()}")
        sys.stdin.read()
        frontier.close()
        _say("closed")
    elif mode == "die-creating":
        _die_creating(job)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
