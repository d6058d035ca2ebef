"""Many commands in one write, every reply read in order: ingest's and the tick's round trip.

redis-py's pipeline packs commands in Python, which costs about 2 us per
event at one event per message, and as much per script call of the CI
tick; hiredis packs them in C. Its ``read_response`` arms a timer for every
reply (about 10 us each, most of the cost of a reply already buffered): the
round trip arms one, the connection's ``socket_timeout``, for all its replies
together, and reads each with ``timeout=math.inf`` (redis-py's documented
"no timer of its own"). This uses the connection pool's public methods
(``get_connection``, ``send_packed_command``, ``read_response``, ``release``)
through a typed view, since redis-py leaves some of them unannotated.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any, Protocol, cast

import hiredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from reliabilityd.store._base import Redis
from reliabilityd.store._errors import TRANSLATED, translate

__all__ = ["pipelined"]


class _Connection(Protocol):
    socket_timeout: float | None

    async def send_packed_command(self, command: bytes) -> None: ...
    async def read_response(self, *, timeout: float | None = None) -> Any: ...  # noqa: ASYNC109
    async def disconnect(self) -> None: ...


class _Pool(Protocol):
    async def get_connection(self) -> _Connection: ...
    async def release(self, connection: _Connection) -> None: ...


_pack = cast("Any", hiredis).pack_command  # its stub types the argument as a 1-tuple


async def pipelined(
    client: Redis,
    commands: Sequence[tuple[Any, ...]],
    sent: asyncio.Event | None = None,
) -> list[Any]:
    """Send the commands in one write, read every reply in order: ingest's round trip.

    hiredis packs the commands in C (redis-py's pipeline packs them in
    Python, which cost 2 us per event at one event per message). Every reply
    is read before an error reply is raised, so the connection stays in step;
    any other failure, cancellation included, drops the connection. On a
    cluster, redis-py's pipeline routes each command to its node. ``sent`` is
    set once the request is written (on a cluster, as it is handed over).
    Failures leave as the store's errors: the first error reply as
    StoreRefused, a lost connection or a round trip past the connection's
    ``socket_timeout`` as StoreUnavailable.
    """
    try:
        return await _round_trip(client, commands, sent)
    except TRANSLATED as exc:
        raise translate(exc) from exc


async def _round_trip(
    client: Redis,
    commands: Sequence[tuple[Any, ...]],
    sent: asyncio.Event | None,
) -> list[Any]:
    if isinstance(client, RedisCluster):
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        if sent is not None:
            sent.set()
        return await pipe.execute()
    pool = cast(_Pool, client.connection_pool)
    conn = await pool.get_connection()
    try:
        packed: list[bytes] = [_pack(c) for c in commands]
        await conn.send_packed_command(b"".join(packed))
        if sent is not None:
            sent.set()
        replies: list[Any] = []
        try:
            async with asyncio.timeout(conn.socket_timeout):
                for _ in commands:
                    try:
                        replies.append(await conn.read_response(timeout=math.inf))
                    except ResponseError as exc:
                        replies.append(exc)
        except TimeoutError:
            raise TimeoutError(
                f"Timeout reading {len(commands)} replies: {len(replies)} came within"
                f" {conn.socket_timeout:g} s"
            ) from None
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)
    for reply in replies:
        if isinstance(reply, ResponseError):
            raise reply
    return replies
