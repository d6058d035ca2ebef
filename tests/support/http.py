"""HTTP helpers for tests: a daemon with its HTTP port, requests, and /metrics samples."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import msgspec
from prometheus_client.parser import text_string_to_metric_families

from reliabilityd.config import Config, HttpConfig, IngestConfig
from reliabilityd.daemon._daemon import Daemon
from tests.support.daemon import make_config, running
from tests.support.servers import Mosquitto, RedisServer, free_port

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def http_config(
    redis: RedisServer,
    prefix: str,
    *,
    broker: Mosquitto | None = None,
    token: str = "",
    max_payload: int = 1 << 20,
    ks: list[int] | None = None,
) -> Config:
    cfg = make_config(
        redis_url=redis.url,
        mqtt_url=broker.url if broker else "mqtt://127.0.0.1:1",
        prefix=prefix,
        ks=ks or [1, 3],
        http=HttpConfig(port=free_port(), token=token),
        ingest=IngestConfig(max_payload=max_payload),
    )
    if broker is None:
        cfg = msgspec.structs.replace(cfg, mqtt=msgspec.structs.replace(cfg.mqtt, enabled=False))
    return cfg


@contextlib.asynccontextmanager
async def serving(cfg: Config) -> AsyncIterator[tuple[Daemon, str]]:
    async with running(cfg) as daemon:
        await asyncio.wait_for(daemon.http_listening.wait(), 10)
        yield daemon, f"http://127.0.0.1:{cfg.http.port}"


def event(task: str, trial: str, outcome: str = "pass", suite: str = "web") -> dict[str, str]:
    return {"suite": suite, "task": task, "trial": trial, "outcome": outcome}


async def post(
    base: str, body: Any, *, raw: bytes | None = None, token: str | None = None
) -> tuple[int, Any, dict[str, str]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else msgspec.json.encode(body)
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base}/v1/trials", data=data, headers=headers) as resp,
    ):
        text = await resp.read()
        parsed = msgspec.json.decode(text) if text else None
        return resp.status, parsed, dict(resp.headers)


async def get(base: str, path: str) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as http, http.get(base + path) as resp:
        return resp.status, await resp.read()


def samples(text: str) -> Samples:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def scrape(base: str) -> Samples:
    status, raw = await get(base, "/metrics")
    assert status == 200
    return samples(raw.decode())


async def probe_while(base: str, work: Callable[[], Awaitable[Any]]) -> tuple[Any, float, int]:
    """``work()``'s result, the longest wait for a /healthz answer while it ran (from the
    previous answer, or from the start: a probe that cannot even send while the loop is
    held shows the stall as well), and how many answers came."""
    longest, answered = 0.0, 0
    done = asyncio.Event()

    async def probe() -> None:
        nonlocal longest, answered
        async with aiohttp.ClientSession() as http:
            last = time.perf_counter()
            while not done.is_set():
                async with http.get(f"{base}/healthz") as resp:
                    assert resp.status == 200
                    await resp.read()
                now = time.perf_counter()
                longest, last = max(longest, now - last), now
                answered += 1
                await asyncio.sleep(0.01)

    prober = asyncio.create_task(probe())
    try:
        result = await work()
    finally:
        done.set()
        await prober
    return result, longest, answered
