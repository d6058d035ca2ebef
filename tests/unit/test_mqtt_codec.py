"""The sans-I/O MQTT codec: byte streams cut anywhere, hostile bytes, and a reference parser.

The reference parser below reads each packet the slow, obvious way: it cuts
the packet's body out of the stream first and reads every field from that
slice through a reader that refuses to go past it, so a field can come from
nowhere but its own packet. The codec, fed the same stream in arbitrary
pieces, must yield exactly what the reference yields and fail exactly where
it fails, and fail only with MqttError.
"""

from __future__ import annotations

import contextlib
import itertools
import struct
from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliabilityd._mqtt import MalformedPacket, Message, MqttError, Skipped, _encode
from reliabilityd._mqtt import _codec as codec
from reliabilityd._mqtt._codec import (
    ConnAck,
    Control,
    Decoder,
    Disconnect,
    PingResp,
    PubAck,
    SubAck,
)

MAX_PAYLOAD = 64  # small, so that skipping (and streaming a skip) happens often


class Bad(Exception):
    """The packet is malformed."""


class Short(Exception):
    """The packet's bytes have not all arrived."""


class Reader:
    """Reads a packet body that declares ``length`` bytes, of which ``data`` arrived."""

    def __init__(self, data: bytes, length: int) -> None:
        self.data, self.length, self.off = data, length, 0

    def take(self, n: int) -> bytes:
        if self.off + n > self.length:
            raise Bad("past the packet's end")
        if self.off + n > len(self.data):
            raise Short
        out = self.data[self.off : self.off + n]
        self.off += n
        return out

    def u16(self) -> int:
        return int(struct.unpack("!H", self.take(2))[0])

    def varint(self) -> int:
        value = 0
        for shift in (0, 7, 14, 21):
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
        raise Bad("variable byte integer of 5 bytes")

    def left(self) -> int:
        return self.length - self.off


WIDTH = {**dict.fromkeys(codec._U8, 1), **dict.fromkeys(codec._U16, 2)}
WIDTH.update(dict.fromkeys(codec._U32, 4))


def ref_properties(r: Reader) -> dict[int, int | bytes]:
    block = Reader(r.take(r.varint()), 0)
    block.length = len(block.data)
    out: dict[int, int | bytes] = {}
    while block.left():
        pid = block.take(1)[0]
        if pid in WIDTH:
            out[pid] = int.from_bytes(block.take(WIDTH[pid]), "big")
        elif pid == 0x0B:
            out[pid] = block.varint()
        elif pid in codec._STR:
            out[pid] = block.take(block.u16())
        elif pid == 0x26:
            block.take(block.u16())
            block.take(block.u16())
        else:
            raise Bad("unknown property")
    return out


def ref_publish(first: int, r: Reader, v5: bool) -> Message:
    qos = (first >> 1) & 3
    if qos > 1 or (qos == 0 and first & 8):
        raise Bad("QoS or DUP")
    tlen = r.u16()
    if tlen == 0:
        raise Bad("empty topic")
    topic = r.take(tlen)
    mid = r.u16() if qos else 0
    if qos and not mid:
        raise Bad("packet id 0")
    if v5:
        r.take(r.varint())
    if r.left() > MAX_PAYLOAD:
        return Skipped(topic, b"", mid, r.left())
    return Message(topic, r.take(r.left()), mid)


