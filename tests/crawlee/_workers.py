"""Real crawlee crawls in subprocesses, and the site they fetch: the harness of this folder's tests.

`Workers` starts ``python -m tests.crawlee.crawl_worker`` processes against
`LoopbackSite` and kills any still running when the test ends; a `Worker`
reads its event log and waits for its end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests._child import child_environment

from ._site import LoopbackSite

ROOT = Path(__file__).resolve().parents[2]
PAGES_PER_HOST = 75
TIMEOUT = 90.0


@pytest.fixture
def loopback() -> Iterator[LoopbackSite]:
    with LoopbackSite(PAGES_PER_HOST) as site:
        yield site


@dataclass
class Worker:
    """One crawl_worker subprocess and its event log."""

    process: subprocess.Popen[bytes]
    log: Path
    stderr: Path

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        lines = self.log.read_text().splitlines()
        events = [json.loads(line) for line in lines if line.endswith("}")]
        return [e for e in events if kind is None or e["event"] == kind]

    def wait(self, timeout: float = TIMEOUT) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the crawl did not end in time:\n{self.error()}") from None

    def error(self) -> str:
        return self.stderr.read_text(errors="replace")[-3000:] if self.stderr.exists() else ""

    def finished(self) -> None:
        """The crawl ended by itself, without error."""
        assert self.wait() == 0, self.error()
        assert self.events("done"), self.error()
        assert "Traceback" not in self.error(), self.error()


class Workers:
    """Starts crawl_worker subprocesses; kills any left at the end of the test."""

    def __init__(self, site: LoopbackSite, directory: Path) -> None:
        self.site = site
        self.directory = directory
        self.started: list[Worker] = []

    def start(self, frontier: str, *, name: str, go: Path | None = None, **options: Any) -> Worker:
        log = self.directory / f"{name}.jsonl"
        stderr = self.directory / f"{name}.stderr"
        command = [
            sys.executable,
            "-m",
            "tests.crawlee.crawl_worker",
            frontier,
            "--seed",
            self.site.url(0, 0),
            "--log",
            str(log),
        ]
        for option, value in options.items():
            command += [f"--{option.replace('_', '-')}", str(value)]
        if go is not None:
            command += ["--go", str(go)]
        with stderr.open("ab") as err:
            process = subprocess.Popen(
                command, cwd=ROOT, env=child_environment(), stdout=subprocess.DEVNULL, stderr=err
            )
        worker = Worker(process, log, stderr)
        self.started.append(worker)
        return worker

    def start_together(self, frontier: str, count: int, **options: Any) -> list[Worker]:
        """``count`` workers that begin crawling at the same moment, once all are ready."""
        go = self.directory / f"go-{uuid.uuid4().hex}"
        workers = [
            self.start(frontier, name=f"worker-{len(self.started)}", go=go, **options)
            for _ in range(count)
        ]
        deadline = time.monotonic() + TIMEOUT
        while not all(worker.events("ready") for worker in workers):
            for worker in workers:
                assert worker.process.poll() is None, worker.error()
            assert time.monotonic() < deadline, "the workers did not get ready in time"
            time.sleep(0.05)
        go.touch()
        return workers

    def stop_all(self) -> None:
        for worker in self.started:
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()


@pytest.fixture
def workers(loopback: LoopbackSite, tmp_path: Path) -> Iterator[Workers]:
    started = Workers(loopback, tmp_path)
    yield started
    started.stop_all()


def assert_every_page_once(site: LoopbackSite) -> None:
    counts = site.counts()
    expected = site.expected()
    missing, unexpected = sorted(expected - set(counts)), sorted(set(counts) - expected)
    assert not missing and not unexpected, f"missing {missing[:5]}, unexpected {unexpected[:5]}"
    twice = {key: n for key, n in counts.items() if n > 1}
    assert not twice, f"{len(twice)} pages fetched more than once: {list(twice.items())[:5]}"
