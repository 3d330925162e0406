"""Requests fed into a Scrapy crawl from outside: crawlq requests without a Scrapy payload.

A Scrapy crawl stores each request as a payload (``codec``). URLs fed into the
crawl by other means (``crawlq add CRAWL URL...``, ``crawlq import`` of
``{"url": ...}`` lines, or ``open_frontier(url, lifo=True, ...).add_many``)
are plain crawlq requests. The scheduler turns each into a Scrapy request
when it hands it out, as scrapy-redis's ``RedisSpider.make_request_from_data``
does:

- if the spider has a method ``make_request_from_crawlq(request)``, it is
  called with the `crawlq.Request` and returns the ``scrapy.Request`` to
  fetch, or None to skip it (acknowledged, counted in ``crawlq/declined``);
- otherwise the Scrapy request has the crawlq request's url, method, headers,
  body, meta (crawlq's own keys left out; ``depth`` from its ``depth``),
  ``dont_filter``, its callback and errback by spider method name (None: the
  spider's ``parse``), and Scrapy priority ``priority // 2``: the inverse of
  `crawlq_priority`, so a request fed with ``priority=crawlq_priority(p,
  False)`` is ordered, and fetched, as Scrapy priority ``p``.

A request that cannot be rebuilt (a callback the spider lacks, a payload it
cannot read, a hook that raises or returns something else) raises here; the
scheduler then parks it (see `Frontiers.pop`).
"""

from __future__ import annotations

from typing import Any, Final

import scrapy

from ..._request import Request
from .adding import PAYLOAD, RUN, TOKEN

__all__ = ["HOOK", "fed_request"]

#: The spider method that makes a Scrapy request from a fed crawlq request.
HOOK: Final = "make_request_from_crawlq"
_INTERNAL: Final = frozenset({PAYLOAD, TOKEN, RUN})


def fed_request(spider: Any, creq: Request) -> scrapy.Request | None:
    """The Scrapy request for ``creq``, a crawlq request without a payload (None: skip it).

    Raises ValueError (or what the spider's hook raises) when it cannot be made.
    """
    hook = getattr(spider, HOOK, None)
    if hook is not None:
        made = hook(creq)
        if made is not None and not isinstance(made, scrapy.Request):
            raise ValueError(
                f"{type(spider).__name__}.{HOOK} returned {type(made).__name__}, "
                "not a scrapy.Request or None"
            )
        return made
    meta = {key: value for key, value in creq.meta.items() if key not in _INTERNAL}
    if creq.depth and "depth" not in meta:
        meta["depth"] = creq.depth
    return scrapy.Request(
        creq.url,
        method=creq.method,
        headers=creq.headers or None,
        body=creq.body,
        priority=creq.priority // 2,
        meta=meta,
        dont_filter=creq.dont_filter,
        callback=_method(spider, creq.callback, "callback"),
        errback=_method(spider, creq.errback, "errback"),
    )


def _method(spider: Any, name: str | None, field: str) -> Any:
    if name is None:
        return None
    method = getattr(spider, name, None)
    if method is None or not callable(method):
        raise ValueError(f"its {field} {name!r} is not a method of spider {spider!r}")
    return method