def ref_control(first: int, r: Reader, v5: bool) -> Control:
    def done() -> None:
        if r.left():
            raise Bad("bytes after the packet's fields")

    if first == 0x20:
        flags, code = r.take(1)[0], r.take(1)[0]
        if flags & 0xFE:
            raise Bad("CONNACK flags")
        refused_in_3_1_1 = r.left() == 0 and code != 0
        props = ref_properties(r) if v5 and not refused_in_3_1_1 else {}
        done()
        if props.get(0x24, 0) not in (0, 1) or props.get(0x25, 0) not in (0, 1):
            raise Bad("capability")
        if props.get(0x28, 1) not in (0, 1) or props.get(0x2A, 1) not in (0, 1):
            raise Bad("capability")
        if props.get(0x21) == 0 or props.get(0x27) == 0:
            raise Bad("capability 0")
        return ConnAck(bool(flags & 1), code, props)
    if first == 0x40:
        mid = r.u16()
        if not mid or (not v5 and r.left()):
            raise Bad("PUBACK")
        code = r.take(1)[0] if r.left() else 0
        if r.left():
            ref_properties(r)
        done()
        return PubAck(mid, code)
    if first == 0x90:
        mid = r.u16()
        if not mid:
            raise Bad("SUBACK id 0")
        props = ref_properties(r) if v5 else {}
        codes = r.take(r.left())
        if not codes:
            raise Bad("SUBACK without codes")
        return SubAck(mid, codes, props)
    if first == 0xD0:
        done()
        return PingResp()
    if first == 0xE0:
        code = r.take(1)[0] if r.left() else 0
        props = ref_properties(r) if v5 and r.left() else {}
        if not v5 and r.left():
            raise Bad("3.1.1 DISCONNECT with a body")
        done()
        return Disconnect(code, props)
    raise Bad("not a packet a client receives")


def reference(stream: bytes, v5: bool) -> tuple[list[Message], list[Control], bool]:
    """(messages, other packets, malformed) of a whole stream, packet by packet."""
    messages: list[Message] = []
    controls: list[Control] = []
    pos = 0
    try:
        while len(stream) - pos >= 2:
            first = stream[pos]
            head = Reader(stream[pos + 1 : pos + 5], 4)
            try:
                length = head.varint()
            except Short:
                break
            start = pos + 1 + head.off
            end = start + length
            publish = first >> 4 == 3
            if not publish and length > codec.CONTROL_MAX:
                raise Bad("huge control packet")
            r = Reader(stream[start:end], length)  # only this packet's bytes
            if end > len(stream):
                if publish and length > MAX_PAYLOAD + codec.HEADER_ROOM:
                    # Streamed: known to be skipped once its header is in.
                    with contextlib.suppress(Short):
                        messages.append(ref_publish(first, r, v5))
                break
            if publish:
                messages.append(ref_publish(first, r, v5))
            else:
                controls.append(ref_control(first, r, v5))
            pos = end
    except Bad:
        return messages, controls, True
    return messages, controls, False


def decode(stream: bytes, cuts: list[int], v5: bool) -> tuple[list[Message], list[Control], bool]:
    """What the codec makes of the stream fed in the pieces ``cuts`` makes."""
    decoder = Decoder(v5, MAX_PAYLOAD)
    inbox: deque[Message] = deque()
    controls: list[Control] = []
    bounds = [0, *sorted(cuts), len(stream)]
    try:
        for a, b in itertools.pairwise(bounds):
            controls += decoder.feed(stream[a:b], inbox)
    except MqttError:
        return list(inbox), controls, True
    return list(inbox), controls, False


# --- strategies ---------------------------------------------------------------


def varint(n: int) -> bytes:
    return _encode.varint(n)


def with_header(first: int, body: bytes) -> bytes:
    return bytes([first]) + varint(len(body)) + body


def prop_block(v5: bool, props: bytes) -> bytes:
    return varint(len(props)) + props if v5 else b""


PROPS = st.sampled_from(
    [
        b"",
        b"\x03\x00\x04json",  # content type
        b"\x26\x00\x01k\x00\x01v",  # a user property
        b"\x01\x01\x02\x00\x00\x00\x3c",  # payload format, message expiry
        b"\x0b\x81\x01",  # a subscription identifier (a 2-byte varint)
    ]
)


@st.composite
def publishes(draw: st.DrawFn, v5: bool) -> bytes:
    topic = draw(st.binary(min_size=1, max_size=12))
    mid = draw(st.integers(0, 65535))
    size = draw(st.sampled_from([0, 1, MAX_PAYLOAD, MAX_PAYLOAD + 1, 300, 70_000]))
    payload = bytes([draw(st.integers(0, 255))]) * size
    props = prop_block(v5, draw(PROPS))
    first = 0x30 | (0x02 if mid else 0) | draw(st.sampled_from([0, 1])) | (8 if mid else 0)
    body = struct.pack("!H", len(topic)) + topic + (struct.pack("!H", mid) if mid else b"")
    return with_header(first, body + props + payload)


