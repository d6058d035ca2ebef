"""A scripted hostile MQTT broker, and a TCP proxy that can go silent: ours, to test our parser.

``HostileBroker`` is a small asyncio server. Connection *i* runs the *i*-th
script it was given (after the last, ``well_behaved``); a script reads the
client's packets and writes whatever bytes the test wants, including ones
no broker should send. Packets here are built by hand, byte by byte, not
with the client's encoder: the point is to send what it would not.
``Freezer`` forwards TCP to a real broker until told to stop, then keeps
both sockets open and forwards nothing: a half-open connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Awaitable, Callable
from types import TracebackType

CONNECT, PUBLISH, SUBSCRIBE, PINGREQ, DISCONNECT = 0x10, 0x30, 0x82, 0xC0, 0xE0


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, b = divmod(n, 128)
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + varint(len(body)) + body


def props(v5: bool, block: bytes = b"") -> bytes:
    return varint(len(block)) + block if v5 else b""


def connack(v5: bool, *, present: bool = False, code: int = 0, properties: bytes = b"") -> bytes:
    return packet(0x20, bytes([int(present), code]) + props(v5, properties))


def suback(mid: int, v5: bool, code: int = 1) -> bytes:
    return packet(0x90, struct.pack("!H", mid) + props(v5) + bytes([code]))


def publish(topic: bytes, payload: bytes, mid: int, v5: bool) -> bytes:
    body = struct.pack("!H", len(topic)) + topic + (struct.pack("!H", mid) if mid else b"")
    return packet(0x32 if mid else 0x30, body + props(v5) + payload)


def disconnect(v5: bool, code: int = 0) -> bytes:
    return packet(DISCONNECT, bytes([code]) + props(v5)) if v5 else b"\xe0\x00"


class Connect:
    """What a client's CONNECT said."""

    def __init__(self, body: bytes) -> None:
        i = 2 + struct.unpack("!H", body[:2])[0]
        self.level, self.flags = body[i], body[i + 1]
        self.keepalive = struct.unpack("!H", body[i + 2 : i + 4])[0]
        self.v5 = self.level == 5
        self.properties: dict[int, int] = {}
        i += 4
        if self.v5:
            n, i = body[i], i + 1  # short property blocks only (this client's)
            block = body[i : i + n]
            i += n
            j = 0
            while j < len(block):
                pid = block[j]
                width = {0x11: 4, 0x21: 2, 0x27: 4}[pid]
                self.properties[pid] = int.from_bytes(block[j + 1 : j + 1 + width], "big")
                j += 1 + width
        self.client_id = body[i + 2 : i + 2 + struct.unpack("!H", body[i : i + 2])[0]].decode()


class Peer:
    """One client connection, as a script sees it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.connect: Connect | None = None
        self.received: list[tuple[int, bytes]] = []  # every packet after CONNECT
        self.ended = asyncio.Event()

    @property
    def v5(self) -> bool:
        return self.connect is not None and self.connect.v5

    def pubacks(self) -> list[int]:
        """Packet ids the client acknowledged, in order."""
        return [struct.unpack("!H", body[:2])[0] for first, body in self.received if first == 0x40]

    async def packet(self) -> tuple[int, bytes] | None:
        """The client's next packet, None at EOF."""
        try:
            first = (await self.reader.readexactly(1))[0]
            length, shift = 0, 0
            while True:
                b = (await self.reader.readexactly(1))[0]
                length |= (b & 0x7F) << shift
                shift += 7
                if b < 0x80:
                    break
            body = await self.reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        if first != CONNECT:
            self.received.append((first, body))
        return first, body

    async def handshake(self, reply: bytes | None = None) -> Connect:
        """Read CONNECT; answer ``reply`` (default: a plain CONNACK in the client's version)."""
        got = await self.packet()
        assert got is not None
        assert got[0] == CONNECT, got
        self.connect = Connect(got[1])
        self.send(connack(self.v5) if reply is None else reply)
        return self.connect

    async def subscribed(self, code: int = 1) -> tuple[int, bytes]:
        """Read SUBSCRIBE and grant ``code``; (packet id, the SUBSCRIBE's body)."""
        got = await self.packet()
        assert got is not None
        assert got[0] == SUBSCRIBE, got
        mid = struct.unpack("!H", got[1][:2])[0]
        self.send(suback(mid, self.v5, code))
        return mid, got[1]

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def serve(self, *, pings: bool = True) -> None:
        """Behave: PUBACK each QoS 1 PUBLISH, grant SUBSCRIBEs, answer PINGREQ, until the end."""
        while (got := await self.packet()) is not None:
            first, body = got
            if first & 0xF0 == PUBLISH and first & 0x06:
                tlen = struct.unpack("!H", body[:2])[0]
                self.send(packet(0x40, body[2 + tlen : 4 + tlen]))
            elif first == SUBSCRIBE:
                granted = min(body[-1] & 0x03, 1)  # what was asked for, QoS 1 at most
                self.send(suback(struct.unpack("!H", body[:2])[0], self.v5, granted))
            elif first == PINGREQ and pings:
                self.send(b"\xd0\x00")
            elif first == DISCONNECT:
                break
        self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


Script = Callable[[Peer], Awaitable[None]]


async def well_behaved(peer: Peer) -> None:
    await peer.handshake()
    await peer.serve()


class HostileBroker:
    """``async with HostileBroker(script, ...) as broker``: broker.url, broker.peers."""

    def __init__(self, *scripts: Script, then: Script = well_behaved) -> None:
        self.scripts = list(scripts)
        self.then = then
        self.peers: list[Peer] = []
        self.arrived = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Known to __aexit__ before the first await: a client that connects
        # while the broker shuts down is closed with the rest, never left to
        # the garbage collector (a ResourceWarning in whichever test runs next).
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = Peer(reader, writer)
        index = len(self.peers)
        self.peers.append(peer)
        try:
            async with self.arrived:
                self.arrived.notify_all()
            script = self.scripts[index] if index < len(self.scripts) else self.then
            await script(peer)
            # A script that returns leaves the connection open until the client ends it.
            while await peer.packet() is not None:
                pass
        finally:
            peer.ended.set()
            peer.close()
            self._tasks.discard(task)

    async def connections(self, count: int, within: float = 20.0) -> None:
        """Wait until ``count`` clients have connected."""
        async with asyncio.timeout(within), self.arrived:
            await self.arrived.wait_for(lambda: len(self.peers) >= count)

    async def __aenter__(self) -> HostileBroker:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        await asyncio.sleep(0)  # a connection accepted just before the close registers first
        for peer in self.peers:
            peer.writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()


class Freezer:
    """A TCP proxy to ``port`` that forwards until ``freeze()``, then forwards nothing
    and closes nothing: to the client, a broker that went silent mid-connection."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.frozen = asyncio.Event()
        self.frozen_at = 0.0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"mqtt://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def freeze(self) -> None:
        self.frozen_at = asyncio.get_running_loop().time()
        self.frozen.set()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not self.frozen.is_set():
            data = await reader.read(65536)
            if not data or self.frozen.is_set():
                break
            writer.write(data)
        await asyncio.Event().wait()  # hold the socket open, silent, until cancelled

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)  # before the first await, so __aexit__ closes it
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        self._writers.append(up_writer)
        for task in (
            asyncio.create_task(self._pipe(reader, up_writer)),
            asyncio.create_task(self._pipe(up_reader, writer)),
        ):
            self._tasks.add(task)

    async def __aenter__(self) -> Freezer:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        await asyncio.sleep(0)  # a connection accepted just before the close registers first
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            writer.transport.abort()
        await self._server.wait_closed()
