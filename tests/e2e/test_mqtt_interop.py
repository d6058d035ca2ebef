"""The interoperability matrix: broker x MQTT version x publisher, exact through a restart.

Each case starts a broker process, runs the daemon on a persistent session,
has a publisher no one here wrote send half the events, stops the daemon,
has the publisher send the other half while the daemon is away (the broker
queues them for the session), starts the daemon again, and requires the
counts to be exact: every trial once, none lost, none twice.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from reliabilityd.config import Config, MqttConfig
from reliabilityd.events import TrialEvent
from reliabilityd.store import Store
from tests.support.daemon import make_config, running, store_for
from tests.support.faults import mqtt_flush
from tests.support.helpers import wait_until
from tests.support.interop import BROKERS, PUBLISHERS, Broker, Version, publish_lines
from tests.support.servers import RedisServer, free_port

EVENTS = 120
CASES = [(b, v, p) for b in BROKERS for v in b.versions for p in PUBLISHERS]


def _events(prefix: str) -> list[TrialEvent]:
    return [
        TrialEvent(prefix, f"task {i % 12}", f"trial-{i}", "pass" if i % 3 else "fail")
        for i in range(EVENTS)
    ]


def _counts(events: list[TrialEvent]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for e in events:
        n, c = out.get(e.task, (0, 0))
        out[e.task] = (n + 1, c + (e.outcome == "pass"))
    return out


async def _exactly(store: Store, suite: str, want: dict[str, tuple[int, int]]) -> bool:
    return await store.reads.task_counts(suite) == want


@pytest.mark.parametrize("case", CASES, ids=[f"{b.name}-{v}-{p}" for b, v, p in CASES])
async def test_exact_counts_through_a_daemon_restart(
    redis_server: RedisServer, tmp_path: Path, prefix: str, case: tuple[Broker, Version, str]
) -> None:
    broker, version, publisher = case
    server = broker.server(tmp_path, free_port())
    await asyncio.to_thread(server.start)
    try:
        cfg: Config = make_config(
            redis_url=redis_server.url, mqtt_url=f"mqtt://127.0.0.1:{server.port}", prefix=prefix
        )
        cfg = msgspec.structs.replace(cfg, mqtt=msgspec.structs.replace(cfg.mqtt, protocol=version))
        assert isinstance(cfg.mqtt, MqttConfig)
        topic = f"{prefix}/trials/{publisher}"
        events = _events(prefix)
        lines = [msgspec.json.encode(e) for e in events]
        half = EVENTS // 2
        async with running(cfg), store_for(cfg) as store:
            await publish_lines(
                publisher,
                server.port,
                topic,
                lines[:half],
                version=version,
                client_id=f"{prefix}-1",
            )
            await wait_until(lambda: _exactly(store, prefix, _counts(events[:half])), 20)
        # The daemon is away: the broker queues these for its persistent session.
        await publish_lines(
            publisher, server.port, topic, lines[half:], version=version, client_id=f"{prefix}-2"
        )
        async with running(cfg), store_for(cfg) as store:
            if broker.queues_while_away:
                await wait_until(lambda: _exactly(store, prefix, _counts(events)), 20)
                # Nothing more arrives, none counted twice: a marker after everything
                # is counted, so whatever the broker held before it has been handled.
                await mqtt_flush(server.port, topic, store)()
                assert await store.reads.task_counts(prefix) == _counts(events)
            else:
                # What such a broker loses, and only that: the away half; what
                # is published while the daemon is connected counts exactly.
                more = [msgspec.structs.replace(e, trial=f"{e.trial}-again") for e in events]
                again = [msgspec.json.encode(e) for e in more[:half]]
                await publish_lines(
                    publisher, server.port, topic, again, version=version, client_id=f"{prefix}-3"
                )
                want = _counts(events[:half] + more[:half])
                await wait_until(lambda: _exactly(store, prefix, want), 20)
                await mqtt_flush(server.port, topic, store)()
                assert await store.reads.task_counts(prefix) == want
    finally:
        await asyncio.to_thread(server.stop)
