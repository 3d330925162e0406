"""examples/crawlee_crawl.py, docs/crawlee.md's example, against the local two-host site."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

from .conftest import ADDRESSES, TwoHostSite

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "crawlee_crawl.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crawlee_crawl_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def test_the_example_fetches_every_page_once_at_the_hosts_pace(site: TwoHostSite) -> None:
    example = _load()
    delay = 0.2
    seeds = [site.url(0, "/page/0"), site.url(1, "/page/0")]
    fetched = await example.crawl(seeds, delay=delay)
    counts = site.fetches()
    assert set(counts) == site.expected()
    assert max(counts.values()) == 1
    assert len(fetched) == len(site.expected())
    # Pacing is at hand-out: the server sees it give or take the time a
    # request takes to go out, under a millisecond except for crawlee's very
    # first fetch of a run (50-100 ms: its HTTP client and sessions start),
    # which shortens the first gap by as much;
    # test_adapter.py checks the pace strictly on a warmed-up crawler.
    for host in ADDRESSES:
        times = site.times(host)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps[1:]) >= delay - 0.005, (host, gaps)
