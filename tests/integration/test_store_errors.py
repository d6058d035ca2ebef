"""The store's errors and pools against a real redis-server: what a caller above the store
sees when Redis refuses, is gone or does not answer, and a pool that waits instead of failing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
import redis.exceptions as rex

from reliabilityd.events import TrialEvent
from reliabilityd.store import (
    Store,
    StoreRefused,
    StoreTimeout,
    StoreUnavailable,
    connect,
)
from tests.support.helpers import wait_until
from tests.support.servers import RedisServer, free_port


@contextlib.asynccontextmanager
async def store_at(url: str, seconds: float = 10.0) -> AsyncIterator[Store]:
    client = connect(url, timeout=seconds)
    try:
        yield Store(client, "errs")
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def silent_server() -> AsyncIterator[int]:
    """A port that accepts connections and never answers."""

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            await reader.read()
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


def _events(n: int) -> list[TrialEvent]:
    return [TrialEvent("s", f"t{i}", f"r{i}", "pass") for i in range(n)]


async def test_nothing_listening_is_store_unavailable_with_redis_py_as_the_cause() -> None:
    async with store_at(f"redis://127.0.0.1:{free_port()}/0", seconds=2.0) as store:
        with pytest.raises(StoreUnavailable) as caught:
            await store.reads.suites()
        # The commit path's own round trip (store._wire) says the same.
        with pytest.raises(StoreUnavailable):
            await store.ingest.apply({"s": _events(2)}, windows={"s": 0}, dedup_ttl=3600)
    assert not isinstance(caught.value, rex.RedisError)
    assert isinstance(caught.value.__cause__, rex.ConnectionError)


async def test_a_server_that_never_answers_is_store_timeout() -> None:
    async with silent_server() as port, store_at(f"redis://127.0.0.1:{port}/0", seconds=0.3) as s:
        with pytest.raises(StoreTimeout):
            await s.reads.suites()


async def test_oom_and_readonly_are_refusals_that_name_redis_s_word(
    private_redis: RedisServer,
) -> None:
    admin = aioredis.Redis.from_url(private_redis.url)
    try:
        async with store_at(private_redis.url) as store:
            await admin.config_set("maxmemory", 1)
            try:
                with pytest.raises(StoreRefused) as oom:
                    await store.admin.probe_write("i")
                with pytest.raises(StoreRefused) as oom_apply:  # through store._wire
                    await store.ingest.apply({"s": _events(2)}, windows={"s": 0}, dedup_ttl=3600)
            finally:
                await admin.config_set("maxmemory", 0)
            await admin.replicaof("127.0.0.1", free_port())
            try:
                with pytest.raises(StoreRefused) as readonly:
                    await store.admin.probe_write("i")
            finally:
                await admin.replicaof("NO", "ONE")
    finally:
        await admin.aclose()
    assert (oom.value.code, oom_apply.value.code) == ("OOM", "OOM")
    assert str(oom.value).startswith("OOM command not allowed")
    assert readonly.value.code == "READONLY"
    assert str(readonly.value).startswith("READONLY ")


async def test_a_missing_consumer_group_is_refused_with_its_code(store: Store) -> None:
    with pytest.raises(StoreRefused) as caught:
        await store.streams.stream_read(
            f"{store.prefix}:nostream", "g", "c", own_pending=True, count=1, block_ms=10
        )
    assert caught.value.code == "NOGROUP"


async def _blocked_reads(admin: aioredis.Redis, name: str) -> int:
    clients = await admin.client_list()
    return sum(1 for c in clients if c.get("name") == name and c.get("cmd") == "xreadgroup")


async def test_calls_past_the_pool_wait_for_a_connection_instead_of_failing(
    redis_server: RedisServer, prefix: str
) -> None:
    """Six blocking reads on a pool of two: two at a time hold a connection, none fails."""
    name = f"{prefix}-pool"
    client = connect(f"{redis_server.url}?client_name={name}", timeout=10.0, max_connections=2)
    store, admin = Store(client, prefix), aioredis.Redis.from_url(redis_server.url)
    stream = f"{prefix}:pool"
    try:
        await store.streams.ensure_group(stream, "g")
        reads = [
            asyncio.create_task(
                store.streams.stream_read(
                    stream, "g", f"c{i}", own_pending=False, count=1, block_ms=400
                )
            )
            for i in range(6)
        ]
        seen: list[int] = []

        async def two_blocked() -> bool:
            seen.append(await _blocked_reads(admin, name))
            return seen[-1] == 2

        await wait_until(two_blocked, 10)
        assert await asyncio.gather(*reads) == [[]] * 6
        assert max(seen) == 2
        connections = [c for c in await admin.client_list() if c.get("name") == name]
        assert len(connections) == 2
    finally:
        await client.aclose()
        await admin.aclose()


async def test_a_pool_whose_connections_stay_taken_is_unavailable_after_the_timeout(
    redis_server: RedisServer, prefix: str
) -> None:
    client = connect(redis_server.url, timeout=0.3, max_connections=1)
    assert isinstance(client, aioredis.Redis)
    store, pool = Store(client, prefix), cast(Any, client.connection_pool)
    held = await pool.get_connection()  # as by a call that does not finish
    try:
        with pytest.raises(StoreUnavailable, match="no free Redis connection in time"):
            await store.reads.suites()
    finally:
        await pool.release(held)
        await client.aclose()
