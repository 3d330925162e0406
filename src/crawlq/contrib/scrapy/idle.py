"""`IdleClose`: a worker that waits for work (``CRAWLQ_IDLE_CLOSE``).

Scrapy closes a spider as soon as its scheduler has nothing pending and
nothing is downloading or being parsed. A worker of a shared crawl fed from
outside (``crawlq add``, as scrapy-redis's ``RedisSpider`` workers are fed
through a Redis list) must stay open instead: on Scrapy's ``spider_idle``
signal `IdleClose` raises ``DontCloseSpider`` and makes the engine ask the
scheduler again a moment later (one pop: one round trip to Redis), until the
worker has had nothing to do for ``CRAWLQ_IDLE_CLOSE`` seconds (0: never),
like scrapy-redis's ``MAX_IDLE_TIME_BEFORE_CLOSE``. Any request handed out
starts the count again. The spider then closes with reason ``finished``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .reports import logger

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["IdleClose"]

#: Longest gap between two looks at the store while idle, in seconds.
_POLL_MAX: Final = 1.0
_POLL_MIN: Final = 0.1


class IdleClose:
    """Keeps an idle spider open for ``seconds`` (0: until stopped), looking for work."""

    __slots__ = ("__weakref__", "_crawler", "_poll", "_wake", "seconds", "since")

    def __init__(self, crawler: Crawler, seconds: float, wake: Callable[[float], None]) -> None:
        from scrapy import signals

        self.seconds = seconds
        #: When the spider was first found idle since it last got a request.
        self.since: float | None = None
        self._crawler = crawler
        self._wake = wake
        self._poll = min(_POLL_MAX, max(_POLL_MIN, seconds / 10)) if seconds else _POLL_MAX
        crawler.signals.connect(self._idle, signal=signals.spider_idle)

    def busy(self) -> None:
        """A request was handed out: the idle time starts again."""
        self.since = None

    def _idle(self, spider: Any) -> None:
        from scrapy.exceptions import DontCloseSpider

        now = time.monotonic()
        if self.since is None:
            self.since = now
        left = self.seconds - (now - self.since) if self.seconds else self._poll
        if left <= 0:
            logger.info(
                "crawlq: nothing to do for %(seconds)g seconds (CRAWLQ_IDLE_CLOSE); closing",
                {"seconds": self.seconds},
                extra={"spider": spider},
            )
            return
        self._wake(min(self._poll, left))
        raise DontCloseSpider

    def remove(self) -> None:
        """Stop keeping the spider open."""
        from scrapy import signals

        self._crawler.signals.disconnect(self._idle, signal=signals.spider_idle)
