"""The two places crawlq touches Scrapy's engine: "request finished" and "wake up".

Scrapy has no signal for "the engine is done with this request": the
download, whatever the downloader middlewares made of it (a redirect or a
retry is a new request, scheduled), and the callback or errback with every
request it yielded scheduled. The engine does record that moment: it removes
the request from its slot (``ExecutionEngine._slot.remove_request``), after
``_handle_downloader_output`` has waited for the scraper to finish with the
response or failure. That is the one moment a request can be acknowledged
without losing the requests it produced, on every path (response, redirect,
retry, download error, errback, exception in a callback, request ignored by
a middleware). `EngineHook` wraps that method on the engine's slot instance
(never on the class); it is present, with the same meaning, in Scrapy 2.13
to 2.19, and `EngineHook` refuses to start rather than run without it.

The engine also stops asking for requests when ``next_request`` returns None
until something happens (a download ends) or its 5-second heartbeat fires.
When crawlq holds requests back for a host's delay, `EngineHook.wake_in`
schedules the engine's own "look again" call for the moment one is ready.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from ..._errors import ConfigError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["EngineHook", "hookable", "running_engine", "slot_key"]

logger = logging.getLogger("crawlq.contrib.scrapy")


def _call_later(delay: float, func: Callable[[], None]) -> Any:
    """Schedule ``func`` on the running loop; the result has ``cancel()``."""
    try:
        from scrapy.utils.asyncio import call_later  # Scrapy >= 2.14
    except ImportError:
        from twisted.internet import reactor

        return cast(Any, reactor).callLater(delay, func)
    return call_later(delay, func)


def slot_key(request: Any) -> str:
    """The download slot of ``request`` outside a crawl (Scrapy's ``Downloader.get_slot_key``)."""
    from scrapy.utils.httpobj import urlparse_cached

    slot = request.meta.get("download_slot")
    if slot is not None:
        return str(slot)
    return urlparse_cached(request).hostname or ""


def running_engine(crawler: Crawler) -> Any:
    """The crawler's engine, or None outside a crawl (Scrapy >= 2.14 raises for it)."""
    try:
        return crawler.engine
    except (AttributeError, RuntimeError):
        return None


def hookable(engine: Any) -> bool:
    """Whether `EngineHook` can learn from ``engine`` when a request is finished.

    False for a stand-in engine without a slot (as in Scrapy's own tests);
    for Scrapy's ``ExecutionEngine`` `EngineHook` then raises `ConfigError`.
    """
    from scrapy.core.engine import ExecutionEngine

    slot = getattr(engine, "_slot", None)
    return isinstance(engine, ExecutionEngine) or callable(getattr(slot, "remove_request", None))


class EngineHook:
    """Reports each request the engine finishes, and wakes the engine on time.

    ``on_finished(request)`` is called with every request the engine removes
    from its slot, before the engine's own bookkeeping, so that an
    acknowledgement is recorded before the engine may close the spider.

    Raises `ConfigError` if the engine has no slot with ``remove_request``
    (a Scrapy release this adapter does not know, or a scheduler opened
    outside a crawl).
    """

    __slots__ = ("_due", "_original", "_slot", "_timer", "_wrapper")

    def __init__(self, crawler: Crawler, on_finished: Callable[[Any], None]) -> None:
        engine = getattr(crawler, "engine", None)
        slot = getattr(engine, "_slot", None)
        original = getattr(slot, "remove_request", None)
        if slot is None or not callable(original):
            import scrapy

            raise ConfigError(
                "crawlq.contrib.scrapy.Scheduler must be opened by Scrapy's engine "
                "(SCHEDULER setting), which records finished requests in "
                f"ExecutionEngine._slot.remove_request; Scrapy {scrapy.__version__} has "
                "no such method: use Scrapy 2.13 or later 2.x"
            )

        def remove_request(request: Any) -> None:
            try:
                on_finished(request)
            except Exception:
                logger.exception(
                    "crawlq could not record %s as finished; it will be fetched again "
                    "after a restart",
                    request,
                )
            original(request)

        self._slot = slot
        self._original = original
        self._wrapper = remove_request
        slot.remove_request = remove_request
        self._timer: Any = None
        self._due: float | None = None

    def wake_in(self, delay: float, now: float) -> None:
        """Make the engine ask for requests again in ``delay`` seconds (or sooner)."""
        due = now + delay
        if self._due is not None and self._due <= due:
            return  # an earlier wake-up is already set
        self.cancel_wake()
        self._due = due
        self._timer = _call_later(delay, self._wake)

    def _wake(self) -> None:
        self._timer = None
        self._due = None
        nextcall = getattr(self._slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    def cancel_wake(self) -> None:
        """Drop a pending wake-up, if any."""
        timer = self._timer
        self._timer = None
        self._due = None
        if timer is not None:
            # Twisted raises AlreadyCalled for a timer that has fired.
            with contextlib.suppress(Exception):
                timer.cancel()

    def remove(self) -> None:
        """Undo the hook and drop any wake-up."""
        self.cancel_wake()
        if vars(self._slot).get("remove_request") is self._wrapper:
            del self._slot.remove_request
