"""Redis I/O of the Redis Stream source: its consumer group, reads, claims, acknowledgements.

The stream commands live in the store with every other Redis command. The
group is created at the last committed entry id
that ``Store.apply`` keeps, so a deleted group never replays what was
already counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.exceptions

from reliabilityd.store._base import Redis
from reliabilityd.store._errors import boundary
from reliabilityd.store.keys import Keys


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@boundary
class Streams:
    """Stream consumer-group commands."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    async def stream_cursor(self, stream: str, group: str) -> str | None:
        """The last committed entry id of a stream for a group, None before any."""
        raw: Any = await self.client.get(self.keys.stream_cursor(stream, group))
        return None if raw is None else _text(raw)

    async def ensure_group(self, stream: str, group: str) -> str | None:
        """Create the group (and the stream) unless it exists; returns the id it starts after,
        None when it already existed."""
        start = await self.stream_cursor(stream, group) or "0"
        try:
            await self.client.xgroup_create(stream, group, id=start, mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
            return None
        return start

    async def stream_claim(
        self, stream: str, group: str, consumer: str, *, min_idle: float, count: int
    ) -> Sequence[Any]:
        """Entries another consumer left pending at least ``min_idle`` seconds (XAUTOCLAIM)."""
        claimed: Any = await self.client.xautoclaim(
            stream, group, consumer, min_idle_time=int(min_idle * 1000), start_id="0-0", count=count
        )
        return list(claimed[1])

    async def stream_read(
        self,
        stream: str,
        group: str,
        consumer: str,
        *,
        own_pending: bool,
        count: int,
        block_ms: int,
    ) -> Sequence[Any]:
        """Our own pending entries (``own_pending``) or new ones, blocking up to ``block_ms``."""
        reply: Any = await self.client.xreadgroup(
            group,
            consumer,
            {stream: "0" if own_pending else ">"},
            count=count,
            block=None if own_pending else block_ms,
        )
        # RESP2: [[key, entries]] for our one stream.
        return list(reply[0][1]) if reply else []

    async def stream_ack(self, stream: str, group: str, ids: Sequence[bytes | str]) -> None:
        if ids:
            await self.client.xack(stream, group, *ids)
