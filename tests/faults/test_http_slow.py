"""Slow clients against a real daemon and redis-server: a request takes an inflight place
only once its body is in, the unfinished requests of one address are capped, the request
stuck longest makes room for a new connection, and the bytes of bodies in flight are
bounded."""

from __future__ import annotations

import asyncio

import msgspec

from reliabilityd.config import Config, IngestConfig
from reliabilityd.daemon._http_server import SLOW_AFTER
from tests.support.http import event, get, http_config, post, serving
from tests.support.servers import RedisServer

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


def _with_http(cfg: Config, **changes: float) -> Config:
    return msgspec.structs.replace(cfg, http=msgspec.structs.replace(cfg.http, **changes))


def _head(length: int) -> bytes:
    return (
        b"POST /v1/trials HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % length
    )


async def _open(port: int, source: str = "127.0.0.1", send: bytes = b"") -> Conn:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    if send:
        writer.write(send)
        await writer.drain()
    return reader, writer


async def _closed(conn: Conn, within: float = 5.0) -> bool:
    """True when the daemon closed ``conn`` (EOF, or an answer) within ``within`` seconds."""
    try:
        async with asyncio.timeout(within):
            await conn[0].read(4096)
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


async def _count_closed(conns: list[Conn], within: float = 2.0) -> int:
    """How many of ``conns`` the daemon closed (or answered) within ``within`` seconds."""
    return sum(await asyncio.gather(*(_closed(c, within) for c in conns)))


async def test_40_slow_bodies_hold_no_inflight_place(
    redis_server: RedisServer, prefix: str
) -> None:
    # Headers and 2 of 1,000 body bytes, 40 times: more than http.max_inflight (32).
    cfg = http_config(redis_server, prefix)
    async with serving(cfg) as (_, base):
        slow = [await _open(cfg.http.port, send=_head(1000) + b"[{") for _ in range(40)]
        await asyncio.sleep(0.3)  # every one of them is reading its body now
        for i in range(5):
            status, answer, _ = await post(base, [event("t", f"p{i}")])
            assert status == 200, answer
        # The slow ones finish their bodies and are answered too.
        rest = msgspec.json.encode(event("t", "slow"))[1:] + b"]"
        rest += b" " * (1000 - 2 - len(rest))
        for reader, writer in slow:
            writer.write(rest)
            await writer.drain()
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
            writer.close()


async def test_past_max_connections_the_request_stuck_longest_makes_room(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _with_http(http_config(redis_server, prefix), max_connections=4, read_timeout=20.0)
    async with serving(cfg) as (_, base):
        port = cfg.http.port
        first = await _open(port)
        stuck = await _open(port)  # sends nothing, ever
        body = await _open(port, send=_head(100) + b"[")  # its body trickles
        last = await _open(port)
        await asyncio.sleep(0.3)
        # The first one moves on (part of its headers): it is no longer stuck longest.
        first[1].write(b"GET /healthz HTTP/1.1\r\nHo")
        await first[1].drain()
        await asyncio.sleep(0.2)
        status, _ = await get(base, "/healthz")
        assert status == 200
        assert await _count_closed([stuck]) == 1
        assert await _count_closed([first, body, last]) == 0
        for _, writer in (first, stuck, body, last):
            writer.close()


async def test_an_address_past_max_pending_per_address_loses_its_oldest_slow_requests(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _with_http(http_config(redis_server, prefix), max_pending_per_address=4)
    async with serving(cfg) as (_, base):
        port = cfg.http.port
        # Six slow requests from 127.0.0.2 (half headers, half a body), four from 127.0.0.1.
        other = [
            await _open(port, "127.0.0.2", b"GET /healthz HTTP/1.1\r\nHo" if i % 2 else _head(9))
            for i in range(6)
        ]
        mine = [await _open(port, send=b"GET /healthz HTTP/1.1\r\nHo") for _ in range(4)]
        await asyncio.sleep(SLOW_AFTER + 0.2)
        # Past the cap: the newcomer from 127.0.0.2 closes three of its address's slow ones.
        newcomer = await _open(port, "127.0.0.2")
        assert await _count_closed(other) == 3
        assert await _count_closed([newcomer, *mine]) == 0
        # Whole requests from either address are served meanwhile.
        assert (await post(base, [event("t", "1")]))[0] == 200
        for _, writer in [*other, newcomer, *mine]:
            writer.close()


async def test_past_max_body_bytes_slow_bodies_make_room_for_a_producer(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = msgspec.structs.replace(
        _with_http(http_config(redis_server, prefix), max_body_bytes=128 << 10),
        ingest=IngestConfig(max_payload=64 << 10),
    )
    async with serving(cfg) as (daemon, base):
        port = cfg.http.port
        # Two bodies of 64 KiB, each sent but for its last bytes: 120 KiB of the 128 held.
        slow = [
            await _open(port, send=_head(64 << 10) + b"[" + b" " * (60 << 10)) for _ in range(2)
        ]
        await asyncio.sleep(SLOW_AFTER + 0.2)
        trials = [event("t", f"p{i}", suite="web") for i in range(200)]  # about 12 KiB
        status, answer, _ = await post(base, trials)
        assert status == 200, answer
        assert await _count_closed(slow) == 1  # one made room; the other still fits
        for _, writer in slow:
            writer.close()
        assert daemon.committed_events >= 200
