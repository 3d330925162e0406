"""The shapes a run measures: ``--shapes`` parsed into one dict per shape.

A shape is ``name[:k][@calls]``: a shape of ``benchmarks.redis_cost_shapes``
(k links, pops or acks per call) or ``a1``; ``@calls`` fixes its calls,
otherwise --calls (k <= 1, w2, floors), --items / k (k > 1, at least 10, at
most --calls) or --a1-steps. ``ping`` is always measured.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.redis_cost_shapes import FLOORS

Shape = dict[str, Any]
DEFAULT_SHAPES = "add_new:100,add_dup:100,pop:100,ack:100,popack:20,w2,add_new:1,pop:1,ack:1,a1"
CRAWLQ_SHAPES = (
    "add_new",
    "add_dup",
    "add_ack",
    "add_pop",
    "pop",
    "pop_empty",
    "ack",
    "popack",
    "w2",
)
#: What one item is, per shape (others: per call only).
ITEM = {
    "add_new": "link",
    "add_dup": "link",
    "add_ack": "link",
    "add_pop": "link",
    "pop": "pop",
    "ack": "ack",
    "popack": "pop+ack",
    "w2": "step",
    "a1": "step",
    "a1c": "step",
}
#: Shapes without k (shown by name alone).
_PLAIN = (*FLOORS, "w2", "a1", "pop_empty")
#: Shapes run on a one-node Redis Cluster (k: the crawl's shards).
CLUSTER_SHAPES = ("a1c",)


def calls_for(shape: str, k: int, calls: int, items: int) -> int:
    """Timed calls of a shape: --calls, or for k > 1 about --items items."""
    if shape in _PLAIN or k <= 1:
        return calls
    return max(10, min(calls, items // k))


def parse_shapes(text: str, args: argparse.Namespace) -> list[Shape]:
    """``--shapes`` as dicts: shape, k, calls, warmup, label; ping first if not given."""
    shapes = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        part, _, forced = part.partition("@")
        name, _, given = part.partition(":")
        if name not in (*FLOORS, *CRAWLQ_SHAPES, "a1", *CLUSTER_SHAPES):
            raise SystemExit(f"unknown shape {name!r}")
        if given:
            k = int(given)
        else:
            k = 5 if name == "w2" else 16 if name == "a1c" else 0 if name in _PLAIN else 1
        if forced:
            calls = int(forced)
        elif name in ("a1", *CLUSTER_SHAPES):
            calls = args.a1_steps
        else:
            calls = calls_for(name, k, args.calls, args.items)
        warm = args.warm if args.warm is not None else max(20, calls // 10)
        label = name if name in _PLAIN else f"{name}:{k}"
        shapes.append({"shape": name, "k": k, "calls": calls, "warmup": warm, "label": label})
    if not any(s["shape"] == "ping" for s in shapes):
        ping = {"shape": "ping", "k": 0, "calls": args.calls, "warmup": 20, "label": "ping"}
        shapes.insert(0, ping)
    return shapes


def replica(shape: Shape, r: int, jitter: int) -> Shape:
    """Replica r of a shape: its warm-up r * jitter calls longer (another heap history)."""
    return {**shape, "warmup": shape["warmup"] + r * jitter, "replica": r}
