"""The environment of a test's child Python process (a crawl, a worker, a spider)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_environment() -> dict[str, str]:
    """``os.environ`` with this checkout's ``src`` and root first on ``PYTHONPATH``.

    So the child imports the crawlq under test (and the ``tests`` package),
    whatever is installed, and keeps any path the parent had after them.
    """
    environment = dict(os.environ)
    paths = [str(ROOT / "src"), str(ROOT)]
    if environment.get("PYTHONPATH"):
        paths.append(environment["PYTHONPATH"])
    environment["PYTHONPATH"] = os.pathsep.join(paths)
    return environment
