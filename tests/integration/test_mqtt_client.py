"""The MQTT client connection: wire format in isolation, sessions and acks against mosquitto."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

import msgspec
import pytest

from reliabilityd.config import MqttConfig, TlsConfig
from reliabilityd.mqtt_connector import Connection, Message, MqttError, connect
from reliabilityd.sources import Acknowledge, Batch, Committed
from reliabilityd.sources.mqtt import consume
from reliabilityd.store import StreamCursor
from tests.support.certs import make_certificates
from tests.support.helpers import wait_until
from tests.support.servers import Mosquitto, free_port


class FakeTransport(asyncio.Transport):
    """Records what the connection writes; nothing goes to a network."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.aborted = False
        self.paused = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def remaining(n: int) -> bytes:
    out = bytearray()
    while True:
        n, b = divmod(n, 128)
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def publish_packet(
    topic: bytes, payload: bytes, mid: int, *, v5: bool, props: bytes = b""
) -> bytes:
    qos = 1 if mid else 0
    body = struct.pack("!H", len(topic)) + topic
    if mid:
        body += struct.pack("!H", mid)
    if v5:
        body += remaining(len(props)) + props
    body += payload
    return bytes([0x30 | qos << 1]) + remaining(len(body)) + body


def opened(v5: bool) -> tuple[Connection, FakeTransport]:
    conn = Connection(v5, reply_within=5.0)
    transport = FakeTransport()
    conn.connection_made(transport)
    return conn, transport


@pytest.mark.parametrize("v5", [True, False])
async def test_packets_split_at_any_byte_give_the_same_messages(v5: bool) -> None:
    """Whatever the reads' boundaries, every message comes out whole and in order."""
    want = [
        Message(b"t/a", b'{"suite": "s"}', 1),
        Message(b"t/b", b"x" * 300, 2),  # a two-byte remaining length
        Message(b"t/c", b"", 0),  # QoS 0: nothing to acknowledge
        Message(b"t/" + b"d" * 200, b"y" * 20_000, 65535),  # a three-byte remaining length
    ]
    # An MQTT 5 message may carry properties (here a content type): skipped.
    props = b"\x03" + struct.pack("!H", 4) + b"json" if v5 else b""
    stream = b"".join(publish_packet(m.topic, m.payload, m.mid, v5=v5, props=props) for m in want)
    for cut in range(0, len(stream), 7):
        conn, _ = opened(v5)
        conn.data_received(stream[:cut])
        conn.data_received(stream[cut:])
        assert await conn.take(100) == want
    conn, _ = opened(v5)
    for i in range(len(stream)):
        conn.data_received(stream[i : i + 1])
    assert await conn.take(2) == want[:2]
    assert await conn.take(100) == want[2:]


async def test_a_batch_is_acknowledged_in_publish_order_in_one_write() -> None:
    conn, transport = opened(True)
    ids = [7, 3, 9, 0, 1]
    conn.data_received(b"".join(publish_packet(b"t", b"p", m, v5=True) for m in ids))
    batch = await conn.take(100)
    assert transport.writes == []  # nothing is acknowledged on receipt
    conn.ack(batch)
    assert transport.writes == [b"".join(b"\x40\x02" + struct.pack("!H", m) for m in ids if m)]


async def test_a_lost_connection_acknowledges_nothing() -> None:
    conn, transport = opened(False)
    conn.data_received(publish_packet(b"t", b"p", 5, v5=False))
    batch = await conn.take(10)
    conn.connection_lost(ConnectionResetError("gone"))
    conn.ack(batch)
    assert transport.writes == []
    with pytest.raises(MqttError):
        await conn.take(10)


async def test_a_malformed_packet_closes_the_connection() -> None:
    conn, transport = opened(True)
    conn.data_received(b"\x30\xff\xff\xff\xff\x7f")  # a remaining length of five bytes
    assert transport.aborted
    assert not conn.is_open
    with pytest.raises(MqttError, match="malformed"):
        await conn.take(10)


