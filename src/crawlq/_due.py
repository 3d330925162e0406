"""Due times: when a request may be handed out, and how revisits are paced.

A request may wait in the frontier before it is handed out: until its
``not_before`` time (a POSIX timestamp, set when it is built), for a delay
after a release (retry backoff), or for an interval after an ack (a refetch:
the page is fetched again later). `due_time` and `check_delay` check what the
caller gives; `Revisit` is the adaptive refetch policy of `open_frontier`.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import Any

from ._errors import ConfigError, InvalidRequest

__all__ = ["Revisit", "check_delay", "due_time"]


def due_time(value: Any) -> float | None:
    """Return ``not_before`` as POSIX seconds (a float), or None for none.

    Takes an int or float timestamp, or an aware `datetime.datetime`. Raises
    `InvalidRequest` for a naive datetime (whose zone crawlq would have to
    guess), NaN, an infinity, a bool or any other type.
    """
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
            raise InvalidRequest(
                f"not_before {value!r} is a naive datetime; give an aware one "
                "(e.g. datetime.now(timezone.utc) + timedelta(minutes=5)) or a POSIX timestamp"
            )
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(
            f"not_before must be a POSIX timestamp (int or float) or an aware datetime, "
            f"not {type(value).__name__} ({value!r})"
        )
    if not math.isfinite(value):
        raise InvalidRequest(
            f"not_before must be a finite POSIX timestamp, not {value!r}; "
            "leave it None for a request due now"
        )
    return float(value)


def check_delay(name: str, value: Any) -> float:
    """Return a delay in seconds as a float; `InvalidRequest` naming ``name`` if it is not one.

    A delay is a finite int or float >= 0 (a `datetime.timedelta` is taken
    too). NaN, an infinity, a negative number or a bool is refused.
    """
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(
            f"{name} must be a number of seconds (int, float or timedelta), "
            f"not {type(value).__name__} ({value!r})"
        )
    if not math.isfinite(value) or value < 0:
        raise InvalidRequest(
            f"{name} must be a finite number of seconds >= 0, not {value!r}; "
            f"use 0 (or leave {name} out) for no delay"
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class Revisit:
    """How often to refetch pages: an adaptive interval kept with each request.

    Given as ``open_frontier(..., revisit=Revisit(...))``. The first
    ``ack(request, changed=...)`` of a page schedules it again after
    ``initial`` seconds; later, ``changed=False`` multiplies its interval by
    ``factor`` (at most ``max``) and ``changed=True`` divides it by
    ``factor`` (at least ``min``). A plain ``ack`` finishes a page for good;
    an explicit ``refetch_after=`` wins over the policy.

    Raises `ConfigError` unless 0 < min <= initial <= max (finite seconds)
    and factor > 1.
    """

    initial: float
    min: float
    max: float
    factor: float = 2.0

    def __post_init__(self) -> None:
        for name in ("initial", "min", "max", "factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"Revisit {name} must be a number, not {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"Revisit {name} must be a finite number > 0, not {value!r}")
            object.__setattr__(self, name, float(value))
        if not self.min <= self.initial <= self.max:
            raise ConfigError(
                f"Revisit needs min <= initial <= max, not min={self.min}, "
                f"initial={self.initial}, max={self.max}"
            )
        if self.factor <= 1:
            raise ConfigError(f"Revisit factor must be > 1, not {self.factor}")

    def next_interval(self, interval: float | None, changed: bool) -> float:
        """The interval after an ack saying whether the page ``changed`` (None: first ack)."""
        if interval is None:
            return self.initial
        if changed:
            return max(self.min, interval / self.factor)
        return min(self.max, interval * self.factor)
