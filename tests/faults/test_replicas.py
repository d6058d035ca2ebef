"""Replicas: one page per breach, whatever ticks when.

Against real redis-server and mosquitto: two replicas on one shared
subscription with different CI intervals, an outbox entry that cannot be
delivered.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import msgspec

from reliabilityd.config import Config, DaemonConfig
from reliabilityd.stats import snapshot
from reliabilityd.stats.histogram import Histogram
from reliabilityd.store import Store
from tests.support.alerting import (
    SUITE,
    Phase,
    alert_config,
    alert_state,
    collect,
    flushed,
    history,
    send,
    settled_alerts,
)
from tests.support.alertmanager import Receiver
from tests.support.daemon import running, store_for
from tests.support.helpers import judged, stored_snapshot, wait_until
from tests.support.servers import Mosquitto, RedisServer


def replica(cfg: Config, name: str, ci_interval: float) -> Config:
    return msgspec.structs.replace(
        cfg,
        mqtt=msgspec.structs.replace(
            cfg.mqtt, shared_group="replicas", client_id=f"{cfg.redis.prefix}-{name}"
        ),
        stats=msgspec.structs.replace(cfg.stats, ci_interval=ci_interval),
        daemon=DaemonConfig(instance=f"{cfg.redis.prefix}-{name}"),
    )


async def _states(items: list[dict[str, Any]], want: list[str]) -> bool:
    return [m.get("state") for m in items] == want


async def test_two_replicas_ticking_differently_page_once_and_resolve_once(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        base = alert_config(redis_server, mosquitto, prefix, am)
        fast = replica(base, "fast", 0.2)
        slow = replica(base, "slow", 1.3)
        async with (
            collect(mosquitto.port, f"{prefix}/alerts/#") as mqtt_msgs,
            running(fast) as one,
            running(slow) as other,
            store_for(base) as store,
        ):
            # The first snapshot either replica sees is the degraded one.
            await send(Phase.events(range(20), flaky=True), base)
            await wait_until(lambda: _states(mqtt_msgs, ["firing"]), 20)
            await judged(store, SUITE, one, other)  # both have judged it
            await send(Phase.events(range(20), flaky=False), base)
            await wait_until(lambda: _states(mqtt_msgs, ["firing", "resolved"]), 20)
            # Both replicas judge the recovered snapshot again and again (the slow one
            # five times, the fast one many more), and what they sent has arrived.
            await settled_alerts(store, one, other, passes=5)
            await flushed(mosquitto.port, f"{prefix}/alerts/~flush", mqtt_msgs)
            assert [n["state"] for n in await history(store, base)] == ["firing", "resolved"]
            assert [m["state"] for m in mqtt_msgs] == ["firing", "resolved"]
            assert [a.get("endsAt") is not None for a in am.alerts] == [True, True]
            assert len(am.alerts) == 2
            assert [n["state"] for n in am.webhook] == ["firing", "resolved"]
            assert await alert_state(store) == "resolved"


async def test_an_undecodable_outbox_entry_is_set_aside_and_delivery_goes_on(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        cfg = alert_config(redis_server, mosquitto, prefix, am)
        async with running(cfg), store_for(cfg) as store:
            await send(Phase.events(range(20), flaky=False), cfg)
            outbox = store.keys.outbox(SUITE, "deploy-reliability", "webhook")
            # Left by an older version during a rolling upgrade.
            await store.client.rpush(outbox, b"\x93\x01\x02 msgpack of an older format")
            await send(Phase.events(range(20), flaky=True), cfg)
            await wait_until(lambda: _count(am.webhook, 1), 20)
            assert am.webhook[0]["state"] == "firing"
            (aside,) = await store.alerts.outbox_deadletters()
            assert aside["sink"] == "webhook"
            assert "undecodable outbox entry" in aside["reason"]
            assert aside["entry"].endswith("older format")
            assert await store.client.llen(outbox) == 0


async def _count(items: list[Any], n: int) -> bool:
    return len(items) >= n


async def test_a_change_mark_is_claimed_and_a_dead_claim_comes_back(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    """The change mark is taken by whichever replica claims it; a dead claim comes back."""
    with Receiver() as am:
        cfg = alert_config(redis_server, mosquitto, prefix, am)
        async with store_for(cfg) as store:
            await store.ingest.apply(
                {SUITE: Phase.events(range(5), flaky=False)}, windows={}, dedup_ttl=60
            )
            assert await store.snapshots.changed() == [SUITE]
            # A replica claims it and dies before writing the snapshot.
            claiming = time.monotonic()
            assert await store.snapshots.claim_changed(10, lifetime=0.5) == [SUITE]
            assert await store.snapshots.claim_changed(10, lifetime=0.5) == []
            assert await store.snapshots.changed() == []

            async def back() -> bool:
                return await store.snapshots.claim_changed(10, lifetime=30) == [SUITE]

            # The claim expires: a later claim gets the suite back, not before its lifetime.
            await wait_until(back, 10)
            assert time.monotonic() - claiming >= 0.5 - 0.01
            await store.snapshots.release_claims([SUITE])
            await store.snapshots.mark_changed([SUITE])
        a = msgspec.structs.replace(cfg, daemon=DaemonConfig(instance=f"{prefix}-a"))
        b = msgspec.structs.replace(
            cfg,
            daemon=DaemonConfig(instance=f"{prefix}-b"),
            mqtt=msgspec.structs.replace(cfg.mqtt, client_id=f"{prefix}-b"),
        )
        async with running(a), running(b), store_for(cfg) as store:
            state = await store.reads.read_state(SUITE)
            await wait_until(partial(_snapshot_at, store, state.counters.version), 20)

            async def no_marks() -> bool:
                return await store.snapshots.changed() == []

            # A replica's start-up version scan can read the versions before the
            # other writes the snapshot, and mark the suite once more; that
            # replica claims the mark in the same tick.
            await wait_until(no_marks, 10)
            snap = await stored_snapshot(store, SUITE)
            assert snap is not None
            settings = snapshot.StatsSettings(ks=(5,), n_boot=500)
            want = snapshot.full_estimates(Histogram.from_pairs([(10, 10)] * 5), settings)
            assert snap.pass_hat_k == [e for e in want if e.metric == "pass^k"]


async def _snapshot_at(store: Store, version: int) -> bool:
    return (await store.snapshots.fields(SUITE)).get("version") == str(version)
