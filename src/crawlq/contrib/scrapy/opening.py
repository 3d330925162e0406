"""How the Scrapy scheduler opens its store, and what it warns about at start.

`open_store` opens the frontier ``CRAWLQ_URL`` names with the scheduler's
settings, its errors naming the setting to fix; `warn_about_settings` logs
the settings crawlq reads differently from Scrapy's own scheduler.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..._errors import ConfigError, IncompatibleStore, StoreError
from ..._fingerprint import Fingerprinter
from ..._frontier import Frontier
from ..._open import open_frontier
from .reports import logger
from .settings import SchedulerConfig

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

__all__ = ["open_store", "warn_about_settings"]


def open_store(config: SchedulerConfig, host_delay: float) -> Frontier:
    """Open the frontier at ``config.url``, paced with ``host_delay``.

    Raises `ConfigError` for a bad URL or ``CRAWLQ_OPTIONS``,
    `IncompatibleStore` for a job made with other settings, and the store's
    `StoreError` when it cannot be opened, each naming ``CRAWLQ_URL``.
    """
    url = config.url
    options = {
        "host_delay": host_delay,
        "host_concurrency": config.host_concurrency,
        "lifo": config.lifo,
        "lease_timeout": config.lease_timeout,
        "fingerprinter": Fingerprinter(mode="scrapy"),
        # The scheduler writes a page's acks with its links itself, and its
        # bound (at most CONCURRENT_REQUESTS refetched after a kill) needs
        # an ack on its own to be durable when it returns.
        "ack_delay": 0.0,
        **config.options,
    }
    try:
        return open_frontier(url, **options)
    except IncompatibleStore as exc:
        hint = ""
        if exc.setting == "lifo":
            hint = (
                f" (this crawl asks for CRAWLQ_LIFO={config.lifo}, from CRAWLQ_LIFO or "
                "SCHEDULER_DISK_QUEUE: set CRAWLQ_LIFO to the job's value)"
            )
        raise IncompatibleStore(f"CRAWLQ_URL={url!r}: {exc}{hint}", setting=exc.setting) from None
    except ConfigError as exc:
        raise ConfigError(f"CRAWLQ_URL={url!r} (or CRAWLQ_OPTIONS): {exc}") from None
    except StoreError as exc:
        raise type(exc)(f"CRAWLQ_URL={url!r}: {exc}") from None


def warn_about_settings(settings: BaseSettings, config: SchedulerConfig) -> None:
    """Log what a Scrapy setting does not do with crawlq's scheduler (never raises)."""
    jobdir = config.jobdir
    if (
        jobdir
        and not settings.get("CRAWLQ_URL")
        and Path(jobdir, "requests.queue").exists()
        and any(Path(jobdir, "requests.queue").iterdir())
    ):
        logger.warning(
            "JOBDIR %s holds requests queued by Scrapy's own scheduler "
            "(requests.queue); crawlq keeps its job in crawlq.db and does not read them",
            jobdir,
        )
    if settings.getdict("DOWNLOAD_SLOTS"):
        logger.info(
            "crawlq paces every download slot with CRAWLQ_HOST_DELAY/"
            "CRAWLQ_HOST_CONCURRENCY; the per-slot values of DOWNLOAD_SLOTS are "
            "still applied by Scrapy's downloader"
        )
