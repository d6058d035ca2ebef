"""After a Redis restart every pooled connection is stale: none may fail its next command.

Without a check, each connection of a pool finds out on its next command,
which fails: the daemon's commit paused ingest again seconds after Redis
was back, a POST got a 503, and the CI tick, the heartbeat and the outboxes
each logged a failure, up to a minute after the restart (`make soak`).
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from reliabilityd.store import connect
from reliabilityd.store._base import HEALTH_CHECK_SECONDS
from tests.support.servers import RedisServer

CONNECTIONS = 4


@pytest.mark.parametrize("max_connections", [8, 32])
async def test_no_pooled_connection_fails_its_next_command_after_a_redis_restart(
    private_redis: RedisServer, max_connections: int
) -> None:
    client = connect(private_redis.url, max_connections=max_connections)
    try:
        # Each BLPOP holds its connection for 0.2 s: the pool opens one per call.
        await asyncio.gather(*(client.blpop(["nothing"], timeout=0.2) for _ in range(CONNECTIONS)))
        await asyncio.to_thread(private_redis.kill)
        await asyncio.to_thread(private_redis.start)
        # The check is for connections idle longer than the interval (a busy one
        # meets a restart on a command it is carrying, which fails, rightly).
        await asyncio.sleep(HEALTH_CHECK_SECONDS)
        results = await asyncio.gather(
            *(client.incr("n") for _ in range(CONNECTIONS)), return_exceptions=True
        )
        assert [r for r in results if isinstance(r, BaseException)] == []
        # Each INCR ran once: the check never sends a command twice.
        assert await client.get("n") == str(CONNECTIONS).encode()
    finally:
        await client.aclose()


async def test_a_loop_stalled_inside_the_handshake_fails_no_command(
    private_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An interval this short is a loop that stalls past the interval between
    # every two sends of redis-py's pipelined handshake (CLIENT SETINFO twice,
    # SELECT): a ping there would read a handshake reply as its own. On the
    # Redis before 7.2 the tests run, the first reply is SETINFO's error.
    monkeypatch.setattr("reliabilityd.store._base.HEALTH_CHECK_SECONDS", 1e-9)
    client = connect(f"{private_redis.url}/1", max_connections=8)
    try:
        for _ in range(3):  # each round opens new connections
            results = await asyncio.gather(
                *(client.blpop(["nothing"], timeout=0.1) for _ in range(CONNECTIONS)),
                return_exceptions=True,
            )
            assert results == [None] * CONNECTIONS
            assert isinstance(client, aioredis.Redis)  # connect gave a single-node client
            await client.connection_pool.disconnect()
        assert await client.incr("n") == 1
        assert await client.get("n") == b"1"  # on database 1, as the URL says
    finally:
        await client.aclose()
