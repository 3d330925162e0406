"""What a `Frontier` checks and builds before a store sees a request: its entry.

`EntryChecks` is the part of `Frontier` that turns requests into store
entries ``(fingerprint, host, request, payload)``: type, URL length and
``download_slot`` checks, the fingerprint (or a given one), the host (slot)
that paces it, and the encoded request for stores that keep bytes. A batch is
checked whole before anything is stored, or with ``invalid="skip"`` the
requests that cannot be stored are skipped and their positions kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final, Literal

from ._batch import as_request, check_fingerprint_count
from ._errors import InvalidRequest
from ._fingerprint import Fingerprinter
from ._request import Request, check_encodable, encode_request
from .stores.base import Entry

__all__ = ["EntryChecks", "Invalid"]

_SLOT_KEY: Final = "download_slot"
#: The fingerprint of an update's entry: stores ignore it (a release keeps the seen set).
_NO_FINGERPRINT: Final = bytes(16)

#: What ``add_many`` does with a request it cannot store: raise (the whole
#: batch is refused) or skip it (``None`` in the result, counted in stats).
Invalid = Literal["raise", "skip"]


class EntryChecks:
    """Entries of `Frontier` (a mixin with no state of its own)."""

    __slots__ = ()

    if TYPE_CHECKING:
        _fingerprinter: Fingerprinter
        _max_url_length: int
        _needs_payload: bool

    def _entry(self, request: Request, fingerprint: bytes | None = None) -> Entry:
        if type(request) is not Request and not isinstance(request, Request):
            raise InvalidRequest(
                f"expected a crawlq.Request, not {type(request).__name__}; "
                "wrap URLs with crawlq.Request(url)"
            )
        if len(request.url) > self._max_url_length:
            raise InvalidRequest(
                f"url {request.url[:200]!r}... is {len(request.url)} characters long, over the "
                f"frontier's max_url_length of {self._max_url_length}; drop it, or open the "
                "frontier with a larger max_url_length"
            )
        meta = request.meta
        slot = meta.get(_SLOT_KEY) if meta else None
        if slot is not None and (type(slot) is not str or not slot):
            raise InvalidRequest(f"meta['download_slot'] must be a non-empty str, not {slot!r}")
        if fingerprint is None:
            fingerprint, host = self._fingerprinter.fingerprint_and_host(request)
        else:
            if type(fingerprint) is not bytes or len(fingerprint) < 16:
                raise InvalidRequest(
                    f"a given fingerprint must be at least 16 bytes, not {fingerprint!r}"
                )
            # With a slot too, nothing is needed from the URL: it is not parsed.
            host = slot or self._fingerprinter.canonical_and_host(request.url)[1]
        if len(fingerprint) != 16:
            fingerprint = fingerprint[:16]  # stores keep and compare 16 bytes
        if slot is not None:
            host = slot
        if self._needs_payload:
            return (fingerprint, host, request, encode_request(request))
        if meta:
            check_encodable(request)
        return (fingerprint, host, request, None)

    def _update(self, request: Request, update: Request) -> Entry:
        """The entry that replaces what a store keeps of leased ``request`` (`Frontier.release`).

        ``update`` must keep what makes the request's fingerprint and host:
        its url, method, body and ``meta["download_slot"]``; raises
        `InvalidRequest` naming what changed, or `SerializationError` for
        meta that cannot be stored. The entry's fingerprint is a placeholder:
        a release leaves the seen set alone.
        """
        if type(update) is not Request and not isinstance(update, Request):
            raise InvalidRequest(f"update must be a crawlq.Request, not {type(update).__name__}")
        if update is not request:
            slot = request.meta.get(_SLOT_KEY) if request.meta else None
            new_slot = update.meta.get(_SLOT_KEY) if update.meta else None
            for name, old, new in (
                ("url", request.url, update.url),
                ("method", request.method, update.method),
                ("body", request.body, update.body),
                ("meta['download_slot']", slot, new_slot),
            ):
                if old != new:
                    raise InvalidRequest(
                        f"update changes the {name} of {request!r} from {old!r} to {new!r}; "
                        "a released request keeps its url, method, body and download_slot "
                        "(they make its fingerprint and its host): add a new request instead"
                    )
        return self._entry(update, _NO_FINGERPRINT)

    def _prepare(
        self,
        requests: Iterable[Request | str],
        fingerprints: Sequence[bytes] | None,
        invalid: Invalid,
    ) -> tuple[list[Entry], list[int] | None]:
        """A batch's store entries, and the positions skipped (``invalid="skip"``).

        Raises `InvalidRequest` as `add_many` says; nothing is stored here.
        """
        skipped: list[int] | None = None
        if invalid == "raise":
            if fingerprints is None:
                entries = [
                    self._entry(r if type(r) is Request else as_request(r)) for r in requests
                ]
            else:
                batch = list(requests)
                check_fingerprint_count(fingerprints, batch)
                entries = [
                    self._entry(r if type(r) is Request else as_request(r), f)
                    for r, f in zip(batch, fingerprints, strict=True)
                ]
        elif invalid == "skip":
            entries, skipped = self._entries_skipping(requests, fingerprints)
        else:
            raise InvalidRequest(f"invalid must be 'raise' or 'skip', not {invalid!r}")
        return entries, skipped

    def _entries_skipping(
        self, requests: Iterable[Request | str], fingerprints: Sequence[bytes] | None
    ) -> tuple[list[Entry], list[int]]:
        """Entries of the requests that can be stored, and the positions of the others."""
        batch = list(requests)
        if fingerprints is not None:
            check_fingerprint_count(fingerprints, batch)
        entries: list[Entry] = []
        skipped: list[int] = []
        for index, item in enumerate(batch):
            if not isinstance(item, Request | str):
                as_request(item)  # raises: a bug in the caller, never skipped
            try:
                request = item if isinstance(item, Request) else Request(item)
                fingerprint = None if fingerprints is None else fingerprints[index]
                entries.append(self._entry(request, fingerprint))
            except InvalidRequest:
                skipped.append(index)
        return entries, skipped