async def test_reading_pauses_while_too_much_waits_for_a_commit() -> None:
    conn, transport = opened(True)
    packet = publish_packet(b"t", b"p", 0, v5=True)
    conn.data_received(packet * 25_000)
    assert transport.paused
    while len(await conn.take(5000)) == 5000 and transport.paused:
        pass
    assert not transport.paused


@pytest.mark.parametrize("protocol", ["5", "3.1.1"])
async def test_unacknowledged_messages_come_back_on_the_next_connection(
    mosquitto: Mosquitto, prefix: str, protocol: Literal["5", "3.1.1"]
) -> None:
    """Persistent session: only what was acknowledged is gone; the rest is redelivered."""
    cfg = MqttConfig(
        url=mosquitto.url, topic=f"{prefix}/t", client_id=f"{prefix}-c", protocol=protocol
    )
    sub = await connect(cfg, identifier=cfg.client_id, persistent=True, receive_maximum=100)
    await sub.subscribe(cfg.topic)
    pub = await connect(cfg, identifier=f"{prefix}-p", persistent=False)
    sent = [f"m{i}".encode() for i in range(10)]
    await asyncio.gather(*(pub.publish(cfg.topic, m, retain=False) for m in sent))
    got: list[Message] = []
    while len(got) < len(sent):
        got += await asyncio.wait_for(sub.take(100), 10)
    assert [m.payload for m in got] == sent
    sub.ack(got[:4])
    await pub.close()
    await sub.close()  # its DISCONNECT follows the PUBACKs on the same stream

    again = await connect(cfg, identifier=cfg.client_id, persistent=True, receive_maximum=100)
    back: list[Message] = []
    while len(back) < 6:
        back += await asyncio.wait_for(again.take(100), 10)
    assert [m.payload for m in back] == sent[4:]
    again.ack(back)
    await again.close()
    last = await connect(cfg, identifier=cfg.client_id, persistent=True, receive_maximum=100)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(last.take(100), 0.5)
    await last.close()


async def test_a_refused_connection_says_why(mosquitto: Mosquitto) -> None:
    cfg = MqttConfig(url=mosquitto.url, client_id="x", protocol="3.1.1")
    # MQTT 3.1.1 forbids an empty client id with a persistent session: refused.
    with pytest.raises(MqttError, match="refused"):
        await connect(cfg, identifier="", persistent=True)