@st.composite
def controls(draw: st.DrawFn, v5: bool) -> bytes:
    mid = struct.pack("!H", draw(st.integers(1, 65535)))
    connack_props = draw(
        st.sampled_from([b"", b"\x13\x00\x00", b"\x21\x00\x0a\x24\x00\x25\x00\x27\x00\x00\x10\x00"])
    )
    return draw(
        st.sampled_from(
            [
                with_header(0x20, b"\x01\x00" + prop_block(v5, connack_props)),
                with_header(
                    0x40, mid + (b"\x10" + prop_block(v5, b"\x1f\x00\x01x") if v5 else b"")
                ),
                with_header(0x90, mid + prop_block(v5, b"") + b"\x01"),
                b"\xd0\x00",
                with_header(0xE0, b"\x8e" + prop_block(v5, b"")) if v5 else b"\xe0\x00",
            ]
        )
    )


def valid_packets(v5: bool) -> st.SearchStrategy[bytes]:
    return st.one_of(publishes(v5), controls(v5))


@st.composite
def damaged(draw: st.DrawFn, v5: bool) -> bytes:
    """A valid packet with a byte changed, cut short, or padded; or random bytes."""
    packet = draw(valid_packets(v5))
    how = draw(st.sampled_from(["flip", "cut", "pad", "random"]))
    if how == "flip":
        i = draw(st.integers(0, min(len(packet), 40) - 1))
        return packet[:i] + bytes([draw(st.integers(0, 255))]) + packet[i + 1 :]
    if how == "cut":
        return packet[: draw(st.integers(0, len(packet)))]
    if how == "pad":
        return packet + draw(st.binary(max_size=4))
    return draw(st.binary(max_size=24))


def streams(v5: bool, hostile: bool) -> st.SearchStrategy[bytes]:
    piece = st.one_of(valid_packets(v5), damaged(v5)) if hostile else valid_packets(v5)
    return st.lists(piece, max_size=8).map(b"".join)


@st.composite
def stream_and_cuts(draw: st.DrawFn, hostile: bool) -> tuple[bool, bytes, list[int]]:
    v5 = draw(st.booleans())
    stream = draw(streams(v5, hostile))
    cuts = draw(st.lists(st.integers(0, len(stream)), max_size=12))
    return v5, stream, cuts


# --- properties -----------------------------------------------------------------


@given(st.booleans(), st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=12))
def test_arbitrary_bytes_raise_nothing_but_the_clients_error(
    v5: bool, stream: bytes, cuts: list[int]
) -> None:
    decode(stream, [c for c in cuts if c <= len(stream)], v5)  # anything else fails the test


@given(stream_and_cuts(hostile=True))
def test_the_codec_yields_what_a_packet_by_packet_reading_yields(
    case: tuple[bool, bytes, list[int]],
) -> None:
    """Every message comes from a well-formed packet, every field from inside it;
    the first malformed packet is an MqttError, wherever the reads were cut."""
    v5, stream, cuts = case
    messages, controls, malformed = decode(stream, cuts, v5)
    want_messages, want_controls, want_malformed = reference(stream, v5)
    assert (messages, malformed) == (want_messages, want_malformed)
    if not malformed:  # else the connection ends: the read's other packets do not matter
        assert controls == want_controls


@given(stream_and_cuts(hostile=False))
def test_valid_packets_split_anywhere_parse_to_the_same_messages(
    case: tuple[bool, bytes, list[int]],
) -> None:
    v5, stream, cuts = case
    whole = decode(stream, [], v5)
    assert not whole[2]
    assert decode(stream, cuts, v5) == whole
    one_by_one = decode(stream, list(range(len(stream))), v5) if len(stream) < 2000 else whole
    assert one_by_one == whole


