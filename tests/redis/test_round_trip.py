"""The store's one round trip behaves like redis-py's with either reply parser."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis._parsers import _HiredisParser, _RESP2Parser

from crawlq.stores.redis.wire import pack
from crawlq.stores.redis.wire import round_trip as _round_trip

PARSERS = {"hiredis": _HiredisParser, "python": _RESP2Parser}


@pytest.fixture(params=sorted(PARSERS))
def connection(request: pytest.FixtureRequest, redis_url: str) -> Iterator[Any]:
    pool = redis.ConnectionPool.from_url(
        redis_url, parser_class=PARSERS[request.param], socket_timeout=0.3
    )
    conn = pool.get_connection()
    yield conn
    pool.disconnect()


def test_replies_of_every_shape(connection: Any) -> None:
    big = b"x" * 200_000  # many reads of the parser's buffer
    assert _round_trip(connection, pack([b"ECHO", big])) == big
    assert _round_trip(connection, pack([b"SET", b"rt:k", b"1"])) == b"OK"
    assert _round_trip(connection, pack([b"INCR", b"rt:k"])) == 2
    assert _round_trip(connection, pack([b"GET", b"rt:missing"])) is None
    reply = _round_trip(connection, pack([b"EVAL", b"return {'a', 1, {'b'}}", b"0"]))
    assert reply == [b"a", 1, [b"b"]]


def test_an_error_reply_raises_and_keeps_the_connection(connection: Any) -> None:
    with pytest.raises(redis.ResponseError, match="unknown command"):
        _round_trip(connection, pack([b"NO-SUCH-COMMAND"]))
    assert _round_trip(connection, pack([b"ECHO", b"still in step"])) == b"still in step"


def test_a_timeout_disconnects(connection: Any) -> None:
    with pytest.raises(redis.TimeoutError):
        _round_trip(connection, pack([b"BLPOP", b"rt:empty", b"2"]))
    # The late reply must never be read as the next command's: a new socket.
    assert connection._sock is None
    connection.connect()
    assert _round_trip(connection, pack([b"ECHO", b"fresh"])) == b"fresh"


def test_a_closed_connection_raises_connection_error(connection: Any, redis_url: str) -> None:
    name = b"rt-victim"
    _round_trip(connection, pack([b"CLIENT", b"SETNAME", name]))
    killer = redis.Redis.from_url(redis_url)
    victims = [c["id"] for c in killer.client_list() if c.get("name") == name.decode()]
    assert len(victims) == 1
    killer.client_kill_filter(_id=victims[0])
    killer.close()
    with pytest.raises(redis.ConnectionError):
        _round_trip(connection, pack([b"PING"]))
    assert connection._sock is None