@pytest.fixture
def tls_broker(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A broker with a TLS listener that wants user `agent`, password `s3cr3t`: (port, CA)."""
    certs = make_certificates(tmp_path)
    ca, cert, key = certs.ca, certs.server_cert, certs.server_key
    passwords = tmp_path / "passwd"
    passwords.touch()
    subprocess.run(
        ["mosquitto_passwd", "-b", str(passwords), "agent", "s3cr3t"],
        check=True,
        capture_output=True,
    )
    tls_port = free_port()
    broker = Mosquitto(
        "mosquitto",
        tmp_path,
        free_port(),
        extra=(
            "allow_anonymous false",
            f"password_file {passwords}",
            f"listener {tls_port} 127.0.0.1",
            f"cafile {ca}",
            f"certfile {cert}",
            f"keyfile {key}",
        ),
    )
    broker.start()
    yield tls_port, ca
    broker.stop()


async def test_tls_and_credentials_from_an_mqtts_url(
    tls_broker: tuple[int, Path], prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mqtts://user:password@host:port verifies the broker's certificate and logs in."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    port, ca = tls_broker
    url = f"mqtts://agent:s3cr3t@127.0.0.1:{port}"
    cfg = MqttConfig(url=url, topic=f"{prefix}/t", client_id=f"{prefix}-c")
    # Without our CA the certificate is not trusted: no connection.
    with pytest.raises(MqttError, match="CERTIFICATE_VERIFY_FAILED"):
        await connect(cfg, identifier=cfg.client_id, persistent=False)
    cfg = msgspec.structs.replace(cfg, tls=TlsConfig(ca_file=str(ca)))
    wrong = msgspec.structs.replace(cfg, url=f"mqtts://agent:nope@127.0.0.1:{port}")
    with pytest.raises(MqttError, match="refused"):
        await connect(wrong, identifier=cfg.client_id, persistent=False)
    sub = await connect(cfg, identifier=cfg.client_id, persistent=False)
    await sub.subscribe(cfg.topic)
    pub = await connect(cfg, identifier=f"{prefix}-p", persistent=False)
    await pub.publish(cfg.topic, b"over TLS", retain=False)
    (message,) = await asyncio.wait_for(sub.take(10), 10)
    assert message.payload == b"over TLS"
    await pub.close()
    await sub.close()


async def test_the_consumer_overlaps_decoding_with_a_commit_and_acknowledges_in_order(
    mosquitto: Mosquitto, prefix: str
) -> None:
    """Batch N+1 is decoded while batch N commits; commits run one at a time, in order;
    a batch is acknowledged only after its own commit (what was not comes back)."""
    cfg = MqttConfig(url=mosquitto.url, topic=f"{prefix}/t", client_id=f"{prefix}-c")
    session = await connect(cfg, identifier=cfg.client_id, persistent=True)
    await session.subscribe(cfg.topic)
    await session.close()
    pub = await connect(cfg, identifier=f"{prefix}-p", persistent=False)
    sent = [f"m{i:02d}".encode() for i in range(30)]
    await asyncio.gather(*(pub.publish(cfg.topic, m, retain=False) for m in sent))
    await pub.close()

    log: list[tuple[str, int]] = []
    batches: list[list[bytes]] = []
    gates = [asyncio.Event() for _ in range(10)]

    class Gated:
        """The commit interface (``sources.Committer``): each commit waits for its gate."""

        def __init__(self) -> None:
            self.numbers: dict[int, int] = {}  # id(batch) -> its number

        def decode(
            self, items: Sequence[tuple[bytes, str]], skipped: Sequence[tuple[int, str]] = ()
        ) -> Batch:
            batches.append([payload for payload, _ in items])
            log.append(("decode", len(batches) - 1))
            batch = Batch([], [], "test")
            self.numbers[id(batch)] = len(batches) - 1
            return batch

        async def __call__(
            self,
            batch: Batch,
            *,
            sent: asyncio.Event | None = None,
            cursor: StreamCursor | None = None,
            acknowledge: Acknowledge | None = None,
        ) -> Committed:
            n = self.numbers[id(batch)]
            log.append(("start", n))
            assert sent is not None
            assert acknowledge is not None
            sent.set()  # the request is on its way: the consumer decodes the next batch
            await gates[n].wait()
            log.append(("end", n))
            done = Committed([])
            acknowledge(done)
            return done

    async def logged(*entries: tuple[str, int]) -> bool:
        return all(e in log for e in entries)

    stop = asyncio.Event()
    consumer = asyncio.create_task(consume(cfg, Gated(), stop, max_batch=10))
    await wait_until(lambda: logged(("start", 0), ("decode", 1)), 10)
    # Between decoding a batch and committing it the consumer does no I/O: had it
    # not waited for commit 0, commit 1 would start within these loop turns.
    for _ in range(20):
        await asyncio.sleep(0)
    assert ("start", 1) not in log  # one commit at a time
    gates[0].set()
    await wait_until(lambda: logged(("start", 1)), 10)
    # Batch 1 was decoded after batch 0's commit started and before it ended.
    assert log.index(("start", 0)) < log.index(("decode", 1)) < log.index(("end", 0))
    assert log.index(("end", 0)) < log.index(("start", 1))

    # Batch 1 is committing, unacknowledged: a consumer cancelled now (the
    # daemon's shutdown grace ran out) cancels the commit, which may hang,
    # instead of waiting for it or leaving it pending; its batch comes back.
    consumer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(consumer, 2)
    assert ("end", 1) not in log
    assert asyncio.all_tasks() == {asyncio.current_task()}  # nothing left pending
    again = await connect(cfg, identifier=cfg.client_id, persistent=True)
    back: list[Message] = []
    while len(back) < len(sent) - len(batches[0]):
        back += await asyncio.wait_for(again.take(100), 10)
    assert [m.payload for m in back] == sent[len(batches[0]) :]
    again.ack(back)
    await again.close()
