"""HTTP load beside MQTT ingest, against `reliabilityd run` with its own redis-server
and mosquitto: 300 concurrent HTTP clients posting while a producer publishes over
MQTT. The HTTP port has its own bounded Redis pool, so HTTP load can only make HTTP
answer 503 with Retry-After; MQTT ingest never pauses and counts every event exactly."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import aiohttp
import msgspec
import numpy as np

from reliabilityd.config import DaemonConfig, HttpConfig
from tests.support.daemon import store_for
from tests.support.faults import assert_exact, mqtt_flush
from tests.support.helpers import DaemonProcess, make_events, payloads, publish, truth_of
from tests.support.http import http_config
from tests.support.servers import Mosquitto, RedisServer, free_port

CLIENTS = 300
TOKEN = "load-token"


async def _check(config: Path) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "reliabilityd", "check", "-c", str(config)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=dict(os.environ),
    )
    out, _ = await proc.communicate()
    return proc.returncode or 0, out.decode()


async def test_300_http_clients_cannot_pause_mqtt_ingest(
    private_redis: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
) -> None:
    cfg = http_config(private_redis, prefix, broker=private_mosquitto, token=TOKEN)
    cfg = msgspec.structs.replace(
        cfg,
        # The connection cap is not what this test is about: every client gets in.
        http=HttpConfig(port=free_port(), token=TOKEN, max_connections=1024),
        # A third of the default TTL: sampled often, yet not so tight that a loop
        # busy with HTTP parsing on a loaded machine misses a beat.
        daemon=DaemonConfig(instance=f"{prefix}-d", heartbeat_ttl=5.0),
    )
    events = make_events(rng, count=3000, tasks=30)
    truth = truth_of(events)
    daemon = DaemonProcess(cfg, tmp_path)
    base = f"http://127.0.0.1:{cfg.http.port}"
    statuses: dict[int, int] = {}
    reads: dict[int, int] = {}
    peak_clients = 0
    missing_retry_after = 0
    answered_200: set[str] = set()
    posted = 0
    stop = asyncio.Event()

    async def client(i: int) -> None:
        nonlocal missing_retry_after, posted
        n = 0
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        async with aiohttp.ClientSession() as http:
            if i % 3 == 2:  # a third read snapshots: they share the HTTP pool's bound
                while not stop.is_set():
                    async with http.get(f"{base}/suites/web") as resp:
                        await resp.read()
                        reads[resp.status] = reads.get(resp.status, 0) + 1
                return
            while not stop.is_set():
                trials = [f"c{i}-{n}-{j}" for j in range(5)]
                n += 1
                body = msgspec.json.encode(
                    [
                        {"suite": "web", "task": f"t{j}", "trial": t, "outcome": "pass"}
                        for j, t in enumerate(trials)
                    ]
                )
                posted += len(trials)
                async with http.post(f"{base}/v1/trials", data=body, headers=headers) as resp:
                    await resp.read()
                    statuses[resp.status] = statuses.get(resp.status, 0) + 1
                    if resp.status == 200:
                        answered_200.update(trials)
                    elif resp.status == 503:
                        if resp.headers.get("Retry-After") != "2":
                            missing_retry_after += 1
                        await asyncio.sleep(0.05)

    paused_samples: list[object] = []
    heartbeats = 0

    async def sample() -> None:
        nonlocal heartbeats, peak_clients
        async with store_for(cfg) as store:
            while not stop.is_set():
                peak_clients = max(peak_clients, len(await store.client.client_list()))
                info = await store.admin.heartbeat_info(cfg.instance)
                if info is not None:
                    heartbeats += 1
                    if info.get("paused_since") is not None:
                        paused_samples.append(info)
                await asyncio.sleep(0.2)

    daemon.start()
    try:
        await daemon.wait_subscribed()
        async with store_for(cfg) as store:
            workers = [asyncio.create_task(client(i)) for i in range(CLIENTS)]
            sampler = asyncio.create_task(sample())
            await asyncio.sleep(1.0)  # the HTTP load is on before MQTT starts
            started = time.monotonic()
            checks = [_check(daemon.path)]
            await publish(
                private_mosquitto.port, f"{prefix}/trials/x", payloads(events, 10), deadline=120
            )
            checks.append(_check(daemon.path))
            await assert_exact(
                store,
                truth,
                events,
                flush=mqtt_flush(private_mosquitto.port, f"{prefix}/trials/x", store),
            )
            checks.append(_check(daemon.path))
            results = await asyncio.gather(*checks)
            elapsed = time.monotonic() - started
            stop.set()
            await asyncio.gather(*workers)
            await sampler
            web = (await store.reads.read_state("web")).counters.trials
    finally:
        stop.set()
        daemon.kill()
    out = daemon.output()
    print(f"http statuses {statuses}, {heartbeats} heartbeats sampled, mqtt in {elapsed:.1f} s")
    print(f"snapshot reads {reads}, at most {peak_clients} Redis clients")
    assert set(statuses) <= {200, 503}, statuses
    assert set(reads) <= {200, 404, 503}, reads  # 404 until the first snapshot
    # The daemon's HTTP connections to Redis stay within http.max_inflight; the
    # rest are its loops', this test's and the `check` commands'.
    assert peak_clients <= cfg.http.max_inflight + 24, peak_clients
    assert statuses.get(200, 0) > 0
    assert missing_retry_after == 0
    assert heartbeats > 3
    assert paused_samples == []
    for code, text in results:
        assert code == 0, text
        assert text.startswith("healthy"), text
    # MQTT ingest never waited for Redis.
    assert "redis_unavailable" not in out, out[-3000:]
    assert "heartbeat_failed" not in out
    # Every HTTP trial answered 200 is counted; none past what was posted.
    assert len(answered_200) <= web <= posted
