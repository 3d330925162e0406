"""Watching a crawl from outside its processes: snapshots, and rates between them.

A `Snapshot` is what ``crawlq top`` and ``crawlq metrics`` read each time:
counts, the crawl's `Counters` and its busiest hosts, read without a lock
(SQLite) or a frontier (Redis), so the crawl goes on undisturbed. A `History`
keeps the last minutes of snapshots and turns them into rates and warnings.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from ._open import store_kind
from .stores.base import Counters, HostCount

__all__ = ["History", "Snapshot", "read_snapshot"]

#: Seconds of snapshots a `History` keeps (the longest rate, and the sparkline).
_KEPT: Final = 120.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A crawl's figures at one moment, read from its store."""

    #: Requests waiting to be handed out.
    queued: int
    #: Requests handed out and not finished (SQLite: as of the crawler's last flush).
    leased: int
    #: Fingerprints recorded.
    seen: int
    counters: Counters
    #: The busiest hosts first (SQLite: ``queued`` includes leased requests).
    hosts: tuple[HostCount, ...]
    #: `time.monotonic` when it was read.
    at: float = field(default_factory=time.monotonic)
    #: Hosts holding requests, and hosts blocked now, listed or not.
    busy_hosts: int = 0
    blocked_hosts: int = 0
    #: Requests held but not due yet, the revisits among them, and seconds
    #: until the first is due (None: none is).
    scheduled: int = 0
    revisits: int = 0
    next_due_in: float | None = None


def read_snapshot(url: str, *, top: int = 20) -> Snapshot:
    """Read a SQLite job's or a Redis crawl's `Snapshot`, without disturbing its crawl.

    Raises `ConfigError` for a memory frontier or a bad URL, `StoreError`
    when there is no job or crawl there, `StoreUnavailable` when its Redis
    cannot be reached: the errors of ``crawlq inspect``.
    """
    admin = store_kind(url).admin("watch")
    counts, hosts = admin.snapshot(url, top=top)
    return Snapshot(
        counts.queued,
        counts.leased,
        counts.seen,
        counts.counters,
        tuple(hosts),
        busy_hosts=hosts.busy,
        blocked_hosts=hosts.blocked,
        scheduled=counts.scheduled,
        revisits=counts.revisits,
        next_due_in=counts.next_due_in,
    )


#: The counters a `History` gives rates of.
RATES: Final = ("accepted", "duplicates", "popped", "acked", "expired")


class History:
    """The last two minutes of snapshots of one crawl: rates, a sparkline, warnings."""

    def __init__(self) -> None:
        self._snapshots: deque[Snapshot] = deque()

    def add(self, snapshot: Snapshot) -> None:
        """Keep ``snapshot`` (the newest); forget those older than two minutes."""
        self._snapshots.append(snapshot)
        while self._snapshots and snapshot.at - self._snapshots[0].at > _KEPT:
            self._snapshots.popleft()

    @property
    def latest(self) -> Snapshot | None:
        return self._snapshots[-1] if self._snapshots else None

    def span(self) -> float:
        """Seconds between the oldest and the newest snapshot kept."""
        if len(self._snapshots) < 2:
            return 0.0
        return self._snapshots[-1].at - self._snapshots[0].at

    def _since(self, seconds: float) -> Snapshot | None:
        """The oldest snapshot at most ``seconds`` older than the newest (not the newest)."""
        if len(self._snapshots) < 2:
            return None
        newest = self._snapshots[-1]
        for snapshot in self._snapshots:
            if newest.at - snapshot.at <= seconds + 0.5:  # a late refresh still counts
                return snapshot if snapshot is not newest else None
        return None

    def rates(self, seconds: float) -> dict[str, float] | None:
        """Per second over about the last ``seconds``: each of `RATES`, and the
        share of offered requests that were duplicates; None until two snapshots."""
        then = self._since(seconds)
        now = self.latest
        if then is None or now is None or now.at <= then.at:
            return None
        elapsed = now.at - then.at
        out = {
            name: (getattr(now.counters, name) - getattr(then.counters, name)) / elapsed
            for name in RATES
        }
        offered = out["accepted"] + out["duplicates"]
        offered += (now.counters.capped - then.counters.capped) / elapsed
        out["duplicate_ratio"] = out["duplicates"] / offered if offered else 0.0
        return out

    def popped_per_second(self, points: int) -> list[float]:
        """Popped per second between consecutive snapshots, the last ``points`` of them."""
        kept = list(self._snapshots)[-(points + 1) :]
        return [
            (b.counters.popped - a.counters.popped) / (b.at - a.at)
            for a, b in itertools.pairwise(kept)
            if b.at > a.at
        ]

    def warnings(self) -> list[str]:
        """What an operator should look at now, in words."""
        out: list[str] = []
        now = self.latest
        minute = self._since(60.0)
        if now is None or minute is None:
            return out
        popped = now.counters.popped - minute.counters.popped
        expired = now.counters.expired - minute.counters.expired
        elapsed = now.at - minute.at
        if expired > 0 and expired >= 0.05 * max(popped, 1):
            out.append(
                f"leases are expiring: {expired:,} in the last {elapsed:.0f} s "
                f"({popped:,} popped): workers dying, or lease_timeout shorter than a fetch"
            )
        if elapsed >= 59.0 and popped == 0 and minute.queued > 0 and now.queued > 0:
            out.append(
                f"no pops for {elapsed:.0f} s while {now.queued:,} requests are queued: "
                "are the workers running? are the hosts blocked or paced?"
            )
        return out

    def as_dict(self) -> dict[str, Any]:
        """The latest snapshot and its rates, JSON-ready (``crawlq top --once --json``)."""
        now = self.latest
        if now is None:
            return {}
        return {
            "queued": now.queued,
            "leased": now.leased,
            "seen": now.seen,
            "counters": asdict(now.counters),
            "rates_10s": self.rates(10.0),
            "rates_1min": self.rates(60.0),
            "hosts": [
                {
                    "host": h.host,
                    "queued": h.queued,
                    "leased": h.leased,
                    "ready_in": h.ready_in,
                    "blocked_for": h.blocked_for,
                    "state": h.state,
                }
                for h in now.hosts
            ],
            "warnings": self.warnings(),
        }
