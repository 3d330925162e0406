"""The demo's job directory: a SQLite frontier plus what a resumed crawl must remember.

A demo job is a directory holding the crawlq job (``crawlq.db``) and
``demo-fetches.log``. The frontier keeps the requests, the seen set and
pacing; its crawler state (``Frontier.save_state``) keeps the demo's own
facts: which site is crawled (pages, hosts, seed), where it was served (the
queued URLs carry those ports, so a resumed crawl serves the site there
again), the running totals, and how many requests were in flight at each stop.

The fetch log is the server's side of the story: one line per request served,
appended (unbuffered) before the answer goes out, so it survives even a
``kill -9``. At the end of a crawl it proves each page was fetched, and how
many were fetched again after a stop: at most the requests that were in
flight then (they were leased, not acked, so they come back).

Without a directory (``path=None``) the job is a memory frontier and nothing
outlives the process.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Final

from ..._errors import CrawlqError, JobLocked
from ..._frontier import Frontier
from ..._open import open_frontier
from ...stores.sqlite.file import DATABASE_NAME, JobLock
from .site import PageKey

__all__ = ["DemoJob", "DemoJobError", "Totals"]

FETCH_LOG: Final = "demo-fetches.log"
#: Files a demo job directory may hold; ``--fresh`` deletes nothing else.
_JOB_FILES: Final = frozenset(
    {
        DATABASE_NAME,
        f"{DATABASE_NAME}-wal",
        f"{DATABASE_NAME}-shm",
        f"{DATABASE_NAME}-journal",
        f"{DATABASE_NAME}.lock",
        FETCH_LOG,
    }
)


class DemoJobError(CrawlqError):
    """A demo job directory cannot be used as asked; the message names the fix."""


@dataclass(slots=True)
class Totals:
    """Crawler counters summed over every run of a job."""

    fetched: int = 0
    duplicates: int = 0
    links: int = 0
    elapsed: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)

    def plus(
        self, fetched: int, duplicates: int, links: int, elapsed: float, errors: Counter[str]
    ) -> Totals:
        """Return these totals with one run's counters added."""
        merged = Counter(self.errors)
        merged.update(errors)
        return Totals(
            self.fetched + fetched,
            self.duplicates + duplicates,
            self.links + links,
            self.elapsed + elapsed,
            dict(sorted(merged.items())),
        )


