"""The daemon end to end against real mosquitto and redis-server processes."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import aiomqtt
import msgspec
import numpy as np
import pytest
import redis.asyncio as aioredis

from reliabilityd.config import StoreConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.daemon._recompute import Recompute, Tick
from reliabilityd.events import TrialEvent
from reliabilityd.stats import snapshot
from reliabilityd.stats.lottery import lottery_cases
from reliabilityd.store import Store
from tests.support.daemon import make_config, running, running_task, store_for, with_stream
from tests.support.helpers import (
    Truth,
    evaluations,
    make_events,
    payloads,
    publish,
    toml_of,
    truth_of,
    wait_until,
)
from tests.support.servers import Mosquitto, RedisServer


async def all_counted(store: Store, truth: Truth, suites: tuple[str, ...]) -> bool:
    for suite in suites:
        c = (await store.reads.read_state(suite)).counters
        if (c.trials, c.errors, c.skips) != (
            truth.trials(suite),
            truth.errors.get(suite, 0),
            truth.skips.get(suite, 0),
        ):
            return False
    return True


async def snapshot_current(store: Store, suite: str) -> bool:
    state = await store.reads.read_state(suite)
    snap = await store.snapshots.fields(suite)
    return snap.get("version") == str(state.counters.version)


def expected_estimates(truth: Truth, suite: str, ks: tuple[int, ...]) -> list[object]:
    settings = snapshot.StatsSettings(ks=ks, n_boot=500)
    estimates = snapshot.full_estimates(truth.hist(suite), settings)
    return list(msgspec.json.decode(msgspec.json.encode(estimates)))


async def test_ten_thousand_events_counted_exactly(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str, rng: np.random.Generator
) -> None:
    cfg = make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix)
    events = make_events(rng, count=10_000)
    truth = truth_of(events)
    # Mixed shapes: single events and arrays of up to 20.
    messages = payloads(events[:3000], 1) + payloads(events[3000:], 20)
    async with running(cfg), store_for(cfg) as store:
        await publish(mosquitto.port, f"{prefix}/trials/x", messages)
        await wait_until(lambda: all_counted(store, truth, ("alpha", "beta")), 60)
        for suite in ("alpha", "beta"):
            await wait_until(partial(snapshot_current, store, suite), 30)
            assert await store.reads.task_counts(suite) == truth.counts(suite)
            snap = await store.snapshots.fields(suite)
            doc = msgspec.json.decode(snap["json"])
            assert doc["schema"] == 1
            assert doc["suite"] == suite
            assert doc["tasks"] == truth.hist(suite).tasks
            assert doc["trials"] == truth.trials(suite)
            assert doc["duplicates"] == truth.duplicates.get(suite, 0)
            ours = doc["pass_at_k"] + doc["pass_hat_k"]
            want = expected_estimates(truth, suite, (1, 3))
            assert sorted(ours, key=str) == sorted(want, key=str)
            assert doc["lottery"]["k"] == 3
            assert doc["lottery"]["rows"] == [
                msgspec.to_builtins(r) for r in lottery_cases(truth.counts(suite), 3, limit=10)
            ]
            # Flat fields for redis-cli users agree with the document.
            hat3 = next(e for e in doc["pass_hat_k"] if e["k"] == 3)
            if hat3["value"] is None:
                assert snap["pass^3"] == ""
            else:
                assert float(snap["pass^3"]) == hat3["value"]
                assert float(snap["pass^3:ci_low"]) == hat3["ci"][0]
            assert int(snap["trials"]) == truth.trials(suite)


async def test_retained_snapshot_on_mqtt(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix)
    events = [TrialEvent("deploy-bot", f"t{i % 4}", f"r{i}", "pass") for i in range(12)]
    async with running(cfg), store_for(cfg) as store:
        await publish(mosquitto.port, f"{prefix}/trials/a", payloads(events, 12))
        await wait_until(lambda: snapshot_current(store, "deploy-bot"), 30)
        stored = msgspec.json.decode((await store.snapshots.fields("deploy-bot"))["json"])
    # After the daemon is gone, a new subscriber still gets the retained state.
    async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
        await client.subscribe(f"{prefix}/snapshot/deploy-bot", qos=1)
        message = await asyncio.wait_for(anext(client.messages), 10)
        assert message.retain
        assert msgspec.json.decode(message.payload) == stored
    assert stored["pass_hat_k"][0]["value"] == 1.0


async def test_live_point_estimate_follows_each_commit_before_the_ci(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = make_config(
        redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix, ci_interval=3600
    )
    async with running(cfg) as daemon, store_for(cfg) as store:

        async def first_tick_done() -> bool:
            return evaluations(daemon) >= 1

        await wait_until(first_tick_done, 10)  # the first CI tick has run on an empty store
        events = [TrialEvent("s", "t", f"r{i}", "pass" if i % 4 else "fail") for i in range(8)]
        started = time.monotonic()
        await publish(mosquitto.port, f"{prefix}/trials/a", payloads(events, 8))

        async def live() -> bool:
            snap = await store.snapshots.fields("s")
            return snap.get("pass^1") == repr(6 / 8)

        await wait_until(live, 10)
        lag = time.monotonic() - started
        snap = await store.snapshots.fields("s")
        assert "json" not in snap  # no CI has run: the value came from the live path
        assert snap["trials"] == "8"
        print(f"live value visible {lag * 1000:.0f} ms after publishing")


async def test_bad_payloads_are_dead_lettered_and_the_daemon_goes_on(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix)
    good = TrialEvent("s", "t", "1", "pass")
    bad_messages = [
        b"\xff\xfe garbage",
        b'{"suite": "s"}',
        msgspec.json.encode([good, {"suite": "a/b", "task": "t", "trial": "x", "outcome": "pass"}]),
        msgspec.json.encode({"suite": "s", "task": "t", "trial": "2", "outcome": "great"}),
        b"",
    ]
    async with running(cfg), store_for(cfg) as store:
        await publish(mosquitto.port, f"{prefix}/trials/a", bad_messages)
        later = TrialEvent("s", "t", "3", "fail")
        await publish(mosquitto.port, f"{prefix}/trials/a", payloads([later], 1), client_id="p2")
        await wait_until(lambda: _eq(store, {"t": (2, 1)}), 30)
        letters = await store.reads.deadletters()
        reasons = [d.reason for d in letters]
        sources = {d.source for d in letters}
        assert len(letters) == 5
        assert letters[0].payload == b"\xff\xfe garbage"
        assert sources == {f"mqtt:{prefix}/trials/a"}
        assert any("not valid MessagePack" in r or "MessagePack" in r for r in reasons)
        assert any("missing required field `task`" in r for r in reasons)
        assert any(r.startswith("element 1: suite contains") for r in reasons)
        assert any("Invalid enum value 'great'" in r for r in reasons)
        assert any(r == "empty payload" for r in reasons)
        assert await store.reads.deadletter_count() == 5


async def _eq(store: Store, want: dict[str, tuple[int, int]]) -> bool:
    return await store.reads.task_counts("s") == want


async def test_redis_stream_source_with_claims(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str, rng: np.random.Generator
) -> None:
    key = f"{prefix}:trials"
    cfg = with_stream(
        make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix),
        key,
        claim_idle=0.5,
    )
    # Claimed entries are applied after later ones: first-write-wins then
    # follows processing order, so duplicates here repeat the same outcome.
    events = make_events(rng, count=2000, suites=("s",), flip=False)
    truth = truth_of(events)
    raw = aioredis.Redis.from_url(redis_server.url)
    await raw.xgroup_create(key, "reliabilityd", id="0", mkstream=True)
    for chunk in payloads(events[:500], 10):
        await raw.xadd(key, {"payload": chunk})
    # A consumer reads entries and dies before acknowledging them.
    await raw.xreadgroup("reliabilityd", "dead-consumer", {key: ">"}, count=20)
    await raw.xadd(key, {"payload": b"not an event"})
    await raw.xadd(key, {"other": b"no payload field"})
    async with running(cfg), store_for(cfg) as store:
        for chunk in payloads(events[500:], 10):
            await raw.xadd(key, {"payload": chunk})
        await wait_until(lambda: all_counted(store, truth, ("s",)), 60)
        assert await store.reads.task_counts("s") == truth.counts("s")
        await wait_until(lambda: _pending_zero(raw, key), 20)
        assert await store.reads.deadletter_count() == 2
    await raw.aclose()


async def _pending_zero(raw: aioredis.Redis, key: str) -> bool:
    info = await raw.xpending(key, "reliabilityd")
    return int(info["pending"]) == 0


async def test_check_reports_heartbeat(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str, tmp_path: object
) -> None:

    cfg = make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix)
    path = Path(str(tmp_path)) / "c.toml"
    path.write_bytes(toml_of(cfg))

    def check() -> int:
        return subprocess.run(
            [sys.executable, "-m", "reliabilityd", "check", "-c", str(path)],
            capture_output=True,
            timeout=60,
            check=False,
        ).returncode

    assert await asyncio.to_thread(check) == 1
    async with running(cfg), store_for(cfg) as store:
        await wait_until(lambda: _beat(store, cfg.instance))
        assert await asyncio.to_thread(check) == 0
    await store_cleanup_heartbeat(cfg)
    assert await asyncio.to_thread(check) == 1


async def _beat(store: Store, instance: str) -> bool:
    return await store.admin.heartbeat_age(instance) is not None


async def store_cleanup_heartbeat(cfg: object) -> None:
    from reliabilityd.config import Config

    assert isinstance(cfg, Config)
    async with store_for(cfg) as store:
        await store.client.delete(store.keys.heartbeat(cfg.instance))


async def test_mqtt_3_1_1_with_a_persistent_session(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str, rng: np.random.Generator
) -> None:
    """protocol = "3.1.1": clean_session false keeps what arrives while the daemon is away."""
    cfg = make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix)
    cfg = msgspec.structs.replace(cfg, mqtt=msgspec.structs.replace(cfg.mqtt, protocol="3.1.1"))
    events = make_events(rng, count=1000)
    truth = truth_of(events)
    async with running(cfg):
        pass  # the session and its subscription now exist at the broker
    await publish(mosquitto.port, f"{prefix}/trials/x", payloads(events, 1))
    async with running(cfg), store_for(cfg) as store:
        await wait_until(lambda: all_counted(store, truth, ("alpha", "beta")), 60)
        for suite in ("alpha", "beta"):
            assert await store.reads.task_counts(suite) == truth.counts(suite)


async def test_broker_with_password_from_the_url(
    redis_server: RedisServer,
    prefix: str,
    password_broker: Mosquitto,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """mqtt://user:password@host:port reaches a broker that refuses anonymous clients."""
    broker = password_broker
    url = f"mqtt://agent:s3cr3t%20pass@127.0.0.1:{broker.port}"
    cfg = make_config(redis_url=redis_server.url, mqtt_url=url, prefix=prefix)
    async with running(cfg), store_for(cfg) as store:
        async with aiomqtt.Client(
            "127.0.0.1", broker.port, username="agent", password="s3cr3t pass"
        ) as client:
            event = TrialEvent("s", "t", "1", "pass")
            await client.publish(f"{prefix}/trials/a", msgspec.json.encode(event), qos=1)
        await wait_until(lambda: _eq(store, {"t": (1, 1)}), 20)
    wrong = make_config(
        redis_url=redis_server.url,
        mqtt_url=f"mqtt://agent:nope@127.0.0.1:{broker.port}",
        prefix=prefix,
    )
    caplog.set_level(logging.WARNING)
    daemon = Daemon(wrong)
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(stop))

    async def refused_twice() -> bool:
        return len(_refusals(caplog)) >= 2

    # The broker answered, refused, and the daemon tried again: not merely slow.
    await wait_until(refused_twice, 20)
    assert not daemon.subscribed.is_set()
    stop.set()
    await asyncio.wait_for(task, 10)
    await daemon.store.client.aclose()


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The consumer's log lines for a CONNACK that refused the credentials."""
    lines = [r.getMessage() for r in caplog.records]
    return [x for x in lines if "mqtt_disconnected" in x and "refused the connection" in x]


