"""The Redis store's host controls and per-host figures (a mixin of `RedisStore`).

Blocks and policies are changed by the ``control`` function (``lua/control.lua``),
atomically with the hosts' filing, so every worker of the crawl obeys them
from its next call; reading them needs no function.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ..._errors import ConfigError
from ..._request import Request
from ..base import HostList
from .config import RedisURL
from .conn import Link
from .host_views import host_counts, host_policy
from .open import Dedup
from .wire import pack

__all__ = ["RedisControls"]

_CHUNK: Final = 1000  # fingerprints per command


class RedisControls:
    """Host controls of `crawlq.stores.redis.RedisStore`."""

    if TYPE_CHECKING:
        _bloom_bits: int
        _buffer: deque[tuple[Request, bytes]]
        _control_head: list[bytes]
        _dedup: Dedup
        _functions: dict[bytes, bytes]
        _link: Link
        _location: RedisURL
        _prefix: bytes

        def flush(self) -> None: ...
        def _send_host_accepted(self) -> None: ...
        def _call(
            self, function: bytes, refill: int, force: bool, extra: Sequence[bytes], doing: str
        ) -> list[Any]: ...

    def host_counts(self, limit: int) -> HostList:
        self.flush()
        self._send_host_accepted()  # this worker's own counts; others' are a second old at most
        mine: dict[str, int] = {}
        for _, host in self._buffer:
            name = host.decode()
            mine[name] = mine.get(name, 0) + 1
        return host_counts(self._link, self._prefix, limit, mine)

    # -- host controls ----------------------------------------------------------

    def _control(self, what: bytes, host: str, *args: bytes) -> int:
        head = [b"FCALL", self._functions[b"control"], b"1", self._prefix, what]
        command = pack([*head, *self._control_head, host.encode(), *args])
        return int(self._link.call(command, "changing a host's controls"))

    def block_host(self, host: str, seconds: float | None) -> None:
        if seconds is None:
            self._control(b"unblock", host)
            return
        self._control(b"block", host, b"%d" % math.ceil(seconds * 1000))
        name = host.encode()
        if any(h == name for _, h in self._buffer):
            # Prefetched requests of the host go back: this worker obeys its
            # own block at once (other workers' batches, at most `prefetch`
            # requests each, were leased before it).
            self._call(b"ack_or_release", 0, True, [b"a", b"0"], "blocking a host")

    def set_host_policy(self, host: str, delay: float | None, concurrency: int | None) -> None:
        self._control(
            b"policy",
            host,
            b"" if delay is None else b"%d" % math.ceil(round(delay * 1_000_000, 3) / 1000),
            b"" if concurrency is None else b"%d" % concurrency,
        )

    def host_policy(self, host: str) -> tuple[float | None, int | None]:
        return host_policy(self._link, self._prefix, host)

    def forget(self, fingerprints: Sequence[bytes]) -> int:
        if self._bloom_bits:
            raise ConfigError(
                f"crawl {self._location.crawl!r} dedups with a Bloom filter, which cannot "
                "remove a fingerprint: forget() needs exact dedup"
            )
        removed = 0
        for i in range(0, len(fingerprints), _CHUNK):
            chunk = fingerprints[i : i + _CHUNK]
            if self._dedup.timed:
                reply = self._link.command(
                    b"HDEL", self._prefix + b"seen_at", *chunk, doing="forgetting"
                )
            else:
                # Buckets (or an older crawl's set): the function finds them.
                function = self._functions[b"forget"]
                reply = self._link.call(
                    pack([b"FCALL", function, b"1", self._prefix, *chunk]), "forgetting"
                )
            removed += int(reply)
        return removed
