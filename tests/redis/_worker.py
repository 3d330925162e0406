"""A crawler worker for the multi-worker test, run as its own process.

    python -m tests.redis._worker URL LOG [--hang-after N] [--block-after N HOST SECONDS]

Pops, "fetches" and acks until the shared frontier is empty, logging one line
per step to LOG (line-buffered, so a SIGKILL loses at most a partial line):

    S <url> <time popped> <lease deadline, ms>
    E <url> <time done, before the ack>
    A <url>

Times are wall-clock seconds (time.time): the same clock as Redis TIME on
this machine. With ``--hang-after N`` the worker stops after popping its
N+1-th request, as if stuck in a fetch, and writes ``HANG``. With
``--block-after N HOST SECONDS`` it blocks HOST after its N-th request,
writing ``B <time before the call> <time after it>``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import redis

import crawlq
from crawlq.stores.redis.cluster.shards import record_tags, shard_of


def _lease_keys(url: str, crawl: str) -> tuple[Any, Callable[[bytes], str]]:
    """A client for reading lease deadlines, and the leases key of a lease's host."""
    if url.startswith("redis+cluster://"):
        from redis.cluster import ClusterNode, RedisCluster

        seeds = urlsplit(url).netloc.split(",")
        nodes = [ClusterNode(s.rpartition(":")[0], int(s.rpartition(":")[2])) for s in seeds]
        record = RedisCluster(startup_nodes=nodes).hmget(
            f"crawlq:{{{crawl}}}:cluster", "shards", "tags"
        )
        count, stored = (v.decode() if v else "" for v in record)
        tags = [t or f"{crawl}:{k}" for k, t in enumerate(record_tags(count, stored))]
        return RedisCluster(startup_nodes=nodes), (
            lambda host: f"crawlq:{{{tags[shard_of(host, len(tags))]}}}:leases"
        )
    return redis.Redis.from_url(url.split("?")[0]), lambda host: f"crawlq:{{{crawl}}}:leases"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("log")
    parser.add_argument("--hang-after", type=int, default=-1)
    parser.add_argument("--ack-delay", type=float, default=0.0)
    parser.add_argument("--block-after", nargs=3, default=None)
    parser.add_argument("--prefetch", type=int, default=64)
    args = parser.parse_args()
    crawl = dict(p.split("=") for p in urlsplit(args.url).query.split("&"))["crawl"]
    admin, leases = _lease_keys(args.url, crawl)
    frontier = crawlq.open_frontier(
        args.url,
        host_concurrency=1,
        lease_timeout=2.0,
        ack_delay=args.ack_delay,
        prefetch=args.prefetch,
    )
    rng = random.Random()
    done = 0
    with open(args.log, "a", buffering=1) as log:
        while True:
            request = frontier.pop()
            if request is None:
                if len(frontier) == 0:
                    break
                time.sleep(0.02)
                continue
            popped = time.time()
            key = leases(request._lease[2])  # type: ignore[index]
            deadline = admin.zscore(key, request._lease[0])  # type: ignore[index]
            log.write(f"S {request.url} {popped:.6f} {deadline}\n")
            if done == args.hang_after:
                log.write("HANG\n")
                time.sleep(3600)
            if rng.random() < 0.02:
                time.sleep(0.002)  # a slow fetch now and then
            log.write(f"E {request.url} {time.time():.6f}\n")
            frontier.ack(request)
            log.write(f"A {request.url}\n")
            done += 1
            if args.block_after and done == int(args.block_after[0]):
                before = time.time()
                frontier.block_host(args.block_after[1], float(args.block_after[2]))
                log.write(f"B {before:.6f} {time.time():.6f}\n")
    frontier.close()


if __name__ == "__main__":
    main()
