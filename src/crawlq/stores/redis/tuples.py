"""The arguments that end leases: (id, token) pairs and the tuples of acks and releases.

Packed for the finishing calls (ack_or_release.lua, due.lua's finish_tuples,
leases.lua's release_updated) from this store's leases ``(id, token, host,
origin)``; each returns the hosts of the leases too (a prefetched request of
one of them makes the call give the batch back, see ``finishing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..base import Entry, Refetch

__all__ = ["lease_pairs", "plain_tuples", "refetch_tuples", "release_tuples", "update_quads"]


def lease_pairs(leases: Sequence[Any]) -> tuple[list[bytes], set[bytes]]:
    """(id, token) pairs of this store's leases ``(id, token, host, origin)``, and their hosts."""
    pairs: list[bytes] = []
    hosts = set()
    for lease in leases:
        pairs.append(lease[0])
        pairs.append(lease[1])
        hosts.add(lease[2])
    return pairs, hosts


def update_quads(
    leases: Sequence[Any], updates: Sequence[Entry | None]
) -> tuple[list[bytes], set[bytes]]:
    """(id, token, score, payload) quads of leases released with ``updates``, and their hosts.

    An update's score is its new -priority; a lease without one gets an
    empty score and payload (a plain release). See release_updated in leases.lua.
    """
    quads: list[bytes] = []
    hosts = set()
    for lease, update in zip(leases, updates, strict=True):
        if update is None:
            quads += (lease[0], lease[1], b"", b"")
        else:
            assert update[3] is not None  # the store needs payloads
            quads += (lease[0], lease[1], b"%d" % -update[2].priority, update[3])
        hosts.add(lease[2])
    return quads, hosts


def _ms(seconds: float) -> bytes:
    """A delay in ms of server time (with a fraction: exact as a double), for due.lua."""
    return repr(seconds * 1000).encode()


def _replacing(update: Entry | None) -> tuple[bytes, bytes]:
    """An update's (score, payload) for due.lua's tuples; empty for none."""
    if update is None:
        return b"", b""
    assert update[3] is not None  # the store needs payloads
    return b"%d" % -update[2].priority, update[3]


def refetch_tuples(
    leases: Sequence[Any], refetch: Sequence[Refetch | None]
) -> tuple[list[bytes], set[bytes]]:
    """(id, token, delay ms, score, payload) tuples of acks, and their hosts.

    A refetch's delay, and its update's score and payload when it has one;
    a plain ack (None) has an empty delay. See finish_tuples in due.lua.
    """
    tuples: list[bytes] = []
    hosts = set()
    for lease, again in zip(leases, refetch, strict=True):
        if again is None:
            tuples += (lease[0], lease[1], b"", b"", b"")
        else:
            tuples += (lease[0], lease[1], _ms(again[0]), *_replacing(again[1]))
        hosts.add(lease[2])
    return tuples, hosts


def release_tuples(
    leases: Sequence[Any], updates: Sequence[Entry | None] | None, delays: Sequence[float]
) -> tuple[list[bytes], set[bytes]]:
    """(id, token, delay ms, score, payload) tuples of releases, and their hosts.

    A delay of 0 releases at once; an update replaces score and payload as
    in `update_quads`. See finish_tuples in due.lua.
    """
    tuples: list[bytes] = []
    hosts = set()
    for index, lease in enumerate(leases):
        update = None if updates is None else updates[index]
        delay = delays[index]
        tuples += (lease[0], lease[1], _ms(delay) if delay > 0 else b"", *_replacing(update))
        hosts.add(lease[2])
    return tuples, hosts


def plain_tuples(pairs: Sequence[bytes]) -> list[bytes]:
    """(id, token) pairs as the tuples of plain acks, to travel with refetches."""
    tuples: list[bytes] = []
    for i in range(0, len(pairs), 2):
        tuples += (pairs[i], pairs[i + 1], b"", b"", b"")
    return tuples
