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

Opened on its own with ``JOBDIR`` (no crawlq scheduler attached: Scrapy's own
tests build a scheduler and open only its ``df``, or Scrapy's scheduler is
given ``DUPEFILTER_CLASS = "crawlq.contrib.scrapy.DupeFilter"``), it remembers
what it was asked across close and reopen, as ``RFPDupeFilter`` does with
``JOBDIR/requests.seen``, in a file of its own, ``JOBDIR/crawlq-requests.seen``
(no pickle; Scrapy's file changes format between releases):

- a header line, ``crawlq-requests.seen 1``;
- then one record per fingerprint: its length (2 bytes, big-endian), then
  its bytes.

Each record is written as ``request_seen`` remembers the fingerprint (one
unbuffered write: a killed process loses none; no fsync). A record cut short
(a crash mid-write) is dropped when the file is next opened.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, Self

from scrapy.dupefilters import RFPDupeFilter
from scrapy.utils.job import job_dir

from ..._errors import CorruptStore, CrawlqError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

__all__ = ["DupeFilter"]

#: The file in JOBDIR where a `DupeFilter` opened on its own keeps its fingerprints.
SEEN_FILE: Final = "crawlq-requests.seen"
_HEADER: Final = b"crawlq-requests.seen 1\n"
_SIZE_BYTES: Final = 2


def _read_seen(data: bytes) -> tuple[list[bytes], int]:
    """The fingerprints of a seen file's records, and where the whole records end."""
    fingerprints = []
    pos = end = len(_HEADER)
    while pos + _SIZE_BYTES <= len(data):
        size = int.from_bytes(data[pos : pos + _SIZE_BYTES], "big")
        pos += _SIZE_BYTES
        if pos + size > len(data):
            break  # cut short by a crash mid-write
        fingerprints.append(data[pos : pos + size])
        pos += size
        end = pos
    return fingerprints, end


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

    ``path`` is the ``JOBDIR`` (``from_crawler`` passes it, as
    ``RFPDupeFilter`` does). Opened with one and no scheduler attached,
    ``open`` loads the fingerprints of ``JOBDIR/crawlq-requests.seen`` and
    ``request_seen`` adds those it remembers to that file, until ``close``
    (see the module docstring); attached, it never touches that file. Raises
    `CorruptStore` at ``open`` if the file is not such a file, and
    `CrawlqError` if it cannot be read or written.
    """

    def __init__(self, path: str | None = None, debug: bool = False, **kwargs: Any) -> None:
        # Never a JOBDIR/requests.seen file: the frontier's store holds the seen
        # set, and on its own this filter keeps JOBDIR/crawlq-requests.seen.
        super().__init__(None, debug, **kwargs)
        self.jobdir = path or None
        self._seen_file: IO[bytes] | None = None
        self._store_seen: Callable[[bytes], bool] | None = None
        self._count: Callable[[str], None] | None = None
        #: How many fingerprints were remembered by request_seen (not by the frontier).
        self.marks = 0

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        """Build it as ``RFPDupeFilter.from_crawler`` does (with the ``JOBDIR``)."""
        return cls(
            job_dir(crawler.settings),
            crawler.settings.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=crawler.request_fingerprinter,
        )

    def open(self) -> Any:
        """On its own with a ``JOBDIR``: load, then append to, ``JOBDIR/crawlq-requests.seen``."""
        if self.jobdir and self._store_seen is None and self._seen_file is None:
            self._open_seen_file(Path(self.jobdir, SEEN_FILE))
        return super().open()

    def close(self, reason: str) -> Any:
        """Close ``JOBDIR/crawlq-requests.seen`` if `open` opened it."""
        seen_file, self._seen_file = self._seen_file, None
        if seen_file is not None:
            try:
                seen_file.close()
            except OSError as exc:
                raise CrawlqError(f"cannot close {seen_file.name}: {exc.strerror}") from None
        return super().close(reason)

    def _open_seen_file(self, path: Path) -> None:
        try:
            file = path.open("a+b", buffering=0)
        except OSError as exc:
            raise CrawlqError(f"cannot open {path}: {exc.strerror}") from None
        try:
            file.seek(0)
            data = file.read()
            if not data.startswith(_HEADER):
                if not _HEADER.startswith(data):
                    raise CorruptStore(
                        f"{path} is not a crawlq dupefilter file (it does not start with "
                        f"{_HEADER!r}): move it away to start afresh"
                    )
                data = b""  # empty, or cut short as it was created
                file.truncate(0)
                file.write(_HEADER)
            fingerprints, end = _read_seen(data)
            if data and end < len(data):
                file.truncate(end)  # appending after a cut record would misalign the rest
            for fingerprint in fingerprints:
                self._remember(fingerprint)
        except OSError as exc:
            file.close()
            raise CrawlqError(f"cannot read {path}: {exc.strerror}") from None
        except BaseException:
            file.close()
            raise
        self._seen_file = file

    def _remember(self, fingerprint: bytes) -> None:
        """Add ``fingerprint`` to ``RFPDupeFilter``'s own set."""
        fingerprints = vars(self).get("_fingerprints")  # Scrapy >= 2.19: bytes
        if fingerprints is not None:
            fingerprints.add(fingerprint)
        else:
            vars(self)["fingerprints"].add(fingerprint.hex())  # Scrapy 2.13-2.18: hex

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
        seen_file = self._seen_file
        if seen_file is not None and store_seen is None:
            fingerprint = self.fingerprint(request)
            try:
                seen_file.write(len(fingerprint).to_bytes(_SIZE_BYTES, "big") + fingerprint)
            except OSError as exc:
                raise CrawlqError(f"cannot write {seen_file.name}: {exc.strerror}") from None
        return False

    def marked(self, fingerprint: bytes) -> bool:
        """True if `request_seen` remembered ``fingerprint`` (the frontier may not know it)."""
        if not self.marks:
            return False
        fingerprints = vars(self).get("_fingerprints")  # Scrapy >= 2.19: bytes
        if fingerprints is not None:
            return fingerprint in fingerprints
        return fingerprint.hex() in vars(self).get("fingerprints", ())  # Scrapy 2.13-2.18: hex

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
