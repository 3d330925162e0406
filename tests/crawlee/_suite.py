"""Run crawlee's own request-queue / request-manager tests with crawlq swapped in.

`run_suite` fetches crawlee's sdist (``scripts/_crawlee_sdist.sh``) and runs
the test files `FILES` of crawlee's source in pytest subprocesses, three
times: as they are (crawlee's own ``MemoryStorageClient``: the baseline),
then with the plugin ``suite/crawlq_crawlee_swap.py`` making the tests'
request manager a ``crawlq.contrib.crawlee.RequestManager`` on ``memory://``,
and on a SQLite job. A test that passes in the baseline and not with crawlq
(run again alone, so a timing test gets a second chance) is a regression
unless ``suite/exclusions.txt`` lists it with its reason; an exclusion whose
test passes with crawlq, or is not run, is stale.

crawlee's sdists (built by uv_build) hold ``src/`` only: 1.11.0's has no
``tests/``. When the sdist has none, the tests are taken from a checkout of
crawlee's repository (at the installed version's tag) named by the
environment variable ``CRAWLEE_TESTS``; with neither, `run_suite` raises
AssertionError saying so (the test fails; it is never skipped)::

    CRAWLEE_TESTS=/path/to/crawlee-python python -m tests.crawlee._suite [VERSION]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SUITE = Path(__file__).with_name("suite")
EXCLUSIONS = SUITE / "exclusions.txt"
#: The crawlq stores each test runs on (``CRAWLQ_SWAP`` of the plugin).
STORES = ("memory", "sqlite")
#: crawlee's test files about the request-manager contract that the plugin
#: swaps crawlq into. Not here: the storage clients' own tests
#: (tests/unit/storage_clients/*/test_*_rq_client.py: their internals, file
#: layout and metadata), request_loaders/ (RequestList and the sitemap loader
#: read-only sources: no request manager in them), and
#: test_throttling_request_manager.py (crawlee's per-domain sub-managers,
#: which crawlq's manager replaces: nothing there to swap).
FILES = [
    "tests/unit/storages/test_request_queue.py",
    "tests/unit/storages/test_request_manager_tandem.py",
]
#: Why there may be no tests to run (with the version filled in).
NO_TESTS = (
    "crawlee {version}'s sdist ({sdist}) ships no tests/ (crawlee builds it with uv_build, "
    "src/ only), so crawlee's own tests cannot come from it. Give a checkout of crawlee's "
    "repository at tag v{version} in CRAWLEE_TESTS=/path/to/crawlee-python to run them."
)


def sdist(version: str | None = None) -> Path:
    """The sdist's cache directory (fetched on first use)."""
    args = [str(ROOT / "scripts" / "_crawlee_sdist.sh")]
    if version:
        args.append(version)
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise AssertionError(
            f"scripts/_crawlee_sdist.sh could not fetch crawlee's sdist (pip download "
            f"needs the package index):\n{out.stderr[-3000:]}"
        )
    return Path(out.stdout.strip().splitlines()[-1])


def test_source(cache: Path) -> Path:
    """The directory whose ``tests/`` hold crawlee's tests: the sdist, else CRAWLEE_TESTS."""
    unpacked = cache / f"crawlee-{cache.name}"
    for source in (unpacked, Path(os.environ.get("CRAWLEE_TESTS") or unpacked)):
        if (source / FILES[0]).is_file():
            return source.resolve()
    raise AssertionError(NO_TESTS.format(version=cache.name, sdist=unpacked))


def exclusions() -> dict[str, str]:
    """``test id`` or ``test id@store`` -> reason, from ``suite/exclusions.txt``."""
    excluded = {}
    for line in EXCLUSIONS.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        test_id, _, reason = line.partition("#")
        excluded[test_id.strip()] = reason.strip()
    return excluded


def excluded_on(test_id: str, store: str) -> bool:
    return test_id in exclusions() or f"{test_id}@{store}" in exclusions()


