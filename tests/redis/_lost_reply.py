"""Lose the reply of the next call that reaches a Redis server (the call itself runs)."""

from __future__ import annotations

import pytest
import redis

from crawlq.stores.redis import conn as _redis_conn


def lose_next_reply(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Make the next reply read from any server time out after it was read.

    The call ran on the server; the store sees a timeout and retries it with
    the same call number. Returns a list that holds the lost reply once lost.
    """
    real_read = _redis_conn.read_replies
    dropped: list[object] = []

    def read_then_lose(conn: object, replies: int) -> list[object]:
        got = real_read(conn, replies)
        if not dropped:
            dropped.append(got)
            raise redis.TimeoutError("timeout reading (test)")
        return got

    monkeypatch.setattr(_redis_conn, "read_replies", read_then_lose)
    return dropped
