"""Packets in, bytes out: what this client sends, encoded (the other half of ``_codec``)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from reliabilityd._mqtt._codec import (
    CONNECT,
    DISCONNECT,
    MAXIMUM_PACKET_SIZE,
    PINGREQ,
    PUBLISH,
    RECEIVE_MAXIMUM,
    SESSION_EXPIRY,
    SUBSCRIBE,
    Message,
)


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, b = divmod(n, 128)
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def string(s: str | bytes) -> bytes:
    raw = s.encode() if isinstance(s, str) else s
    return struct.pack("!H", len(raw)) + raw


def packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + varint(len(body)) + body


def connect_packet(
    *,
    client_id: str,
    clean: bool,
    keepalive: int,
    username: str | None,
    password: str | None,
    v5: bool,
    session_expiry: int | None = None,
    receive_maximum: int | None = None,
    maximum_packet_size: int | None = None,
) -> bytes:
    flags = 0x02 if clean else 0
    payload = string(client_id)
    if username is not None:
        flags |= 0x80
        payload += string(username)
        if password is not None:
            flags |= 0x40
            payload += string(password)
    header = string("MQTT") + bytes([5 if v5 else 4, flags]) + struct.pack("!H", keepalive)
    if v5:
        props = b""
        if session_expiry is not None:
            props += bytes([SESSION_EXPIRY]) + struct.pack("!I", session_expiry)
        if receive_maximum is not None:
            props += bytes([RECEIVE_MAXIMUM]) + struct.pack("!H", receive_maximum)
        if maximum_packet_size is not None:
            props += bytes([MAXIMUM_PACKET_SIZE]) + struct.pack("!I", maximum_packet_size)
        header += varint(len(props)) + props
    return packet(CONNECT, header + payload)


def subscribe_packet(mid: int, topic: str, qos: int, v5: bool) -> bytes:
    body = struct.pack("!H", mid) + (b"\x00" if v5 else b"") + string(topic) + bytes([qos])
    return packet(SUBSCRIBE, body)


def publish_packet(
    topic: str | bytes, payload: bytes, mid: int, *, retain: bool, v5: bool
) -> bytes:
    """A PUBLISH at QoS 1 with packet id ``mid``, or QoS 0 when ``mid`` is 0."""
    body = string(topic) + (struct.pack("!H", mid) if mid else b"") + (b"\x00" if v5 else b"")
    return packet(PUBLISH | (0x02 if mid else 0) | int(retain), body + payload)


def pubacks(batch: Sequence[Message]) -> bytes:
    """One PUBACK per QoS 1 message, in order: each is 0x40 0x02 and the id, one 32-bit word."""
    words = [0x40020000 | m.mid for m in batch if m.mid]
    return struct.pack(f">{len(words)}I", *words)


PINGREQ_PACKET = bytes([PINGREQ, 0])
DISCONNECT_PACKET = bytes([DISCONNECT, 0])