def run_pytest(cache: Path, source: Path, swap: str, tests: list[str]) -> dict[str, Any]:
    """Run ``tests`` of ``source`` (``swap``: "0", "memory" or "sqlite"); the plugin's report."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp, "report.json")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CRAWL"))}
        env.update(
            PYTHONPATH=os.pathsep.join([str(cache / "site"), str(SUITE), str(source)]),
            CRAWLQ_SWAP=swap,
            CRAWLQ_SWAP_REPORT=str(report),
        )
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--noconftest",  # the plugin stands in for crawlee's conftest.py files
            "-p",
            "crawlq_crawlee_swap",
            "-o",
            "addopts=",  # crawlee's --dist (pytest-xdist) is not installed
            "-o",
            "asyncio_mode=auto",
            "-o",
            "asyncio_default_fixture_loop_scope=function",
            "--timeout=60",
            "-q",
            *tests,
        ]
        proc = subprocess.run(
            command, cwd=source, env=env, capture_output=True, text=True, timeout=600
        )
        if not report.exists():
            raise AssertionError(f"pytest wrote no report:\n{proc.stdout[-4000:]}{proc.stderr}")
        result: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
        result["output"] = proc.stdout
        return result


@dataclass
class SuiteResult:
    version: str
    source: Path
    baseline: dict[str, Any]
    #: Store -> the plugin's report of the run with crawlq on that store.
    crawlq: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Store -> outcomes, run again alone, of the tests that failed there and pass in the baseline.
    again: dict[str, dict[str, str]] = field(default_factory=dict)

    def passed(self, store: str) -> list[str]:
        outcomes = self.crawlq[store]["outcomes"]
        return sorted(t for t, o in outcomes.items() if o == "passed")

    def baseline_passed(self) -> list[str]:
        return sorted(t for t, o in self.baseline["outcomes"].items() if o == "passed")

    def candidates(self, store: str) -> list[str]:
        """Tests that pass in the baseline, not with crawlq on ``store``, and are not excluded."""
        base = self.baseline["outcomes"]
        return sorted(
            t
            for t, o in self.crawlq[store]["outcomes"].items()
            if o != "passed" and base.get(t) == "passed" and not excluded_on(t, store)
        )

    def regressions(self) -> list[str]:
        """``test id@store`` of each candidate that failed again."""
        return sorted(
            f"{t}@{store}"
            for store in self.crawlq
            for t in self.candidates(store)
            if self.again.get(store, {}).get(t) != "passed"
        )

    def stale_exclusions(self) -> list[str]:
        """Exclusions whose test passes with crawlq (on their store), or did not run with it."""
        stale = []
        for entry in exclusions():
            test_id, _, only = entry.partition("@")
            stores = [only] if only else list(self.crawlq)
            outcomes = [self.crawlq[s]["outcomes"].get(test_id) for s in stores]
            if None in outcomes or all(o == "passed" for o in outcomes):
                stale.append(entry)
        return sorted(stale)


def run_suite(version: str | None = None) -> SuiteResult:
    """The baseline, then crawlq on each store, then each store's candidates again alone."""
    cache = sdist(version)
    source = test_source(cache)
    files = [name for name in FILES if (source / name).is_file()]
    result = SuiteResult(cache.name, source, run_pytest(cache, source, "0", files))
    for store in STORES:
        result.crawlq[store] = run_pytest(cache, source, store, files)
    for store in STORES:
        candidates = result.candidates(store)
        if candidates:
            result.again[store] = run_pytest(cache, source, store, candidates)["outcomes"]
    return result


def main(argv: list[str]) -> int:
    result = run_suite(argv[0] if argv else None)
    print(f"crawlee {result.baseline['crawlee_version']}: tests from {result.source}")
    base = result.baseline["outcomes"]
    print(
        f"  baseline (crawlee's MemoryStorageClient): {len(result.baseline_passed())} of "
        f"{len(base)} passed"
    )
    for store, report in result.crawlq.items():
        print(
            f"  crawlq {store}: {len(result.passed(store))} of {len(report['outcomes'])} "
            f"passed; managers opened: {report['opened']}; "
            f"{len(report['deselected'])} deselected (no request manager in them)"
        )
    for test_id, reason in exclusions().items():
        print(f"  excluded: {test_id}  # {reason}")
    problems = result.regressions() + result.stale_exclusions()
    print(
        "REGRESSIONS / STALE EXCLUSIONS:" if problems else "no regressions", *problems, sep="\n  "
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
