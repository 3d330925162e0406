"""The ``crawlq demo`` command's machinery: a generated site, its server, a crawler.

`run_demo` is the whole demo as one coroutine, for the CLI and for tests.
Everything but ``site``, ``report`` and ``command`` needs aiohttp (the ``crawlq[demo]``
extra), so the names below are imported from ``run`` only when first used:
importing this package alone does not import aiohttp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .run import DemoConfig, DemoProgress, DemoResult, run_demo

__all__ = ["DemoConfig", "DemoProgress", "DemoResult", "run_demo"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
