"""The edges of the HTTP port and the output, against a real daemon and redis-server:
slow and idle clients are closed, connections and requests in flight are bounded,
and no secret appears in any output or log."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import msgspec
import pytest

from reliabilityd.alerting.sinks import Http, SinkError
from reliabilityd.config import Config, HttpConfig
from reliabilityd.store import connect
from tests.support.helpers import wait_until
from tests.support.http import event, get, http_config, post, serving
from tests.support.servers import RedisServer, free_port

MARKER = "Sekr1tMarker"


def _with_http(cfg: Config, **changes: float) -> Config:
    return msgspec.structs.replace(cfg, http=msgspec.structs.replace(cfg.http, **changes))


async def _exchange(port: int, data: bytes, wait: float = 5.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        async with asyncio.timeout(wait):
            return await reader.read()
    finally:
        writer.close()


async def test_half_sent_requests_and_idle_sockets_are_closed_after_the_read_timeout(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _with_http(http_config(redis_server, prefix), read_timeout=1.0)
    async with serving(cfg) as (_, base):
        port = cfg.http.port
        conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(60)]
        for i, (_, writer) in enumerate(conns):
            if i % 2:  # half of them a request never finished, half nothing at all
                writer.write(b"POST /v1/trials HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        # Health and ingest keep answering meanwhile.
        assert (await get(base, "/healthz"))[0] == 200
        assert (await post(base, [event("t", "1")]))[0] == 200
        # EOF: the daemon closed each of them (aiohttp alone keeps them an hour).
        async with asyncio.timeout(30):
            for reader, _ in conns:
                await reader.read()
        for _, writer in conns:
            writer.close()


async def _request_in_hand(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, length: int
) -> None:
    """Send a POST's head without its body, and wait until the daemon holds the request.

    With ``Expect: 100-continue`` the daemon answers ``100 Continue`` once its
    handler has the request (and its place in flight) and waits for the body.
    """
    writer.write(
        b"POST /v1/trials HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % length
    )
    await writer.drain()
    async with asyncio.timeout(10):
        assert (await reader.readline()).startswith(b"HTTP/1.1 100")
        assert await reader.readline() == b"\r\n"


async def test_past_max_connections_the_oldest_idle_one_makes_room(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _with_http(http_config(redis_server, prefix), max_connections=10, read_timeout=20.0)
    async with serving(cfg):
        port = cfg.http.port
        idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(10)]
        # Well before the read timeout, a new connection is served (accepted after
        # the ten: the listening socket hands connections over in order)...
        answer = await _exchange(
            port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        assert answer.startswith(b"HTTP/1.1 200"), answer
        # ...and the oldest idle one was closed for it (EOF), the newest kept.
        async with asyncio.timeout(5):
            assert await idle[0][0].read() == b""
        assert not idle[-1][0].at_eof()
        for _, writer in idle:
            writer.close()


async def test_past_max_connections_a_newcomer_makes_room_before_a_kept_alive_producer(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _with_http(http_config(redis_server, prefix), max_connections=4, read_timeout=20.0)
    async with serving(cfg):
        port = cfg.http.port
        health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"

        async def served(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
            writer.write(health)
            await writer.drain()
            async with asyncio.timeout(5):
                line = await reader.readline()
                while (await reader.readline()).strip():
                    pass  # the headers; /healthz answers a short body
                await reader.read(64)
            return line.startswith(b"HTTP/1.1 200")

        # A producer's kept-alive connection, served once, is sending its next body: of
        # the unfinished requests, its one moved on least recently.
        producer = await asyncio.open_connection("127.0.0.1", port)
        assert await served(*producer)
        body = msgspec.json.encode([event("t", "kept-alive")])
        producer[1].write(_whole_post(body)[:-3])
        await producer[1].drain()
        await asyncio.sleep(0.1)
        silent = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        # Past the cap, well within a second: a newcomer makes room, the producer stays.
        answer = await _exchange(
            port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        assert answer.startswith(b"HTTP/1.1 200"), answer
        async with asyncio.timeout(5):
            assert await silent[0][0].read() == b""
        producer[1].write(_whole_post(body)[-3:])
        async with asyncio.timeout(5):
            assert (await producer[0].readline()).startswith(b"HTTP/1.1 200")
        for _, writer in [producer, *silent]:
            writer.close()


def _whole_post(body: bytes) -> bytes:
    return (
        b"POST /v1/trials HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


@contextlib.asynccontextmanager
async def _writes_paused(redis: RedisServer, seconds: float) -> AsyncIterator[None]:
    """Redis holds every write for ``seconds`` (CLIENT PAUSE): commits wait in their handlers."""
    client = connect(redis.url)
    try:
        await client.execute_command("CLIENT", "PAUSE", int(seconds * 1000), "WRITE")
        yield
    finally:
        await client.execute_command("CLIENT", "UNPAUSE")
        await client.aclose()


async def test_past_max_connections_with_every_one_busy_a_new_one_is_answered_503(
    private_redis: RedisServer, prefix: str
) -> None:
    cfg = _with_http(http_config(private_redis, prefix), max_connections=4, read_timeout=20.0)
    async with serving(cfg) as (_, base):
        port = cfg.http.port
        # Four whole requests whose commits wait for Redis: each connection is busy.
        async with _writes_paused(private_redis, 10.0):
            busy = [await asyncio.open_connection("127.0.0.1", port) for _ in range(4)]
            for i, (_, writer) in enumerate(busy):
                writer.write(_whole_post(msgspec.json.encode([event("t", str(i))])))
                await writer.drain()
            answer = b""

            async def refused() -> bool:
                # Until the four commits are in their handlers, a fifth connection is served.
                nonlocal answer
                answer = await _exchange(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                return answer.startswith(b"HTTP/1.1 503")

            await wait_until(refused, 10)
            assert b"Retry-After: 2" in answer
        for reader, writer in busy:  # none of the busy ones was closed for it
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
            writer.close()

        async def healthy() -> bool:
            return (await get(base, "/healthz"))[0] == 200

        await wait_until(healthy, 10)


async def test_requests_in_flight_past_the_limit_are_503_with_retry_after(
    private_redis: RedisServer, prefix: str
) -> None:
    cfg = _with_http(http_config(private_redis, prefix), max_inflight=2, read_timeout=3.0)
    async with serving(cfg) as (_, base):
        port = cfg.http.port
        # Two whole requests whose commits wait for Redis hold both places.
        async with _writes_paused(private_redis, 10.0):
            held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
            for i, (_, writer) in enumerate(held):
                writer.write(_whole_post(msgspec.json.encode([event("t", str(i))])))
                await writer.drain()
            await asyncio.sleep(0.3)
            status, answer, headers = await post(base, [event("t", "2")])
            assert status == 503
            assert headers["Retry-After"] == "2"
            assert "max_inflight" in answer["error"]
        for reader, writer in held:
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
            writer.close()
        assert (await post(base, [event("t", "2")]))[0] == 200


# --- secrets ------------------------------------------------------------------


async def test_a_failed_sink_delivery_names_the_url_without_its_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    http = Http()
    url = f"http://hook:{MARKER}@127.0.0.1:{free_port()}/hook?key={MARKER}"
    try:
        with pytest.raises(SinkError) as err:
            await http.post_json(url, b"{}", 2.0)
    finally:
        await http.close()
    assert MARKER not in str(err.value)
    assert "http://***@127.0.0.1" in str(err.value)


async def test_a_malformed_header_line_is_one_warning_without_the_token(
    redis_server: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = http_config(redis_server, prefix, token=MARKER)
    caplog.set_level(logging.DEBUG)
    async with serving(cfg) as (_, base):
        port = cfg.http.port
        for _ in range(5):
            answer = await _exchange(
                port,
                b"POST /v1/trials HTTP/1.1\r\nHost: x\r\nAuthorization Bearer "
                + MARKER.encode()
                + b"\r\nContent-Length: 0\r\n\r\n",
            )
            assert answer.split(b" ", 2)[1] == b"400"
            assert MARKER.encode() not in answer
        assert (await get(base, "/healthz"))[0] == 200
    text = caplog.text
    assert MARKER not in text
    lines = [r for r in caplog.records if "http_malformed_request" in r.getMessage()]
    assert len(lines) == 1  # rate-limited: one line for the five
    assert all(r.exc_info is None for r in caplog.records if r.name.startswith("aiohttp"))


def test_the_http_limits_have_defaults() -> None:
    http = HttpConfig()
    assert (http.read_timeout, http.max_connections, http.max_inflight) == (10.0, 256, 32)
