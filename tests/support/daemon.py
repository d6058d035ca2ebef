"""Config builders and an in-process daemon runner for integration tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig, StreamConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.store import Store, connect


def make_config(
    *,
    redis_url: str,
    mqtt_url: str,
    prefix: str,
    client_id: str | None = None,
    ks: list[int] | None = None,
    ci_interval: float = 0.3,
    window: int = 0,
    **sections: Any,
) -> Config:
    cfg = Config(
        redis=RedisConfig(url=redis_url, prefix=prefix),
        mqtt=MqttConfig(
            url=mqtt_url,
            topic=f"{prefix}/trials/#",
            client_id=client_id or f"{prefix}-d",
            snapshot_topic=f"{prefix}/snapshot",
        ),
        stats=StatsConfig(k=ks or [1, 3], ci_interval=ci_interval, n_boot=500, window=window),
    )
    for name, value in sections.items():
        cfg = msgspec.structs.replace(cfg, **{name: value})
    return cfg


def with_stream(cfg: Config, key: str, claim_idle: float = 60.0) -> Config:
    return msgspec.structs.replace(
        cfg, stream=StreamConfig(enabled=True, key=key, claim_idle=claim_idle)
    )


@contextlib.asynccontextmanager
async def running(config: Config) -> AsyncIterator[Daemon]:
    """A daemon in this test's event loop; stopped (gracefully) on exit."""
    async with running_task(config) as (daemon, _):
        yield daemon


@contextlib.asynccontextmanager
async def running_task(config: Config) -> AsyncIterator[tuple[Daemon, asyncio.Task[None]]]:
    """Like ``running``, with the task that runs the daemon (to see that it is still up)."""
    daemon = Daemon(config)
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(stop))
    try:
        if config.mqtt.enabled:
            # A message published before the subscription exists reaches no one.
            await asyncio.wait_for(daemon.subscribed.wait(), 20)
        yield daemon, task
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await daemon.store.client.aclose()


@contextlib.asynccontextmanager
async def store_for(config: Config) -> AsyncIterator[Store]:
    client = connect(config.redis.url, cluster=config.redis.cluster)
    try:
        yield Store(client, config.redis.prefix)
    finally:
        await client.aclose()
