"""The Emitter against real mosquitto and the daemon: arrival, batching, backpressure, restarts."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiomqtt
import pytest

from reliabilityd.cli._main import main
from reliabilityd.client import Emitter, EmitterError, EmitterFull
from reliabilityd.embedded._servers import IotcoreBroker
from reliabilityd.store import Store
from tests.support.daemon import make_config, running
from tests.support.helpers import wait_until
from tests.support.servers import Mosquitto, RedisServer, free_port


async def counted(store: Store, suite: str, trials: int, duplicates: int = 0) -> None:
    async def done() -> bool:
        c = (await store.reads.read_state(suite)).counters
        return c.trials + c.errors + c.skips >= trials and c.duplicates >= duplicates

    await wait_until(done, within=60)


@pytest.fixture
async def daemon_store(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> AsyncIterator[Store]:
    cfg = make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix)
    async with running(cfg) as daemon:
        yield daemon.store


def test_events_are_checked_before_they_are_accepted() -> None:
    emitter = Emitter("mqtt://127.0.0.1:1")
    with pytest.raises(EmitterError, match="not started"):
        emitter.emit("suite", "task", "pass")
    with pytest.raises(ValueError, match="suite contains one of"):
        emitter.emit("model/a", "task", "pass")
    with pytest.raises(ValueError, match="outcome must be one of"):
        emitter.emit("suite", "task", "passed")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mqtt://"):
        Emitter("http://127.0.0.1:1883")


def test_generated_trial_ids_are_uuid4_hex(mosquitto: Mosquitto) -> None:
    with Emitter(mosquitto.url, topic="ids/trials/emit") as em:
        ids = [em.emit("ids", "task", "pass") for _ in range(1000)]
    assert len(set(ids)) == 1000
    for trial in ids:
        parsed = uuid.UUID(hex=trial)
        assert (parsed.hex, parsed.version, parsed.variant) == (trial, 4, uuid.RFC_4122)


def test_an_unreachable_broker_is_an_error_naming_it() -> None:
    with pytest.raises(EmitterError, match=r"mqtt://127\.0\.0\.1:1"):
        Emitter("mqtt://127.0.0.1:1", connect_timeout=0.5).start()


def test_a_failed_start_leaves_the_emitter_not_started() -> None:
    em = Emitter("mqtt://127.0.0.1:1", connect_timeout=0.3)
    for _ in range(2):
        with pytest.raises(EmitterError, match="cannot connect"):
            em.start()
        with pytest.raises(EmitterError, match="not started"):
            em.emit("suite", "task", "pass")


async def test_sync_emits_arrive_once_with_generated_and_given_trial_ids(
    daemon_store: Store, mosquitto: Mosquitto, prefix: str
) -> None:
    def produce() -> list[str]:
        with Emitter(mosquitto.url, topic=f"{prefix}/trials/emit") as em:
            ids = [
                em.emit("sync", f"task {i % 25}", "pass" if i % 4 else "fail") for i in range(500)
            ]
            ids.append(em.emit("sync", "task 0", "pass", trial="given-1"))
            ids.append(em.emit("sync", "task 0", "fail", trial="given-1"))  # a duplicate
            em.emit("sync", "task 1", "error")
        return ids

    ids = await asyncio.to_thread(produce)
    assert len(set(ids[:500])) == 500  # generated ids are unique
    assert ids[500:] == ["given-1", "given-1"]
    await counted(daemon_store, "sync", 502, duplicates=1)
    c = (await daemon_store.reads.read_state("sync")).counters
    assert (c.trials, c.errors, c.duplicates) == (501, 1, 1)
    counts = await daemon_store.reads.task_counts("sync")
    passes = sum(1 for i in range(0, 500, 25) if i % 4)
    assert counts["task 0"] == (21, passes + 1)  # 20 generated + given-1, first write wins


async def test_async_context_manager_and_aemit(
    daemon_store: Store, mosquitto: Mosquitto, prefix: str
) -> None:
    async with Emitter(mosquitto.url, topic=f"{prefix}/trials/emit") as em:
        for i in range(200):
            await em.aemit("async", f"task {i % 10}", "pass")
        await em.aflush(30)
        assert em.pending == 0
        assert em.acknowledged == 200
    await counted(daemon_store, "async", 200)
    assert (await daemon_store.reads.read_state("async")).counters.trials == 200


async def test_events_travel_in_arrays_of_at_most_batch_size(
    mosquitto: Mosquitto, prefix: str
) -> None:
    topic = f"{prefix}/trials/emit"
    sizes: list[int] = []
    trials: set[str] = set()
    async with aiomqtt.Client("127.0.0.1", mosquitto.port) as sub:
        await sub.subscribe(topic, qos=1)

        def produce() -> None:
            with Emitter(mosquitto.url, topic=topic, batch_size=40, linger=0.05) as em:
                for i in range(300):
                    em.emit("batch", f"task {i}", "pass")

        await asyncio.to_thread(produce)
        async with asyncio.timeout(30):
            async for message in sub.messages:
                assert isinstance(message.payload, bytes)
                events = json.loads(message.payload)
                assert isinstance(events, list)
                sizes.append(len(events))
                trials.update(e["trial"] for e in events)
                if len(trials) == 300:
                    break
    assert sum(sizes) == 300
    assert max(sizes) <= 40


async def test_a_full_queue_raises_and_a_returning_broker_takes_it_all(
    private_mosquitto: Mosquitto, prefix: str
) -> None:
    em = Emitter(
        private_mosquitto.url,
        topic=f"{prefix}/trials/emit",
        max_pending=3,
        block_timeout=0.3,
        reconnect_delay=0.2,
    )
    await asyncio.to_thread(em.start)
    try:
        await asyncio.to_thread(private_mosquitto.stop, signal.SIGTERM)
        for i in range(3):
            await em.aemit("full", f"task {i}", "pass")
        with pytest.raises(EmitterFull, match="max_pending 3"):
            await asyncio.to_thread(em.emit, "full", "task 3", "pass")
        assert em.pending == 3
        await asyncio.to_thread(private_mosquitto.start)
        await em.aflush(30)
        assert em.acknowledged == 3
    finally:
        await asyncio.to_thread(em.close)


async def test_broker_restart_mid_stream_loses_nothing_accepted(
    redis_server: RedisServer, private_mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = make_config(redis_url=redis_server.url, mqtt_url=private_mosquitto.url, prefix=prefix)
    halfway, stopped, resumed = threading.Event(), threading.Event(), threading.Event()
    total = 3000

    def produce() -> int:
        with Emitter(
            private_mosquitto.url, topic=f"{prefix}/trials/emit", reconnect_delay=0.2
        ) as em:
            for i in range(total):
                if i == 1000:
                    halfway.set()
                    assert stopped.wait(30)
                if i == 2000:  # 1000 accepted while the broker was away
                    resumed.set()
                em.emit("restart", f"task {i % 30}", "pass" if i % 3 else "fail")
            em.flush(60)
            return em.acknowledged

    async with running(cfg) as daemon:
        producer = asyncio.create_task(asyncio.to_thread(produce))
        assert await asyncio.to_thread(halfway.wait, 30)
        # SIGTERM: mosquitto writes its persistence file (the daemon's session) on the way out.
        await asyncio.to_thread(private_mosquitto.stop, signal.SIGTERM)
        stopped.set()
        assert await asyncio.to_thread(resumed.wait, 30)
        await asyncio.to_thread(private_mosquitto.start)
        assert await producer == total
        await counted(daemon.store, "restart", total)
        counts = await daemon.store.reads.task_counts("restart")
    assert sum(n for n, _ in counts.values()) == total
    assert counts["task 0"] == (100, 0)
    assert counts["task 1"] == (100, 100)


async def test_emit_command_prints_the_trial_id(
    daemon_store: Store, mosquitto: Mosquitto, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["emit", "cli", "deploy service 0", "pass", "--mqtt", mosquitto.url]
    argv += ["--topic", f"{prefix}/trials/emit", "--trial", "run-42"]
    assert await asyncio.to_thread(main, argv) == 0
    assert capsys.readouterr().out.strip() == "run-42"
    await counted(daemon_store, "cli", 1)
    assert await daemon_store.reads.task_counts("cli") == {"deploy service 0": (1, 1)}
    bad = ["emit", "a/b", "t", "pass", "--mqtt", mosquitto.url]
    assert await asyncio.to_thread(main, bad) == 2  # a usage error: the event is invalid
    assert "suite contains" in capsys.readouterr().err


async def test_a_broker_that_lost_its_state_gets_every_accepted_event_again(
    private_mosquitto: Mosquitto, prefix: str
) -> None:
    """Batches in flight when the broker dies without a trace (kill -9, no persistence
    file): the new broker knows nothing of them; the emitter must publish those
    batches again on its new connection."""
    total = 4000
    halfway, frozen = threading.Event(), threading.Event()
    emitter: list[Emitter] = []

    def produce() -> int:
        with Emitter(
            private_mosquitto.url, topic=f"{prefix}/trials/emit", reconnect_delay=0.2
        ) as em:
            emitter.append(em)
            for i in range(total):
                if i == total // 2:
                    halfway.set()
                    assert frozen.wait(30)
                em.emit("lost", f"task {i}", "pass")
            em.flush(30)
            return em.acknowledged

    producer = asyncio.create_task(asyncio.to_thread(produce))
    assert await asyncio.to_thread(halfway.wait, 30)
    assert private_mosquitto.proc is not None
    # A frozen broker takes PUBLISH packets into its socket buffer and acknowledges none.
    private_mosquitto.proc.send_signal(signal.SIGSTOP)
    frozen.set()
    await wait_until(lambda: _in_flight(emitter[0]), within=30)
    await asyncio.to_thread(private_mosquitto.kill)
    (private_mosquitto.workdir / "mosquitto.db").unlink(missing_ok=True)
    await asyncio.to_thread(private_mosquitto.start)
    assert await producer == total


async def _in_flight(em: Emitter) -> bool:
    return len(em._inflight) == em.max_inflight


async def test_emit_command_takes_broker_and_topic_from_the_config(
    daemon_store: Store, mosquitto: Mosquitto, prefix: str, tmp_path: Path
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[mqtt]\nurl = "{mosquitto.url}"\ntopic = "{prefix}/trials/#"\n')
    argv = ["emit", "cfg", "task", "fail", "-c", str(config)]
    assert await asyncio.to_thread(main, argv) == 0
    await counted(daemon_store, "cfg", 1)
    assert await daemon_store.reads.task_counts("cfg") == {"task": (1, 0)}


def test_credentials_come_from_the_url(password_broker: Mosquitto) -> None:
    port = password_broker.port
    with Emitter(f"mqtt://agent:s3cr3t%20pass@127.0.0.1:{port}") as em:
        em.emit("auth", "task", "pass")
        em.flush(10)
        assert em.acknowledged == 1
    with pytest.raises(EmitterError, match="cannot connect"):
        Emitter(f"mqtt://agent:nope@127.0.0.1:{port}", connect_timeout=5).start()


@pytest.fixture
def acl_broker(tmp_path: Path) -> Iterator[Mosquitto]:
    """A broker that lets anonymous clients publish under `allowed/` only."""
    acl = tmp_path / "acl"
    acl.write_text("topic readwrite allowed/#\n")
    broker = Mosquitto(
        "mosquitto", tmp_path, free_port(), extra=("allow_anonymous true", f"acl_file {acl}")
    )
    broker.start()
    yield broker
    broker.stop()


def test_a_message_the_broker_refuses_stops_the_emitter_with_the_reason(
    acl_broker: Mosquitto,
) -> None:
    with Emitter(acl_broker.url, topic="allowed/trials") as em:
        em.emit("acl", "task", "pass")
        em.flush(10)
        assert em.acknowledged == 1
    em = Emitter(acl_broker.url, topic="denied/trials").start()
    em.emit("acl", "task", "pass")
    with pytest.raises(EmitterError, match="refused the message on 'denied/trials'"):
        em.flush(10)
    with pytest.raises(EmitterError, match="refused"):
        em.emit("acl", "task", "fail")
    with pytest.raises(EmitterError, match="refused"):
        em.close()
    assert em.acknowledged == 0


def test_close_with_the_broker_away_says_how_many_events_were_left(
    private_mosquitto: Mosquitto,
) -> None:
    em = Emitter(private_mosquitto.url, reconnect_delay=0.2).start()
    private_mosquitto.stop(signal.SIGTERM)
    for i in range(7):
        em.emit("away", f"task {i}", "pass")
    with pytest.raises(EmitterError, match="7 events not acknowledged"):
        em.close(timeout=0.5)
    assert em.pending == 7


@pytest.fixture
def rumqttd(tmp_path: Path) -> Iterator[IotcoreBroker]:
    """The embedded MQTT 3.1.1-only broker (rumqttd), which drops an MQTT 5 CONNECT."""
    pytest.importorskip("iotcore", reason="no iotcore wheel here")
    broker = IotcoreBroker("rumqttd", tmp_path, free_port())
    broker.start()
    yield broker
    broker.stop()


async def test_a_broker_that_speaks_only_3_1_1_gets_every_event(rumqttd: IotcoreBroker) -> None:
    topic = "reliability/trials/emit"
    trials: set[str] = set()
    async with aiomqtt.Client(
        "127.0.0.1", rumqttd.port, protocol=aiomqtt.ProtocolVersion.V311
    ) as sub:
        await sub.subscribe(topic, qos=1)
        async with Emitter(rumqttd.url, topic=topic, batch_size=50) as em:
            for i in range(250):
                await em.aemit("v311", f"task {i}", "pass")
            await em.aflush(30)
            assert em.acknowledged == 250
            assert em.protocol == "3.1.1"
        async with asyncio.timeout(30):
            async for message in sub.messages:
                assert isinstance(message.payload, bytes)
                trials.update(e["trial"] for e in json.loads(message.payload))
                if len(trials) == 250:
                    break
