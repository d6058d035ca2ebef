"""Fault tests: the daemon, the broker and Redis die mid-stream; nothing is lost or doubled.

Each test runs its own redis-server and mosquitto (deploy/ settings:
append-only file with fsync always, broker persistence, deep queues) and
`reliabilityd run` as a child process, and publishes with a QoS 1 publisher
that resends whatever the broker did not acknowledge.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from redis.asyncio.cluster import RedisCluster

from reliabilityd.config import IngestConfig, MqttConfig, RedisConfig
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Store, connect
from reliabilityd.store._base import CLUSTER_SLACK
from tests.support.daemon import make_config, running, store_for
from tests.support.faults import (
    SUITES,
    SUITES4,
    assert_exact,
    counted,
    mqtt_flush,
    scenario,
)
from tests.support.helpers import (
    DaemonProcess,
    Truth,
    make_events,
    payloads,
    publish,
    stored_snapshot,
    truth_of,
    wait_until,
)
from tests.support.servers import ClusterNode, Mosquitto, RedisServer

Fault = Callable[[DaemonProcess], Awaitable[None]]


async def stream_with_faults(
    redis: RedisServer,
    broker: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
    *,
    faults: dict[int, Fault],
) -> DaemonProcess:
    """Publish 6000 events through a daemon process; run each fault once `sent` passes its mark.

    Returns the (killed) daemon for its log; asserts the counts are exact.
    """
    cfg = make_config(redis_url=redis.url, mqtt_url=broker.url, prefix=prefix)
    events, truth, messages = scenario(rng)
    daemon = DaemonProcess(cfg, tmp_path)
    daemon.start()
    await daemon.wait_subscribed()
    pending = dict(sorted(faults.items()))

    async def on_progress(sent: int) -> None:
        for mark in [m for m in pending if sent >= m]:
            await pending.pop(mark)(daemon)

    try:
        async with store_for(cfg) as store:
            await publish(broker.port, f"{prefix}/trials/x", messages, on_progress=on_progress)
            assert not pending, f"faults never ran: {sorted(pending)}"
            await assert_exact(
                store, truth, events, flush=mqtt_flush(broker.port, f"{prefix}/trials/x", store)
            )
    finally:
        daemon.kill()
    return daemon


async def test_daemon_kill_9_mid_stream_then_restart(
    private_redis: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
) -> None:
    async def kill(daemon: DaemonProcess) -> None:
        daemon.kill()  # mid-stream: messages in flight, some committed, not acknowledged

    async def restart(daemon: DaemonProcess) -> None:
        daemon.start()  # the broker kept the session and queued what came meanwhile

    await stream_with_faults(
        private_redis, private_mosquitto, prefix, tmp_path, rng, faults={1500: kill, 3500: restart}
    )


async def test_sigterm_mid_stream_exits_0_within_5_s(
    private_redis: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
) -> None:
    exits: list[tuple[int, float]] = []

    async def terminate(daemon: DaemonProcess) -> None:
        started = time.monotonic()
        daemon.signal(signal.SIGTERM)
        # The shipped unit's TimeoutStopSec: systemd kills a daemon still running then.
        code = await asyncio.to_thread(daemon.wait, 15)
        exits.append((code, time.monotonic() - started))
        daemon.start()
        await daemon.wait_subscribed(2)

    daemon = await stream_with_faults(
        private_redis, private_mosquitto, prefix, tmp_path, rng, faults={2000: terminate}
    )
    ((code, took),) = exits
    print(f"SIGTERM to exit: {took:.2f} s")
    assert code == 0, daemon.output()
    assert "event=stopped" in daemon.output()


async def test_broker_restart_mid_stream(
    private_redis: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
) -> None:
    async def restart_broker(_: DaemonProcess) -> None:
        # SIGTERM: mosquitto writes its persistence file on a clean shutdown.
        await asyncio.to_thread(private_mosquitto.stop, signal.SIGTERM)
        await asyncio.sleep(0.5)
        await asyncio.to_thread(private_mosquitto.start)

    daemon = await stream_with_faults(
        private_redis, private_mosquitto, prefix, tmp_path, rng, faults={2500: restart_broker}
    )
    assert daemon.output().count("event=mqtt_subscribed") >= 2  # it reconnected


async def test_redis_kill_9_mid_stream(
    private_redis: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
) -> None:
    async def kill_redis(_: DaemonProcess) -> None:
        await asyncio.to_thread(private_redis.kill)  # no shutdown: only the AOF survives
        await asyncio.sleep(1.0)
        await asyncio.to_thread(private_redis.start)

    daemon = await stream_with_faults(
        private_redis, private_mosquitto, prefix, tmp_path, rng, faults={2500: kill_redis}
    )
    # The outage reached the daemon (whichever of its loops met it first).
    assert re.search(
        r"event=(redis_unavailable|heartbeat_failed|ci_tick_failed|live_refresh_failed)",
        daemon.output(),
    )


async def test_two_daemons_on_a_shared_subscription_equal_one(
    redis_server: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
) -> None:
    """Replicas A and B split the topic; C alone reads all of it into its own keys."""
    events = make_events(rng, count=6000, suites=SUITES, tasks=40, flip=False)
    truth = truth_of(events)
    base = make_config(redis_url=redis_server.url, mqtt_url=private_mosquitto.url, prefix=prefix)
    shared = msgspec.structs.replace(base.mqtt, shared_group="replicas", client_id=f"{prefix}-a")
    a_cfg = msgspec.structs.replace(base, mqtt=shared)
    b_cfg = msgspec.structs.replace(
        base, mqtt=msgspec.structs.replace(shared, client_id=f"{prefix}-b")
    )
    solo_prefix = f"{prefix}solo"
    c_cfg = msgspec.structs.replace(
        base,
        redis=RedisConfig(url=redis_server.url, prefix=solo_prefix),
        mqtt=MqttConfig(
            url=private_mosquitto.url,
            topic=base.mqtt.topic,
            client_id=f"{prefix}-c",
            snapshot_topic=f"{solo_prefix}/snapshot",
        ),
    )
    a = DaemonProcess(a_cfg, tmp_path, "a")
    b = DaemonProcess(b_cfg, tmp_path, "b")
    c = DaemonProcess(c_cfg, tmp_path, "c")
    for d in (a, b, c):
        d.start()
    try:
        for d in (a, b, c):
            await d.wait_subscribed()
        async with store_for(a_cfg) as pair, store_for(c_cfg) as solo:
            await publish(private_mosquitto.port, f"{prefix}/trials/x", payloads(events, 5))
            await assert_exact(pair, truth, events)
            await assert_exact(solo, truth, events)
            for suite in SUITES:
                for store in (pair, solo):
                    await wait_until(partial(current, store, suite), 30)
                snaps = [await stored_snapshot(s, suite) for s in (pair, solo)]
                assert snaps[0] is not None
                assert snaps[1] is not None
                assert _without(
                    snaps[0], "updated_at", "version", "duplicates", "last_trial_at"
                ) == _without(snaps[1], "updated_at", "version", "duplicates", "last_trial_at")
        # Both replicas did part of the work: each logs its count when it stops.
        shares = []
        for d in (a, b):
            d.signal(signal.SIGTERM)
            assert await asyncio.to_thread(d.wait, 10) == 0
            found = re.search(r"event=stopped committed_events=(\d+)", d.output())
            assert found, d.output()
            shares.append(int(found.group(1)))
        assert all(share > 0 for share in shares), shares
        assert sum(shares) == sum(truth.trials(s) for s in SUITES)
        # Every daemon stopped, having finished what it had taken: nothing can
        # arrive any more, and the counts still hold.
        c.signal(signal.SIGTERM)
        assert await asyncio.to_thread(c.wait, 10) == 0
        async with store_for(a_cfg) as pair, store_for(c_cfg) as solo:
            assert await counted(pair, truth)
            assert await counted(solo, truth)
    finally:
        for d in (a, b, c):
            d.kill()


async def current(store: Store, suite: str) -> bool:
    state = await store.reads.read_state(suite)
    return (await store.snapshots.fields(suite)).get("version") == str(state.counters.version)


def _without(snap: Snapshot, *names: str) -> dict[str, Any]:
    """The snapshot's fields but ``names``: what two deployments must agree on."""
    doc = msgspec.structs.asdict(snap)
    for name in names:
        del doc[name]
    return doc


