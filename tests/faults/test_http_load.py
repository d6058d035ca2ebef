"""HTTP load beside MQTT ingest, against `reliabilityd run` with its own redis-server
and mosquitto: 300 concurrent HTTP clients posting, or many loading the pages of 300
suites, while a producer publishes over MQTT. The HTTP port reads and commits through
its own bounded, waiting Redis pool, so HTTP load can only make HTTP wait or answer 503
with Retry-After; MQTT ingest never pauses and counts every event exactly."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from pathlib import Path

import aiohttp
import msgspec
import numpy as np

from reliabilityd.config import DaemonConfig, HttpConfig
from reliabilityd.events import TrialEvent
from tests.support.daemon import store_for
from tests.support.faults import assert_exact, mqtt_flush
from tests.support.helpers import (
    DaemonProcess,
    make_events,
    payloads,
    publish,
    truth_of,
    wait_until,
)
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


PAGE_CLIENTS = 24
PAGE_SUITES = 300


async def test_every_read_route_of_300_suites_beside_mqtt_ingest(
    private_redis: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
) -> None:
    """Every read route hammered at once while MQTT ingest runs: the index's pages and a
    filtered page (from the summary rows), ``GET /v1/suites``, ``/metrics``, suite pages and
    their JSON. Each reads through the HTTP port's pool, which waits for its connections, so
    no read fails on Redis (no pool runs dry), each index page lists exactly its 100
    suites, and ingest counts every event exactly with no commit failed or retried."""
    cfg = http_config(private_redis, prefix, broker=private_mosquitto)
    cfg = msgspec.structs.replace(
        cfg,
        http=HttpConfig(port=free_port(), max_connections=1024),
        daemon=DaemonConfig(instance=f"{prefix}-d", heartbeat_ttl=5.0),
    )
    events = make_events(rng, count=3000, tasks=30)
    truth = truth_of(events)
    names = [f"page-{i:03d}" for i in range(PAGE_SUITES)]
    base = f"http://127.0.0.1:{cfg.http.port}"
    pages: dict[tuple[str, int], int] = {}
    refused_by_redis: list[str] = []
    wrong_pages: list[str] = []
    answered: list[int] = []  # the index's statuses
    stop = asyncio.Event()
    # (route kind, path, Accept): every read route, each client taking them in turn.
    routes = [
        ("index", "/", "text/html"),
        ("index", "/?page=2", "text/html"),
        ("index", "/?page=3", "text/html"),
        ("filtered", "/?state=none&q=-1", "text/html"),
        ("list", "/v1/suites?page=2", "application/json"),
        ("metrics", "/metrics", "text/plain"),
        ("page", "/suites/{suite}", "text/html"),
        ("json", "/suites/{suite}", "application/json"),
    ]

    async def reader(i: int) -> None:
        async with aiohttp.ClientSession() as http:
            n = i
            while not stop.is_set():
                n += 1
                kind, path, accept = routes[n % len(routes)]
                path = path.format(suite=names[(i * 7 + n) % PAGE_SUITES])
                async with http.get(base + path, headers={"Accept": accept}) as resp:
                    body = await resp.read()
                    pages[(kind, resp.status)] = pages.get((kind, resp.status), 0) + 1
                    if b"Redis unavailable" in body:
                        at = body.index(b"Redis unavailable")
                        refused_by_redis.append(f"{path} {accept}: {body[at : at + 80]!r}")
                    if kind == "index":
                        answered.append(resp.status)
                    if kind == "index" and resp.status == 200:
                        # 100 suites in name order (the ingest's own suites and the flush's
                        # marker join the list as the daemon writes their rows).
                        got = [m.decode() for m in re.findall(rb'data-suite="([^"]+)"', body)]
                        if len(got) != 100 or got != sorted(got):
                            wrong_pages.append(f"{path}: {got[:3]}...")
                    if resp.status == 503:
                        await asyncio.sleep(0.05)

    daemon = DaemonProcess(cfg, tmp_path)
    async with store_for(cfg) as store:
        seed = [TrialEvent(name, f"t{j}", f"r{j}", "pass") for name in names for j in range(3)]
        by_suite: dict[str, list[TrialEvent]] = {}
        for e in seed:
            by_suite.setdefault(e.suite, []).append(e)
        await store.ingest.apply(by_suite, windows=dict.fromkeys(names, 0), dedup_ttl=3600)
        await store.snapshots.mark_changed(names)
    daemon.start()
    try:
        await daemon.wait_subscribed()
        async with store_for(cfg) as store:

            async def all_computed() -> bool:
                rows = await store.rows.page(limit=PAGE_SUITES)
                return rows.total == PAGE_SUITES and None not in rows.rows

            await wait_until(all_computed, 60)
            readers = [asyncio.create_task(reader(i)) for i in range(PAGE_CLIENTS)]

            async def an_index_answered() -> bool:
                return bool(answered)

            await wait_until(an_index_answered, 60)  # the pages load all along
            await publish(
                private_mosquitto.port, f"{prefix}/trials/x", payloads(events, 10), deadline=120
            )
            await assert_exact(
                store,
                truth,
                events,
                flush=mqtt_flush(private_mosquitto.port, f"{prefix}/trials/x", store),
            )

            async def every_route_loaded_often() -> bool:
                return all(
                    sum(v for (k, _), v in pages.items() if k == kind) >= 60
                    for kind, _, _ in routes
                )

            await wait_until(every_route_loaded_often, 120)
            stop.set()
            await asyncio.gather(*readers)
    finally:
        stop.set()
        daemon.kill()
    out = daemon.output()
    print(f"pages {pages}")
    # No read failed on Redis: a page past the places in flight waits, or is told to retry.
    failed_reads = [line for line in out.splitlines() if "ui_read_failed" in line]
    assert refused_by_redis == [], (refused_by_redis[:5], failed_reads[:5])
    assert {status for _, status in pages} <= {200, 503}, pages
    for kind in ("index", "filtered", "list", "metrics", "page", "json"):
        assert pages.get((kind, 200), 0) > 0, pages
    assert wrong_pages == []  # every index page listed exactly its 100 suites
    # No commit waited for Redis, none was retried; nothing else failed on it either.
    for failure in ("redis_unavailable", "heartbeat_failed", "ci_tick_failed", "ui_read_failed"):
        assert failure not in out, out[-3000:]
