"""The ordering and pacing settings every store applies, validated once."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._errors import ConfigError

__all__ = ["Policy"]


def _number(name: str, value: Any, *, minimum: float, inclusive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number of seconds, not {value!r}")
    if value < minimum or (not inclusive and value == minimum):
        relation = ">=" if inclusive else ">"
        raise ConfigError(f"{name} must be {relation} {minimum}, not {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Policy:
    """How a frontier orders and paces requests.

    ``host_delay`` is the least time in seconds between two pops for one host
    (download slot). ``host_concurrency`` is the most leased requests a host may
    have at once (None: no limit). ``lifo`` hands out the newest request first
    within a priority. ``lease_timeout`` is how long a popped request may stay
    un-acked before it comes back by itself. ``clock`` returns seconds; stores
    that keep time across processes may ignore it.

    Raises `ConfigError` for a value of the wrong type or range.
    """

    host_delay: float = 0.0
    host_concurrency: int | None = None
    lifo: bool = False
    lease_timeout: float = 600.0
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    def __post_init__(self) -> None:
        _number("host_delay", self.host_delay, minimum=0.0, inclusive=True)
        _number("lease_timeout", self.lease_timeout, minimum=0.0, inclusive=False)
        concurrency = self.host_concurrency
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise ConfigError(
                f"host_concurrency must be an int >= 1, or None for no limit, not {concurrency!r}"
            )
        if not isinstance(self.lifo, bool):
            raise ConfigError(f"lifo must be True or False, not {self.lifo!r}")
        if not callable(self.clock):
            raise ConfigError(f"clock must be a callable returning seconds, not {self.clock!r}")
        object.__setattr__(self, "host_delay", float(self.host_delay))
        object.__setattr__(self, "lease_timeout", float(self.lease_timeout))
