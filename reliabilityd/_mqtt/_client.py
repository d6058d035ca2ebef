"""One MQTT 3.1.1 / 5 client connection: the wire format and nothing more.

The daemon needs a small part of MQTT: CONNECT with a persistent session,
SUBSCRIBE at QoS 1, receiving PUBLISH, sending PUBACKs when *it* decides
(after the Redis commit), publishing retained QoS 1 messages and waiting for
their PUBACK, and keep-alive. This module does exactly that, as an
``asyncio.Protocol`` that parses every complete packet of a read in one pass
and hands received messages over in batches, so the per-message cost is a few
slice operations; a batch's PUBACKs go out in one write, in PUBLISH order.

A ``Connection`` is one network connection. Packet identifiers of received
messages belong to it: ``ack`` on a closed connection sends nothing, and a
new connection is a new object, so a message id is never acknowledged on a
connection that did not deliver it (the broker redelivers it instead).
General-purpose clients were measured for this job (``make bench-ingest``):
paho (under aiomqtt) spends its time in per-packet Python, gmqtt acknowledges
after a coroutine per message and reconnects on its own with the same client,
which would acknowledge old ids on the new connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
import time
from collections import deque

import msgspec

CONNECT, CONNACK, PUBLISH, PUBACK = 0x10, 0x20, 0x30, 0x40
SUBSCRIBE, SUBACK, PINGREQ, PINGRESP, DISCONNECT = 0x82, 0x90, 0xC0, 0xD0, 0xE0
# Received messages held at once before reading pauses (QoS 0 has no broker-side limit).
HIGH_WATER = 20_000
# MQTT 5 property identifiers this client sends or reads.
SESSION_EXPIRY, RECEIVE_MAXIMUM, SERVER_KEEP_ALIVE, REASON_STRING = 0x11, 0x21, 0x13, 0x1F
# Value sizes of every MQTT 5 property, to walk a property block (0 = varint, -1 = string, ...).
_U8 = (0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A)
_U16 = (0x13, 0x21, 0x22, 0x23)
_U32 = (0x02, 0x11, 0x18, 0x27)
_STR = (0x03, 0x08, 0x09, 0x12, 0x15, 0x16, 0x1A, 0x1C, 0x1F)  # strings and binary data


class MqttError(ConnectionError):
    """The broker is unreachable, went away, or broke the protocol; reconnect and retry."""


class Refused(MqttError):
    """The broker refused the connection or the subscription (reason code in the message)."""


class Message(msgspec.Struct, frozen=True, gc=False):
    """One PUBLISH received. A struct, not a NamedTuple: a NamedTuple's
    constructor runs in Python, and a drain makes one per message.
    Holding only bytes and an int, it cannot be part of a cycle (``gc=False``)."""

    topic: bytes
    payload: bytes
    mid: int  # 0 for QoS 0: nothing to acknowledge


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, b = divmod(n, 128)
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def _read_varint(buf: bytes | bytearray, i: int) -> tuple[int, int]:
    """(value, next index); ValueError when malformed or incomplete."""
    value, shift = 0, 0
    while True:
        b = buf[i]  # IndexError when incomplete: the caller checks lengths first
        value |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 21:
            raise ValueError("malformed variable byte integer")


def _remaining_length(buf: bytes | bytearray, i: int, size: int) -> tuple[int, int]:
    """(length, start of the body), or (0, -1) while the length's bytes are incomplete."""
    value, shift = 0, 0
    while i < size:
        b = buf[i]
        value |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 21:
            raise ValueError("malformed remaining length")
    return 0, -1


def _holds_a_packet(buf: bytearray) -> bool:
    """Whether the buffer starts with a whole packet (or a malformed length to report)."""
    size = len(buf)
    if size < 2:
        return False
    length, start = buf[1], 2
    if length >= 0x80:
        try:
            length, start = _remaining_length(buf, 1, size)
        except ValueError:
            return True  # the parser reports it
        if start < 0:
            return False
    return start + length <= size


def _str(s: str | bytes) -> bytes:
    raw = s.encode() if isinstance(s, str) else s
    return struct.pack("!H", len(raw)) + raw


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + _varint(len(body)) + body


def _properties(block: bytes) -> dict[int, int | bytes]:
    """Numbers and strings of an MQTT 5 property block (user properties skipped)."""
    out: dict[int, int | bytes] = {}
    i = 0
    while i < len(block):
        pid = block[i]
        i += 1
        if pid in _U8:
            out[pid], i = block[i], i + 1
        elif pid in _U16:
            out[pid], i = int.from_bytes(block[i : i + 2], "big"), i + 2
        elif pid in _U32:
            out[pid], i = int.from_bytes(block[i : i + 4], "big"), i + 4
        elif pid == 0x0B:
            out[pid], i = _read_varint(block, i)
        elif pid in _STR:
            n = int.from_bytes(block[i : i + 2], "big")
            out[pid], i = bytes(block[i + 2 : i + 2 + n]), i + 2 + n
        elif pid == 0x26:  # user property: a string pair
            for _ in range(2):
                i += 2 + int.from_bytes(block[i : i + 2], "big")
        else:
            raise ValueError(f"unknown MQTT 5 property {pid:#x}")
    return out


