"""benchmarks.ir_ab's shape list: names, their k and their calls."""

from __future__ import annotations

import argparse

import pytest
from benchmarks.ir_ab.shapes import parse_shapes


def _args(**given: int) -> argparse.Namespace:
    options = {"calls": 200, "items": 5000, "a1_steps": 1000, "warm": None, **given}
    return argparse.Namespace(**options)


def test_cluster_a1_takes_its_shard_count_and_the_a1_steps() -> None:
    shapes = parse_shapes("a1c:3,a1c,a1", _args(a1_steps=700))
    assert [s["label"] for s in shapes] == ["ping", "a1c:3", "a1c:16", "a1"]
    assert [s["k"] for s in shapes[1:]] == [3, 16, 0]
    assert {s["calls"] for s in shapes[1:]} == {700}


def test_an_unknown_shape_is_refused() -> None:
    with pytest.raises(SystemExit, match="unknown shape 'a2'"):
        parse_shapes("a2", _args())
