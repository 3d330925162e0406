"""The scheduler's contract, order, storage and the disk queues, checked in a child process.

``_scenarios.py`` plays Scrapy's engine against the scheduler (and the
stock scheduler, for the order it must match); it runs in a child process
because Scrapy installs its reactor globally. Each scenario is one test here.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._child import child_environment

from ._scenarios import SCENARIOS
from .conftest import ROOT


def _child(*args: str) -> list[str]:
    return [sys.executable, "-m", "tests.scrapy._scenarios", *args]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str | None]]:
    directory = tmp_path_factory.mktemp("scenarios")
    done = subprocess.run(
        _child(str(directory)),
        cwd=ROOT,
        env=child_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    results: dict[str, str | None] = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            results[entry["name"]] = entry["error"]
    assert results, f"the scenarios did not run:\n{done.stderr[-3000:]}"
    yield results


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario(name: str, outcomes: dict[str, str | None]) -> None:
    assert name in outcomes, "the child process died before this scenario"
    error = outcomes[name]
    if error is not None:
        pytest.fail(error, pytrace=False)


def test_disk_queue_pushes_survive_kill_9(tmp_path: Path) -> None:
    key = tmp_path / "queue"
    pusher = subprocess.Popen(
        _child(str(tmp_path), "push-forever", str(key)),
        cwd=ROOT,
        env=child_environment(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert pusher.stdout is not None
    deadline = time.monotonic() + 60
    pushed = 0
    while pushed < 300 and time.monotonic() < deadline:
        line = pusher.stdout.readline()
        if not line:
            break
        pushed = int(line)
    pusher.send_signal(signal.SIGKILL)
    pusher.wait()
    assert pushed >= 300, "the child did not push"
    counted = subprocess.run(
        _child(str(tmp_path), "count", str(key)),
        cwd=ROOT,
        env=child_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    numbers = json.loads(counted.stdout.strip().splitlines()[-1])
    # Every push that returned (and more the child made before the kill
    # landed) is there, in order, with no gap and nothing torn.
    assert len(numbers) >= pushed
    assert numbers == list(range(len(numbers)))