class DemoJob:
    """One demo crawl's frontier and memory, new or resumed; see the module doc.

    Use `open`; call `start` once the site is served, `seeded` after adding
    the seeds, `save` now and then, `finish` at the end of the run and
    `close` always.
    """

    def __init__(
        self, path: Path | None, frontier: Frontier, state: dict[str, Any], site: dict[str, int]
    ) -> None:
        self.path = path
        self.frontier = frontier
        self._state = state
        #: True if the job was crawled before (this run resumes it).
        self.resumed = bool(state)
        #: Fetches served in earlier runs, by page.
        self.fetches: Counter[PageKey] = Counter()
        self._log: BinaryIO | None = None
        if not state:
            state.update(site=site, runs=0, refetch_bound=0, seeded=False, totals=asdict(Totals()))
        elif state.get("running"):
            # The last run ended without saying so (killed): every request it
            # had in flight may come back, and it had at most one per worker.
            state["refetch_bound"] += state.get("workers", 0)
            state["running"] = False
        self.totals = Totals(**state["totals"])
        self._bound = int(state["refetch_bound"])

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str] | None,
        *,
        site: dict[str, int],
        fresh: bool = False,
        **options: Any,
    ) -> DemoJob:
        """Open (or create) the job in directory ``path``; None: a memory frontier.

        ``site`` names the site crawled (pages, hosts, seed); a resumed job
        must crawl the same one. ``options`` go to `open_frontier`. With
        ``fresh``, an existing job in ``path`` is deleted first. Raises
        `DemoJobError` for a path that is not a demo job directory or a job
        of another site, and what `open_frontier` raises (`JobLocked` while
        another process has the job open).
        """
        if path is None:
            return cls(None, open_frontier("memory://", **options), {}, site)
        directory = Path(path).absolute()
        if directory.exists() and not directory.is_dir():
            raise DemoJobError(f"{directory} is a file; the demo's --job is a directory")
        if fresh and directory.exists():
            _wipe(directory)
        frontier = open_frontier(str(directory), **options)
        try:
            state = frontier.load_state()
            if not state and len(frontier) + frontier.stats().seen:
                raise DemoJobError(
                    f"{directory} holds a crawlq job that is not a demo crawl; "
                    "use another --job, or add --fresh to replace it"
                )
            if state and state.get("site") != site:
                raise DemoJobError(_other_site(directory, state.get("site"), site))
            job = cls(directory, frontier, state, site)
            job._open_log()
        except BaseException:
            frontier.close()
            raise
        return job

    def _open_log(self) -> None:
        assert self.path is not None
        log = self.path / FETCH_LOG
        if self.resumed and log.exists():
            for line in log.read_bytes().splitlines():
                try:
                    host, page = json.loads(line)
                except (ValueError, TypeError):
                    continue  # a line cut short by a kill: the fetch is in the next run
                self.fetches[(host, page)] += 1
        self._log = log.open("ab" if self.resumed else "wb", buffering=0)

    # -- facts ----------------------------------------------------------------

    @property
    def base_urls(self) -> list[str] | None:
        """Where the site was served before (None for a new job)."""
        urls = self._state.get("base_urls")
        return list(urls) if urls else None

    @property
    def single_address(self) -> bool:
        """True if the site was served on 127.0.0.1 only."""
        return bool(self._state.get("single_address", False))

    @property
    def runs(self) -> int:
        """Runs of this job, this one included once `start` was called."""
        return int(self._state["runs"])

    @property
    def refetch_bound(self) -> int:
        """Requests in flight at the stops before this run: the most that may repeat."""
        return self._bound

    @property
    def complete(self) -> bool:
        """True if an earlier run finished the crawl: seeded, and nothing left."""
        return bool(self._state["seeded"]) and len(self.frontier) == 0

    @property
    def is_seeded(self) -> bool:
        """True once the seeds were added (they are never added again)."""
        return bool(self._state["seeded"])

    # -- recording ------------------------------------------------------------

    def record_fetch(self, key: PageKey) -> None:
        """Append one served fetch to the log (a no-op for a memory job)."""
        if self._log is not None:
            self._log.write(json.dumps(key).encode() + b"\n")

    def start(self, base_urls: list[str], single_address: bool, workers: int) -> None:
        """Record that a run starts, serving the site at ``base_urls``."""
        state = self._state
        state.update(
            base_urls=base_urls,
            single_address=single_address,
            runs=state["runs"] + 1,
            running=True,
            workers=workers,
        )
        self.frontier.save_state(state)

    def seeded(self) -> None:
        """Record that the seeds were added."""
        self._state["seeded"] = True
        self.frontier.save_state(self._state)

    def save(self, totals: Totals) -> None:
        """Save the running totals (the run goes on)."""
        self._state["totals"] = asdict(totals)
        self.frontier.save_state(self._state)

    def finish(self, totals: Totals, in_flight: int) -> None:
        """Record the end of a run, with ``in_flight`` requests that may be fetched again."""
        state = self._state
        state.update(
            totals=asdict(totals),
            running=False,
            refetch_bound=state["refetch_bound"] + in_flight,
        )
        self.frontier.save_state(state)

    def close(self) -> None:
        """Close the fetch log and the frontier."""
        if self._log is not None:
            self._log.close()
            self._log = None
        self.frontier.close()


def _other_site(directory: Path, stored: Any, site: dict[str, int]) -> str:
    if not isinstance(stored, dict):
        return f"{directory} is not a demo job this crawlq understands; add --fresh to replace it"
    return (
        f"{directory} crawls a site of {stored.get('pages')} pages over {stored.get('hosts')} "
        f"hosts (seed {stored.get('seed')}), not {site['pages']} over {site['hosts']} "
        f"(seed {site['seed']}); run again with --pages {stored.get('pages')} "
        f"--hosts {stored.get('hosts')} --seed {stored.get('seed')} to resume it, "
        "or add --fresh to start over"
    )


def _wipe(directory: Path) -> None:
    """Delete the job in ``directory``, refusing if it holds anything else or is in use."""
    others = sorted(p.name for p in directory.iterdir() if p.name not in _JOB_FILES)
    if others:
        raise DemoJobError(
            f"--fresh would delete {directory}, but it holds files that are not part of a "
            f"demo job ({', '.join(others[:3])}); delete it yourself or use another --job"
        )
    lock = JobLock(directory / DATABASE_NAME)
    try:
        lock.acquire()
    except JobLocked as exc:
        raise DemoJobError(f"cannot start over: {exc}") from None
    try:
        for name in _JOB_FILES - {f"{DATABASE_NAME}.lock"}:
            (directory / name).unlink(missing_ok=True)
    finally:
        lock.release()