async def test_stream_deleted_under_the_daemon_is_recreated(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    key = f"{prefix}:trials"
    cfg = with_stream(
        make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix), key
    )
    raw = aioredis.Redis.from_url(redis_server.url)
    async with running(cfg), store_for(cfg) as store:
        await raw.xadd(key, {"payload": msgspec.json.encode(TrialEvent("s", "t", "1", "pass"))})
        await wait_until(lambda: _eq(store, {"t": (1, 1)}), 20)
        await raw.delete(key)  # the group goes with it
        # Whenever the daemon recreates the group, it starts after the last committed
        # entry: an entry added before or after that is read all the same.
        await raw.xadd(key, {"payload": msgspec.json.encode(TrialEvent("s", "t", "2", "fail"))})
        await wait_until(lambda: _eq(store, {"t": (2, 1)}), 20)
    await raw.aclose()


async def test_deleting_the_consumer_group_replays_nothing(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    """The group comes back after the last committed entry, not at 0.

    The dedup records here live 2 s to 3 s (their TTL and at most one 1 s
    bucket more), so entries read again after that would count twice: only
    the stored cursor keeps the counts exact.
    """
    key = f"{prefix}:trials"
    cfg = with_stream(
        make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix), key
    )
    cfg = msgspec.structs.replace(
        cfg,
        mqtt=msgspec.structs.replace(cfg.mqtt, session_expiry=1),
        store=StoreConfig(dedup_ttl=2),
    )
    first = [TrialEvent("s", f"t{i % 4}", f"a{i}", "pass") for i in range(20)]
    later = [TrialEvent("s", f"t{i % 4}", f"b{i}", "fail") for i in range(8)]
    raw = aioredis.Redis.from_url(redis_server.url)
    async with running(cfg), store_for(cfg) as store:
        for chunk in payloads(first, 5):
            await raw.xadd(key, {"payload": chunk})
        await wait_until(lambda: _trials(store, 20), 20)

        async def forgotten() -> bool:
            recorded = [
                await store.ingest.is_recorded("s", e.task, e.trial, dedup_ttl=2) for e in first
            ]
            return not any(recorded)

        await wait_until(forgotten, 20)  # every dedup record of the first entries has expired
        await raw.xgroup_destroy(key, "reliabilityd")
        for chunk in payloads(later, 4):
            await raw.xadd(key, {"payload": chunk})
        # A marker after them: once it is counted, every entry before it has been read.
        marker = TrialEvent("marker", "t", "m", "pass")
        await raw.xadd(key, {"payload": msgspec.json.encode(marker)})

        async def marked() -> bool:
            return (await store.reads.read_state("marker")).counters.trials == 1

        await wait_until(marked, 20)
        assert await store.reads.task_counts("s") == {f"t{t}": (7, 5) for t in range(4)}
    await raw.aclose()


