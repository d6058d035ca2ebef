"""Redis refuses work mid-stream (OOM, READONLY, NOSCRIPT, BUSY, a 10 s outage).

Each test runs the daemon in this event loop against a private redis-server
that is pushed into the fault while events keep arriving over MQTT, held
there until the daemon has hit it, and then released. The daemon must stay
up, pause ingest without acknowledging, say why (`reliabilityd check` too),
and catch up exactly: nothing lost, nothing counted twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
import redis.asyncio as aioredis

from reliabilityd.config import (
    AlertmanagerSinkConfig,
    Config,
    DaemonConfig,
    MqttSinkConfig,
    SinksConfig,
    WebhookSinkConfig,
)
from reliabilityd.daemon import _check as check_module
from reliabilityd.events import TrialEvent
from reliabilityd.store import Store
from tests.support.alerting import collect, flushed
from tests.support.alertmanager import Receiver
from tests.support.daemon import make_config, running, running_task, store_for
from tests.support.faults import assert_exact, counted, mqtt_flush, scenario
from tests.support.helpers import DaemonProcess, payloads, publish, truth_of, wait_until
from tests.support.servers import Mosquitto, RedisServer, free_port

Fault = Callable[[aioredis.Redis], Awaitable[Callable[[], Awaitable[None]]]]


async def oom(admin: aioredis.Redis) -> Callable[[], Awaitable[None]]:
    # maxmemory-policy noeviction (deploy/redis.conf): every write answers OOM.
    await admin.config_set("maxmemory", 1)

    async def release() -> None:
        await admin.config_set("maxmemory", 0)

    return release


async def readonly(admin: aioredis.Redis) -> Callable[[], Awaitable[None]]:
    # Demoted to a replica of a master that does not exist: it keeps its data
    # and answers READONLY to every write.
    await admin.replicaof("127.0.0.1", free_port())

    async def release() -> None:
        await admin.replicaof("NO", "ONE")

    return release


async def busy(admin: aioredis.Redis) -> Callable[[], Awaitable[None]]:
    await admin.config_set("busy-reply-threshold", 100)
    runner = aioredis.Redis(host="127.0.0.1", port=admin.connection_pool.connection_kwargs["port"])

    async def spin_forever() -> None:
        await runner.eval("while true do end", 0)

    spin = asyncio.create_task(spin_forever())
    await asyncio.sleep(0.3)

    async def release() -> None:
        killer = aioredis.Redis(
            host="127.0.0.1", port=admin.connection_pool.connection_kwargs["port"]
        )
        await killer.script_kill()
        with contextlib.suppress(Exception):
            await spin
        await killer.aclose()
        await runner.aclose()

    return release


# Each fault with what the daemon's logs say of it: the store's error and Redis's own word.
FAULTS: dict[str, tuple[Fault, str]] = {
    "oom": (oom, "StoreRefused: OOM"),
    "readonly": (readonly, "StoreRefused: READONLY"),
    "busy": (busy, "StoreRefused: BUSY"),
}


def fault_config(redis: RedisServer, broker: Mosquitto, prefix: str) -> Config:
    cfg = make_config(redis_url=redis.url, mqtt_url=broker.url, prefix=prefix)
    return msgspec.structs.replace(
        cfg, daemon=DaemonConfig(instance=f"{prefix}-d", heartbeat_ttl=1.5, blind_after=60.0)
    )


async def check(cfg: Config, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = await check_module.check(cfg)
    return code, capsys.readouterr().out


@contextlib.asynccontextmanager
async def admin_of(redis: RedisServer) -> AsyncIterator[aioredis.Redis]:
    admin = aioredis.Redis.from_url(redis.url)
    try:
        yield admin
    finally:
        await admin.aclose()


@pytest.mark.parametrize("name", sorted(FAULTS))
async def test_redis_refusing_writes_mid_stream_pauses_ingest_and_counts_exactly(
    *,
    private_redis: RedisServer,
    mosquitto: Mosquitto,
    prefix: str,
    rng: np.random.Generator,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    name: str,
) -> None:
    caplog.set_level(logging.INFO, logger="reliabilityd")
    inject, words = FAULTS[name]
    cfg = fault_config(private_redis, mosquitto, prefix)
    events, truth, messages = scenario(rng, count=3000)
    released = asyncio.Event()
    checks: list[tuple[int, str]] = []

    async def fault(admin: aioredis.Redis) -> None:
        release = await inject(admin)
        try:
            await wait_until(_logged(caplog, "event=redis_unavailable", words), 30)
            if name != "busy":  # under BUSY only SCRIPT KILL and SHUTDOWN get an answer
                checks.append(await check(cfg, capsys))
            await asyncio.sleep(1.0)  # more events arrive and wait, unacknowledged
        finally:
            await release()
            released.set()

    async with (
        admin_of(private_redis) as admin,
        running_task(cfg) as (daemon, run_task),
        store_for(cfg) as store,
    ):
        started: list[asyncio.Task[None]] = []

        async def on_progress(sent: int) -> None:
            if sent >= 1000 and not started:
                started.append(asyncio.create_task(fault(admin)))

        await publish(mosquitto.port, f"{prefix}/trials/x", messages, on_progress=on_progress)
        await asyncio.wait_for(released.wait(), 60)
        await started[0]
        await assert_exact(
            store, truth, events, flush=mqtt_flush(mosquitto.port, f"{prefix}/trials/x", store)
        )
        assert not run_task.done(), "the daemon stopped"
        # Every counted trial, and the flush's marker.
        assert daemon.committed_events == sum(truth.trials(s) for s in truth.outcomes) + 1
        await wait_until(_logged(caplog, "event=redis_recovered"), 10)
    for code, out in checks:
        assert code == (4 if "Redis unusable" in out else 1), out
        assert "unhealthy" in out
        assert words in out or "OOM" in out or "READONLY" in out, out


async def _applies_refused(admin: aioredis.Redis) -> int:
    """Apply requests Redis has refused: the ingest pipeline's leading ZADD (the idle
    index, with ``stats.idle_expiry`` set) is the daemon's only top-level ZADD."""
    stats = await admin.info("commandstats")
    return int(stats.get("cmdstat_zadd", {}).get("rejected_calls", 0))