async def test_redis_cluster_gives_the_same_snapshot_as_one_node(
    redis_cluster: list[ClusterNode],
    redis_server: RedisServer,
    mosquitto: Mosquitto,
    prefix: str,
    rng: np.random.Generator,
) -> None:
    events = make_events(rng, count=4000, suites=SUITES4, tasks=30)
    truth = truth_of(events)
    # `version` counts commits; one message per commit makes it the same for
    # both daemons whatever the arrival timing (batches follow the reads).
    single = make_config(
        redis_url=redis_server.url,
        mqtt_url=mosquitto.url,
        prefix=prefix,
        client_id=f"{prefix}-1",
        ingest=IngestConfig(max_batch=1),
    )
    cluster = msgspec.structs.replace(
        single,
        redis=RedisConfig(url=redis_cluster[0].url, prefix=prefix, cluster=True),
        mqtt=msgspec.structs.replace(
            single.mqtt, client_id=f"{prefix}-3", snapshot_topic=f"{prefix}/cluster-snapshot"
        ),
    )
    async with (
        running(single),
        running(cluster),
        store_for(single) as one,
        store_for(cluster) as many,
    ):
        await publish(mosquitto.port, f"{prefix}/trials/x", payloads(events, 10))
        for suite in SUITES4:
            for store in (one, many):
                await wait_until(partial(is_complete, store, suite, truth), 60)
                await wait_until(partial(current, store, suite), 30)
            snaps = [await stored_snapshot(s, suite) for s in (one, many)]
            assert snaps[0] is not None
            assert snaps[1] is not None
            assert _without(snaps[0], "updated_at", "last_trial_at") == _without(
                snaps[1], "updated_at", "last_trial_at"
            )
            assert await many.reads.task_counts(suite) == truth.counts(suite)
            # The history is written by the same script call on the cluster: its newest
            # point holds that snapshot's numbers on both.
            newest = [(await s.history.read(suite)).points[-1].values for s in (one, many)]
            assert newest[0] == newest[1]
        assert sorted(await many.reads.suites()) == ["alpha", "beta", "delta", "gamma"]
        # The suites really are spread over the nodes.
        assert isinstance(many.client, RedisCluster)
        nodes = [many.client.get_node_from_key(many.key(s, "meta")) for s in SUITES4]
        assert len({node.name for node in nodes if node is not None}) == 3


