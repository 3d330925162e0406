"""Run Scrapy's own tests (from its sdist) with crawlq's Scheduler swapped in.

`run_suite` runs the test files `FILES` of Scrapy's sdist (fetched once by
``scripts/_scrapy_sdist.sh``) in a pytest subprocess, with the plugin
``suite/crawlq_scrapy_swap.py`` replacing ``scrapy.core.scheduler.Scheduler``
and the default ``SCHEDULER`` by ``crawlq.contrib.scrapy.Scheduler``. Every
test that does not pass there and is not in ``suite/exclusions.txt`` is run
again with Scrapy's own scheduler: a test that passes with Scrapy's scheduler
and not with crawlq's is a regression. Used by ``test_scrapy_suite.py`` (the
installed Scrapy) and ``scripts/scrapy-suite`` (any version, e.g. the oldest
the ``scrapy`` extra allows)::

    python -m tests.scrapy._suite [VERSION] [--no-reactor]

``--no-reactor`` runs them as Scrapy's ``no-reactor`` tox environment does
(pytest-asyncio, ``--reactor=none``: Scrapy 2.14 and later), instead of
under pytest-twisted with the asyncio reactor (Scrapy's default environment).
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
CRAWLQ_SCHEDULER = "crawlq.contrib.scrapy.scheduler.Scheduler"
STOCK_SCHEDULER = "scrapy.core.scheduler.Scheduler"
#: Scrapy's test files that define what a scheduler does (globs in its tests/).
FILES = [
    "test_scheduler.py",
    "test_scheduler_base.py",
    "test_dupefilters.py",
    "test_engine*.py",
    "test_signals.py",
    "test_crawl.py",
]


def sdist(version: str | None = None) -> Path:
    """The unpacked sdist's cache directory (fetched on first use)."""
    args = [str(ROOT / "scripts" / "_scrapy_sdist.sh")]
    if version:
        args.append(version)
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise AssertionError(
            f"scripts/_scrapy_sdist.sh could not fetch Scrapy's sdist (pip download "
            f"needs the package index):\n{out.stderr[-3000:]}"
        )
    return Path(out.stdout.strip().splitlines()[-1])


def exclusions() -> dict[str, str]:
    """Test id -> reason, from ``suite/exclusions.txt``."""
    excluded = {}
    for line in EXCLUSIONS.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        test_id, _, reason = line.partition("#")
        excluded[test_id.strip()] = reason.strip()
    return excluded


def run_pytest(
    cache: Path, version: str, swap: bool, tests: list[str], no_reactor: bool = False
) -> dict[str, Any]:
    """Run ``tests`` of the sdist in ``cache``; return the plugin's report."""
    source = cache / f"scrapy-{version}"
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp, "report.json")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CRAWLQ_"))}
        env.update(
            PYTHONPATH=os.pathsep.join([str(cache / "site"), str(SUITE)]),
            CRAWLQ_SWAP="1" if swap else "0",
            CRAWLQ_SWAP_REPORT=str(report),
        )
        if no_reactor:
            mode = ["-p", "no:twisted", "--reactor=none"]
            mode += ["-o", "asyncio_default_fixture_loop_scope=function"]
        else:
            mode = ["-p", "no:asyncio"]  # under pytest-twisted (Scrapy's tox.ini)
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            *mode,
            "-p",
            "crawlq_scrapy_swap",
            "--timeout=120",
            "-q",
            *tests,
        ]
        proc = subprocess.run(
            command, cwd=source, env=env, capture_output=True, text=True, timeout=900
        )
        if not report.exists():
            raise AssertionError(f"pytest wrote no report:\n{proc.stdout[-4000:]}{proc.stderr}")
        result: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
        result["output"] = proc.stdout
        return result


@dataclass
class SuiteResult:
    version: str
    crawlq: dict[str, Any]
    #: Outcomes with Scrapy's scheduler of the tests that did not pass with crawlq's.
    stock: dict[str, str] = field(default_factory=dict)
    #: Outcomes with crawlq's scheduler, run again, of those that passed with Scrapy's.
    again: dict[str, str] = field(default_factory=dict)

    def passed(self) -> list[str]:
        return sorted(t for t, o in self.crawlq["outcomes"].items() if o == "passed")

    def regressions(self) -> list[str]:
        """Tests that pass with Scrapy's scheduler, not with crawlq's (twice), not excluded."""
        return sorted(
            t for t, o in self.stock.items() if o == "passed" and self.again.get(t) != "passed"
        )

    def stale_exclusions(self) -> list[str]:
        """Excluded tests that pass with crawlq's scheduler (some are in one version only)."""
        outcomes = self.crawlq["outcomes"]
        return sorted(t for t in exclusions() if outcomes.get(t) == "passed")


def run_suite(version: str | None = None, no_reactor: bool = False) -> SuiteResult:
    """Run `FILES` with crawlq's scheduler, then the failures with Scrapy's."""
    cache = sdist(version)
    version = cache.name
    source = cache / f"scrapy-{version}"
    files = sorted(
        str(path.relative_to(source)) for name in FILES for path in source.glob(f"tests/{name}")
    )
    crawlq = run_pytest(cache, version, True, files, no_reactor)
    excluded = exclusions()
    not_passed = sorted(
        t for t, o in crawlq["outcomes"].items() if o != "passed" and t not in excluded
    )
    result = SuiteResult(version, crawlq)
    if not_passed:
        result.stock = run_pytest(cache, version, False, not_passed, no_reactor)["outcomes"]
    # A test that passes with Scrapy's scheduler alone is run once more with
    # crawlq's, alone too: a timing test can fail once on a loaded machine.
    candidates = sorted(t for t, o in result.stock.items() if o == "passed")
    if candidates:
        result.again = run_pytest(cache, version, True, candidates, no_reactor)["outcomes"]
    return result


def main(argv: list[str]) -> int:
    no_reactor = "--no-reactor" in argv
    versions = [arg for arg in argv if arg != "--no-reactor"]
    result = run_suite(versions[0] if versions else None, no_reactor)
    outcomes = result.crawlq["outcomes"]
    print(f"Scrapy {result.crawlq['scrapy_version']}: with {result.crawlq['scheduler_name']}")
    print(f"  {len(result.passed())} of {len(outcomes)} tests passed; schedulers opened:")
    for name, count in sorted(result.crawlq["opened"].items()):
        print(f"    {name}: {count}")
    for test_id, reason in exclusions().items():
        print(f"  excluded ({outcomes.get(test_id, 'not collected')}): {test_id}  # {reason}")
    for test_id, outcome in sorted(result.stock.items()):
        again = f"; again with crawlq's: {result.again[test_id]}" if test_id in result.again else ""
        print(f"  not passed: {test_id} ({outcomes[test_id]}; with Scrapy's: {outcome}{again})")
    problems = result.regressions() + result.stale_exclusions()
    print("REGRESSIONS:" if problems else "no regressions", *problems, sep="\n  ")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
