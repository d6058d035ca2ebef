"""The daemon's MQTT session against mosquitto: a lost session and a takeover are said,
counted and shown by ``reliabilityd check``; a message over max_payload is dead-lettered."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import msgspec
import pytest

from reliabilityd.config import Config, DaemonConfig, IngestConfig
from reliabilityd.daemon import check
from reliabilityd.events import TrialEvent
from tests.support.daemon import make_config, running, store_for
from tests.support.helpers import publish, wait_until
from tests.support.servers import Mosquitto, RedisServer


def _config(
    redis: RedisServer, broker: Mosquitto, prefix: str, name: str, **mqtt: object
) -> Config:
    cfg = make_config(
        redis_url=redis.url,
        mqtt_url=broker.url,
        prefix=prefix,
        client_id=f"{prefix}-shared",
        daemon=DaemonConfig(instance=f"{prefix}-{name}", heartbeat_ttl=1.5),
    )
    return msgspec.structs.replace(cfg, mqtt=msgspec.structs.replace(cfg.mqtt, **mqtt))


def _forget_sessions(workdir: Path) -> None:
    for db in workdir.glob("*.db"):
        db.unlink()


async def test_a_session_the_broker_lost_is_logged_counted_and_shown_by_check(
    redis_server: RedisServer,
    private_mosquitto: Mosquitto,
    prefix: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = _config(redis_server, private_mosquitto, prefix, "a")
    async with running(cfg) as daemon, store_for(cfg) as store:
        assert daemon.mqtt_watch.sessions_lost == 0  # the first connect made it: not lost
        # A broker restarted without its persistence file has no session for us.
        await asyncio.to_thread(private_mosquitto.stop, signal.SIGTERM)
        await asyncio.to_thread(_forget_sessions, Path(private_mosquitto.workdir))
        daemon.subscribed.clear()
        await asyncio.to_thread(private_mosquitto.start)
        await asyncio.wait_for(daemon.subscribed.wait(), 30)
        assert daemon.mqtt_watch.sessions_lost == 1
        assert b"reliabilityd_mqtt_sessions_lost_total 1.0" in daemon.metrics.render()

        async def beat_says_lost() -> bool:
            info = await store.admin.heartbeat_info(cfg.instance)
            return info is not None and info["mqtt"]["sessions_lost"] == 1

        await wait_until(beat_says_lost, 10)
        assert await check(cfg) == 0
    out = capsys.readouterr().out
    assert "lost this instance's MQTT session on 1 reconnect(s)" in out


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
async def test_two_daemons_with_one_client_id_back_off_and_check_says_so(
    redis_server: RedisServer,
    mosquitto: Mosquitto,
    prefix: str,
    protocol: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each takes the session from the other; the backoff grows instead of resetting."""
    first = _config(redis_server, mosquitto, prefix, "a", protocol=protocol)
    second = _config(redis_server, mosquitto, prefix, "b", protocol=protocol)
    async with running(first) as a, running(second) as b, store_for(first) as store:
        # The window the takeovers are counted in (an upper bound: a busy machine
        # makes fewer of them, never more). The pacing itself is tested on virtual
        # time in tests/integration/test_mqtt_hostile.py.
        await asyncio.sleep(8)
        takeovers = a.mqtt_watch.takeovers + b.mqtt_watch.takeovers

        async def beats_say_taken_over() -> bool:
            infos = [await store.admin.heartbeat_info(c.instance) for c in (first, second)]
            return all(i is not None for i in infos) and any(
                i["mqtt"]["takeovers"] >= 1 for i in infos if i is not None
            )

        await wait_until(beats_say_taken_over, 10)
        assert await check(first) == 0
        assert await check(second) == 0
    # At a constant 0.2 s between attempts this is about 40 in 8 s.
    assert 1 <= takeovers <= 12, takeovers
    out = capsys.readouterr().out
    assert f"client id '{prefix}-shared' was taken over" in out


async def test_a_message_over_max_payload_is_dead_lettered_with_its_size_and_topic(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = msgspec.structs.replace(
        _config(redis_server, mosquitto, prefix, "a"), ingest=IngestConfig(max_payload=2000)
    )
    topic = f"{prefix}/trials/big"
    big = msgspec.json.encode([TrialEvent("s", "t", str(i), "pass") for i in range(100)])
    small = msgspec.json.encode(TrialEvent("s", "t", "small", "pass"))
    async with running(cfg), store_for(cfg) as store:
        await publish(mosquitto.port, topic, [big, small])

        async def counted() -> bool:
            return await store.reads.task_counts("s") == {"t": (1, 1)}

        await wait_until(counted, 20)
        (letter,) = await store.reads.deadletters()
        assert letter.source == f"mqtt:{topic}"
        assert f"payload of {len(big)} bytes exceeds ingest.max_payload (2000)" in letter.reason
        assert letter.payload == b""
    # Acknowledged: a restart on the same session does not bring it back. A later
    # message on the topic is delivered after any redelivery (the broker keeps the
    # order), so once it is counted a redelivered big one would have been handled.
    later = msgspec.json.encode(TrialEvent("s", "t", "later", "pass"))
    async with running(cfg), store_for(cfg) as store:
        await publish(mosquitto.port, topic, [later])

        async def later_counted() -> bool:
            return await store.reads.task_counts("s") == {"t": (2, 2)}

        await wait_until(later_counted, 20)
        assert await store.reads.deadletter_count() == 1
