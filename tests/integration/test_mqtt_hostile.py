"""The MQTT client against a scripted hostile broker: what a broker must not send, and
what it may send that a client must honour (keep-alive, takeover, CONNACK capabilities)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Literal

import msgspec
import pytest

from reliabilityd._mqtt import Connection, MalformedPacket, MqttError, Refused, guard_size
from reliabilityd.backoff import sleep_or_stop
from reliabilityd.client.emitter import Emitter
from reliabilityd.config import MqttConfig
from reliabilityd.mqtt_connector import connect
from reliabilityd.sources import Acknowledge, Batch, Committed
from reliabilityd.sources.mqtt import BACKOFF_MAX, BACKOFF_START, STABLE, Watch, consume
from reliabilityd.store import StreamCursor
from tests.support.hostile import (
    DISCONNECT,
    Freezer,
    HostileBroker,
    Peer,
    connack,
    disconnect,
    packet,
    publish,
)
from tests.support.servers import Mosquitto

Protocol = Literal["5", "3.1.1"]
BOTH: list[Protocol] = ["5", "3.1.1"]


class Consumer(msgspec.Struct):
    payloads: list[bytes]
    skipped: list[tuple[int, str]]
    watch: Watch
    task: asyncio.Task[None]
    subscribed: asyncio.Event


@contextlib.asynccontextmanager
async def consuming(
    url: str,
    protocol: Protocol = "5",
    *,
    max_payload: int = 1 << 20,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[asyncio.Event, float], Awaitable[None]] = sleep_or_stop,
) -> AsyncIterator[Consumer]:
    """The daemon's consume loop with a commit that only records what it was given."""
    cfg = MqttConfig(url=url, topic="t/#", client_id="hostile-test", protocol=protocol)
    seen = Consumer([], [], Watch(), asyncio.create_task(asyncio.sleep(0)), asyncio.Event())

    class Recording:
        """The commit interface (``sources.Committer``): records, applies nothing, acknowledges."""

        def decode(
            self, pairs: Sequence[tuple[bytes, str]], big: Sequence[tuple[int, str]] = ()
        ) -> Batch:
            seen.payloads.extend(p for p, _ in pairs)
            seen.skipped.extend(big)
            return Batch([], [], "test")

        async def __call__(
            self,
            batch: Batch,
            *,
            sent: asyncio.Event | None = None,
            cursor: StreamCursor | None = None,
            acknowledge: Acknowledge | None = None,
        ) -> Committed:
            if sent is not None:
                sent.set()
            done = Committed([])
            if acknowledge is not None:
                acknowledge(done)
            return done

    stop = asyncio.Event()
    seen.task = asyncio.create_task(
        consume(
            cfg,
            Recording(),
            stop,
            max_batch=100,
            max_payload=max_payload,
            subscribed=seen.subscribed,
            watch=seen.watch,
            clock=clock,
            pause=pause,
        )
    )
    try:
        yield seen
    finally:
        stop.set()
        await asyncio.wait_for(seen.task, 10)


# --- malformed input is a protocol error, and only an MqttError ------------------


@pytest.mark.parametrize("protocol", BOTH)
async def test_a_topic_overrunning_its_packet_is_never_acknowledged(protocol: Protocol) -> None:
    """``32 06 00 10 61 62 63 64`` and a valid packet: no message, no PUBACK, a reconnect."""

    async def script(peer: Peer) -> None:
        await peer.handshake()
        await peer.subscribed()
        valid = publish(b"t/it", b'{"x": 1}', 0x6974, peer.v5)
        peer.send(bytes.fromhex("3206001061626364") + valid)

    async with HostileBroker(script) as broker, consuming(broker.url, protocol) as seen:
        await broker.connections(2)
        await asyncio.wait_for(broker.peers[0].ended.wait(), 10)
        assert broker.peers[0].pubacks() == []
        assert seen.payloads == []
        assert not seen.task.done()


@pytest.mark.parametrize("protocol", BOTH)
@pytest.mark.parametrize(
    "bad",
    [
        packet(0x36, b"\x00\x03t/a\x00\x05{}"),  # QoS 3
        packet(0x32, b"\x00\x03t/a\x00\x00{}"),  # QoS 1 with packet id 0
        b"\xd1\x00",  # PINGRESP with a reserved flag bit
    ],
    ids=["qos3", "id0", "reserved-flags"],
)
async def test_qos_3_id_0_and_reserved_flags_end_the_connection(
    protocol: Protocol, bad: bytes
) -> None:
    async def script(peer: Peer) -> None:
        await peer.handshake()
        await peer.subscribed()
        # For MQTT 5 a PUBLISH carries a property length: insert it after the id.
        peer.send(bad if not peer.v5 or bad[0] & 0xF0 != 0x30 else bad[:-2] + b"\x00{}")

    async with HostileBroker(script) as broker, consuming(broker.url, protocol) as seen:
        await broker.connections(2)
        assert broker.peers[0].pubacks() == []
        assert seen.payloads == []


