"""Threads on one Redis crawl: one shared frontier (``threads=True``) or one frontier each.

``python -m benchmarks.threads`` runs the W2 step (pop, add 5 links with the
page's ack) in 8 threads of one process on one redis-server, two ways: every
thread with its own frontier (what crawlq offered before ``threads=True``),
and all threads sharing one frontier opened with ``threads=True``, whose calls
made at once share function calls. It prints, per way, the medians of
``--runs`` fresh processes (alternating the two ways): pages per second, the
server's CPU per page (utime + stime of redis-server from /proc, over the
timed section) and function calls per page (INFO commandstats), and the
shared/separate ratios, as a Markdown table. Each run uses a fresh server on
127.0.0.1, stopped by its pid. Worker and server are not pinned: the figures
are what an unpinned box shows, noisy; compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import crawlq

from .redis_servers import servers

_WAYS = ("separate", "shared")


def _crawl(url: str, way: str, threads: int, pages: int) -> float:
    """Crawl ``threads`` trees of ``pages`` pages; return the seconds the crawl took."""
    shared = crawlq.open_frontier(url, threads=True, ack_delay=0) if way == "shared" else None
    seed = shared or crawlq.open_frontier(url, ack_delay=0)
    seed.add_many([f"https://h{i}.example/0" for i in range(threads)])
    left = [threads * pages]
    lock = threading.Lock()

    def work() -> None:
        frontier = shared or crawlq.open_frontier(url, ack_delay=0)
        while True:
            with lock:
                if left[0] <= 0:
                    break
            request = frontier.pop()
            if request is None:
                time.sleep(0.0005)
                continue
            host, number = request.url.removeprefix("https://").split("/")
            n = int(number)
            links = [f"https://{host}/{5 * n + k}" for k in range(1, 6) if 5 * n + k < pages]
            frontier.add_many(links, ack=request)
            with lock:
                left[0] -= 1
        if frontier is not shared:
            frontier.close()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    took = time.perf_counter() - started
    seed.close()
    return took


def _child(url: str, way: str, threads: int, pages: int) -> None:
    """One fresh process's run: print its seconds as JSON."""
    print(json.dumps({"seconds": _crawl(url, way, threads, pages)}))


def _run(way: str, threads: int, pages: int) -> dict[str, float]:
    """One measurement in a fresh process against a fresh server."""
    with tempfile.TemporaryDirectory() as scratch, servers(0, Path(scratch)) as nodes:
        node = nodes[0]
        url = f"redis://127.0.0.1:{node.port}/0?crawl=threads"
        node.command("CONFIG", "RESETSTAT")
        cpu = node.cpu()
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.threads", "--child", url, way],
            check=True,
            capture_output=True,
            text=True,
            env=None,
        )
        cpu = node.cpu() - cpu
        calls = node.commands().get("fcall", (0, 0))[0]
    seconds = json.loads(out.stdout.splitlines()[-1])["seconds"]
    total = threads * pages
    return {
        "pages_per_s": total / seconds,
        "server_us_per_page": cpu * 1e6 / total,
        "fcalls_per_page": calls / total,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.threads", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--pages", type=int, default=2000, help="pages per thread")
    parser.add_argument("--child", nargs=2, metavar=("URL", "WAY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child[0], args.child[1], args.threads, args.pages)
        return 0
    results: dict[str, list[dict[str, float]]] = {way: [] for way in _WAYS}
    for _ in range(args.runs):
        for way in _WAYS:
            results[way].append(_run(way, args.threads, args.pages))
    medians = {
        way: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for way, runs in results.items()
    }
    print(f"{args.threads} threads, {args.pages} pages each, medians of {args.runs} runs\n")
    print("| way | pages/s | server us/page | FCALLs/page |")
    print("| --- | ---: | ---: | ---: |")
    for way in _WAYS:
        m = medians[way]
        print(
            f"| {way} | {m['pages_per_s']:,.0f} | {m['server_us_per_page']:.1f} "
            f"| {m['fcalls_per_page']:.2f} |"
        )
    s, t = medians["separate"], medians["shared"]
    print(
        f"| shared / separate | {t['pages_per_s'] / s['pages_per_s']:.2f}x "
        f"| {t['server_us_per_page'] / s['server_us_per_page']:.2f}x "
        f"| {t['fcalls_per_page'] / s['fcalls_per_page']:.2f}x |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