class Connection(asyncio.Protocol):
    """One connection to the broker. Open it with ``connect()``."""

    def __init__(self, v5: bool, reply_within: float) -> None:
        self.v5 = v5
        # Seconds the broker has to answer CONNECT, SUBSCRIBE and PUBLISH.
        self.reply_within = reply_within
        self.keepalive = 0
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._inbox: deque[Message] = deque()
        self._wake = asyncio.Event()
        self._paused = False
        self._replies: dict[tuple[int, int], asyncio.Future[bytes]] = {}
        self._next_id = 0
        self._last_in = time.monotonic()
        self._pinger: asyncio.Task[None] | None = None
        # QoS 1 publishes awaiting PUBACK, at most the broker's Receive Maximum.
        self._quota = asyncio.Semaphore(65535)
        self.error: MqttError | None = None
        self.closed = asyncio.Event()
        self._lost = asyncio.Event()

    # --- asyncio.Protocol ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost.set()
        self._fail(MqttError(f"connection to the broker lost: {exc or 'closed'}"))

    def data_received(self, data: bytes) -> None:
        self._last_in = time.monotonic()
        buf = self._buf
        # Parse from immutable bytes: one copy per slice (a bytearray slice
        # is a copy, and bytes() of it another), none when nothing was left over.
        if buf:
            buf += data
            if not _holds_a_packet(buf):
                return  # copy the buffer once a whole packet is there, not per read
            view = bytes(buf)
        else:
            view = data
        size = len(view)
        pos = 0
        inbox = self._inbox
        v5 = self.v5
        try:
            while size - pos >= 2:
                first = view[pos]
                length = view[pos + 1]
                start = pos + 2
                if length >= 0x80:
                    length, start = _remaining_length(view, pos + 1, size)
                    if start < 0:
                        break  # the length itself is still incomplete
                end = start + length
                if end > size:
                    break
                if first & 0xF0 == PUBLISH:
                    tlen = (view[start] << 8) | view[start + 1]
                    i = start + 2 + tlen
                    topic = view[start + 2 : i]
                    qos = (first >> 1) & 3
                    mid = 0
                    if qos:
                        if qos == 2:
                            raise ValueError("QoS 2 PUBLISH on a QoS 1 subscription")
                        mid = (view[i] << 8) | view[i + 1]
                        i += 2
                    if v5:
                        plen = view[i]  # the properties' length, nearly always one byte
                        if plen < 0x80:
                            i += 1 + plen
                        else:
                            plen, i = _read_varint(view, i)
                            i += plen
                    inbox.append(Message(topic, view[i:end], mid))
                else:
                    self._control(first, view[start:end])
                pos = end
        except (ValueError, IndexError) as exc:
            self._abort(MqttError(f"malformed packet from the broker: {exc}"))
            return
        # Keep what is left of an incomplete packet for the next read.
        buf[:] = view[pos:]
        if inbox:
            self._wake.set()
            if len(inbox) >= HIGH_WATER and self._transport is not None:
                self._transport.pause_reading()
                self._paused = True

    def _control(self, first: int, body: bytes) -> None:
        kind = first & 0xF0
        if kind == CONNACK:
            self._reply((CONNACK, 0), body)
        elif kind in (PUBACK, SUBACK):
            self._reply((kind, int.from_bytes(body[:2], "big")), body)
        elif kind == PINGRESP:
            pass
        elif kind == DISCONNECT:
            reason = body[0] if body else 0
            self._abort(MqttError(f"the broker disconnected us (reason {reason:#x})"))
        else:
            raise ValueError(f"unexpected packet type {first:#x}")

    def _reply(self, key: tuple[int, int], body: bytes) -> None:
        fut = self._replies.pop(key, None)
        if fut is not None and not fut.done():
            fut.set_result(body)

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

    async def _request(self, key: tuple[int, int], data: bytes) -> bytes:
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
            if (PUBACK, self._next_id) not in self._replies and (
                SUBACK,
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
    ) -> bool:
        """CONNECT and wait for CONNACK; True when the broker kept our session."""
        flags = 0x02 if clean else 0
        payload = _str(client_id)
        if username is not None:
            flags |= 0x80
            payload += _str(username)
            if password is not None:
                flags |= 0x40
                payload += _str(password)
        header = _str("MQTT") + bytes([5 if self.v5 else 4, flags]) + struct.pack("!H", keepalive)
        if self.v5:
            props = b""
            if session_expiry is not None:
                props += bytes([SESSION_EXPIRY]) + struct.pack("!I", session_expiry)
            if receive_maximum is not None:
                props += bytes([RECEIVE_MAXIMUM]) + struct.pack("!H", receive_maximum)
            header += _varint(len(props)) + props
        body = await self._request((CONNACK, 0), _packet(CONNECT, header + payload))
        present, code = body[0] & 1, body[1]
        self.keepalive = keepalive
        reason = b""
        if self.v5 and len(body) > 2:
            plen, i = _read_varint(body, 2)
            props_in = _properties(body[i : i + plen])
            server_keepalive = props_in.get(SERVER_KEEP_ALIVE)
            if isinstance(server_keepalive, int):
                self.keepalive = server_keepalive
            quota = props_in.get(RECEIVE_MAXIMUM)
            if isinstance(quota, int) and quota > 0:
                self._quota = asyncio.Semaphore(quota)
            text = props_in.get(REASON_STRING, b"")
            reason = text if isinstance(text, bytes) else b""
        if code != 0:
            self._abort(Refused(f"the broker refused the connection: code {code:#x} {reason!r}"))
            raise self._gone()
        if self.keepalive:
            self._pinger = asyncio.create_task(self._ping_loop(), name="mqtt-keepalive")
        return bool(present)

    async def subscribe(self, topic: str) -> None:
        """SUBSCRIBE at QoS 1; Refused when the broker grants none."""
        mid = self._packet_id()
        body = struct.pack("!H", mid) + (b"\x00" if self.v5 else b"") + _str(topic) + b"\x01"
        reply = await self._request((SUBACK, mid), _packet(SUBSCRIBE, body))
        i = 2
        if self.v5:
            plen, i = _read_varint(reply, 2)
            i += plen
        if reply[i] >= 0x80:
            raise Refused(f"the broker refused the subscription to {topic!r}: {reply[i]:#x}")

    async def publish(self, topic: str, payload: bytes, *, retain: bool) -> None:
        """PUBLISH at QoS 1 and wait for the broker's PUBACK.

        Concurrent calls are fine: beyond the broker's Receive Maximum they wait.
        """
        async with self._quota:
            mid = self._packet_id()
            body = _str(topic) + struct.pack("!H", mid) + (b"\x00" if self.v5 else b"") + payload
            reply = await self._request((PUBACK, mid), _packet(PUBLISH | 0x02 | int(retain), body))
        if len(reply) > 2 and reply[2] >= 0x80:
            raise Refused(f"the broker refused the message on {topic!r}: {reply[2]:#x}")

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
        else:
            batch = [inbox.popleft() for _ in range(limit)]
        if self._paused and len(inbox) < HIGH_WATER // 2 and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return batch

    @property
    def waiting(self) -> int:
        """Messages received and not yet taken."""
        return len(self._inbox)

    def wake(self) -> None:
        """Make a waiting ``take()`` return."""
        self._wake.set()

    def ack(self, batch: list[Message]) -> None:
        """PUBACK every QoS 1 message of the batch, in order, in one write.

        On a connection that is gone, nothing is sent: the broker redelivers.
        """
        if self.error is not None or self._transport is None:
            return
        # Each PUBACK is 0x40 0x02 and the 2-byte id: one 32-bit word.
        words = [0x40020000 | m.mid for m in batch if m.mid]
        if words:
            self._transport.write(struct.pack(f">{len(words)}I", *words))

    async def _ping_loop(self) -> None:
        interval = max(self.keepalive / 2, 0.5)
        while self.error is None:
            await asyncio.sleep(interval)
            if time.monotonic() - self._last_in > 1.5 * self.keepalive + interval:
                self._abort(MqttError(f"no data from the broker for {1.5 * self.keepalive} s"))
                return
            with contextlib.suppress(MqttError):
                self._send(bytes([PINGREQ, 0]))

    async def close(self) -> None:
        """DISCONNECT (the session stays as configured) and close the socket."""
        if self._transport is None:
            return
        if self.error is None:
            with contextlib.suppress(MqttError):
                self._send(bytes([DISCONNECT, 0]))
            self._fail(MqttError("the connection was closed"))
            # The broker closes its side once it has read the DISCONNECT, so
            # everything before it (the last PUBACKs) has been read too;
            # closing first could reset the socket with those still unread.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), 2.0)
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
    receive_maximum: int | None = None,
    reply_within: float = 10.0,
) -> Connection:
    """Open a connection and complete the handshake; MqttError on failure.

    ``persistent`` asks for a session the broker keeps (MQTT 5: for
    ``session_expiry`` seconds after a disconnect); ``tls`` is the context to
    wrap the socket in, or None for plain TCP.
    """
    loop = asyncio.get_running_loop()
    try:
        # asyncio.timeout, not wait_for: Python 3.11's wait_for, cancelled
        # just as the connection is made, drops the new transport unclosed.
        async with asyncio.timeout(reply_within):
            _, conn = await loop.create_connection(
                lambda: Connection(v5, reply_within), host, port, ssl=tls
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
        )
    except BaseException:
        await conn.close()
        raise
    return conn