def short_connack(peer: Peer) -> bytes:
    return b"\x20\x01\x00"


def unknown_property(peer: Peer) -> bytes:
    return connack(True, properties=b"\x77\x00")


MALFORMED_REPLIES = {"short-connack": short_connack, "unknown-property": unknown_property}


@pytest.mark.parametrize("reply", ["short-connack", "unknown-property", "short-suback"])
async def test_a_malformed_reply_is_an_mqtt_error_and_the_consumer_reconnects(reply: str) -> None:
    async def script(peer: Peer) -> None:
        if reply == "short-suback":
            await peer.handshake()
            await peer.packet()
            peer.send(b"\x90\x02\x00\x01")
        else:
            await peer.handshake(MALFORMED_REPLIES[reply](peer))

    async with HostileBroker(script) as broker:
        cfg = MqttConfig(url=broker.url, client_id="x")

        async def connect_and_subscribe() -> None:
            conn = await connect(cfg, identifier="x", persistent=False)
            await conn.subscribe("t")

        with pytest.raises(MalformedPacket):
            await connect_and_subscribe()
    async with HostileBroker(script) as broker, consuming(broker.url) as seen:
        await asyncio.wait_for(seen.subscribed.wait(), 10)
        assert len(broker.peers) == 2
        assert not seen.task.done()


async def test_the_emitter_survives_a_malformed_reply_to_its_reconnect() -> None:
    """A 1-byte CONNACK on reconnect: the emitter keeps its thread and delivers everything."""

    async def drops_the_first_publish(peer: Peer) -> None:
        await peer.handshake()
        await peer.packet()
        peer.writer.transport.abort()

    async def short(peer: Peer) -> None:
        await peer.handshake(b"\x20\x01\x00")

    async with HostileBroker(drops_the_first_publish, short) as broker:
        emitter = Emitter(broker.url, protocol="5", reconnect_delay=0.2, batch_size=5)
        await asyncio.to_thread(emitter.start)
        try:
            for i in range(20):
                await emitter.aemit("s", f"t{i}", "pass")
            await emitter.aflush(20)
            assert emitter.acknowledged == 20
            assert len(broker.peers) >= 3
        finally:
            await asyncio.to_thread(emitter.close, 5)


# --- bounded by bytes, never by what the broker announces --------------------------


async def test_connect_sends_a_maximum_packet_size_well_above_max_payload() -> None:
    async with HostileBroker() as broker:
        conn = await connect(
            MqttConfig(url=broker.url), identifier="x", persistent=False, max_payload=1 << 20
        )
        await conn.close()
        sent = broker.peers[0].connect
        assert sent is not None
        assert sent.properties[0x27] == guard_size(1 << 20) >= 16 << 20


async def test_a_close_cancelled_while_it_waits_for_the_broker_still_closes_the_socket() -> None:
    """close() waits up to 2 s for the broker to end the connection after DISCONNECT; a
    task cancelled in that wait (a daemon shutting down) must not leave the socket open."""
    disconnected = asyncio.Event()

    async def holds_on(peer: Peer) -> None:
        await peer.handshake()
        while (got := await peer.packet()) is not None:
            if got[0] == DISCONNECT:
                disconnected.set()  # and keeps its side open

    async with HostileBroker(holds_on) as broker:
        conn = await connect(MqttConfig(url=broker.url), identifier="x", persistent=False)
        closing = asyncio.create_task(conn.close())
        await asyncio.wait_for(disconnected.wait(), 5)
        closing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await closing
        # The client's socket is closed: the broker reads its end of stream.
        await asyncio.wait_for(broker.peers[0].ended.wait(), 5)


async def test_a_message_past_max_payload_arrives_without_its_body_and_is_acknowledged() -> None:
    big = b"{" + b" " * 300_000 + b"}"

    async def script(peer: Peer) -> None:
        await peer.handshake()
        await peer.subscribed()
        peer.send(publish(b"t/big", big, 5, peer.v5) + publish(b"t/ok", b"{}", 6, peer.v5))
        await peer.serve()

    async with HostileBroker(script) as broker, consuming(broker.url, max_payload=1000) as seen:
        await asyncio.wait_for(seen.subscribed.wait(), 10)
        for _ in range(100):
            if len(broker.peers[0].pubacks()) == 2:
                break
            await asyncio.sleep(0.05)
        assert broker.peers[0].pubacks() == [5, 6]
        assert seen.skipped == [(len(big), "mqtt:t/big")]
        assert seen.payloads == [b"{}"]
        assert seen.watch.skipped == 1


