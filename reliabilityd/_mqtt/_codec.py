"""The MQTT wire format, sans I/O: bytes in, packets out (``_encode``: packets in, bytes out).

``Decoder.feed`` takes whatever a read returned and appends every PUBLISH it
completes to an inbox, returning the other packets it completed. Each field
is read against its own packet's end, never the next packet's bytes; what is
not a packet this client accepts (QoS 2 or 3, a packet id of 0, reserved
flag bits, a property that overruns its block, a packet type a client never
receives) raises ``MalformedPacket``, and nothing else is raised. A PUBLISH
whose payload exceeds ``max_payload`` comes out as ``Skipped`` (topic, packet
id and size, no payload): its body is discarded as it arrives, never held,
so the caller can acknowledge and dead-letter it instead of buffering it or
disconnecting (a persistent session would redeliver it for ever).

Nothing here does I/O or knows asyncio: ``_client.Connection`` feeds it.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from reliabilityd._mqtt._errors import MalformedPacket

CONNECT, CONNACK, PUBLISH, PUBACK = 0x10, 0x20, 0x30, 0x40
SUBSCRIBE, SUBACK, PINGREQ, PINGRESP, DISCONNECT = 0x82, 0x90, 0xC0, 0xD0, 0xE0
# MQTT 5 property identifiers this client sends or reads.
SESSION_EXPIRY, RECEIVE_MAXIMUM, SERVER_KEEP_ALIVE, REASON_STRING = 0x11, 0x21, 0x13, 0x1F
MAXIMUM_QOS, RETAIN_AVAILABLE, MAXIMUM_PACKET_SIZE = 0x24, 0x25, 0x27
WILDCARD_AVAILABLE, SHARED_AVAILABLE = 0x28, 0x2A
# Value sizes of every MQTT 5 property, to walk a property block.
_U8 = frozenset((0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A))
_U16 = frozenset((0x13, 0x21, 0x22, 0x23))
_U32 = frozenset((0x02, 0x11, 0x18, 0x27))
_STR = frozenset((0x03, 0x08, 0x09, 0x12, 0x15, 0x16, 0x1A, 0x1C, 0x1F))  # strings, binary data
_VARINT, _USER = 0x0B, 0x26
# The most a PUBLISH header can take before its payload: topic length and
# topic, packet id, property length (the properties are skipped with the body).
HEADER_ROOM = 2 + 65535 + 2 + 4
# No packet but PUBLISH comes near this; a larger one is hostile, not buffered.
CONTROL_MAX = 1 << 18
# The largest remaining length MQTT can encode.
LARGEST = 268_435_455
_NAMES = {
    CONNACK: "CONNACK",
    PUBACK: "PUBACK",
    SUBACK: "SUBACK",
    PINGRESP: "PINGRESP",
    DISCONNECT: "DISCONNECT",
}


class Message(msgspec.Struct, frozen=True, gc=False):
    """One PUBLISH received. A struct, not a NamedTuple: a NamedTuple's
    constructor runs in Python, and a drain makes one per message.
    Holding only bytes and an int, it cannot be part of a cycle (``gc=False``)."""

    topic: bytes
    payload: bytes
    mid: int  # 0 for QoS 0: nothing to acknowledge


class Skipped(Message, frozen=True, gc=False):
    """A PUBLISH whose payload (``size`` bytes) exceeded ``max_payload``: its body
    was discarded unread; ``payload`` is empty. Acknowledge it like any other."""

    size: int


Properties = dict[int, int | bytes]


class ConnAck(msgspec.Struct, frozen=True):
    session_present: bool
    code: int
    properties: Properties


class PubAck(msgspec.Struct, frozen=True):
    mid: int
    code: int


class SubAck(msgspec.Struct, frozen=True):
    mid: int
    codes: bytes
    properties: Properties


class PingResp(msgspec.Struct, frozen=True):
    pass


class Disconnect(msgspec.Struct, frozen=True):
    code: int
    properties: Properties


Control = ConnAck | PubAck | SubAck | PingResp | Disconnect


class Inbox(Protocol):
    def append(self, message: Message, /) -> None: ...


def _overrun(what: str) -> MalformedPacket:
    return MalformedPacket(f"malformed packet from the broker: {what} overruns its packet")


def _varint_at(buf: bytes, i: int, end: int, what: str) -> tuple[int, int]:
    """(value, next index) of a variable byte integer inside buf[:end]."""
    value = 0
    for shift in (0, 7, 14, 21):
        if i >= end:
            raise _overrun(what)
        b = buf[i]
        value |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return value, i
    raise MalformedPacket(f"malformed packet from the broker: {what} takes more than 4 bytes")


def _length_at(buf: bytes, i: int, size: int) -> tuple[int, int]:
    """(remaining length, start of the body), or (0, -1) while its bytes are incomplete."""
    value = 0
    for shift in (0, 7, 14, 21):
        if i >= size:
            return 0, -1
        b = buf[i]
        value |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return value, i
    raise MalformedPacket("malformed packet from the broker: a remaining length of 5 bytes")


def properties(block: bytes, where: str) -> Properties:
    """Numbers and strings of an MQTT 5 property block (user properties skipped)."""
    out: Properties = {}
    i, n = 0, len(block)
    while i < n:
        pid = block[i]
        i += 1
        if pid in _U8:
            width = 1
        elif pid in _U16:
            width = 2
        elif pid in _U32:
            width = 4
        elif pid == _VARINT:
            out[pid], i = _varint_at(block, i, n, f"{where} property {pid:#x}")
            continue
        elif pid in _STR or pid == _USER:
            for _ in range(2 if pid == _USER else 1):
                if i + 2 > n:
                    raise _overrun(f"{where} property {pid:#x}")
                start = i + 2
                i = start + int.from_bytes(block[i:start], "big")
                if i > n:
                    raise _overrun(f"{where} property {pid:#x}")
                if pid != _USER:
                    out[pid] = block[start:i]
            continue
        else:
            raise MalformedPacket(
                f"malformed packet from the broker: unknown property {pid:#x} in {where}"
            )
        if i + width > n:
            raise _overrun(f"{where} property {pid:#x}")
        out[pid] = int.from_bytes(block[i : i + width], "big")
        i += width
    return out


def _props_then(body: bytes, i: int, where: str) -> tuple[Properties, int]:
    """The property block starting at body[i], and the index after it."""
    plen, i = _varint_at(body, i, len(body), f"{where} property length")
    if i + plen > len(body):
        raise _overrun(f"{where} properties")
    return properties(body[i : i + plen], where), i + plen


def _mid(body: bytes, where: str) -> int:
    if len(body) < 2:
        raise _overrun(f"{where} packet id")
    mid = (body[0] << 8) | body[1]
    if not mid:
        raise MalformedPacket(f"malformed packet from the broker: {where} with packet id 0")
    return mid


def control(first: int, body: bytes, v5: bool) -> Control:
    """A complete packet other than PUBLISH; MalformedPacket if it is not one we accept."""
    n = len(body)
    if first == CONNACK:
        if n < 2 or (not v5 and n != 2):
            raise (
                _overrun("CONNACK")
                if n < 2
                else MalformedPacket(
                    f"malformed packet from the broker: an MQTT 3.1.1 CONNACK of {n} bytes"
                )
            )
        if body[0] & 0xFE:
            raise MalformedPacket("malformed packet from the broker: CONNACK reserved flag bits")
        props: Properties = {}
        # A 3.1.1 broker answers an MQTT 5 CONNECT in 3.1.1 (code 0x01, no properties).
        if v5 and not (n == 2 and body[1]):
            props, i = _props_then(body, 2, "CONNACK")
            if i != n:
                raise MalformedPacket("malformed packet from the broker: bytes after CONNACK")
            _check_capabilities(props)
        return ConnAck(bool(body[0] & 1), body[1], props)
    if first == PUBACK:
        mid = _mid(body, "PUBACK")
        if not v5 and n != 2:
            raise MalformedPacket(f"malformed packet from the broker: a PUBACK of {n} bytes")
        if n > 3:
            _, i = _props_then(body, 3, "PUBACK")
            if i != n:
                raise MalformedPacket("malformed packet from the broker: bytes after PUBACK")
        return PubAck(mid, body[2] if n > 2 else 0)
    if first == SUBACK:
        mid = _mid(body, "SUBACK")
        props, i = _props_then(body, 2, "SUBACK") if v5 else ({}, 2)
        if i >= n:
            raise _overrun("SUBACK reason code")
        return SubAck(mid, body[i:], props)
    if first == PINGRESP:
        if n:
            raise MalformedPacket(f"malformed packet from the broker: a PINGRESP of {n} bytes")
        return PingResp()
    if first == DISCONNECT:
        if n > 1:
            props, i = _props_then(body, 1, "DISCONNECT") if v5 else ({}, n)
            if i != n:
                raise MalformedPacket("malformed packet from the broker: bytes after DISCONNECT")
            return Disconnect(body[0], props)
        return Disconnect(body[0] if n else 0, {})
    name = _NAMES.get(first & 0xF0)
    if name is not None:
        raise MalformedPacket(
            f"malformed packet from the broker: {name} with reserved flag bits {first & 0xF:#x}"
        )
    raise MalformedPacket(f"malformed packet from the broker: a client never receives {first:#x}")


def _check_length(first: int, length: int) -> None:
    if length > CONTROL_MAX:
        raise MalformedPacket(
            f"malformed packet from the broker: a {first:#x} packet of {length} bytes"
        )


def _check_capabilities(props: Properties) -> None:
    for pid in (MAXIMUM_QOS, RETAIN_AVAILABLE, WILDCARD_AVAILABLE, SHARED_AVAILABLE):
        if props.get(pid, 0) not in (0, 1):
            raise MalformedPacket(f"malformed packet from the broker: CONNACK property {pid:#x}")
    for pid in (RECEIVE_MAXIMUM, MAXIMUM_PACKET_SIZE):
        if props.get(pid) == 0:
            raise MalformedPacket(f"malformed packet from the broker: CONNACK property {pid:#x} 0")


def publish_header(
    view: bytes, first: int, start: int, end: int, *, avail: int, v5: bool
) -> tuple[bytes, int, int] | None:
    """(topic, packet id, payload start) of the PUBLISH in view[start:end],
    None while its header is not all in view[:avail]. ``Decoder.feed`` inlines
    the same checks for a packet that is all there."""
    qos = (first >> 1) & 3
    if qos > 1:
        raise MalformedPacket(
            f"malformed packet from the broker: a QoS {qos} PUBLISH (this client takes QoS 0 and 1)"
        )
    if not qos and first & 0x08:
        raise MalformedPacket("malformed packet from the broker: DUP set on a QoS 0 PUBLISH")
    i = start + 2
    if i > end:
        raise _overrun("PUBLISH topic length")
    if i > avail:
        return None
    tlen = (view[start] << 8) | view[start + 1]
    topic_end = i + tlen
    if not tlen:
        raise MalformedPacket("malformed packet from the broker: a PUBLISH without a topic")
    if topic_end > end:
        raise _overrun("PUBLISH topic")
    i = topic_end + (2 if qos else 0)
    if i > end:
        raise _overrun("PUBLISH packet id")
    if i > avail:
        return None
    mid = 0
    if qos:
        mid = (view[topic_end] << 8) | view[topic_end + 1]
        if not mid:
            raise MalformedPacket("malformed packet from the broker: PUBLISH with packet id 0")
    if v5:
        try:
            plen, i = _varint_at(view, i, min(end, avail), "PUBLISH property length")
        except MalformedPacket:
            if avail < end and i + 4 > avail:
                return None  # the property length may be incomplete, not malformed
            raise
        i += plen
        if i > end:
            raise _overrun("PUBLISH properties")
    return view[start + 2 : topic_end], mid, i


class Decoder:
    """The packets of one connection's byte stream, fed read by read."""

    def __init__(self, v5: bool, max_payload: int = LARGEST) -> None:
        self.v5 = v5
        self.max_payload = max_payload
        # A PUBLISH longer than this is skipped as it streams in (its payload
        # cannot fit in max_payload); shorter ones are read whole.
        self._stream_above = max_payload + HEADER_ROOM
        self._buf = bytearray()
        self._need = 0  # buffered bytes before the next attempt to parse
        self._skip = 0  # bytes of a skipped PUBLISH still to come
        self.skipped = 0  # Skipped messages appended so far

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete packet held for the next read."""
        return len(self._buf)

    def feed(self, data: bytes, inbox: Inbox) -> list[Control]:
        """Append the messages ``data`` completes to ``inbox``; return the other packets.

        Raises MalformedPacket (and nothing else) at the first packet that is
        not one this client accepts, after appending the messages before it.
        """
        if self._skip:
            if len(data) <= self._skip:
                self._skip -= len(data)
                return []
            data = data[self._skip :]
            self._skip = 0
        buf = self._buf
        # Parse from immutable bytes: one copy per slice (a bytearray slice
        # is a copy, and bytes() of it another), none when nothing was left over.
        if buf:
            buf += data
            if len(buf) < self._need:
                return []  # copy the buffer once a whole packet is there, not per read
            view = bytes(buf)
        else:
            view = data
        size = len(view)
        pos = 0
        controls: list[Control] = []
        v5 = self.v5
        max_payload = self.max_payload
        append = inbox.append
        self._need = 2
        try:
            while size - pos >= 2:
                first = view[pos]
                length = view[pos + 1]
                start = pos + 2
                if length >= 0x80:
                    length, start = _length_at(view, pos + 1, size)
                    if start < 0:
                        self._need = size - pos + 1
                        break  # the length itself is still incomplete
                end = start + length
                if end > size:
                    if first & 0xF0 != PUBLISH:
                        _check_length(first, length)
                        self._need = end - pos
                    elif length > self._stream_above:
                        header = publish_header(view, first, start, end, avail=size, v5=v5)
                        if header is not None:
                            topic, mid, i = header
                            append(Skipped(topic, b"", mid, end - i))
                            self.skipped += 1
                            self._skip = end - size
                            pos = size
                            break
                        self._need = size - pos + 1
                    else:
                        self._need = end - pos
                    break
                if first & 0xF0 == PUBLISH:
                    # publish_header's checks, inline for QoS 1: this runs once
                    # per message. Whatever fails here goes the general way.
                    if first & 0x06 == 0x02 and length > 4:
                        tlen = (view[start] << 8) | view[start + 1]
                        topic_end = start + 2 + tlen
                        i = topic_end + 2
                        if v5:
                            if tlen and i < end:
                                mid = (view[topic_end] << 8) | view[topic_end + 1]
                                plen = view[i]
                                if plen < 0x80:
                                    i += 1 + plen
                                else:
                                    plen, i = _varint_at(view, i, end, "PUBLISH properties")
                                    i += plen
                                if mid and 0 <= end - i <= max_payload:
                                    append(Message(view[start + 2 : topic_end], view[i:end], mid))
                                    pos = end
                                    continue
                        elif tlen and i <= end:
                            mid = (view[topic_end] << 8) | view[topic_end + 1]
                            if mid and end - i <= max_payload:
                                append(Message(view[start + 2 : topic_end], view[i:end], mid))
                                pos = end
                                continue
                    # QoS 0 or anything wrong: the general path names the fault.
                    header = publish_header(view, first, start, end, avail=end, v5=v5)
                    assert header is not None
                    topic, mid, i = header
                    if end - i <= max_payload:
                        append(Message(topic, view[i:end], mid))
                    else:
                        append(Skipped(topic, b"", mid, end - i))
                        self.skipped += 1
                else:
                    _check_length(first, length)
                    controls.append(control(first, view[start:end], v5))
                pos = end
        except MalformedPacket:
            buf.clear()
            raise
        # Keep what is left of an incomplete packet for the next read.
        if pos == size:
            buf.clear()
        else:
            buf[:] = view[pos:]
        return controls
