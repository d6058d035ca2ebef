"""Benchmark: POST /v1/trials events/s, beside the same commits without HTTP.

A private redis-server and one daemon (HTTP on, MQTT off). The baseline
hands the same decoded batches straight to the daemon's commit
(``Daemon.http_port.commit``); the HTTP figure sends each batch as a JSON POST over
one keep-alive connection, one request at a time, and counts it once the
200 is back (which comes after the Redis commit). The two alternate for a
few rounds and each keeps its best, so the ratio is the cost of HTTP,
decoding and the per-element answer on this machine, in this run.

Also prints one /metrics scrape's time with many suites, beside a bare
``/healthz`` round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import tempfile
import time
from pathlib import Path

import aiohttp
import msgspec

from reliabilityd.config import Config, HttpConfig, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.embedded.processes import RedisServer, free_port
from reliabilityd.events import TrialEvent
from reliabilityd.sources import Batch

BATCH = 500
BATCHES = 100
ROUNDS = 3
SUITES = 200


def _batches(tag: str) -> list[list[TrialEvent]]:
    return [
        [
            TrialEvent(
                "bench",
                f"task {i % 2000}",
                f"{tag}-{b}-{i}",
                "pass" if (i * 7) % 10 < 7 else "fail",
            )
            for i in range(BATCH)
        ]
        for b in range(BATCHES)
    ]


async def _direct(daemon: Daemon, batches: list[list[TrialEvent]]) -> float:
    started = time.perf_counter()
    for batch in batches:
        await daemon.http_port.commit(Batch.of(batch, [], "bench"))
    return BATCH * len(batches) / (time.perf_counter() - started)


async def _http(http: aiohttp.ClientSession, url: str, batches: list[list[TrialEvent]]) -> float:
    bodies = [msgspec.json.encode(b) for b in batches]
    started = time.perf_counter()
    for body in bodies:
        async with http.post(url, data=body) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"POST answered {resp.status}")
    return BATCH * len(bodies) / (time.perf_counter() - started)


async def _timed_get(http: aiohttp.ClientSession, url: str, times: int = 20) -> float:
    best = float("inf")
    for _ in range(times):
        started = time.perf_counter()
        async with http.get(url) as resp:
            await resp.read()
        best = min(best, time.perf_counter() - started)
    return best


async def _main() -> None:
    with tempfile.TemporaryDirectory(prefix="reliabilityd-bench-") as tmp:
        redis = RedisServer("redis", Path(tmp), free_port())
        redis.start()
        port = free_port()
        config = Config(
            redis=RedisConfig(url=redis.url, prefix="bench"),
            mqtt=MqttConfig(enabled=False),
            stats=StatsConfig(k=[1, 5], ci_interval=1.0, n_boot=200),
            http=HttpConfig(port=port),
        )
        daemon = Daemon(config)
        stop = asyncio.Event()
        task = asyncio.create_task(daemon.run(stop))
        try:
            await asyncio.wait_for(daemon.http_listening.wait(), 10)
            base = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as http:
                direct = posted = 0.0
                for r in range(ROUNDS):
                    direct = max(direct, await _direct(daemon, _batches(f"d{r}")))
                    posted = max(posted, await _http(http, f"{base}/v1/trials", _batches(f"h{r}")))
                print(f"best of {ROUNDS} alternating rounds, {BATCHES} batches of {BATCH} events")
                print(f"  direct commit      {direct:>10,.0f} events/s")
                print(
                    f"  POST /v1/trials    {posted:>10,.0f} events/s  ({posted / direct:.0%} "
                    "of direct)"
                )
                many = [
                    TrialEvent(f"suite-{s}", f"task {t}", str(j), "pass" if j % 3 else "fail")
                    for s in range(SUITES)
                    for t in range(5)
                    for j in range(5)
                ]
                await daemon.http_port.commit(Batch.of(many, [], "bench"))
                await asyncio.sleep(3 * config.stats.ci_interval)  # let snapshots land
                scrape = await _timed_get(http, f"{base}/metrics")
                health = await _timed_get(http, f"{base}/healthz")
                print(
                    f"  /metrics with {SUITES + 1} suites  {scrape * 1000:7.1f} ms "
                    f"(bare /healthz {health * 1000:.1f} ms, best of 20)"
                )
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)
            await daemon.store.client.aclose()
            with contextlib.suppress(Exception):
                redis.stop(signal.SIGKILL)


def main() -> None:
    asyncio.run(_main())


if __name__ == "__main__":
    main()
