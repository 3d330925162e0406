"""Prometheus metrics for a crawl (extra ``crawlq[metrics]``: prometheus_client).

    import crawlq.metrics
    crawlq.metrics.serve(frontier, 9410)   # http://127.0.0.1:9410/metrics

Every figure is read from the store at each scrape, so a Redis crawl's
counters are every worker's (serve them from any one process, or from
outside with ``crawlq metrics URL --port N``). Series are labelled by crawl,
never by URL; per-host series exist only for the ``host_series`` busiest
hosts, so a broad crawl cannot explode the series count.

Metrics: ``crawlq_store_up`` (0 when a scrape could not read the store),
``crawlq_requests_{accepted,duplicate,capped,popped,acked,released}_total``
and ``crawlq_leases_expired_total`` (re-deliveries), the gauges
``crawlq_requests_queued``, ``crawlq_requests_leased``,
``crawlq_fingerprints_seen``, ``crawlq_hosts_busy``, ``crawlq_hosts_blocked``,
per host ``crawlq_host_requests_queued``, ``crawlq_host_requests_leased``,
``crawlq_host_blocked_seconds``, and, for a frontier of this process, the
histogram ``crawlq_store_call_seconds`` by operation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, Final

from ._errors import CrawlqError, import_extra
from ._frontier import Frontier
from ._open import store_kind
from ._watch import Snapshot, read_snapshot

__all__ = ["CrawlCollector", "crawl_label", "register", "serve", "serve_url"]

log = logging.getLogger(__name__)

INSTALL_HINT: Final = "crawlq.metrics needs prometheus_client: pip install 'crawlq[metrics]'"

#: Store calls timed by `register` (the frontier's calls into its store).
_TIMED: Final = ("add", "pop", "ack", "release", "flush", "counts", "next_ready_in")
_BUCKETS: Final = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
)  # fmt: skip

#: (counter, metric name, help) of each `crawlq.Counters` figure.
_COUNTERS: Final = (
    ("accepted", "crawlq_requests_accepted", "Adds that enqueued a request."),
    ("duplicates", "crawlq_requests_duplicate", "Adds refused: fingerprint already seen."),
    ("capped", "crawlq_requests_capped", "Adds refused by max_requests_per_host."),
    ("popped", "crawlq_requests_popped", "Requests handed out (Redis: with prefetch)."),
    ("acked", "crawlq_requests_acked", "Requests finished by an ack."),
    ("released", "crawlq_requests_released", "Requests put back by release."),
    ("expired", "crawlq_leases_expired", "Leases that ran out: re-deliveries."),
    ("refetched", "crawlq_requests_refetched", "Acks that scheduled a refetch."),
)


def _prometheus() -> ModuleType:
    """Import prometheus_client (and its metric families, ``.core``), or raise `ConfigError`."""
    prometheus = import_extra("prometheus_client", INSTALL_HINT)
    import_extra("prometheus_client.core", INSTALL_HINT)
    return prometheus


def crawl_label(url: str) -> str:
    """The ``crawl`` label for a frontier URL: a Redis crawl's name, a job directory's name."""
    kind = store_kind(url)
    if kind.jobs_module is None:
        return kind.name
    return kind.admin("label").crawl_label(url)


class CrawlCollector:
    """A Prometheus collector of one crawl: reads a `Snapshot` at each scrape.

    ``read`` returns the snapshot (of a frontier of this process, or of a
    crawl read from outside); ``crawl`` is the label value.
    """

    def __init__(self, read: Callable[[], Snapshot], crawl: str) -> None:
        self._read = read
        self._crawl = crawl

    def describe(self) -> list[Any]:
        """Nothing: registering must not read the store (prometheus_client's hook)."""
        return []  # unchecked: the metrics come from the store at each scrape

    def collect(self) -> Iterator[Any]:
        """Read the crawl and yield its metric families (prometheus_client's hook)."""
        core = _prometheus().core
        label = [self._crawl]
        up = core.GaugeMetricFamily(
            "crawlq_store_up", "1 if the scrape could read the store, else 0.", labels=["crawl"]
        )
        try:
            snapshot = self._read()
        except CrawlqError as exc:  # the server went away: say so, serve nothing stale
            log.warning("crawlq metrics of %s: %s", self._crawl, exc)
            up.add_metric(label, 0)
            yield up
            return
        up.add_metric(label, 1)
        yield up
        for field, name, text in _COUNTERS:
            counter = core.CounterMetricFamily(name, text, labels=["crawl"])
            counter.add_metric(label, getattr(snapshot.counters, field))
            yield counter
        for name, text, value in (
            ("crawlq_requests_queued", "Requests waiting to be handed out.", snapshot.queued),
            ("crawlq_requests_leased", "Requests handed out, not finished.", snapshot.leased),
            ("crawlq_fingerprints_seen", "Fingerprints recorded for dedup.", snapshot.seen),
            ("crawlq_hosts_busy", "Hosts holding requests.", snapshot.busy_hosts),
            ("crawlq_hosts_blocked", "Hosts blocked now.", snapshot.blocked_hosts),
            ("crawlq_requests_scheduled", "Requests held, not due yet.", snapshot.scheduled),
            ("crawlq_requests_revisits", "Scheduled refetches of done pages.", snapshot.revisits),
        ):
            gauge = core.GaugeMetricFamily(name, text, labels=["crawl"])
            gauge.add_metric(label, value)
            yield gauge
        if snapshot.next_due_in is not None:  # no series while nothing is scheduled
            due = core.GaugeMetricFamily(
                "crawlq_next_due_seconds",
                "Seconds until the first scheduled request is due.",
                labels=["crawl"],
            )
            due.add_metric(label, snapshot.next_due_in)
            yield due
        per_host = (
            ("crawlq_host_requests_queued", "Queued requests of a busiest host.", "queued"),
            ("crawlq_host_requests_leased", "Leased requests of a busiest host.", "leased"),
            ("crawlq_host_blocked_seconds", "Seconds left of a busiest host's block.", "blocked"),
        )
        for name, text, what in per_host:
            gauge = core.GaugeMetricFamily(name, text, labels=["crawl", "host"])
            for host in snapshot.hosts:
                blocked = host.blocked_for or 0.0
                figure: float = blocked if what == "blocked" else getattr(host, what)
                gauge.add_metric([self._crawl, host.host], figure)
            yield gauge


def _frontier_snapshot(frontier: Frontier, host_series: int) -> Callable[[], Snapshot]:
    def read() -> Snapshot:
        stats = frontier.stats(hosts=max(1, host_series))  # 0 would skip the host totals
        return Snapshot(
            stats.queued,
            stats.leased,
            stats.seen,
            stats.counters,
            (stats.hosts or ())[:host_series],
            time.monotonic(),
            stats.busy_hosts or 0,
            stats.blocked_hosts or 0,
            stats.scheduled,
            stats.revisits,
            stats.next_due_in,
        )

    return read


class _TimedStore:
    """The frontier's store, each call of `_TIMED` observed in a histogram."""

    def __init__(self, store: Any, histogram: Any, crawl: str) -> None:
        self._inner = store
        for name in _TIMED:
            setattr(self, name, self._timed(getattr(store, name), histogram.labels(crawl, name)))

    @staticmethod
    def _timed(call: Callable[..., Any], child: Any) -> Callable[..., Any]:
        observe, clock = child.observe, time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return call(*args, **kwargs)
            finally:
                observe(clock() - started)

        return timed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def register(
    frontier: Frontier,
    registry: Any = None,
    *,
    crawl: str | None = None,
    host_series: int = 10,
    time_calls: bool = True,
) -> CrawlCollector:
    """Register ``frontier``'s metrics in ``registry`` (default: prometheus_client's).

    With ``time_calls``, the frontier's calls into its store are timed from
    now on (``crawlq_store_call_seconds``; about a microsecond per call).
    ``crawl`` labels the series (default: `crawl_label` of its URL). Raises
    `ConfigError` without the ``metrics`` extra.
    """
    prometheus = _prometheus()
    registry = prometheus.REGISTRY if registry is None else registry
    crawl = crawl_label(frontier.url) if crawl is None else crawl
    collector = CrawlCollector(_frontier_snapshot(frontier, host_series), crawl)
    registry.register(collector)
    if time_calls:
        histogram = prometheus.Histogram(
            "crawlq_store_call_seconds",
            "Seconds per call of the frontier into its store, by operation.",
            ["crawl", "operation"],
            registry=registry,
            buckets=_BUCKETS,
        )
        frontier._replace_store(_TimedStore(frontier._store, histogram, crawl))
    return collector


def serve(
    frontier: Frontier,
    port: int,
    *,
    addr: str = "127.0.0.1",
    crawl: str | None = None,
    host_series: int = 10,
) -> Any:
    """Serve ``frontier``'s metrics over HTTP at ``addr:port/metrics``, on a thread.

    Registers them (`register`) in a registry of their own; returns the HTTP
    server (``.shutdown()`` stops it). Raises `ConfigError` without the
    ``metrics`` extra.
    """
    return _serve(
        lambda registry: register(frontier, registry, crawl=crawl, host_series=host_series),
        port,
        addr,
    )


def serve_url(
    url: str,
    port: int,
    *,
    addr: str = "127.0.0.1",
    crawl: str | None = None,
    host_series: int = 10,
) -> Any:
    """Serve the metrics of the crawl at ``url`` (a SQLite job, a Redis crawl) from outside it.

    Read-only, like ``crawlq top``: each scrape reads a snapshot (no store
    call latencies: those are the crawlers'). Checks the URL first, raising
    what ``crawlq inspect`` raises. Returns the HTTP server.
    """
    _prometheus()  # without the extra, say so before reading the crawl
    read_snapshot(url, top=host_series)  # a bad job or URL fails here, typed
    label = crawl_label(url) if crawl is None else crawl
    collector = CrawlCollector(lambda: read_snapshot(url, top=host_series), label)
    return _serve(lambda registry: registry.register(collector), port, addr)


def _serve(fill: Callable[[Any], object], port: int, addr: str) -> Any:
    """Start prometheus_client's HTTP exporter of a registry of its own, which ``fill`` fills."""
    prometheus = _prometheus()
    registry = prometheus.CollectorRegistry()
    fill(registry)
    server, _ = prometheus.start_http_server(port, addr=addr, registry=registry)
    return server
