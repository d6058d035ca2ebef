"""The HTTP port's own way to Redis, against a real redis-server: a page and the JSON of
one URL read through the same pool, and a POST commits through it, the port's, never the
pool that ingest and the CI tick use."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, cast

import aiohttp
import msgspec
import redis.asyncio as aioredis

from reliabilityd.config import Config
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.store import Store
from tests.support.daemon import store_for
from tests.support.helpers import current_snapshot
from tests.support.http import event, http_config, post, serving
from tests.support.servers import RedisServer

HTML = "text/html"
JSON = "application/json"
# The three reads a browser and a script make of one suite.
READS = [("/", HTML), ("/suites/web", HTML), ("/suites/web", JSON)]


async def _get(base: str, path: str, accept: str) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(base + path, headers={"Accept": accept}) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


async def _all(base: str) -> list[tuple[int, dict[str, str], bytes]]:
    """The three reads at once: each waits out redis.timeout beside the others."""
    return list(await asyncio.gather(*(_get(base, path, accept) for path, accept in READS)))


async def _statuses(base: str) -> list[int]:
    return [status for status, _, _ in await _all(base)]


@contextlib.asynccontextmanager
async def _holding(store: Store, count: int) -> AsyncIterator[None]:
    """Every connection of ``store``'s pool taken, as by requests that do not finish."""
    client = store.client
    assert isinstance(client, aioredis.Redis)
    pool = cast(Any, client.connection_pool)  # redis-py leaves get_connection untyped
    held = [await pool.get_connection() for _ in range(count)]
    try:
        yield
    finally:
        for connection in held:
            await pool.release(connection)


def _config(redis_server: RedisServer, prefix: str) -> Config:
    cfg = http_config(redis_server, prefix)
    return msgspec.structs.replace(
        cfg,
        # Short waits: a read that cannot get a connection gives up within a second.
        redis=msgspec.structs.replace(cfg.redis, timeout=1.0, max_connections=2),
        http=msgspec.structs.replace(cfg.http, max_inflight=len(READS)),
    )


async def _ready(daemon: Daemon, cfg: Config, base: str) -> None:
    batch = [event(f"t{i}", str(j), "pass" if j else "fail") for i in range(4) for j in range(3)]
    assert (await post(base, batch))[0] == 200
    async with store_for(cfg) as store:
        await current_snapshot(store, "web")
    assert await _statuses(base) == [200, 200, 200]


async def test_pages_and_json_read_through_the_http_pool_never_the_ingest_pool(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _config(redis_server, prefix)
    async with serving(cfg) as (daemon, base):
        await _ready(daemon, cfg, base)
        # Ingest's pool taken whole: every read of the port is still answered.
        async with _holding(daemon.store, cfg.redis.max_connections):
            assert await _statuses(base) == [200, 200, 200]
        # The port's pool taken whole: the page and the JSON of one URL wait for
        # it alike, and both give up after redis.timeout with the same 503.
        async with _holding(daemon.http_port.store, cfg.http.max_inflight):
            answers = await _all(base)
        assert [status for status, _, _ in answers] == [503, 503, 503]
        assert all(b"Redis unavailable" in body for _, _, body in answers)
        assert await _statuses(base) == [200, 200, 200]


async def test_a_post_commits_through_the_http_pool_never_the_ingest_pool(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _config(redis_server, prefix)
    async with serving(cfg) as (daemon, base), store_for(cfg) as store:
        await _ready(daemon, cfg, base)
        before = (await store.reads.read_state("web")).counters.trials
        # Ingest's pool taken whole (for less than redis.timeout: nothing of the
        # daemon's has given up on it yet): the POST is committed all the same.
        async with _holding(daemon.store, cfg.redis.max_connections):
            status, _, _ = await post(base, [event("t9", "during-ingest-held")])
        assert status == 200
        # The port's pool taken whole: the commit waits for it, gives up, is not counted.
        async with _holding(daemon.http_port.store, cfg.http.max_inflight):
            status, body, headers = await post(base, [event("t9", "during-port-held")])
        assert (status, headers["Retry-After"]) == (503, "2")
        assert "not committed" in body["error"]
        assert (await store.reads.read_state("web")).counters.trials == before + 1


async def test_a_read_past_the_places_in_flight_waits_then_answers_503_with_retry_after(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _config(redis_server, prefix)
    async with serving(cfg) as (daemon, base):
        await _ready(daemon, cfg, base)
        places = daemon.http_port.inflight
        for _ in range(cfg.http.max_inflight):
            await places.acquire()
        try:
            answers, (status, headers, _) = await asyncio.gather(
                _all(base), _get(base, "/metrics", "text/plain")
            )
        finally:
            for _ in range(cfg.http.max_inflight):
                places.release()
        for got, headers_of in [*((s, h) for s, h, _ in answers), (status, headers)]:
            assert got == 503
            assert headers_of["Retry-After"] == "2"
        assert all(b"max_inflight" in body for _, _, body in answers)
        assert await _statuses(base) == [200, 200, 200]
