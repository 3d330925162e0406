"""The ``crawlq`` command line: one typer app, a module per command family.

`app` builds the app and registers the commands; `options` holds what the
commands share (the job argument, error handling); `jobs` is ``inspect``,
``export``, ``check``, ``import`` and ``purge``; `hosts`, `top` and `metrics`
their own commands; `demo` the demo crawl. The CLI is the top of the package:
it may import anything in crawlq, and nothing in crawlq imports it.
"""

from .app import DEMO_NEEDS_AIOHTTP, app, main

__all__ = ["DEMO_NEEDS_AIOHTTP", "app", "main"]
