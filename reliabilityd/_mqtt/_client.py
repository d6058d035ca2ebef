"""One MQTT 3.1.1 / 5 client connection: an ``asyncio.Protocol`` over ``_codec``.

The codec turns bytes into packets and packets into bytes; this module does
the I/O and the state around it: the handshake, replies awaited by packet
id, keep-alive, back-pressure, and received messages handed over in batches,
so the per-message cost is the codec's few slice operations; a batch's
PUBACKs go out in one write, in PUBLISH order.

A ``Connection`` is one network connection. Packet identifiers of received
messages belong to it: ``ack`` on a closed connection sends nothing, and a
new connection is a new object, so a message id is never acknowledged on a
connection that did not deliver it (the broker redelivers it instead). A
malformed packet from the broker ends the connection with ``MalformedPacket``
(an ``MqttError``), like any other failure: the caller's reconnect runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import deque

from reliabilityd._mqtt import _codec as codec
from reliabilityd._mqtt import _encode as encode
from reliabilityd._mqtt._codec import ConnAck, Control, Message, PubAck, SubAck
from reliabilityd._mqtt._errors import Closed, MalformedPacket, MqttError, Refused, TakenOver
from reliabilityd._mqtt._keepalive import KeepAlive

# Received messages, and bytes of them, held at once before reading pauses.
HIGH_WATER = 20_000
HIGH_WATER_BYTES = 64 << 20
SESSION_TAKEN_OVER = 0x8E
# Requests awaiting a reply are keyed by (packet type, packet id).
Key = tuple[int, int]


def guard_size(max_payload: int) -> int:
    """The Maximum Packet Size sent in an MQTT 5 CONNECT: a memory guard well above
    ``max_payload``, so that messages a little too large still arrive (to be
    skipped and dead-lettered) and only absurd ones are left to the broker."""
    return min(16 * max_payload + codec.HEADER_ROOM, codec.LARGEST + 5)


class Connection(asyncio.Protocol):
    """One connection to the broker. Open it with ``connect()``."""

    def __init__(
        self,
        v5: bool,
        reply_within: float,
        *,
        max_payload: int = codec.LARGEST,
        max_inbox_bytes: int = HIGH_WATER_BYTES,
    ) -> None:
        self.v5 = v5
        # Seconds the broker has to answer CONNECT, SUBSCRIBE and PUBLISH.
        self.reply_within = reply_within
        self._decoder = codec.Decoder(v5, max_payload)
        self._max_inbox_bytes = max_inbox_bytes
        # The keep-alive the broker holds us to (its Server Keep Alive, when it
        # sent one), and the interval this side checks the connection at.
        self.keepalive = 0
        self._liveness = 0.0
        # What the broker's CONNACK said (MQTT 5 capabilities; 3.1.1 has none).
        self.session_present = False
        self.maximum_qos = 1
        self.retain_available = True
        self.maximum_packet_size: int | None = None
        self.shared_available = True
        self.wildcard_available = True
        self._transport: asyncio.Transport | None = None
        self._inbox: deque[Message] = deque()
        self._held = 0  # bytes read into the inbox and not yet taken (reads, approximately)
        self._wake = asyncio.Event()
        self._paused = False
        self._replies: dict[Key, asyncio.Future[Control]] = {}
        self._next_id = 0
        self._last_in = time.monotonic()
        self._pinger: asyncio.Task[None] | None = None
        # QoS 1 publishes awaiting PUBACK, at most the broker's Receive Maximum.
        self._quota = asyncio.Semaphore(65535)
        self.error: MqttError | None = None
        self.disconnect_reason: int | None = None  # of the broker's DISCONNECT, if it sent one
        self.closed = asyncio.Event()
        self._lost = asyncio.Event()

    # --- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost.set()
        self._fail(Closed(f"connection to the broker lost: {exc or 'closed'}"))

    def data_received(self, data: bytes) -> None:
        self._last_in = time.monotonic()
        inbox = self._inbox
        try:
            controls = self._decoder.feed(data, inbox)
            for packet in controls:
                self._control(packet)
        except MqttError as exc:
            self._abort(exc)
            return
        except Exception as exc:  # the codec raises MalformedPacket only; never crash the loop
            self._abort(MalformedPacket(f"malformed packet from the broker: {exc!r}"))
            return
        if inbox:
            self._held += len(data)
            self._wake.set()
            if (
                len(inbox) >= HIGH_WATER or self._held >= self._max_inbox_bytes
            ) and self._transport is not None:
                self._transport.pause_reading()
                self._paused = True

    def _control(self, packet: Control) -> None:
        if isinstance(packet, PubAck):
            self._reply((codec.PUBACK, packet.mid), packet)
        elif isinstance(packet, SubAck):
            self._reply((codec.SUBACK, packet.mid), packet)
        elif isinstance(packet, ConnAck):
            self._reply((codec.CONNACK, 0), packet)
        elif isinstance(packet, codec.Disconnect):
            self.disconnect_reason = packet.code
            reason = packet.properties.get(codec.REASON_STRING, b"")
            text = f"the broker disconnected us (reason {packet.code:#x} {reason!r})"
            self._abort(TakenOver(text) if packet.code == SESSION_TAKEN_OVER else Closed(text))

    def _reply(self, key: Key, packet: Control) -> None:
        fut = self._replies.pop(key, None)
        if fut is not None and not fut.done():
            fut.set_result(packet)

    # --- state ----------------------------------------------------------------

    def _fail(self, error: MqttError) -> None:
        if self.error is None:
            self.error = error
        for fut in self._replies.values():
            if not fut.done():
                fut.set_exception(self._gone())
        self._replies.clear()
        self.closed.set()
        if self._pinger is not None:
            self._pinger.cancel()
        self._wake.set()

    def _abort(self, error: MqttError) -> None:
        self._fail(error)
        if self._transport is not None:
            self._transport.abort()

    @property
    def is_open(self) -> bool:
        return self.error is None

    def _gone(self) -> MqttError:
        """A new exception each time: re-raising one instance would grow its traceback."""
        assert self.error is not None
        return type(self.error)(str(self.error))

    def _send(self, data: bytes) -> None:
        if self.error is not None:
            raise self._gone()
        assert self._transport is not None
        self._transport.write(data)

    async def _request(self, key: Key, data: bytes) -> Control:
        fut = asyncio.get_running_loop().create_future()
        self._replies[key] = fut
        self._send(data)
        try:
            return await asyncio.wait_for(fut, self.reply_within)
        except TimeoutError:
            self._abort(MqttError(f"no answer from the broker within {self.reply_within} s"))
            raise self._gone() from None

    def _packet_id(self) -> int:
        while True:
            self._next_id = self._next_id % 65535 + 1
            if (codec.PUBACK, self._next_id) not in self._replies and (
                codec.SUBACK,
                self._next_id,
            ) not in self._replies:
                return self._next_id

    # --- the client's operations --------------------------------------------

    async def handshake(
        self,
        *,
        client_id: str,
        clean: bool,
        keepalive: int,
        username: str | None,
        password: str | None,
        session_expiry: int | None,
        receive_maximum: int | None,
        maximum_packet_size: int | None = None,
    ) -> bool:
        """CONNECT and wait for CONNACK; True when the broker kept our session."""
        data = encode.connect_packet(
            client_id=client_id,
            clean=clean,
            keepalive=keepalive,
            username=username,
            password=password,
            v5=self.v5,
            session_expiry=session_expiry,
            receive_maximum=receive_maximum,
            maximum_packet_size=maximum_packet_size,
        )
        reply = await self._request((codec.CONNACK, 0), data)
        assert isinstance(reply, ConnAck)
        props = reply.properties
        if reply.code != 0:
            reason = props.get(codec.REASON_STRING, b"")
            self._abort(
                Refused(f"the broker refused the connection: code {reply.code:#x} {reason!r}")
            )
            raise self._gone()
        self.session_present = reply.session_present and not clean
        self.keepalive = keepalive
        server_keepalive = props.get(codec.SERVER_KEEP_ALIVE)
        if isinstance(server_keepalive, int):
            self.keepalive = server_keepalive
        # Server Keep Alive 0 turns the broker's check off, not ours: PINGREQ
        # is allowed at any time, so a dead connection is still noticed.
        self._liveness = float(self.keepalive or keepalive)
        quota = props.get(codec.RECEIVE_MAXIMUM)
        if isinstance(quota, int):
            self._quota = asyncio.Semaphore(quota)
        self.maximum_qos = min(1, int(props.get(codec.MAXIMUM_QOS, 2)))
        self.retain_available = props.get(codec.RETAIN_AVAILABLE, 1) == 1
        size = props.get(codec.MAXIMUM_PACKET_SIZE)
        self.maximum_packet_size = size if isinstance(size, int) else None
        self.shared_available = props.get(codec.SHARED_AVAILABLE, 1) == 1
        self.wildcard_available = props.get(codec.WILDCARD_AVAILABLE, 1) == 1
        if self._liveness:
            self._pinger = asyncio.create_task(self._ping_loop(), name="mqtt-keepalive")
        return self.session_present

    async def subscribe(self, topic: str, qos: int = 1) -> int:
        """SUBSCRIBE; the QoS the broker granted (at most its Maximum QoS).

        Refused when the broker grants none, or said in its CONNACK that it does
        not take shared or wildcard subscriptions and the topic is one.
        """
        if topic.startswith("$share/") and not self.shared_available:
            raise Refused(
                f"the broker does not take shared subscriptions ({topic!r}): "
                "its CONNACK says Shared Subscription Available 0"
            )
        if ("#" in topic or "+" in topic) and not self.wildcard_available:
            raise Refused(
                f"the broker does not take wildcard subscriptions ({topic!r}): "
                "its CONNACK says Wildcard Subscription Available 0"
            )
        mid = self._packet_id()
        data = encode.subscribe_packet(mid, topic, min(qos, self.maximum_qos), self.v5)
        reply = await self._request((codec.SUBACK, mid), data)
        assert isinstance(reply, SubAck)
        code = reply.codes[0]
        if code >= 0x80:
            raise Refused(f"the broker refused the subscription to {topic!r}: {code:#x}")
        if code > 2:
            self._abort(MalformedPacket(f"malformed packet from the broker: SUBACK {code:#x}"))
            raise self._gone()
        return code

    async def publish(self, topic: str, payload: bytes, *, retain: bool) -> None:
        """PUBLISH at QoS 1 and wait for the broker's PUBACK.

        Concurrent calls are fine: beyond the broker's Receive Maximum they wait.
        Refused, before anything is sent, for what the broker's CONNACK ruled
        out: QoS 1 (Maximum QoS 0), retained messages, packets over its Maximum
        Packet Size.
        """
        if self.maximum_qos < 1:
            raise Refused("the broker takes QoS 0 only (Maximum QoS 0): no acknowledged publish")
        if retain and not self.retain_available:
            raise Refused(f"the broker keeps no retained messages (Retain Available 0): {topic!r}")
        async with self._quota:
            mid = self._packet_id()
            data = encode.publish_packet(topic, payload, mid, retain=retain, v5=self.v5)
            if self.maximum_packet_size is not None and len(data) > self.maximum_packet_size:
                raise Refused(
                    f"a {len(data)}-byte PUBLISH on {topic!r} exceeds the broker's Maximum "
                    f"Packet Size ({self.maximum_packet_size})"
                )
            reply = await self._request((codec.PUBACK, mid), data)
        assert isinstance(reply, PubAck)
        if reply.code >= 0x80:
            raise Refused(f"the broker refused the message on {topic!r}: {reply.code:#x}")

    async def take(self, limit: int) -> list[Message]:
        """Up to ``limit`` received messages in arrival order; waits for the first.

        Raises MqttError once the connection is gone and nothing is left; an
        empty list means ``wake()`` was called (for example to stop).
        """
        inbox = self._inbox
        if not inbox:
            if self.error is not None:
                raise self._gone()
            self._wake.clear()
            await self._wake.wait()
            if not inbox:
                if self.error is not None:
                    raise self._gone()
                return []
        if len(inbox) <= limit:
            batch = list(inbox)
            inbox.clear()
            self._held = 0
        else:
            batch = [inbox.popleft() for _ in range(limit)]
            # The bytes read are not kept per message: take the batch's share.
            self._held -= self._held * limit // (limit + len(inbox))
        if (
            self._paused
            and len(inbox) < HIGH_WATER // 2
            and self._held < self._max_inbox_bytes // 2
            and self._transport is not None
        ):
            self._paused = False
            self._last_in = time.monotonic()  # the silence while paused was ours
            self._transport.resume_reading()
        return batch

    @property
    def waiting(self) -> int:
        """Messages received and not yet taken."""
        return len(self._inbox)

    @property
    def skipped(self) -> int:
        """Messages received without their body (over ``max_payload``), so far."""
        return self._decoder.skipped

    @property
    def paused(self) -> bool:
        """Whether reading is paused because too much waits to be taken."""
        return self._paused

    def wake(self) -> None:
        """Make a waiting ``take()`` return."""
        self._wake.set()

    def ack(self, batch: list[Message]) -> None:
        """PUBACK every QoS 1 message of the batch, in order, in one write.

        On a connection that is gone, nothing is sent: the broker redelivers.
        """
        if self.error is not None or self._transport is None:
            return
        data = encode.pubacks(batch)
        if data:
            self._transport.write(data)

    async def _ping_loop(self) -> None:
        """PINGREQ every half keep-alive; a silence longer than the keep-alive is a
        dead connection (``_keepalive``: noticed within 1.25 keep-alives)."""
        keepalive = KeepAlive(self._liveness, time.monotonic())
        while self.error is None:
            await asyncio.sleep(keepalive.tick)
            now = time.monotonic()
            if self._paused:
                # Not reading: the broker's bytes (PINGRESP too) wait in the socket.
                self._last_in = now
            action = keepalive.check(now, self._last_in)
            if action == "dead":
                silent = now - self._last_in
                self._abort(
                    MqttError(
                        f"no data from the broker for {silent:.1f} s "
                        f"(keep-alive {keepalive.every} s)"
                    )
                )
                return
            if action == "ping":
                with contextlib.suppress(MqttError):
                    self._send(encode.PINGREQ_PACKET)

    async def close(self) -> None:
        """DISCONNECT (the session stays as configured) and close the socket."""
        if self._transport is None:
            return
        if self.error is None:
            with contextlib.suppress(MqttError):
                self._send(encode.DISCONNECT_PACKET)
            self._fail(MqttError("the connection was closed"))
            # The broker closes its side once it has read the DISCONNECT, so
            # everything before it (the last PUBACKs) has been read too;
            # closing first could reset the socket with those still unread.
            # Cancelled while it waits, the socket is closed all the same.
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._lost.wait(), 2.0)
            finally:
                self._transport.close()
        else:
            self._transport.abort()
        if self._pinger is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._pinger


async def connect(
    host: str,
    port: int,
    *,
    identifier: str,
    persistent: bool,
    v5: bool = True,
    keepalive: int = 60,
    session_expiry: int = 0,
    username: str | None = None,
    password: str | None = None,
    tls: ssl.SSLContext | None = None,
    server_name: str | None = None,
    receive_maximum: int | None = None,
    reply_within: float = 10.0,
    max_payload: int = 1 << 20,
    max_inbox_bytes: int = HIGH_WATER_BYTES,
) -> Connection:
    """Open a connection and complete the handshake; MqttError on failure.

    ``persistent`` asks for a session the broker keeps (MQTT 5: for
    ``session_expiry`` seconds after a disconnect); ``tls`` is the context to
    wrap the socket in, or None for plain TCP, ``server_name`` the name the
    broker's certificate must carry when not ``host``. A message whose
    payload exceeds ``max_payload`` is taken as ``Skipped`` (no payload);
    MQTT 5 asks the broker for packets of at most ``guard_size(max_payload)``.
    """
    loop = asyncio.get_running_loop()
    try:
        # asyncio.timeout, not wait_for: Python 3.11's wait_for, cancelled
        # just as the connection is made, drops the new transport unclosed.
        async with asyncio.timeout(reply_within):
            _, conn = await loop.create_connection(
                lambda: Connection(
                    v5, reply_within, max_payload=max_payload, max_inbox_bytes=max_inbox_bytes
                ),
                host,
                port,
                ssl=tls,
                server_hostname=(server_name or host) if tls is not None else None,
            )
    except (OSError, TimeoutError) as exc:
        raise MqttError(f"cannot reach the broker at {host}:{port}: {exc}") from None
    try:
        await conn.handshake(
            client_id=identifier,
            clean=not persistent,
            keepalive=keepalive,
            username=username,
            password=password,
            session_expiry=session_expiry if (v5 and persistent) else None,
            receive_maximum=receive_maximum if v5 else None,
            maximum_packet_size=guard_size(max_payload) if v5 else None,
        )
    except BaseException:
        await conn.close()
        raise
    return conn
