"""A SQLite job on a disk that fills up: `StoreFull`, and nothing half-stored.

Each test runs its job on a tmpfs of 3 MiB mounted for it (root only: the
tests skip, saying why, when they cannot mount one; CI runs them as root).
A full disk makes SQLite fail a ``COMMIT`` after it rolled the transaction
back itself, and fail the flush that follows a committed log record: the
store must raise `StoreFull` (naming the file system and its free space)
from the call whose own write failed, and from no other.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import crawlq
from tests.small_disk import Disk, mounted_disk

from ._helpers import job_url, read_line, sigkill, spawn

BATCH = 200


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Disk]:
    with mounted_disk(tmp_path / "disk") as mounted:
        yield mounted


def batch(number: int) -> list[crawlq.Request]:
    return [
        crawlq.Request(
            f"http://h{j % 9}.test/{number}/{j}",
            priority=j % 3,
            meta={"pad": "p" * (50 + (number * 37 + j * 11) % 250)},
        )
        for j in range(BATCH)
    ]


def fill_job(frontier: crawlq.Frontier) -> tuple[list[str], list[crawlq.Request], Exception]:
    """Add batches until one raises; return the URLs that returned, the batch, the error."""
    accepted: list[str] = []
    for number in range(1000):
        requests = batch(number)
        try:
            results = frontier.add_many(requests)
        except Exception as exc:  # its type is what the tests check
            return accepted, requests, exc
        assert results == [True] * BATCH
        accepted += [request.url for request in requests]
    raise AssertionError("the disk never filled up")


def assert_full(error: BaseException, disk: Disk) -> None:
    """``error`` is a StoreFull naming the file system and its free space."""
    assert isinstance(error, crawlq.StoreFull), f"{type(error).__name__}: {error}"
    message = str(error)
    assert f"file system at {disk.path} (" in message, message
    assert re.search(r"\(\d+(\.\d+)? ?(bytes|KiB|MiB|GiB|TiB) free of ", message), message
    assert "free disk space" in message, message


def pop_all(frontier: crawlq.Frontier) -> list[str]:
    urls = []
    while (request := frontier.pop()) is not None:
        urls.append(request.url)
    return urls


def assert_holds(url: str, expected: set[str], *, seen: int) -> None:
    """The job at ``url`` holds exactly ``expected``, and ``seen`` fingerprints."""
    with crawlq.open_frontier(url) as frontier:
        stats = frontier.stats()
        assert (stats.queued, stats.leased, stats.seen) == (len(expected), 0, seen)
        assert sorted(pop_all(frontier)) == sorted(expected)


def test_a_full_disk_raises_store_full_and_the_batch_is_not_stored(disk: Disk) -> None:
    """The issue's run: add_many until an error, free space, reopen, retry the batch.

    (Failed before the fix: the error was StoreError('... cannot rollback - no
    transaction is active'), raised by the flush after the batch's own record
    had committed, so the job held the batch and a retry accepted none of it.)
    """
    url = job_url(disk.path / "job.db")
    frontier = crawlq.open_frontier(url)
    try:
        accepted, failed, error = fill_job(frontier)
        assert_full(error, disk)
        assert accepted, "the first batch already failed"
        stats = frontier.stats()
        assert (stats.queued, stats.seen) == (len(accepted), len(accepted))
        assert stats.counters.accepted == len(accepted)
        assert stats.counters.duplicates == 0
    finally:
        frontier.close()  # a flush that finds no room is not an error: the log is durable
    disk.grow()
    assert_holds(url, set(accepted), seen=len(accepted))
    with crawlq.open_frontier(url) as frontier:
        assert frontier.add_many(failed) == [True] * BATCH
        assert not any(frontier.add_many([crawlq.Request(u) for u in accepted[:: BATCH // 4]]))
    assert_holds(url, {*accepted, *(r.url for r in failed)}, seen=len(accepted) + BATCH)


def test_the_failed_batch_left_nothing_in_memory(disk: Disk) -> None:
    """Without reopening: once there is room, the same frontier accepts the batch whole."""
    url = job_url(disk.path / "job.db")
    with crawlq.open_frontier(url) as frontier:
        accepted, failed, error = fill_job(frontier)
        assert_full(error, disk)
        disk.fill()  # whatever the failed write left free
        mixed = [crawlq.Request(accepted[0]), *failed]  # a duplicate, then new requests
        with pytest.raises(crawlq.StoreFull):
            frontier.add_many(mixed)
        disk.free()
        disk.grow()
        assert frontier.stats().counters.duplicates == 0
        assert frontier.add_many(mixed) == [False] + [True] * BATCH
        stats = frontier.stats()
        assert (stats.queued, stats.seen) == (len(accepted) + BATCH, len(accepted) + BATCH)
        assert (stats.counters.accepted, stats.counters.duplicates) == (stats.queued, 1)
        assert sorted(pop_all(frontier)) == sorted([*accepted, *(r.url for r in failed)])


def test_an_ack_and_a_flush_on_a_full_disk(disk: Disk) -> None:
    """An ack that cannot be written raises StoreFull and stays undone; a flush keeps
    its acks waiting; both go through once there is room."""
    url, other = job_url(disk.path / "job.db"), job_url(disk.path / "other.db")
    durable = crawlq.open_frontier(url, ack_delay=0)
    try:
        assert all(durable.add_many(batch(0)))
        popped = [durable.pop() for _ in range(4)]
        assert all(request is not None for request in popped)
    finally:
        durable.close()
    durable = crawlq.open_frontier(url, ack_delay=0)
    waiting = crawlq.open_frontier(other, ack_delay=3600)  # a second job, same disk
    try:
        first, second = durable.pop(), durable.pop()
        assert first is not None and second is not None
        assert all(waiting.add_many(batch(1)))
        late = waiting.pop()
        assert late is not None
        waiting.ack(late)  # waits in memory: nothing to write yet
        disk.fill()
        with pytest.raises(crawlq.StoreFull) as raised:
            durable.ack(first)
        assert_full(raised.value, disk)
        assert durable.stats().leased == 2  # the ack did not take effect
        with pytest.raises(crawlq.StoreFull) as raised:  # children and ack: one commit
            durable.add_many(batch(2), ack=second)
        assert_full(raised.value, disk)
        assert (durable.stats().queued, durable.stats().leased) == (BATCH - 2, 2)
        with pytest.raises(crawlq.StoreFull) as raised:
            waiting.flush()
        assert_full(raised.value, disk)
        assert waiting.stats().counters.acked == 1  # still waiting, still counted
        assert waiting.pop() is not None  # pops go on on a full disk
        disk.free()
        durable.ack(first)
        assert durable.add_many(batch(2), ack=second) == [True] * BATCH
        waiting.flush()
        assert durable.stats().leased == 0
    finally:
        durable.close()
        waiting.close()
    kept = {r.url for r in [*batch(0), *batch(2)]} - {first.url, second.url}
    assert_holds(url, kept, seen=2 * BATCH)
    assert_holds(other, {r.url for r in batch(1)} - {late.url}, seen=BATCH)


def test_reopening_a_full_job_says_the_disk_is_full(disk: Disk) -> None:
    """A job killed with records in its log must apply them at open: no room, StoreFull."""
    job = disk.path / "job.db"
    child = spawn("add_many", job_url(job))
    try:
        assert read_line(child) == "added"
    finally:
        sigkill(child)
    disk.fill()
    with pytest.raises(crawlq.StoreFull) as raised:
        crawlq.open_frontier(job_url(job))
    assert_full(raised.value, disk)
    assert "while opening it: the records in its log" in str(raised.value)
    # Nothing changed, the lock was released: once there is room the job opens, whole.
    disk.free()
    urls = {f"http://h{i % 7}.test/{i}" for i in range(100)}
    assert_holds(job_url(job), urls, seen=100)


def test_opening_a_closed_job_on_a_full_disk(disk: Disk) -> None:
    """Its -shm file cannot be made (SQLite calls that an I/O error): StoreFull too."""
    url = job_url(disk.path / "job.db")
    with crawlq.open_frontier(url) as frontier:
        assert all(frontier.add_many(batch(0)))
    disk.fill()
    with pytest.raises(crawlq.StoreFull) as raised:
        crawlq.open_frontier(url)
    assert_full(raised.value, disk)
    disk.free()
    assert_holds(url, {r.url for r in batch(0)}, seen=BATCH)


def test_a_delay_and_a_refetch_on_a_full_disk(disk: Disk) -> None:
    """A release with a delay or an ack with a refetch that cannot be written raises
    StoreFull and changes nothing; a scheduled request still comes due (its record
    waits for a write); all of them go through once there is room."""
    url = job_url(disk.path / "job.db")
    frontier = crawlq.open_frontier(url, ack_delay=0)
    try:
        later = crawlq.Request("http://later.test/1", not_before=time.time() + 0.3)
        assert all(frontier.add_many([*batch(0), later]))
        first, second = frontier.pop(), frontier.pop()
        assert first is not None and second is not None
        disk.fill()
        with pytest.raises(crawlq.StoreFull) as raised:
            frontier.release(first, delay=60)
        assert_full(raised.value, disk)
        with pytest.raises(crawlq.StoreFull):
            frontier.ack(second, refetch_after=60)
        with pytest.raises(crawlq.StoreFull):
            frontier.add_many(batch(1)[:1], ack=second, refetch_after=60)
        stats = frontier.stats()
        assert (stats.leased, stats.scheduled, stats.revisits) == (2, 1, 0)
        assert (stats.counters.released, stats.counters.refetched) == (0, 0)
        time.sleep(0.35)
        assert later.url in pop_all(frontier)  # due, and handed out on a full disk
        disk.free()
        frontier.release(first, delay=60)
        frontier.ack(second, refetch_after=60)
        stats = frontier.stats()
        assert (stats.scheduled, stats.revisits, stats.counters.refetched) == (2, 1, 1)
    finally:
        frontier.close()
    with crawlq.open_frontier(url) as frontier:
        stats = frontier.stats()
        assert (stats.queued, stats.leased, stats.scheduled, stats.revisits) == (BATCH - 1, 0, 2, 1)
        assert first.url not in pop_all(frontier)