async def is_complete(store: Store, suite: str, truth: Truth) -> bool:
    c = (await store.reads.read_state(suite)).counters
    return c.trials == truth.trials(suite) and c.errors == truth.errors.get(suite, 0)


async def test_broker_restart_keeps_what_it_queued_for_an_absent_daemon(
    private_redis: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
) -> None:
    """Daemon away, broker restarted: the queued messages come back from its persistence."""
    cfg = make_config(redis_url=private_redis.url, mqtt_url=private_mosquitto.url, prefix=prefix)
    events, truth, messages = scenario(rng, count=3000)
    daemon = DaemonProcess(cfg, tmp_path)
    daemon.start()
    await daemon.wait_subscribed()
    try:
        async with store_for(cfg) as store:
            await publish(private_mosquitto.port, f"{prefix}/trials/x", messages[:1000])
            daemon.signal(signal.SIGTERM)
            assert await asyncio.to_thread(daemon.wait, 10) == 0
            await publish(private_mosquitto.port, f"{prefix}/trials/x", messages[1000:])
            await asyncio.to_thread(private_mosquitto.stop, signal.SIGTERM)
            await asyncio.to_thread(private_mosquitto.start)
            daemon.start()
            await assert_exact(
                store,
                truth,
                events,
                flush=mqtt_flush(private_mosquitto.port, f"{prefix}/trials/x", store),
            )
    finally:
        daemon.kill()


