"""Due times of Scrapy requests: the ``crawlq_*`` meta keys the scheduler reads.

``meta["crawlq_not_before"]`` (POSIX seconds or an aware datetime) and
``meta["crawlq_delay"]`` (seconds from when the scheduler receives the
request) give a request a due time: it is stored at once and not handed out
before then (both given: the later of the two). The scheduler applies a
delay once: it replaces ``crawlq_delay`` in the request's meta by the
``crawlq_not_before`` it worked out, so a request made from this one (a
redirect, a retry by Scrapy's own ``RetryMiddleware``, a request built from
``response.meta``) is not delayed again. ``meta["crawlq_refetch_after"]``
(seconds; None: never) overrides ``CRAWLQ_REFETCH_AFTER`` for one request:
when the engine is done with it, it is acked with that refetch (see
`refetch_after`). Every value is checked when the request is enqueued; a bad
one raises `crawlq.InvalidRequest` naming the key, the value and the URL.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

from ..._due import check_delay, due_time
from ..._errors import InvalidRequest

if TYPE_CHECKING:
    import scrapy

__all__ = ["DELAY", "NOT_BEFORE", "REFETCH_AFTER", "due_of", "refetch_after", "settle_delay"]

#: Meta keys: when the request is due, in how long, and when to fetch it again.
NOT_BEFORE: Final = "crawlq_not_before"
DELAY: Final = "crawlq_delay"
REFETCH_AFTER: Final = "crawlq_refetch_after"


def due_of(request: scrapy.Request, now: float | None = None) -> float | None:
    """The due time (POSIX seconds) the request's meta asks for; None for none.

    Reads ``crawlq_not_before`` and ``crawlq_delay`` (counted from ``now``,
    default the wall clock) and checks ``crawlq_refetch_after`` too. A due
    time that has passed already is returned as is (the store hands the
    request out at once). Raises `InvalidRequest` naming the key, the value
    and the URL for a naive datetime, a negative, NaN or infinite number, a
    bool or any other type.
    """
    meta = request.meta
    due: float | None = None
    if NOT_BEFORE in meta:
        value = meta[NOT_BEFORE]
        try:
            due = due_time(value)
        except InvalidRequest as exc:
            raise _invalid(request, NOT_BEFORE, exc) from None
        if due is not None and due < 0:
            raise InvalidRequest(
                f"meta[{NOT_BEFORE!r}] of {request.url} is {value!r}, before 1970: give a "
                f"POSIX timestamp >= 0 or an aware datetime (for a delay in seconds, use "
                f"meta[{DELAY!r}])"
            )
    if DELAY in meta:
        try:
            delay = check_delay(DELAY, meta[DELAY])
        except InvalidRequest as exc:
            raise _invalid(request, DELAY, exc) from None
        if delay:
            after = (time.time() if now is None else now) + delay
            due = after if due is None else max(due, after)
    if REFETCH_AFTER in meta:
        value = meta[REFETCH_AFTER]
        if value is not None:
            try:
                check_delay(REFETCH_AFTER, value)
            except InvalidRequest as exc:
                raise _invalid(request, REFETCH_AFTER, exc) from None
    return due


def settle_delay(request: scrapy.Request, due: float | None) -> None:
    """Apply a ``crawlq_delay`` once: replace it by ``crawlq_not_before`` = ``due``.

    Leaves a request without ``crawlq_delay`` as it is.
    """
    meta = request.meta
    if DELAY in meta:
        del meta[DELAY]
        if due is not None:
            meta[NOT_BEFORE] = due


def refetch_after(request: Any, default: float | None) -> tuple[float | None, str | None]:
    """Seconds after which a finished request is fetched again (None: never), and an error.

    ``meta["crawlq_refetch_after"]`` wins over ``default`` (the
    ``CRAWLQ_REFETCH_AFTER`` setting); None in meta turns it off for that
    request. A retry (meta ``retry_times``, from Scrapy's ``RetryMiddleware``
    or ``get_retry_request``) is never refetched: the request it retries was,
    when the engine was done with it. Never raises (the engine has finished
    the request): a bad value, set by a callback after the request was
    enqueued, gives (None, a message saying why).
    """
    meta = getattr(request, "meta", None)
    if not meta:
        return default, None
    if meta.get("retry_times"):
        return None, None
    if REFETCH_AFTER not in meta:
        return default, None
    value = meta[REFETCH_AFTER]
    if value is None:
        return None, None
    try:
        return check_delay(REFETCH_AFTER, value), None
    except InvalidRequest as exc:
        return None, str(_invalid(request, REFETCH_AFTER, exc))


def _invalid(request: scrapy.Request, key: str, exc: InvalidRequest) -> InvalidRequest:
    return InvalidRequest(f"meta[{key!r}] of {request.url}: {exc}")
