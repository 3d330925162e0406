"""``crawlq metrics``: serve a running crawl's Prometheus metrics from outside it.

Registered on the app by ``crawlq.cli``. Each scrape reads a snapshot of the
crawl, as ``crawlq top`` does (no lock on a SQLite job, no frontier on
Redis); serve it from one process however many workers the crawl has.
"""

from __future__ import annotations

import threading
from typing import Annotated

import typer

from .options import JobArgument, clean_errors, note_default_crawl

__all__ = ["metrics"]


def metrics(
    job: JobArgument,
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to serve /metrics on.")],
    addr: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    hosts: Annotated[
        int, typer.Option(min=0, help="Busiest hosts that get series of their own.")
    ] = 10,
    crawl: Annotated[
        str | None, typer.Option(help="The crawl label (default: the crawl's or job's name).")
    ] = None,
) -> None:
    """Serve a running crawl's Prometheus metrics at http://ADDR:PORT/metrics (Ctrl-C stops).

    Read-only, from any process. Needs the ``metrics`` extra.
    """
    with clean_errors():
        note_default_crawl(job)
        from ..metrics import serve_url

        server = serve_url(job, port, addr=addr, crawl=crawl, host_series=hosts)
    typer.echo(f"serving the metrics of {job} at http://{addr}:{port}/metrics (Ctrl-C stops)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
