"""The wide entries of key format 9 (see stores/redis/lua/shared.lua), for tests that
turn a crawl back into an older format: a crawl made before format 9 has none."""

from __future__ import annotations

from typing import Any

#: The member of `ready` and `leases` (score +inf), the value of `hosts` '' and `lease` '@'.
WIDE = b"~" * 80


def strip_wide(client: Any, prefix: str) -> None:
    """Remove a crawl's wide entries, as a crawl of key format 8 or older has none."""
    client.zrem(prefix + "ready", WIDE)
    client.zrem(prefix + "leases", WIDE)
    client.hdel(prefix + "hosts", b"")
    client.hdel(prefix + "lease", b"@")