async def test_the_inbox_is_bounded_in_bytes() -> None:
    """Reading pauses once the messages waiting hold too many bytes, whatever their count."""

    class Transport(asyncio.Transport):
        paused = False

        def pause_reading(self) -> None:
            self.paused = True

        def resume_reading(self) -> None:
            self.paused = False

        def write(self, data: bytes | bytearray | memoryview) -> None:
            pass

    conn = Connection(True, 5.0, max_payload=1 << 20, max_inbox_bytes=4 << 20)
    transport = Transport()
    conn.connection_made(transport)
    message = publish(b"t", b"x" * 500_000, 1, True)
    for _ in range(9):
        conn.data_received(message)
    assert transport.paused
    await conn.take(100)
    assert not transport.paused


# --- keep-alive and takeover ---------------------------------------------------------


@pytest.mark.parametrize("protocol", BOTH)
async def test_a_half_open_connection_is_noticed_by_the_keepalive(
    mosquitto: Mosquitto, protocol: Protocol
) -> None:
    """The bound (1.25 keep-alives) is checked on virtual time in test_mqtt_keepalive;
    here a real broker behind a frozen proxy is noticed at all, by the keep-alive."""
    keepalive = 1
    async with Freezer(mosquitto.port) as proxy:
        cfg = MqttConfig(url=proxy.url, keepalive=keepalive, protocol=protocol)
        conn = await connect(cfg, identifier=f"half-open-{protocol}", persistent=False)
        await asyncio.sleep(1.5 * keepalive)  # pings answered meanwhile: still open
        assert conn.is_open
        proxy.freeze()
        await asyncio.wait_for(conn.closed.wait(), 30 * keepalive)
        await conn.close()
        assert isinstance(conn.error, MqttError)
        assert "no data from the broker" in str(conn.error)


async def test_server_keepalive_0_does_not_switch_dead_connection_detection_off() -> None:
    async def silent(peer: Peer) -> None:
        await peer.handshake(connack(True, properties=b"\x13\x00\x00"))
        await peer.serve(pings=False)  # never answers PINGREQ

    async with HostileBroker(silent) as broker:
        conn = await connect(
            MqttConfig(url=broker.url, keepalive=1), identifier="x", persistent=False
        )
        assert conn.keepalive == 0
        await asyncio.wait_for(conn.closed.wait(), 30)
        assert "no data from the broker" in str(conn.error)  # our keep-alive, not the socket
        assert any(first == 0xC0 for first, _ in broker.peers[0].received)  # PINGREQ went out
        await conn.close()