async def _trials(store: Store, n: int) -> bool:
    return (await store.reads.read_state("s")).counters.trials >= n


async def test_a_loop_that_keeps_failing_is_restarted_and_ingest_goes_on(
    redis_server: RedisServer,
    mosquitto: Mosquitto,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug in the CI loop is logged with its traceback and restarted; nothing else stops."""
    calls: list[int] = []

    async def broken(self: Recompute) -> Tick:
        calls.append(1)
        raise RuntimeError("a bug in the CI tick")

    monkeypatch.setattr(Recompute, "ci_tick", broken)
    cfg = make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix)
    events = [TrialEvent("s", f"t{i % 3}", f"r{i}", "pass") for i in range(30)]
    async with running_task(cfg) as (_, task), store_for(cfg) as store:
        await publish(mosquitto.port, f"{prefix}/trials/a", payloads(events, 5))
        await wait_until(lambda: _trials(store, 30), 20)

        async def restarted() -> bool:
            return len(calls) >= 2

        await wait_until(restarted, 20)
        assert not task.done()
    failures = [r for r in caplog.records if "event=loop_failed loop=ci" in r.getMessage()]
    assert failures
    assert failures[0].exc_info is not None
    assert "a bug in the CI tick" in str(failures[0].exc_info[1])
