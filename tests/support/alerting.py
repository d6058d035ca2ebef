"""Alerting scenarios shared by the alerting, replica and Redis-fault tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import aiomqtt
import msgspec

from reliabilityd.config import (
    AlertmanagerSinkConfig,
    Config,
    DaemonConfig,
    MqttSinkConfig,
    SinksConfig,
    WebhookSinkConfig,
)
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.events import TrialEvent
from reliabilityd.rules import Rule
from reliabilityd.store import Store
from reliabilityd.testing import TestingSource, commit_to
from tests.support.alertmanager import Receiver
from tests.support.daemon import make_config
from tests.support.helpers import judged, payloads, stored_state, wait_until
from tests.support.servers import Mosquitto, RedisServer

SUITE = "deploy-bot"
# The alerting suite's window, and make_config's dedup TTL.
WINDOW = 10
DEDUP_TTL = 2 * 3600


def alert_config(
    redis: RedisServer,
    broker: Mosquitto,
    prefix: str,
    receiver: Receiver,
    *,
    below: float = 0.75,
    resolve_above: float = 0.8,
    client_id: str | None = None,
    instance: str = "",
) -> Config:
    cfg = make_config(
        redis_url=redis.url,
        mqtt_url=broker.url,
        prefix=prefix,
        ks=[5],
        window=WINDOW,
        ci_interval=0.3,
        client_id=client_id,
    )
    return msgspec.structs.replace(
        cfg,
        alerts=[
            Rule(
                name="deploy-reliability",
                suite="deploy-*",
                k=5,
                below=below,
                resolve_above=resolve_above,
                trigger="ci-low",
            )
        ],
        sinks=SinksConfig(
            mqtt=MqttSinkConfig(topic=f"{prefix}/alerts"),
            alertmanager=AlertmanagerSinkConfig(url=receiver.url, resend_interval=3600),
            webhook=WebhookSinkConfig(url=receiver.url + "/hook"),
        ),
        external_url="https://reliability.example",
        daemon=DaemonConfig(instance=instance or f"{prefix}-d"),
    )


class Phase:
    """Trials for `tasks` tasks, 10 each; flaky tasks pass half the time."""

    counter = 0

    @classmethod
    def events(cls, tasks: range, *, flaky: bool) -> list[TrialEvent]:
        out = []
        for t in tasks:
            for j in range(10):
                cls.counter += 1
                ok = (j % 2 == 0) if flaky and t % 4 else True
                out.append(
                    TrialEvent(SUITE, f"task {t}", f"r{cls.counter}", "pass" if ok else "fail")
                )
        return out


@contextlib.asynccontextmanager
async def collect(port: int, topic: str) -> AsyncIterator[list[dict[str, Any]]]:
    """Every MQTT message on `topic` while the block runs."""
    got: list[dict[str, Any]] = []
    async with aiomqtt.Client("127.0.0.1", port) as client:
        await client.subscribe(topic, qos=1)

        async def read() -> None:
            async for message in client.messages:
                got.append(msgspec.json.decode(message.payload))

        task = asyncio.create_task(read())
        try:
            yield got
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def flushed(port: int, topic: str, got: list[dict[str, Any]]) -> None:
    """Until a marker published to ``topic`` now is in ``got`` (a ``collect`` list that
    subscribes to it), then take the marker out again.

    The broker forwards to a subscriber in the order it took the messages, so
    whatever the daemon had published before (an outbox drained) has arrived too.
    """
    marker = {"flush": f"{time.monotonic_ns()}"}
    async with aiomqtt.Client("127.0.0.1", port) as client:
        await client.publish(topic, msgspec.json.encode(marker), qos=1)

    async def arrived() -> bool:
        return marker in got

    await wait_until(arrived, 20)
    got.remove(marker)


async def history(store: Store, cfg: Config) -> list[dict[str, Any]]:
    return [msgspec.json.decode(n) for n in await store.alerts.alert_history(cfg.alerts_key)]


async def send(events: list[TrialEvent], cfg: Config) -> None:
    """Commit a phase as one payload through the sources' commit, then wait for its snapshot.

    The alerting tests are about what follows a commit, so they skip the
    broker: the testing source hands the phase to the commit every source
    uses, with ``cfg``'s settings (its window, its dedup TTL), as one batch
    (one EVAL, so a CI tick sees all of it or none).
    """
    async with commit_to(cfg) as commit:
        sink = await TestingSource([events], topic=f"{cfg.redis.prefix}/trials/a").run(commit)
        assert sink.letters == [], sink.letters
        await wait_until(partial(settled, commit.store), 30)


async def delivered(store: Store, *daemons: Daemon, suite: str = SUITE) -> bool:
    """For wait_until: every notification queued for the suite's rules has left for its
    sink."""
    sinks = sorted({sink for d in daemons for sink in d.outbox.sinks})
    rules = [rule.name for rule in daemons[0].config.alerts]
    triples = [(suite, rule, sink) for rule in rules for sink in sinks]
    return not any(await store.alerts.outbox_lengths(triples))


async def settled_alerts(
    store: Store, *daemons: Daemon, passes: int = 1, suite: str = SUITE, within: float = 30.0
) -> None:
    """Until every daemon has judged the suite's current snapshot (``passes`` times) and
    every notification it decided has been delivered: what the sinks hold then is all
    there is to hold."""
    await judged(store, suite, *daemons, passes=passes, within=within)
    await wait_until(partial(delivered, store, *daemons, suite=suite), within)


async def alert_state(store: Store) -> str:
    state = await stored_state(store, SUITE, "deploy-reliability")
    return state.state


async def alert_is(store: Store, state: str) -> bool:
    """For wait_until: the rule's stored state is `state`."""
    return await alert_state(store) == state


async def settled(store: Store) -> bool:
    state = await store.reads.read_state(SUITE)
    return (await store.snapshots.fields(SUITE)).get("version") == str(state.counters.version)


def phase_message(events: list[TrialEvent]) -> list[bytes]:
    """A phase as one message: one EVAL applies it, so a CI tick sees all of it or none."""
    return payloads(events, len(events))
