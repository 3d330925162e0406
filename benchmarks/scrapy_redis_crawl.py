"""A real Scrapy crawl on Redis: crawlq's drop-in scheduler against scrapy-redis.

The site is a local copy of the Python documentation (Debian's
``python3.11-doc``: ``/usr/share/doc/python3.11/html``), with the "Show
Source" link to its ``_sources`` text file that docs.python.org puts on each
page and Debian's build leaves out added back (about 1,030 pages, half of
them text files without links), served by ``python -m http.server`` on
127.0.0.1, pinned to CPU 0. Each crawl is ``scrapy runspider`` of a spider
that follows every link into the site (about 150 offered a page, counted in
the report), with Scrapy's defaults (``CONCURRENT_REQUESTS`` 16, 8 per
domain, no delay), ``SCHEDULER`` set to crawlq's on ``redis://`` or to
scrapy-redis's (its ``PriorityQueue`` and ``RFPDupeFilter``). The crawler
and a fresh redis-server (no persistence, a free port, stopped by its pid)
share CPU 1 (``taskset -c 1``), so the figures do not depend on how the
kernel spreads them.

Reported per crawl: pages fetched, links offered per page, the server's CPU
(utime + stime of redis-server from ``/proc/PID/stat``, from before the crawl
starts to after it ends) per page, the crawler's CPU per page, and the
server's commands per page (``INFO commandstats``). The repeats are
interleaved (crawlq, scrapy-redis, crawlq, ...), each a fresh crawler process
and a fresh server, and every timed crawl holds ``flock
/tmp/crawlq-bench.lock`` so that other benchmarks do not run beside it. The
summary is the median of the repeats and crawlq / scrapy-redis for the
server CPU per page (below 1: crawlq costs the server less).

Run from the repository root, with a Python that has Scrapy, scrapy-redis and
redis-py (the benchmark venv)::

    apt-get install -y python3.11-doc redis-server
    /work/benchvenv/bin/python -m benchmarks.scrapy_redis_crawl --repeat 3

``--primaries 1,3`` adds crawlq crawls on a fresh Redis Cluster of each
primary count (``crawlq-cluster-P``, ``--shards`` shards, default 16;
``benchmarks.redis_servers``, every node pinned to ``--cpu``), interleaved
with the others: server CPU is all primaries' summed, commands all nodes'.

``--before DIR`` adds crawls with another copy of ``src/`` (say, the last
commit's: ``git archive HEAD src | tar -x -C /tmp/before``, then
``--before /tmp/before/src``), named crawlq-before, interleaved with the
others.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SITE = Path("/usr/share/doc/python3.11/html")
LOCK = "/tmp/crawlq-bench.lock"
_TICK = os.sysconf("SC_CLK_TCK")

SPIDER = """
import json, scrapy
from pathlib import Path
from scrapy.http import HtmlResponse

class DocsSpider(scrapy.Spider):
    name = "docs"

    def __init__(self, base="", out="", **kwargs):
        super().__init__(**kwargs)
        self.base, self.out, self.links = base, out, 0

    async def start(self):
        yield scrapy.Request(self.base + "index.html")

    def start_requests(self):  # Scrapy before 2.13
        yield scrapy.Request(self.base + "index.html")

    def parse(self, response):
        if not isinstance(response, HtmlResponse):
            return
        base = self.base
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href)
            if url.startswith(base):
                self.links += 1
                yield scrapy.Request(url)

    def closed(self, reason):
        stats = self.crawler.stats.get_stats()
        Path(self.out).write_text(json.dumps({
            "reason": reason,
            "links": self.links,
            "elapsed": (stats["finish_time"] - stats["start_time"]).total_seconds()
            if "finish_time" in stats else None,
            "stats": {k: v for k, v in stats.items() if isinstance(v, (int, float))},
        }))