# --- the probes, one by one -------------------------------------------------------


def test_a_topic_length_past_the_packets_end_is_malformed_not_read_from_the_next_packet() -> None:
    """``32 06 00 10 61 62 63 64`` then a valid packet: no message, no packet id from it."""
    valid = with_header(0x32, b"\x00\x03abc\x00\x07payload")
    for v5 in (False, True):
        inbox: deque[Message] = deque()
        with pytest.raises(MalformedPacket, match="topic overruns"):
            Decoder(v5).feed(bytes.fromhex("3206001061626364") + valid, inbox)
        assert not inbox


@pytest.mark.parametrize(
    ("packet", "fault"),
    [
        (with_header(0x36, b"\x00\x01t\x00\x05p"), "QoS 3"),
        (with_header(0x34, b"\x00\x01t\x00\x05p"), "QoS 2"),
        (with_header(0x32, b"\x00\x01t\x00\x00p"), "packet id 0"),
        (with_header(0x38, b"\x00\x01tp"), "DUP set on a QoS 0"),
        (with_header(0x30, b"\x00\x00p"), "without a topic"),
        (with_header(0x42, b"\x00\x05"), "PUBACK with reserved flag bits"),
        (with_header(0x21, b"\x00\x00"), "CONNACK with reserved flag bits"),
        (with_header(0x40, b"\x00\x00"), "PUBACK with packet id 0"),
        (with_header(0x20, b"\x02\x00"), "CONNACK reserved flag bits"),
        (b"\xd0\x01\x00", "PINGRESP of 1 bytes"),
        (b"\x82\x00", "never receives"),
        (with_header(0x20, b"\x00"), "CONNACK overruns"),
        (with_header(0x90, b"\x00\x01"), "SUBACK reason code overruns"),
        (b"\x20\xff\xff\xff\x7f", "a 0x20 packet of"),
        (b"\x30\xff\xff\xff\xff\x7f", "5 bytes"),
    ],
)
def test_what_a_client_must_not_accept_is_malformed(packet: bytes, fault: str) -> None:
    with pytest.raises(MalformedPacket, match=fault):
        Decoder(False).feed(packet, deque())


def test_a_3_1_1_refusal_of_an_mqtt_5_connect_is_a_connack() -> None:
    """A 3.1.1-only broker (aedes) answers an MQTT 5 CONNECT with ``20 02 00 01``."""
    assert Decoder(True).feed(b"\x20\x02\x00\x01", deque()) == [ConnAck(False, 1, {})]


def test_an_unknown_connack_property_or_a_short_one_is_malformed() -> None:
    for props, fault in ((b"\x02\x77\x00", "unknown property 0x77"), (b"\x02\x21\x00", "overruns")):
        with pytest.raises(MalformedPacket, match=fault):
            Decoder(True).feed(with_header(0x20, b"\x00\x00" + props), deque())
    packet = with_header(0x20, b"\x01\x00" + prop_block(True, b"\x24\x00\x25\x00\x2a\x00"))
    (connack,) = Decoder(True).feed(packet, deque())
    assert connack == ConnAck(True, 0, {0x24: 0, 0x25: 0, 0x2A: 0})


def test_a_payload_past_max_payload_is_skipped_as_it_streams_in() -> None:
    """Its body is never held: the buffer stays at the header while megabytes pass."""
    decoder = Decoder(True, max_payload=1000)
    inbox: deque[Message] = deque()
    body = struct.pack("!H", 3) + b"big" + struct.pack("!H", 9) + b"\x00" + b"x" * (8 << 20)
    packet = with_header(0x32, body) + with_header(0x32, b"\x00\x01t\x00\x0a\x00small")
    for i in range(0, len(packet), 65536):
        decoder.feed(packet[i : i + 65536], inbox)
        assert decoder.buffered < 70_000
    assert list(inbox) == [Skipped(b"big", b"", 9, 8 << 20), Message(b"t", b"small", 10)]