async def test_nothing_is_acknowledged_before_its_commit(
    private_redis: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
) -> None:
    """Guards the manual-ack path: received but uncommitted messages come back.

    With Redis down the daemon receives every message but cannot commit; it
    is then killed. Had anything been acknowledged on receipt, the broker
    would consider it delivered and it would be lost.
    """
    cfg = make_config(redis_url=private_redis.url, mqtt_url=private_mosquitto.url, prefix=prefix)
    events, truth, messages = scenario(rng, count=800)
    daemon = DaemonProcess(cfg, tmp_path)
    daemon.start()
    await daemon.wait_subscribed()
    try:
        await asyncio.to_thread(private_redis.kill)
        await publish(private_mosquitto.port, f"{prefix}/trials/x", messages)

        async def stuck() -> bool:
            return "event=redis_unavailable during=apply" in daemon.output()

        await wait_until(stuck, 20)
        daemon.kill()
        await asyncio.to_thread(private_redis.start)
        daemon.start()
        async with store_for(cfg) as store:
            await assert_exact(
                store,
                truth,
                events,
                flush=mqtt_flush(private_mosquitto.port, f"{prefix}/trials/x", store),
            )
    finally:
        daemon.kill()


@pytest.mark.timeout(300)  # about a minute alone; more on a busy CI machine
async def test_sigkill_ten_times_during_fifty_thousand_events(
    private_redis: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
) -> None:
    """kill -9 and restart every 500 messages (10 events each): exact per-task counts."""
    cfg = make_config(redis_url=private_redis.url, mqtt_url=private_mosquitto.url, prefix=prefix)
    events = make_events(rng, count=50_000, suites=SUITES, tasks=40)
    truth = truth_of(events)
    messages = payloads(events, 10)
    daemon = DaemonProcess(cfg, tmp_path)
    daemon.start()
    await daemon.wait_subscribed()
    kills: list[int] = []

    async def on_progress(sent: int) -> None:
        if sent // 500 > len(kills) and len(kills) < 10:
            kills.append(sent)
            daemon.kill()  # mid-stream: some batches committed, not acknowledged
            daemon.start()  # the broker queued for the persistent session meanwhile
            await daemon.wait_subscribed(times=len(kills) + 1)
            await asyncio.sleep(0.3)  # let it commit some of the backlog before the next kill

    try:
        async with store_for(cfg) as store:
            await publish(
                private_mosquitto.port, f"{prefix}/trials/x", messages, on_progress=on_progress
            )
            assert len(kills) == 10
            await assert_exact(
                store,
                truth,
                events,
                flush=mqtt_flush(private_mosquitto.port, f"{prefix}/trials/x", store),
            )
    finally:
        daemon.kill()


async def test_a_cluster_client_past_its_size_waits_instead_of_failing(
    redis_cluster: list[ClusterNode], prefix: str
) -> None:
    """redis-py's asyncio cluster client raises past a node's max_connections; the store
    holds its calls to the pool's size, so many calls at once all wait their turn."""
    size = 2
    client = connect(redis_cluster[0].url, cluster=True, timeout=10.0, max_connections=size)
    store = Store(client, prefix)
    admin = RedisCluster.from_url(redis_cluster[0].url)
    stream = f"{prefix}:{{pool}}:s"
    try:
        await store.streams.ensure_group(stream, "g")
        await admin.initialize()  # learns the slots, for the node of the stream's key
        node = admin.get_node_from_key(stream)
        assert node is not None
        # Blocking reads, each holding its connection 300 ms, all on the stream's node:
        # four times what the node's connections could hold at once.
        reads = [
            asyncio.create_task(
                store.streams.stream_read(
                    stream, "g", f"c{i}", own_pending=False, count=1, block_ms=300
                )
            )
            for i in range(4 * (size + CLUSTER_SLACK))
        ]
        seen: list[int] = []

        async def blocked_at_size() -> bool:
            clients = await admin.client_list(target_nodes=node)
            seen.append(sum(1 for c in clients if c.get("cmd") == "xreadgroup"))
            return seen[-1] == size

        await wait_until(blocked_at_size, 10)
        assert await asyncio.gather(*reads) == [[]] * len(reads)
        assert max(seen) == size
    finally:
        await client.aclose()
        await admin.aclose()