@pytest.mark.parametrize("name", ["oom", "readonly"])
async def test_a_batch_whose_commit_redis_refuses_survives_a_kill_9_during_the_retry(
    *,
    private_redis: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
    name: str,
) -> None:
    """A batch's apply is written to Redis and refused (OOM, READONLY); while the
    daemon retries it, it is killed -9; restarted, it counts every trial the broker
    took, once.

    Nothing of the batch is acknowledged while its commit fails, so the broker
    redelivers it to the restarted daemon. Acknowledging once the request is
    written, before Redis has answered, would lose the batch here.
    """
    inject, words = FAULTS[name]
    cfg = fault_config(private_redis, private_mosquitto, prefix)
    # A day's idle expiry puts the ZADD that _applies_refused counts in every apply.
    cfg = msgspec.structs.replace(cfg, stats=msgspec.structs.replace(cfg.stats, idle_expiry=86400))
    events, truth, messages = scenario(rng, count=3000)
    topic = f"{prefix}/trials/x"
    daemon = DaemonProcess(cfg, tmp_path)
    daemon.start()
    try:
        await daemon.wait_subscribed()
        async with admin_of(private_redis) as admin, store_for(cfg) as store:
            sent = 500
            await publish(private_mosquitto.port, topic, messages[:sent])
            await wait_until(partial(counted, store, truth_of(events[:sent])), 60)
            # Redis refuses writes; the next batches reach the daemon. An attempt whose
            # refusal came before the apply was written (the dedup view's refresh,
            # every few seconds) is released and tried again.
            for _ in range(5):
                refused = await _applies_refused(admin)
                release = await inject(admin)
                await publish(private_mosquitto.port, topic, messages[sent : sent + 200])
                sent += 200

                async def apply_refused(before: int = refused) -> bool:
                    return await _applies_refused(admin) > before

                try:
                    await wait_until(apply_refused, 5)
                    break
                except TimeoutError:
                    await release()
                    await wait_until(partial(counted, store, truth_of(events[:sent])), 60)
            else:
                raise AssertionError("no apply request was ever written and refused")
            # The daemon retries the refused batch, unacknowledged: kill it now.
            await wait_until(partial(_in_log, daemon, "event=redis_unavailable", words), 30)
            daemon.kill()
            await release()
            # The rest arrives while it is down, and waits in the broker.
            await publish(private_mosquitto.port, topic, messages[sent:])
            daemon.start()
            await daemon.wait_subscribed(times=2)
            await assert_exact(
                store, truth, events, flush=mqtt_flush(private_mosquitto.port, topic, store)
            )
    finally:
        daemon.kill()


