"""A crawl of known size in its own process, for ``crawlq top`` and metrics to watch.

    python -m tests._watched_crawl URL

`Crawl` runs it from a test (the ``crawl`` fixture of ``tests/conftest.py``).

Adds 200 requests over 10 hosts and 20 duplicates, pops 50 (acks 40,
releases 5, holds 5), flushes and prints ``ready``. Then, for each line on
stdin: ``pop N`` pops and acks N requests over about two seconds and prints
``popped``; ``later`` pops 3, releases two of them for 600 s and acks the
third to be refetched in 1,200 s, and prints ``scheduled``; ``quit`` (or
end of input) closes the frontier and exits. The frontier stays open in
between: the watcher reads a running crawl.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import crawlq

REQUESTS = 200
HOSTS = 10
DUPLICATES = 20
#: What the crawl has done when it says "ready".
READY = crawlq.Counters(accepted=200, duplicates=20, popped=50, acked=40, released=5)


class Crawl:
    """This crawl running in a child process, driven line by line."""

    def __init__(self, url: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests._watched_crawl", url],
            cwd=Path(__file__).parent.parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.expect("ready")

    def expect(self, line: str) -> None:
        assert self.process.stdout is not None
        got = self.process.stdout.readline().strip()
        assert got == line, f"the crawl said {got!r} (exit {self.process.poll()})"

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.send("quit")
            self.process.wait(timeout=30)
        if self.process.poll() is None:
            self.process.kill()


def main(url: str) -> None:
    # On Redis, one request leased per pop: what a worker prefetches counts
    # as popped and leased on the server (the counters' documented view).
    prefetch = {"prefetch": 1} if crawlq.store_kind(url).name == "redis" else {}
    frontier = crawlq.open_frontier(url, lease_timeout=600, **prefetch)
    urls = [f"https://h{i % HOSTS}.example/{i}" for i in range(REQUESTS)]
    frontier.add_many(urls + urls[:DUPLICATES])
    held = []
    for step in range(50):
        request = frontier.pop()
        assert request is not None
        if step < 40:
            frontier.ack(request)
        elif step < 45:
            frontier.release(request)
        else:
            held.append(request)
    frontier.flush()
    print("ready", flush=True)
    for line in sys.stdin:
        command = line.split()
        if not command or command[0] == "quit":
            break
        if command[0] == "later":
            retries = [frontier.pop(), frontier.pop()]
            page = frontier.pop()
            assert page is not None and None not in retries
            frontier.release_many(retries, delay=600)  # type: ignore[arg-type]
            frontier.ack(page, refetch_after=1200)
            frontier.flush()
            print("scheduled", flush=True)
            continue
        count = int(command[1])
        for _ in range(count):
            request = frontier.pop()
            assert request is not None
            frontier.ack(request)
            time.sleep(2.0 / count)
        frontier.flush()
        print("popped", flush=True)
    frontier.close()


if __name__ == "__main__":
    main(sys.argv[1])