"""

IMPLS = ("crawlq", "scrapy-redis")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all its threads, from ``/proc/PID/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


@contextmanager
def redis_server(cpu: str) -> Iterator[tuple[str, int]]:
    """A fresh redis-server pinned to ``cpu``: (url, pid); stopped by its pid."""
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is missing: apt-get install -y redis-server")
    port = _free_port()
    directory = tempfile.mkdtemp(prefix="crawlq-bench-redis-")
    command = ["taskset", "-c", cpu, binary, "--port", str(port), "--bind", "127.0.0.1"]
    command += ["--save", "", "--appendonly", "no", "--dir", directory]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        import redis

        client = redis.Redis(host="127.0.0.1", port=port)
        for _ in range(500):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.02)
        client.close()
        yield f"redis://127.0.0.1:{port}/0", process.pid
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def crawl_servers(impl: str, cpu: str, shards: int) -> Iterator[tuple[str, list[int], list[str]]]:
    """The servers of one crawl, pinned to ``cpu``: (the scheduler's URL, their pids, the URL
    of each for ``INFO``). ``crawlq-cluster-P`` crawls a fresh Redis Cluster of P primaries
    (``benchmarks.redis_servers``) with ``shards`` shards; the others one fresh server."""
    if not impl.startswith("crawlq-cluster-"):
        with redis_server(cpu) as (url, pid):
            yield url, [pid], [url]
        return
    from benchmarks.redis_servers import servers

    primaries = int(impl.rpartition("-")[2])
    root = Path(tempfile.mkdtemp(prefix="crawlq-bench-cluster-"))
    with servers(primaries, root, [int(c) for c in cpu.split(",")]) as nodes:
        seeds = ",".join(f"127.0.0.1:{node.port}" for node in nodes[:2])
        yield (
            f"redis+cluster://{seeds}/",
            [node.pid for node in nodes],
            [f"redis://127.0.0.1:{node.port}/0" for node in nodes],
        )


def with_source_links(source: Path, copy: Path) -> None:
    """Copy the docs to ``copy``, adding each page's "Show Source" link, as docs.python.org has."""
    shutil.copytree(source, copy)
    for page in copy.rglob("*.html"):
        path = page.relative_to(copy).with_suffix("").as_posix()
        if not (copy / "_sources" / f"{path}.rst.txt").exists():
            continue
        html = page.read_text(encoding="utf-8", errors="surrogateescape")
        link = f'<a href="/_sources/{path}.rst.txt" rel="nofollow">Show Source</a>\n'
        html = html.replace("</body>", link + "</body>", 1)
        page.write_text(html, encoding="utf-8", errors="surrogateescape")


