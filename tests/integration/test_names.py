"""Names against real mosquitto and redis-server: every accepted name yields valid
topics and keys, and a topic the broker refuses never silences the others."""

from __future__ import annotations

import asyncio
import binascii
import time

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from redis.crc import key_slot

from reliabilityd.alerting import publisher as publisher_mod
from reliabilityd.alerting.publisher import STRIKES, Publisher
from reliabilityd.config import MqttConfig
from reliabilityd.events import TrialEvent, validate
from reliabilityd.mqtt_connector import connect
from reliabilityd.store.keys import Keys
from tests.support.alerting import SUITE, Phase, alert_config, collect, phase_message
from tests.support.alertmanager import Receiver
from tests.support.daemon import running, store_for
from tests.support.helpers import publish, wait_until
from tests.support.names import names
from tests.support.servers import Mosquitto, RedisServer


async def test_a_noncharacter_suite_is_dead_lettered_and_another_suites_alert_arrives(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        cfg = alert_config(redis_server, mosquitto, prefix, am)
        async with (
            collect(mosquitto.port, f"{prefix}/alerts/#") as alerts,
            collect(mosquitto.port, f"{prefix}/snapshot/#") as snapshots,
            running(cfg) as daemon,
            store_for(cfg) as store,
        ):
            for bad in ("bad\uffff", "bad\ufdd0", "bad\U0001fffe", "bad\u200b", "bad\u202e"):
                raw = msgspec.json.encode(
                    {"suite": bad, "task": "t", "trial": "1", "outcome": "pass"}
                )
                await publish(mosquitto.port, f"{prefix}/trials/x", [raw])
            flaky = Phase.events(range(20), flaky=True)
            await publish(mosquitto.port, f"{prefix}/trials/a", phase_message(flaky))

            async def firing() -> bool:
                return any(m.get("state") == "firing" for m in alerts)

            await wait_until(firing, 30)
            assert any(m.get("suite") == SUITE for m in snapshots)
            letters = await store.reads.deadletters()
            assert len(letters) == 5
            assert all(d.reason.startswith("suite contains a") for d in letters)
            assert await store.reads.suites() == [SUITE]
            assert daemon.publisher is not None
            assert daemon.publisher.refused == {}


def _config(broker: Mosquitto) -> MqttConfig:
    return MqttConfig(url=broker.url, client_id="pub-test")


async def _received(broker: Mosquitto, topic: str, within: float = 10.0) -> bytes:
    async with collect(broker.port, topic) as got:

        async def arrived() -> bool:
            return bool(got)

        await wait_until(arrived, within)
        return msgspec.json.encode(got[0])


async def test_a_topic_the_broker_drops_us_for_is_set_aside_and_the_rest_go_out(
    private_mosquitto: Mosquitto, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the local check the noncharacter topic reaches mosquitto, which
    # disconnects the publisher each time it sees it.
    monkeypatch.setattr(publisher_mod, "topic_problem", lambda topic: None)
    pub = Publisher(_config(private_mosquitto), f"{prefix}-pub")
    refused: list[tuple[str, str]] = []
    pub.on_refused = lambda topic, reason: refused.append((topic, reason))
    stop = asyncio.Event()
    task = asyncio.create_task(pub.run(stop))
    try:
        bad = f"{prefix}/snapshot/bad\uffff"
        pub.publish(bad, b'{"n": 0}')
        for i in range(5):
            pub.publish(f"{prefix}/snapshot/good{i}", msgspec.json.encode({"n": i}))

        async def set_aside() -> bool:
            return bad in pub.refused

        await wait_until(set_aside, 30)
        assert f"{STRIKES} times in a row" in pub.refused[bad]
        assert refused == [(bad, pub.refused[bad])]
        for i in range(5):
            assert msgspec.json.decode(
                await _received(private_mosquitto, f"{prefix}/snapshot/good{i}")
            ) == {"n": i}
        # A later payload for the set-aside topic is dropped; the others still go out.
        pub.publish(bad, b'{"n": 1}')
        pub.publish(f"{prefix}/snapshot/good0", b'{"n": 10}')

        async def newest_is_out() -> bool:
            # The retained value a new subscriber gets: the old one until the
            # publisher (in its reconnect backoff after the strikes) sends the new.
            got = await _received(private_mosquitto, f"{prefix}/snapshot/good0")
            return bool(msgspec.json.decode(got) == {"n": 10})

        await wait_until(newest_is_out, 30)
        with pytest.raises(publisher_mod.TopicRefused):
            await pub.send(bad, b"{}")
        # The connection stays up from here on: another payload for the set-aside
        # topic, then one for a good topic, which the publisher sends in that order.
        # Had the first gone out, the broker would have dropped the connection
        # before the second was out.
        conn = pub._conn
        pub.publish(bad, b'{"n": 2}')
        pub.publish(f"{prefix}/snapshot/good1", b'{"n": 11}')

        async def second_is_out() -> bool:
            got = await _received(private_mosquitto, f"{prefix}/snapshot/good1")
            return bool(msgspec.json.decode(got) == {"n": 11})

        await wait_until(second_is_out, 30)
        assert conn is not None
        assert conn is pub._conn
        assert conn.is_open
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_a_burst_of_topics_goes_out_in_windows_each_with_its_newest_payload(
    private_mosquitto: Mosquitto, prefix: str
) -> None:
    """More topics than a window (and than the broker's Receive Maximum) queued at once,
    some twice: every topic retained with its newest payload, nothing set aside."""
    pub = Publisher(_config(private_mosquitto), f"{prefix}-pub")
    stop = asyncio.Event()
    task = asyncio.create_task(pub.run(stop))
    topics = [f"{prefix}/snapshot/s{i:03d}" for i in range(3 * publisher_mod.WINDOW + 5)]
    try:
        async with collect(private_mosquitto.port, f"{prefix}/snapshot/#") as got:
            for i, topic in enumerate(topics):
                pub.publish(topic, msgspec.json.encode({"n": i}))
            for i, topic in enumerate(topics[::7]):
                pub.publish(topic, msgspec.json.encode({"n": -i}))

            async def all_out() -> bool:
                return not pub._pending and len(got) >= len(topics)

            await wait_until(all_out, 30)
        assert pub.refused == {}
        assert not pub._careful
        for i, topic in enumerate(topics):
            want = {"n": -(i // 7)} if i % 7 == 0 else {"n": i}
            assert msgspec.json.decode(await _received(private_mosquitto, topic)) == want
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_a_topic_mqtt_forbids_is_refused_before_it_is_sent(
    private_mosquitto: Mosquitto, prefix: str
) -> None:
    pub = Publisher(_config(private_mosquitto), f"{prefix}-pub")
    stop = asyncio.Event()
    task = asyncio.create_task(pub.run(stop))
    try:
        for topic in (f"{prefix}/a\ufdd0", f"{prefix}/a+b", f"{prefix}/\x00", ""):
            pub.publish(topic, b"{}")
            assert topic in pub.refused
        pub.publish(f"{prefix}/ok", b'{"ok": 1}')
        assert msgspec.json.decode(await _received(private_mosquitto, f"{prefix}/ok")) == {"ok": 1}
        assert "noncharacter" in pub.refused[f"{prefix}/a\ufdd0"]
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


# --- the name fuzzer --------------------------------------------------------


def _suite_keys(keys: Keys, suite: str) -> list[str]:
    return [
        *(keys.suite(suite, name) for name in ("meta", "tasks", "hist", "lottery", "snapshot")),
        keys.dedup_bucket(suite, 60, 1234),
        keys.imported(suite),
        keys.imports(suite),
        keys.alert(suite, "rule"),
        keys.outbox(suite, "rule", "mqtt"),
        keys.outbox_lease(suite, "rule", "mqtt"),
        keys.am_resend(suite, "rule"),
    ]


async def test_every_accepted_name_has_topics_mosquitto_takes_and_keys_in_its_slot(
    private_mosquitto: Mosquitto, prefix: str
) -> None:
    conn = await connect(_config(private_mosquitto), identifier=f"{prefix}-fuzz", persistent=False)
    keys = Keys(prefix)
    loop = asyncio.get_running_loop()
    seen = {"accepted": 0, "rejected": 0}

    @settings(
        max_examples=600,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(suite=names, task=names)
    def check(suite: str, task: str) -> None:
        event = TrialEvent(suite, task, "1", "pass")
        if validate(event) is not None:
            seen["rejected"] += 1
            return
        seen["accepted"] += 1
        for topic in (f"{prefix}/snapshot/{suite}", f"{prefix}/alerts/{suite}/rule"):
            future = asyncio.run_coroutine_threadsafe(
                conn.publish(topic, b"{}", retain=False), loop
            )
            future.result(10)
            assert conn.is_open, f"mosquitto dropped us for {topic!r}: {conn.error}"
        slot = binascii.crc_hqx(suite.encode(), 0) % 16384
        for key in _suite_keys(keys, suite):
            assert key_slot(key.encode()) == slot, key

    try:
        started = time.monotonic()
        await asyncio.to_thread(check)
        print(f"names: {seen} in {time.monotonic() - started:.1f} s")
        assert seen["accepted"] > 50
        assert seen["rejected"] > 50
    finally:
        await conn.close()
