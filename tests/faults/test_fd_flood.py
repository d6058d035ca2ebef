"""A file-descriptor flood: `reliabilityd run` under RLIMIT_NOFILE 384, with its own
redis-server and mosquitto, flooded with more idle sockets than its file limit.

The daemon keeps its HTTP connections under the limit (logged as
``http_connections_clamped``) and closes the oldest idle one for each new
connection, so `/healthz` keeps answering on a fresh connection, MQTT ingest
keeps counting, the reconnect to a restarted Redis succeeds, and the log stays
small."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import aiohttp
import msgspec
import numpy as np

from reliabilityd.config import DaemonConfig, HttpConfig
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

NOFILE = 384  # leaves 96 HTTP connections after the reserve (_http_server.connection_limit)
FLOOD = 600  # idle sockets held open at once, well past the daemon's file limit
LOG_BOUND = 64 * 1024  # bytes of log the whole test may produce


async def test_an_idle_socket_flood_past_the_file_limit_leaves_health_and_ingest_working(
    private_redis: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
) -> None:
    cfg = http_config(private_redis, prefix, broker=private_mosquitto, token="t")
    cfg = msgspec.structs.replace(
        cfg,
        http=HttpConfig(port=free_port(), token="t", read_timeout=30.0),
        daemon=DaemonConfig(instance=f"{prefix}-d", heartbeat_ttl=1.5),
    )
    port = cfg.http.port
    first, second = np.array_split(np.arange(2000), 2)
    events = make_events(rng, count=2000, tasks=20)
    truth_first = truth_of([events[i] for i in first])
    daemon = DaemonProcess(cfg, tmp_path, nofile=NOFILE)
    # Each idle socket and the task that reads it until the daemon closes it.
    flood: list[tuple[asyncio.StreamWriter, asyncio.Task[None]]] = []
    stop = asyncio.Event()

    async def open_one() -> None:
        with contextlib.suppress(OSError):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            flood.append((writer, asyncio.create_task(_drain(reader))))

    async def keep_flooding() -> None:
        """Hold FLOOD idle sockets open, reopening each one the daemon closes: all
        at once, so the daemon's accept queue stays full (its accepts come in
        batches that reach the connection cap only later)."""
        while not stop.is_set():
            for entry in [e for e in flood if e[1].done()]:
                entry[0].close()
                flood.remove(entry)
            await asyncio.gather(*(open_one() for _ in range(FLOOD - len(flood))))
            await asyncio.sleep(0.05)

    async def healthz() -> bool:
        connector = aiohttp.TCPConnector(force_close=True)
        async with (
            aiohttp.ClientSession(connector=connector) as http,
            http.get(f"http://127.0.0.1:{port}/healthz", timeout=aiohttp.ClientTimeout(5)) as r,
        ):
            return r.status == 200

    daemon.start()
    try:
        await daemon.wait_subscribed()
        assert "event=http_connections_clamped" in daemon.output()
        await wait_until(healthz, 20)
        flooder = asyncio.create_task(keep_flooding())
        await wait_until(lambda: _at_least(flood, FLOOD), 60)
        # Health answers on a fresh connection while the flood holds its sockets.
        for _ in range(5):
            assert await healthz()
        async with store_for(cfg) as store:
            await publish(
                private_mosquitto.port,
                f"{prefix}/trials/x",
                payloads([events[i] for i in first], 10),
                client_id="flood-pub-1",
            )
            flush = mqtt_flush(private_mosquitto.port, f"{prefix}/trials/x", store)
            await assert_exact(store, truth_first, [events[i] for i in first], flush=flush)
        # Redis restarts under the flood: the daemon reconnects and counts the rest.
        await asyncio.to_thread(private_redis.stop)
        await asyncio.to_thread(private_redis.start)
        async with store_for(cfg) as store:
            await publish(
                private_mosquitto.port,
                f"{prefix}/trials/x",
                payloads([events[i] for i in second], 10),
                client_id="flood-pub-2",
            )
            flush = mqtt_flush(private_mosquitto.port, f"{prefix}/trials/x", store)
            await assert_exact(store, truth_of(events), events, flush=flush)
        assert await healthz()
        assert daemon.proc is not None
        assert daemon.proc.poll() is None
        stop.set()
        await flooder
    finally:
        stop.set()
        for writer, reading in flood:
            writer.close()
            reading.cancel()
        daemon.kill()
    size = daemon.log.stat().st_size
    print(f"daemon log: {size} bytes")
    out = daemon.output()
    assert size < LOG_BOUND, out[-3000:]
    assert "Too many open files" not in out
    assert "Traceback" not in out


async def _drain(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(OSError):
        while await reader.read(4096):
            pass


async def _at_least(flood: list[tuple[asyncio.StreamWriter, asyncio.Task[None]]], n: int) -> bool:
    return len(flood) >= n


def test_a_file_limit_that_leaves_no_room_for_connections_is_a_config_error(
    redis_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    cfg = http_config(redis_server, prefix)
    daemon = DaemonProcess(cfg, tmp_path, nofile=150)
    daemon.start()
    try:
        code = daemon.wait(60)
    finally:
        daemon.kill()
    out = daemon.output()
    assert code == 2, out
    assert "RLIMIT_NOFILE: $.http.max_connections: the file limit 150 leaves" in out
    assert "raise LimitNOFILE" in out