@contextmanager
def served_site(source: Path, cpu: str) -> Iterator[str]:
    """``python -m http.server`` on a copy of ``source``, pinned to ``cpu``; its base URL."""
    copy = Path(tempfile.mkdtemp(prefix="crawlq-docs-site-")) / "html"
    with_source_links(source, copy)
    directory = copy
    port = _free_port()
    command = ["taskset", "-c", cpu, sys.executable, "-m", "http.server", str(port)]
    command += ["--bind", "127.0.0.1", "--directory", str(directory)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.02)
        yield f"http://127.0.0.1:{port}/"
    finally:
        os.kill(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        shutil.rmtree(copy.parent, ignore_errors=True)


def settings_for(impl: str, url: str, options: dict[str, str], shards: int) -> dict[str, str]:
    settings = {
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": "False",
        "ROBOTSTXT_OBEY": "False",
        **options,
    }
    if impl.startswith("crawlq"):
        settings["SCHEDULER"] = "crawlq.contrib.scrapy.Scheduler"
        settings["CRAWLQ_URL"] = url + "?crawl=docs"
        if impl.startswith("crawlq-cluster-"):
            settings["CRAWLQ_OPTIONS"] = json.dumps({"shards": shards})
    else:
        settings["SCHEDULER"] = "scrapy_redis.scheduler.Scheduler"
        settings["DUPEFILTER_CLASS"] = "scrapy_redis.dupefilter.RFPDupeFilter"
        settings["REDIS_URL"] = url
    return settings


def commandstats(urls: list[str]) -> dict[str, dict[str, float]]:
    """Calls and microseconds of each command, summed over the servers at ``urls``."""
    import redis

    total: dict[str, dict[str, float]] = {}
    for url in urls:
        client = redis.Redis.from_url(url)
        try:
            for name, v in client.info("commandstats").items():
                had = total.setdefault(name.removeprefix("cmdstat_"), {"calls": 0, "usec": 0})
                had["calls"] += v["calls"]
                had["usec"] += v["usec"]
        finally:
            client.close()
    return total


def crawl(
    impl: str, base: str, cpu: str, options: dict[str, str], src: Path, shards: int
) -> dict[str, Any]:
    """One timed crawl on fresh servers, holding the benchmark lock."""
    with tempfile.TemporaryDirectory(prefix="crawlq-docs-crawl-") as tmp:
        workdir = Path(tmp)
        spider, out = workdir / "docs_spider.py", workdir / "out.json"
        spider.write_text(SPIDER)
        with crawl_servers(impl, cpu, shards) as (url, pids, info_urls):
            command = ["taskset", "-c", cpu, sys.executable, "-m", "scrapy", "runspider"]
            command += [str(spider), "-a", f"base={base}", "-a", f"out={out}"]
            for name, value in settings_for(impl, url, options, shards).items():
                command += ["-s", f"{name}={value}"]
            environment = dict(os.environ, PYTHONPATH=str(src))
            with open(LOCK, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                server_before = sum(map(cpu_seconds, pids))
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                done = subprocess.run(
                    command, cwd=workdir, env=environment, capture_output=True, text=True
                )
                wall = time.perf_counter() - started
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                server = sum(map(cpu_seconds, pids)) - server_before
            calls = commandstats(info_urls)
        if done.returncode or not out.exists():
            return {"impl": impl, "error": done.stderr[-2000:]}
        data = json.loads(out.read_text())
    stats = data["stats"]
    pages = stats.get("response_received_count", 0)
    worker = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {
        "impl": impl,
        "reason": data["reason"],
        "pages": pages,
        "links_per_page": data["links"] / max(pages, 1),
        "server_us_per_page": 1e6 * server / max(pages, 1),
        "worker_ms_per_page": 1e3 * worker / max(pages, 1),
        "wall_s": wall,
        "pages_per_s": pages / wall,
        "commands_per_page": {
            name: round(v["calls"] / max(pages, 1), 3)
            for name, v in sorted(calls.items(), key=lambda item: -item[1]["usec"])
            if name not in ("info", "ping", "hello", "client|setinfo", "config|get")
        },
        "command_usec_per_page": {
            name: round(v["usec"] / max(pages, 1), 1)
            for name, v in sorted(calls.items(), key=lambda item: -item[1]["usec"])[:6]
        },
        "stats": {
            key: stats[key]
            for key in sorted(stats)
            if key.startswith(("scheduler/", "dupefilter/", "crawlq/", "downloader/response_count"))
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=SITE)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--cpu", default="1", help="CPU of the crawler and redis-server")
    parser.add_argument("--site-cpu", default="0", help="CPU of the HTTP server")
    parser.add_argument("-s", dest="options", action="append", default=[], help="NAME=VALUE")
    parser.add_argument("--output", type=Path, help="write every result here (JSON)")
    parser.add_argument(
        "--src", type=Path, default=ROOT / "src", help="crawlq's source folder (src/)"
    )
    parser.add_argument(
        "--before", type=Path, help="also crawl with this copy of src/ (crawlq-before), interleaved"
    )
    parser.add_argument(
        "--primaries",
        default="",
        help="also crawl a Redis Cluster of each of these primary counts (comma list, e.g. 1,3): "
        "crawlq-cluster-P, on --cpu like the others",
    )
    parser.add_argument("--shards", type=int, default=16, help="a cluster crawl's shards")
    args = parser.parse_args()
    if not (args.site / "index.html").exists():
        sys.exit(f"no site at {args.site}: apt-get install -y python3.11-doc, or --site DIR")
    options = dict(option.split("=", 1) for option in args.options)
    impls = args.impls.split(",")
    impls += [f"crawlq-cluster-{p}" for p in args.primaries.split(",") if p]
    sources = dict.fromkeys(impls, args.src)
    if args.before is not None:
        impls.insert(0, "crawlq-before")
        sources["crawlq-before"] = args.before
    results: list[dict[str, Any]] = []
    with served_site(args.site, args.site_cpu) as base:
        for round_ in range(args.repeat):
            for impl in impls:
                result = crawl(impl, base, args.cpu, options, sources[impl], args.shards)
                result["round"] = round_
                results.append(result)
                shown = {k: v for k, v in result.items() if k not in ("stats", "commands_per_page")}
                print(json.dumps(shown), file=sys.stderr, flush=True)
    if args.output is not None:
        args.output.write_text(json.dumps(results, indent=1))
    medians: dict[str, dict[str, float]] = {}
    print("| scheduler | pages | links/page | server CPU us/page | worker CPU ms/page | pages/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for impl in impls:
        runs = [r for r in results if r["impl"] == impl and "error" not in r]
        if not runs:
            print(f"| {impl} | failed: {results[-1].get('error', '')[-300:]!r} |")
            continue
        keys = ("pages", "links_per_page", "server_us_per_page", "worker_ms_per_page")
        median = {k: statistics.median(r[k] for r in runs) for k in (*keys, "pages_per_s")}
        medians[impl] = median
        spread = [round(r["server_us_per_page"]) for r in runs]
        print(
            f"| {impl} | {median['pages']:.0f} | {median['links_per_page']:.1f} "
            f"| {median['server_us_per_page']:.0f} {spread} | {median['worker_ms_per_page']:.2f} "
            f"| {median['pages_per_s']:.0f} |"
        )
    peer = medians.get("scrapy-redis")
    for impl in ("crawlq-before", "crawlq", *(i for i in impls if i.startswith("crawlq-c"))):
        if impl in medians and peer is not None:
            ratio = medians[impl]["server_us_per_page"] / peer["server_us_per_page"]
            print(f"\nserver CPU per page, {impl} / scrapy-redis: {ratio:.3f}x")


if __name__ == "__main__":
    main()