async def _in_log(daemon: DaemonProcess, *words: str) -> bool:
    return any(all(w in line for w in words) for line in daemon.output().splitlines())


def _logged(caplog: pytest.LogCaptureFixture, *words: str) -> Callable[[], Awaitable[bool]]:
    async def seen() -> bool:
        return any(all(w in r.getMessage() for w in words) for r in caplog.records)

    return seen


async def test_script_flush_mid_stream_changes_nothing(
    private_redis: RedisServer, mosquitto: Mosquitto, prefix: str, rng: np.random.Generator
) -> None:
    """NOSCRIPT never happens: every script goes by EVAL, which Redis recompiles."""
    cfg = fault_config(private_redis, mosquitto, prefix)
    events, truth, messages = scenario(rng, count=3000)
    async with admin_of(private_redis) as admin, running(cfg), store_for(cfg) as store:

        async def on_progress(sent: int) -> None:
            if sent % 500 == 0:
                await admin.script_flush()

        await publish(mosquitto.port, f"{prefix}/trials/x", messages, on_progress=on_progress)
        await assert_exact(
            store, truth, events, flush=mqtt_flush(mosquitto.port, f"{prefix}/trials/x", store)
        )
        # What makes a flush harmless: the scripts went by EVAL, never EVALSHA.
        stats = await admin.info("commandstats")
        assert stats["cmdstat_eval"]["calls"] > 0
        assert "cmdstat_evalsha" not in stats, stats["cmdstat_evalsha"]