class VirtualTime:
    """The consumer's clock and reconnect pause: time moves only when it pauses.

    Each pause is recorded and moves the clock on by its length at once, so
    the pacing is tested by what the consumer decided, not by how fast a
    busy machine let it run.
    """

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def clock(self) -> float:
        return self.now

    async def pause(self, stop: asyncio.Event, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


async def taken_over(peer: Peer) -> None:
    """Hand the client its session, then drop it as a takeover does."""
    await peer.handshake()
    await peer.subscribed()
    if peer.v5:
        peer.send(disconnect(True, 0x8E))
    peer.writer.transport.abort()


def doubling(pauses: Sequence[float], start: float, count: int) -> None:
    """The first ``count`` pauses double from ``start`` (each within its +-10% jitter)."""
    assert len(pauses) >= count, pauses
    for i, paused in enumerate(pauses[:count]):
        assert paused == pytest.approx(min(start * 2**i, BACKOFF_MAX), rel=0.1), pauses


@pytest.mark.parametrize("protocol", BOTH)
async def test_a_takeover_is_logged_once_and_backs_off(
    protocol: Protocol, caplog: pytest.LogCaptureFixture
) -> None:
    """Taken over at once, every time: the waits between attempts double, not reset."""
    caplog.set_level(logging.INFO)
    time_ = VirtualTime()
    async with (
        HostileBroker(then=taken_over) as broker,
        consuming(broker.url, protocol, clock=time_.clock, pause=time_.pause) as seen,
    ):
        await broker.connections(9)
    # 0.2, 0.4, ... 12.8, then the 15 s cap: never reset by a connection of no age.
    doubling(time_.pauses, BACKOFF_START, 8)
    assert seen.watch.takeovers >= 8
    lines = [r for r in caplog.records if "mqtt_session_taken_over" in r.getMessage()]
    assert len(lines) == seen.watch.takeovers


async def test_a_connection_that_lasted_resets_the_backoff() -> None:
    """Once a connection has lived ``STABLE`` seconds, the next wait starts over."""
    time_ = VirtualTime()
    lasting = asyncio.Event()

    async def lasts(peer: Peer) -> None:
        await peer.handshake()
        await peer.subscribed()
        lasting.set()
        await peer.ended.wait()

    async with (
        HostileBroker(taken_over, taken_over, taken_over, lasts, then=taken_over) as broker,
        consuming(broker.url, clock=time_.clock, pause=time_.pause) as seen,
    ):
        await asyncio.wait_for(lasting.wait(), 20)
        assert len(time_.pauses) == 3
        time_.now += STABLE  # the fourth connection has now lived STABLE seconds
        broker.peers[3].writer.transport.abort()
        await broker.connections(7)
    doubling(time_.pauses, BACKOFF_START, 3)
    doubling(time_.pauses[3:], BACKOFF_START, 3)
    assert seen.watch.takeovers >= 5


async def test_reconnects_in_real_time_wait_at_least_the_backoff() -> None:
    """The real clock and sleep: the consumer waits at least each backoff delay.

    Only a lower bound, which no busy machine can break: a sleep never ends
    early, while a slow machine may make any gap longer.
    """
    arrivals: list[float] = []
    async with HostileBroker(then=taken_over) as broker, consuming(broker.url) as seen:
        for n in range(1, 4):
            await broker.connections(n)
            arrivals.append(time.monotonic())
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    floors = [0.9 * BACKOFF_START * 2**i for i in range(len(gaps))]  # the jitter's floor
    assert all(gap >= floor for gap, floor in zip(gaps, floors, strict=True)), gaps
    assert seen.watch.takeovers >= 2


# --- what the CONNACK says the broker can do -------------------------------------------


async def capable(peer: Peer, capabilities: bytes) -> None:
    await peer.handshake(connack(True, properties=capabilities))
    await peer.serve()


@contextlib.asynccontextmanager
async def connected_to(capabilities: bytes) -> AsyncIterator[tuple[Connection, HostileBroker]]:
    async def script(peer: Peer) -> None:
        await capable(peer, capabilities)

    async with HostileBroker(then=script) as broker:
        conn = await connect(MqttConfig(url=broker.url), identifier="x", persistent=False)
        try:
            yield conn, broker
        finally:
            await conn.close()


def sent(broker: HostileBroker, kind: int) -> list[tuple[int, bytes]]:
    return [(f, b) for f, b in broker.peers[0].received if f & 0xF0 == kind]


async def test_maximum_qos_0_is_honoured() -> None:
    async with connected_to(b"\x24\x00") as (conn, broker):
        granted = await conn.subscribe("t/#")
        with pytest.raises(Refused, match="Maximum QoS 0"):
            await conn.publish("t/a", b"x", retain=False)
        assert granted == 0
        (subscribe,) = sent(broker, 0x80)
        assert subscribe[1][-1] == 0  # asked for QoS 0, not 1
        assert sent(broker, 0x30) == []


async def test_retain_available_0_is_honoured_by_the_retained_publisher() -> None:
    from reliabilityd.alerting.publisher import Publisher

    async with connected_to(b"\x25\x00") as (conn, broker):
        with pytest.raises(Refused, match="Retain Available 0"):
            await conn.publish("t/a", b"x", retain=True)
        assert sent(broker, 0x30) == []
        publisher = Publisher(MqttConfig(url=broker.url), "pub")
        stop = asyncio.Event()
        task = asyncio.create_task(publisher.run(stop))
        publisher.publish("snap/s", b"{}")
        for _ in range(100):
            if len(broker.peers) > 1 and sent_by(broker.peers[1], 0x30):
                break
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(task, 10)
        (first, _), *_ = sent_by(broker.peers[1], 0x30)
        assert first & 0x01 == 0  # published, not retained


def sent_by(peer: Peer, kind: int) -> list[tuple[int, bytes]]:
    return [(f, b) for f, b in peer.received if f & 0xF0 == kind]


async def test_maximum_packet_size_is_honoured() -> None:
    async with connected_to(b"\x27" + struct.pack("!I", 100)) as (conn, broker):
        await conn.publish("t/a", b"x" * 50, retain=False)
        with pytest.raises(Refused, match="Maximum Packet Size"):
            await conn.publish("t/a", b"x" * 200, retain=False)
        assert len(sent(broker, 0x30)) == 1


async def test_shared_subscription_available_0_is_honoured() -> None:
    async with connected_to(b"\x2a\x00") as (conn, broker):
        with pytest.raises(Refused, match="Shared Subscription Available 0"):
            await conn.subscribe("$share/g/t/#")
        assert sent(broker, 0x80) == []
        assert await conn.subscribe("t/#") == 1
