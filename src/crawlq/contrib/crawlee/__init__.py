"""crawlq for crawlee-python: a request manager with per-host pacing shared by every worker.

Open one and give it to any crawlee crawler::

    from crawlee.crawlers import ParselCrawler
    from crawlq.contrib.crawlee import RequestManager

    manager = await RequestManager.open("crawl-job", host_delay=1.0, host_concurrency=2)
    crawler = ParselCrawler(request_manager=manager)
    await crawler.run(["https://example.com/"])
    await manager.close()

The public interface is ``await RequestManager.open(url, **options)``:

- ``url``: any crawlq store: ``memory://``, a SQLite job (a directory path
  or ``sqlite:///job.db``), ``redis://host:port/0?crawl=NAME`` or
  ``redis+cluster://host:port/?crawl=NAME`` (the last two shared by every
  process that opens them).
- ``options``: `crawlq.open_frontier`'s (``host_delay``,
  ``host_concurrency``, ``lease_timeout``, ``max_requests_per_host``,
  ``seen_ttl``...; ``ack_delay`` is 0 unless given, so a request is handled
  for good when ``mark_request_as_handled`` returns), and the adapter's
  ``allow_purge`` (False), ``base_delay`` (2 s), ``max_delay`` (60 s) and
  ``max_domain_stall`` (900 s).

The manager is a crawlee ``ThrottlingRequestManager`` for every host: a 429
blocks its host in the frontier (``Retry-After`` or a doubling backoff) for
every worker of the crawl, and with ``respect_robots_txt_file=True`` a
robots.txt ``Crawl-delay`` becomes the host's delay in the frontier.
Requests are deduplicated by crawlee's ``unique_key``, stored without pickle
(`mapping`), and handed out in crawlq's order at crawlq's pace. A second
``crawler.run()`` purges the manager: a memory frontier is emptied, a SQLite
job or a Redis crawl only with ``allow_purge=True`` (else `crawlq.ConfigError`).
``docs/crawlee.md`` has the mapping table and what is durable.

Tested with crawlee 1.11 (``crawlq[crawlee]``). Importing this module
without crawlee raises `crawlq.ConfigError` naming the extra to install.
Modules: `mapping` (requests both ways), `manager` (the manager), `view`
(cached counts), `throttle` (429 backoffs), `stores` (open and wipe).
"""

from __future__ import annotations

from ..._errors import ConfigError

try:
    import crawlee  # noqa: F401
    from crawlee.request_loaders import ThrottlingRequestManager  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ConfigError(
        f"crawlq.contrib.crawlee needs crawlee 1.11 or later ({exc}): pip install 'crawlq[crawlee]'"
    ) from exc

from .manager import RequestManager

__all__ = ["RequestManager"]