async def test_a_ten_second_outage_mid_stream(
    private_redis: RedisServer,
    mosquitto: Mosquitto,
    prefix: str,
    rng: np.random.Generator,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = fault_config(private_redis, mosquitto, prefix)
    events, truth, messages = scenario(rng, count=3000)
    outage: list[asyncio.Task[None]] = []
    results: list[tuple[int, str]] = []

    async def down_ten_seconds() -> None:
        await asyncio.to_thread(private_redis.kill)
        await asyncio.sleep(2.0)
        results.append(await check(cfg, capsys))
        await asyncio.sleep(8.0)
        await asyncio.to_thread(private_redis.start)

    async with running(cfg), store_for(cfg) as store:

        async def on_progress(sent: int) -> None:
            if sent >= 1000 and not outage:
                outage.append(asyncio.create_task(down_ten_seconds()))

        await publish(mosquitto.port, f"{prefix}/trials/x", messages, on_progress=on_progress)
        await outage[0]
        await assert_exact(
            store, truth, events, flush=mqtt_flush(mosquitto.port, f"{prefix}/trials/x", store)
        )
    ((code, out),) = results
    assert code == 4
    assert "Redis unusable" in out


async def test_blind_daemon_tells_the_redis_free_sinks_and_then_resolves(
    private_redis: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    """Redis OOM longer than blind_after: one blind notice per sink, then one resolved."""
    with Receiver() as hook:
        cfg = fault_config(private_redis, mosquitto, prefix)
        cfg = msgspec.structs.replace(
            cfg,
            daemon=msgspec.structs.replace(cfg.daemon, blind_after=1.0),
            sinks=SinksConfig(
                mqtt=MqttSinkConfig(topic=f"{prefix}/alerts"),
                webhook=WebhookSinkConfig(url=hook.url + "/hook"),
                alertmanager=AlertmanagerSinkConfig(
                    url=hook.url, resend_interval=0.3, watchdog=True
                ),
            ),
        )
        async with (
            admin_of(private_redis) as admin,
            collect(mosquitto.port, f"{prefix}/alerts/#") as mqtt_msgs,
            running(cfg),
            store_for(cfg) as store,
        ):
            await publish(mosquitto.port, f"{prefix}/trials/x", payloads(_events(0, 10), 5))
            await wait_until(partial(_trials, store, 10), 20)
            # While it can judge, the always-firing watchdog alert keeps arriving.
            await wait_until(lambda: _alerts_named(hook, "ReliabilitydWatchdog", 3), 10)
            release = await oom(admin)
            await publish(mosquitto.port, f"{prefix}/trials/x", payloads(_events(10, 20), 5))
            await wait_until(partial(_count, hook.webhook, 1), 20)
            await wait_until(partial(_count, mqtt_msgs, 1), 10)
            firing = hook.webhook[0]
            assert (firing["alert"], firing["state"]) == ("ReliabilitydBlind", "firing")
            assert firing["instance"] == cfg.instance
            assert "StoreRefused: OOM" in firing["reason"]
            await wait_until(lambda: _alerts_named(hook, "ReliabilitydBlind", 1), 10)
            watchdogs = len(_named(hook, "ReliabilitydWatchdog"))
            blinds = len(_named(hook, "ReliabilitydBlind"))
            # Still blind, and still telling Alertmanager so (re-sent while it lasts):
            # meanwhile nothing more on the webhook, no watchdog.
            await wait_until(lambda: _alerts_named(hook, "ReliabilitydBlind", blinds + 2), 10)
            assert len(hook.webhook) == 1
            assert len(_named(hook, "ReliabilitydWatchdog")) == watchdogs
            await release()
            await wait_until(partial(_count, hook.webhook, 2), 20)
            await wait_until(partial(_count, mqtt_msgs, 2), 10)
            await wait_until(partial(_trials, store, 20), 20)  # caught up
            # Judging again (the watchdog is back), and what the broker had has arrived.
            await wait_until(lambda: _alerts_named(hook, "ReliabilitydWatchdog", watchdogs + 1), 10)
            await flushed(mosquitto.port, f"{prefix}/alerts/~flush", mqtt_msgs)
            assert [n["state"] for n in hook.webhook] == ["firing", "resolved"]
            assert [m["state"] for m in mqtt_msgs] == ["firing", "resolved"]
            assert hook.webhook[1]["since"] == firing["since"]
            assert hook.webhook[1]["ended_at"] is not None
            assert hook.rejected == []
            blind_alerts = _named(hook, "ReliabilitydBlind")
            assert "endsAt" in blind_alerts[-1]
            assert blind_alerts[-1]["labels"]["instance"] == cfg.instance


def _named(hook: Receiver, name: str) -> list[dict[str, Any]]:
    return [a for a in hook.alerts if a["labels"]["alertname"] == name]


async def _alerts_named(hook: Receiver, name: str, n: int) -> bool:
    return len(_named(hook, name)) >= n


def _events(first: int, last: int) -> list[TrialEvent]:
    return [TrialEvent("s", f"t{i % 3}", f"r{i}", "pass") for i in range(first, last)]


async def _trials(store: Store, n: int) -> bool:
    return (await store.reads.read_state("s")).counters.trials == n


async def _count(items: Sequence[object], n: int) -> bool:
    return len(items) >= n
