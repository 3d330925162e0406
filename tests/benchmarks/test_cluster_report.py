"""The Redis Cluster benchmark's options, setups and report, from made-up results (no servers)."""

from __future__ import annotations

import argparse
from dataclasses import asdict
from typing import Any

import pytest
from benchmarks.cluster import parse_args
from benchmarks.cluster_report import SHARDS, Setup, render, setups

Result = dict[str, Any]


def _run(mode: str, busiest: float, primary: list[float], spread: list[int]) -> Result:
    return {
        "mode": mode,
        "repeat": 0,
        "load1": 1.0,
        "check": "ok",
        "steps_rate": 2000.0,
        "server_us": sum(primary),
        "busiest_us": busiest,
        "primary_us": primary,
        "client_us": 300.0,
        "empty_pops": 0,
        "commands": {"fcall": [4.4 if sum(spread) == 16 else 2.6, 300.0]},
        "worker_cpus": [1] if mode == "pinned" else [0, 1],
        "server_cpus": [1] if mode == "pinned" else [0, 1],
        "shards_per_node": spread,
    }


def _document(chosen: tuple[Setup, ...], shards: Any, placements: Result) -> Result:
    runs: dict[str, list[Result]] = {}
    for setup in chosen:
        if setup.primaries:
            spread = [6, 5, 5] if setup.shards == 16 else [1, 1, 1]
            primary = [150.0, 130.0, 130.0] if setup.shards == 16 else [100.0, 95.0, 95.0]
        else:
            spread, primary = [], [125.0]
        runs[setup.key] = [
            _run(mode, max(primary), primary, spread) for mode in ("pinned", "unpinned")
        ]
    return {
        "started": "2026-11-27T04:00:00+00:00",
        "argv": [],
        "quick": True,
        "repeat": 1,
        "workers": 1,
        "primaries": [3],
        "pin": [1],
        "steps": 4000,
        "seeds": 1000,
        "seconds": 60.0,
        "load_start": 0.5,
        "shards": shards,
        "setups": [asdict(s) for s in chosen],
        "runs": runs,
        "environment": "test",
        "placements": placements,
    }


_IDLE_16 = [1] * 16 + [0] * 14
_IDLE_3 = [1] * 3 + [0] * 27


def test_shards_default_and_list() -> None:
    assert parse_args([]).shards == (SHARDS,)
    assert parse_args(["--shards", "16,3,16"]).shards == (16, 3)


@pytest.mark.parametrize("text", ["0", "1025", "", "x"])
def test_shards_refuses_counts_crawlq_refuses(text: str) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--shards", text])
    with pytest.raises((argparse.ArgumentTypeError, ValueError)):
        from benchmarks.cluster import _shards

        _shards(text)


def test_a_setup_per_size_and_shard_count_naming_both() -> None:
    clusters = [s for s in setups((3, 6), (16, 3)) if s.primaries]
    assert [(s.primaries, s.shards) for s in clusters] == [(3, 16), (3, 3), (6, 16), (6, 3)]
    assert len({s.key for s in clusters}) == 4
    assert all("-shards" in s.key and f"-{s.primaries}-primaries" in s.key for s in clusters)
    assert clusters[1].label == "crawlq, Redis Cluster, 3 primaries (3 shards)"
    assert setups((1,), (1,))[1].label == "crawlq, Redis Cluster, 1 primary (1 shard)"


def test_two_shard_counts_each_get_their_rows() -> None:
    placements = {
        "16": {"3": [6, 5, 5], "10": [2] * 6 + [1] * 4, "16": [1] * 16, "30": _IDLE_16},
        "3": {"3": [1, 1, 1], "10": [1] * 3 + [0] * 7, "16": [1] * 3 + [0] * 13, "30": _IDLE_3},
    }
    text = render(_document(setups((3,), (16, 3)), [16, 3], placements))
    # the targets on 3 primaries, once per shard count
    assert "| 3-primary cluster with 16 shards W2: all primaries'" in text
    assert "| 3-primary cluster with 3 shards W2: all primaries'" in text
    assert "/ the busiest primary's of the 3-primary cluster with 3 shards |" in text
    assert "| crawlq, Redis Cluster, 3 primaries (3 shards) |" in text
    # the capacity rows: the measured and the derived ones of each shard count
    assert "| crawlq, Redis Cluster, 3 measured (16 shards) | 3 (3) | 6/5/5 |" in text
    assert "| crawlq, Redis Cluster, 3 measured (3 shards) | 3 (3) | 1/1/1 |" in text
    assert "| crawlq, Redis Cluster, 10 **derived** (3 shards) | 10 (3) | 3 x 1, 7 x 0 |" in text
    assert "**3 shards cap a crawl at 3 useful primaries**" in text
    assert "on 30 primaries 27 hold none and the ceiling is the 3-primary one" in text
    assert "on 30 primaries 14 hold none and the ceiling is the 16-primary one" in text
    assert "holds at least ceil(3/N)" in text and "holds at least ceil(16/N)" in text
    assert "this run measured 16 and 3" in text
    assert "16 or 3 shards (`shards` option" in text
    assert "other shard counts are not measured here" not in text


def test_default_run_names_no_shard_count_but_the_default() -> None:
    placements = {"16": {"3": [6, 5, 5], "10": [2] * 6 + [1] * 4, "16": [1] * 16, "30": _IDLE_16}}
    text = render(_document(setups((3,)), [16], placements))
    assert "| 3-primary cluster W2: all primaries' server CPU per step / one server's |" in text
    assert "| crawlq, Redis Cluster, 3 measured | 3 (3) | 6/5/5 |" in text
    assert "other shard counts are not measured here" in text
    assert "16 shards (`shards` option, the default)" in text


def test_a_run_made_before_shards_renders_as_it_did() -> None:
    old = setups((3,))
    chosen = tuple(
        Setup("crawlq-cluster-3", s.label, s.impl, s.primaries, 16) if s.primaries else s
        for s in old
    )
    document = _document(chosen, 16, {"3": [6, 5, 5], "10": [2] * 6 + [1] * 4, "30": _IDLE_16})
    for setup in document["setups"]:
        del setup["shards"]
    text = render(document)
    assert (
        "| 3-primary cluster W2: all primaries' server CPU per step / one server's | 3.28x" in text
    )
    assert "| crawlq, Redis Cluster, 3 measured | 3 (3) | 6/5/5 |" in text
    assert "| crawlq, Redis Cluster, 10 **derived** | 10 (10) | 6 x 2, 4 x 1 |" in text
