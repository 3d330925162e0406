"""`DupeFilter`: Scrapy's default dupefilter as the crawlq scheduler's ``df``.

Scrapy's scheduler exposes its dupefilter as ``scheduler.df``, and
extensions call ``crawler.engine.slot.scheduler.df.request_seen(request)``
or ``df.log(request, spider)``. When ``DUPEFILTER_CLASS`` is Scrapy's
default (``scrapy.dupefilters.RFPDupeFilter``), the crawlq scheduler builds
this subclass instead: it is an ``RFPDupeFilter`` (same fingerprinter, same
``DUPEFILTER_DEBUG`` logging under the ``scrapy.dupefilters`` logger, same
``dupefilter/filtered`` stat) whose memory is the crawlq frontier's seen set
while the scheduler is open, and which writes no ``requests.seen`` file in
``JOBDIR`` (the job's ``crawlq.db`` holds the seen set).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

from scrapy.dupefilters import RFPDupeFilter

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["DupeFilter"]


class DupeFilter(RFPDupeFilter):
    """Scrapy's ``RFPDupeFilter``, backed by the crawlq frontier's seen set.

    ``request_seen(request)`` answers True for a request whose fingerprint
    the frontier has seen (queued, handed out or done, in this run or an
    earlier run of the job) or that this filter was asked about before;
    otherwise it remembers the fingerprint and answers False. Fingerprints
    given to it this way, and not enqueued, are kept in this process only:
    the scheduler refuses their requests too, until the crawl stops. Before
    the scheduler opens (or after it closes) it is a plain in-memory
    ``RFPDupeFilter``. ``log`` logs like ``RFPDupeFilter`` and counts
    ``dupefilter/filtered``.
    """

    def __init__(self, path: str | None = None, debug: bool = False, **kwargs: Any) -> None:
        # Never a JOBDIR/requests.seen file: the frontier's store holds the seen set.
        super().__init__(None, debug, **kwargs)
        self._store_seen: Callable[[bytes], bool] | None = None
        self._count: Callable[[str], None] | None = None
        #: How many fingerprints were remembered by request_seen (not by the frontier).
        self.marks = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build it as ``RFPDupeFilter.from_crawler`` does, without a ``JOBDIR`` file."""
        return cls(
            None,
            crawler.settings.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=crawler.request_fingerprinter,
        )

    def attach(self, store_seen: Callable[[bytes], bool], count: Callable[[str], None]) -> None:
        """Answer from ``store_seen(fingerprint)`` too, and count stats with ``count``."""
        self._store_seen = store_seen
        self._count = count

    def detach(self) -> None:
        """Stop consulting the frontier (it is closing)."""
        self._store_seen = None
        self._count = None

    def fingerprint(self, request: Any) -> bytes:
        """The fingerprint the frontier files ``request`` under."""
        return bytes.fromhex(self.request_fingerprint(request))

    def request_seen(self, request: Any) -> bool:
        """True if ``request`` is a duplicate; else remember it and return False."""
        store_seen = self._store_seen
        if store_seen is not None and store_seen(self.fingerprint(request)):
            return True
        if super().request_seen(request):
            return True
        self.marks += 1
        return False

    def marked(self, fingerprint: bytes) -> bool:
        """True if `request_seen` remembered ``fingerprint`` (the frontier may not know it)."""
        if not self.marks:
            return False
        fingerprints = vars(self).get("_fingerprints")  # Scrapy >= 2.14: bytes
        if fingerprints is not None:
            return fingerprint in fingerprints
        return fingerprint.hex() in vars(self).get("fingerprints", ())  # Scrapy 2.13: hex

    def log(self, request: Any, spider: Any) -> None:
        """Log a filtered duplicate like ``RFPDupeFilter.log`` and count it."""
        count = self._count
        if count is None:
            super().log(request, spider)
            return
        if self.debug or self.logdupes:
            # RFPDupeFilter.log without its stat, which is counted in batches here.
            self._log_only(request, spider)
        count("dupefilter/filtered")

    def _log_only(self, request: Any, spider: Any) -> None:
        from scrapy.utils.request import referer_str

        if self.debug:
            self.logger.debug(
                "Filtered duplicate request: %(request)s (referer: %(referer)s)",
                {"request": request, "referer": referer_str(request)},
                extra={"spider": spider},
            )
        else:
            self.logger.debug(
                "Filtered duplicate request: %(request)s - no more duplicates will be shown"
                " (see DUPEFILTER_DEBUG to show all duplicates)",
                {"request": request},
                extra={"spider": spider},
            )
            self.logdupes = False
