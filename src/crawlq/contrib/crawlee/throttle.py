"""The adapter's memory of 429s per host: backoff, bursts and stalls, as crawlee counts them.

crawlee's ``ThrottlingRequestManager`` keeps, per listed domain, a backoff
that doubles with each burst of 429s (``base_delay``, capped at
``max_delay``, a positive ``Retry-After`` taking the place of the doubling)
and a stall clock (a host that answered every request with 429 for longer
than ``max_domain_stall`` ends the crawl with ``PersistentRateLimitError``).
`HostBackoffs` does the same for every host, and only decides: the block
itself is crawlq's ``block_host``, kept in the store so every worker of a
shared crawl obeys it. This module needs no crawlee and no store (`seconds` reads its options).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..._errors import ConfigError

__all__ = ["HostBackoffs", "seconds"]

#: Highest exponent of the doubling (crawlee's cap, so a timedelta never overflows).
_MAX_EXPONENT = 20


@dataclass(slots=True)
class _Host:
    """One host's 429 history, in `time.monotonic` seconds."""

    backoff_until: float = 0.0
    decays_at: float = 0.0
    consecutive: int = 0
    rate_limited_since: float | None = None
    last_rate_limited_at: float | None = None


class HostBackoffs:
    """Per-host 429 backoffs and stall clocks (see the module doc)."""

    def __init__(self, base_delay: float, max_delay: float, max_stall: float) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.max_stall = max_stall
        self._hosts: dict[str, _Host] = {}

    def record(self, host: str, retry_after: float | None) -> float | None:
        """A 429 from ``host``: return the seconds to block it, None inside an active backoff.

        Requests in flight when a limit is hit all come back 429: one event,
        so only the first of a burst advances the doubling (and blocks).
        """
        now = time.monotonic()
        state = self._hosts.setdefault(host, _Host())
        state.last_rate_limited_at = now
        if state.rate_limited_since is None:
            state.rate_limited_since = now
        if now < state.backoff_until:
            return None
        if now >= state.decays_at:
            state.consecutive = 0  # quiet for a whole window: a new burst
        state.consecutive += 1
        if retry_after is not None and retry_after > 0:
            delay = retry_after
        else:
            delay = self.base_delay * 2 ** min(state.consecutive - 1, _MAX_EXPONENT)
        delay = min(delay, self.max_delay)
        state.backoff_until = now + delay
        state.decays_at = state.backoff_until + delay
        return delay

    def blocked_for(self, host: str) -> float:
        """Seconds left of the backoff this process set on ``host`` (0.0: none)."""
        state = self._hosts.get(host)
        if state is None:
            return 0.0
        return max(0.0, state.backoff_until - time.monotonic())

    def succeeded(self, host: str) -> None:
        """A success from ``host``: the next 429 starts the doubling over."""
        state = self._hosts.get(host)
        if state is not None:
            state.consecutive = 0

    def handled(self, host: str) -> None:
        """A request of ``host`` was handled (not with a 429): the stall clock stops."""
        state = self._hosts.get(host)
        if state is not None:
            state.rate_limited_since = None

    def stalled(self) -> dict[str, float]:
        """Hosts answering only 429s for over ``max_stall`` seconds, with for how long."""
        now = time.monotonic()
        found = {}
        for host, state in self._hosts.items():
            since, last = state.rate_limited_since, state.last_rate_limited_at
            if since is None or last is None:
                continue
            if now - last <= self.max_stall and now - since > self.max_stall:
                found[host] = now - since
        return found

    def reset(self) -> None:
        """Forget every backoff and stall clock (crawlee's ``purge`` does)."""
        self._hosts.clear()


def seconds(name: str, value: Any) -> float:
    """An option's positive seconds, from a number or a `timedelta`; else `crawlq.ConfigError`."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(
            f"{name} must be a positive number of seconds or a timedelta, not {value!r}"
        )
    return float(value)
