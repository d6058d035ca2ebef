"""SIGHUP every second under MQTT and HTTP load, against `reliabilityd run -c` with its
own redis-server and mosquitto.

The config file alternates between two versions that differ in reloadable keys
(a rule, a second token, the log level, a suite override, the Redis sink's
length, the lottery) and a key that needs a restart; every fifth signal finds
a file that is not TOML. Each signal is answered by exactly one `reloaded` or
`reload_failed` line; the producers never see their token refused; and Redis
counts every trial sent, over both paths, exactly once.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp
import msgspec
import numpy as np

from reliabilityd.config import Config, DaemonConfig, HttpConfig, HttpToken, SuiteOverride
from reliabilityd.rules import Rule
from tests.support.daemon import store_for
from tests.support.faults import SUITES, assert_exact
from tests.support.helpers import (
    DaemonProcess,
    make_events,
    payloads,
    publish,
    toml_of,
    truth_of,
    wait_until,
)
from tests.support.http import http_config
from tests.support.servers import Mosquitto, RedisServer, free_port

TOKEN = "reload-token"
RELOADS = 15  # signals, one a second (every fifth one finds a bad file)


def variants(cfg: Config) -> list[Config]:
    """Two versions of the config that differ in reloadable keys, and one restart key."""
    other = msgspec.structs.replace(
        cfg,
        alerts=[Rule(name="alpha-low", suite="alpha", k=1, below=0.01, trigger="ci-low")],
        http=msgspec.structs.replace(cfg.http, tokens=[HttpToken(token="reader", read=["*"])]),
        # Stated rather than inherited; a level above INFO would hide the reload lines.
        daemon=msgspec.structs.replace(cfg.daemon, log_level="INFO"),
        suites=[SuiteOverride(match="beta", min_coverage=0.5)],
        sinks=msgspec.structs.replace(
            cfg.sinks, redis=msgspec.structs.replace(cfg.sinks.redis, maxlen=500)
        ),
        stats=msgspec.structs.replace(cfg.stats, lottery_limit=3),
        mqtt=msgspec.structs.replace(cfg.mqtt, keepalive=cfg.mqtt.keepalive + 5),
    )
    return [cfg, other]


async def test_a_reload_every_second_under_load_loses_nothing_and_counts_nothing_twice(
    private_redis: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
) -> None:
    cfg = http_config(private_redis, prefix, broker=private_mosquitto, token=TOKEN)
    cfg = msgspec.structs.replace(
        cfg,
        http=HttpConfig(port=free_port(), token=TOKEN),
        daemon=DaemonConfig(instance=f"{prefix}-d"),
    )
    events = make_events(rng, count=4000, suites=SUITES, tasks=40, flip=False)
    truth = truth_of(events)
    over_mqtt, over_http = events[::2], events[1::2]
    daemon = DaemonProcess(cfg, tmp_path)
    versions = [toml_of(v) for v in variants(cfg)]
    statuses: dict[int, int] = {}
    outcomes = {"reloaded": 0, "reload_failed": 0}
    loading = asyncio.Event()

    async def http_producer() -> None:
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
        url = f"http://127.0.0.1:{cfg.http.port}/v1/trials"
        async with aiohttp.ClientSession() as http:
            for i in range(0, len(over_http), 20):
                body = msgspec.json.encode(over_http[i : i + 20])
                while True:  # a 503 is retried: trial ids make it idempotent
                    async with http.post(url, data=body, headers=headers) as resp:
                        await resp.read()
                        statuses[resp.status] = statuses.get(resp.status, 0) + 1
                    if resp.status != 503:
                        break
                    await asyncio.sleep(0.2)
                await asyncio.sleep(0.08)

    async def mqtt_producer() -> None:
        async def paced(_: int) -> None:
            await asyncio.sleep(0.4)  # 50 messages every 0.4 s: over the reloads

        await publish(
            private_mosquitto.port,
            f"{prefix}/trials/x",
            payloads(over_mqtt, 2),
            on_progress=paced,
            client_id=f"{prefix}-pub",
        )

    def answers() -> int:
        """Reload outcomes in the log so far (and the daemon still runs)."""
        log = daemon.output()
        assert daemon.proc is not None
        assert daemon.proc.poll() is None, log[-2000:]
        for key in outcomes:
            outcomes[key] = log.count(f"event={key} ")
        return sum(outcomes.values())

    async def reloads() -> None:
        await loading.wait()
        for n in range(RELOADS):
            bad = n % 5 == 4
            daemon.path.write_bytes(b"[stats\nk = " if bad else versions[n % 2])
            before = answers()
            daemon.signal(signal.SIGHUP)

            async def answered(before: int = before) -> bool:
                return answers() == before + 1

            await wait_until(answered, 20)
            await asyncio.sleep(1.0)

    daemon.start()
    try:
        await daemon.wait_subscribed()
        started = time.monotonic()
        reloading = asyncio.create_task(reloads())
        loading.set()
        await asyncio.gather(http_producer(), mqtt_producer())
        await reloading
        elapsed = time.monotonic() - started
        async with store_for(cfg) as store:
            await assert_exact(store, truth, events)
        alive = daemon.proc is not None and daemon.proc.poll() is None
    finally:
        daemon.kill()
    log = daemon.output()
    print(f"{outcomes} in {elapsed:.1f} s; http statuses {statuses}")
    assert alive, log[-3000:]
    assert outcomes == {"reloaded": RELOADS - RELOADS // 5, "reload_failed": RELOADS // 5}
    assert set(statuses) <= {200, 503}, statuses  # the token was never refused
    assert "event=reload_ignored keys=mqtt.keepalive" in log
    assert "changed=" in log
