"""Slow clients beside a producer, against `reliabilityd run` with its own redis-server.

1,000 raw sockets from 127.0.0.1, the producer's own address, each send the
headers of a `POST /v1/trials` with a 1,000-byte body, 2 bytes of it, then a
byte every half second; each one the daemon closes or answers comes back at
once. Meanwhile a producer posts batches of trials over one keep-alive
connection, with and without a token configured (with one, the slow clients
send it too). Its first request is a newcomer among a thousand and, like
theirs, may be closed to make room: it resends the batch, as an HTTP
producer does, with a pause that grows to a second, until it is in (on a
loaded machine, several times). Once it has been answered, its connection is never closed to
make room: every later batch is answered 200 at its first try, and Redis
counts exactly what it sent. A request takes an inflight place only once its
body is in, and an address holds at most ``http.max_pending_per_address``
unfinished requests older than a second, so the slow clients crowd out only
each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import time
from pathlib import Path

import aiohttp
import msgspec
import pytest

from reliabilityd.config import HttpConfig
from tests.support.daemon import store_for
from tests.support.helpers import DaemonProcess, wait_until
from tests.support.http import http_config
from tests.support.servers import RedisServer, free_port

SLOW = 1000  # slow clients at once
DURATION = 12.0  # seconds the producer posts: past the 10 s read timeout of the first wave
RENEWALS = 200_000  # connections the slow clients may open in all (a bound, never reached)
RETRIES = 6  # resends of a batch whose connection was closed under it, backing off
FIRST_IN = 40.0  # seconds a newcomer resends its first batch before the test gives up
BODY = 1000
TOKEN = "slow-token"


def _files_for(count: int) -> None:
    """This process's file limit raised to hold ``count`` sockets (and its own files)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = count + 512
    if soft != resource.RLIM_INFINITY and soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} cannot hold {count} sockets")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


@pytest.mark.timeout(240)  # on a loaded machine: a minute to get in, a minute more for 5 answers
@pytest.mark.parametrize("token", ["", TOKEN], ids=["no-token", "token"])
async def test_1000_slow_bodies_leave_a_producer_200s_and_an_exact_count(
    private_redis: RedisServer, prefix: str, tmp_path: Path, token: str
) -> None:
    _files_for(SLOW)
    cfg = http_config(private_redis, prefix, token=token)
    cfg = msgspec.structs.replace(cfg, http=HttpConfig(port=free_port(), token=token))
    port = cfg.http.port
    daemon = DaemonProcess(cfg, tmp_path)
    auth = f"Authorization: Bearer {token}\r\n".encode() if token else b""
    head = (
        b"POST /v1/trials HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n%s\r\n[{" % (BODY, auth)
    )
    stop = asyncio.Event()
    opened = 0  # connections the slow clients opened
    ended = 0  # of them, closed or answered by the daemon
    live = 0  # slow connections open now (each sent its headers)
    peak_live = 0

    async def slow_client() -> None:
        nonlocal opened, ended, live, peak_live
        while not stop.is_set() and opened < RENEWALS:
            opened += 1
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                ended += 1
                await asyncio.sleep(0.05)
                continue
            live += 1
            peak_live = max(peak_live, live)
            try:
                writer.write(head)
                while not stop.is_set():
                    try:
                        # Anything from the daemon (an answer, EOF) ends this one.
                        await asyncio.wait_for(reader.read(4096), 0.5)
                        break
                    except TimeoutError:
                        writer.write(b" ")  # a byte of the body, every half second
                        await writer.drain()
            except OSError:
                pass
            finally:
                live -= 1
                ended += 1
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

    statuses: dict[str, int] = {}
    resent: dict[str, int] = {}
    resent_once_in = 0  # resends after the producer's first 200
    sent: set[str] = set()
    slowest = 0.0

    async def producer() -> None:
        nonlocal slowest, resent_once_in
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        timeout = aiohttp.ClientTimeout(total=15)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            n = 0
            deadline = time.monotonic() + DURATION
            # DURATION at least, and on a machine too busy for 5 answers in it, on
            # until the fifth (for at most a minute more): progress is what is asserted.
            while time.monotonic() < deadline or (
                statuses.get("200", 0) < 5 and time.monotonic() < deadline + 60
            ):
                trials = [f"p{n}-{j}" for j in range(5)]
                n += 1
                body = msgspec.json.encode(
                    [
                        {"suite": "web", "task": f"t{j}", "trial": t, "outcome": "pass"}
                        for j, t in enumerate(trials)
                    ]
                )
                began = time.monotonic()
                # As an HTTP producer does: a batch whose connection was closed under it
                # is sent again after a pause, the same trial ids, which the daemon
                # counts once.
                # Before its first answer it is a newcomer and keeps trying (for at most
                # FIRST_IN seconds); once in, RETRIES bounds the resends, and none is
                # expected.
                attempt = 0
                while True:
                    try:
                        async with http.post(
                            f"http://127.0.0.1:{port}/v1/trials", data=body, headers=headers
                        ) as resp:
                            await resp.read()
                            key = str(resp.status)
                    except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                        key = type(exc).__name__
                    if key == "200" or key[0].isdigit():
                        break
                    once_in = bool(statuses.get("200"))
                    if attempt >= RETRIES if once_in else time.monotonic() - began > FIRST_IN:
                        break
                    resent[key] = resent.get(key, 0) + 1
                    resent_once_in += once_in
                    await asyncio.sleep(min(1.0, 0.05 * 2**attempt))
                    attempt += 1
                slowest = max(slowest, time.monotonic() - began)
                statuses[key] = statuses.get(key, 0) + 1
                if key == "200":
                    sent.update(trials)
                await asyncio.sleep(0.02)

    async def healthy() -> bool:
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{port}/healthz") as resp,
            ):
                return resp.status == 200
        except aiohttp.ClientError:
            return False

    daemon.start()
    try:
        await wait_until(healthy, 30)
        attackers = [asyncio.create_task(slow_client()) for _ in range(SLOW)]

        # Every slow client has opened its first connection before the producer starts.
        async def all_opened() -> bool:
            return opened >= SLOW

        await wait_until(all_opened, 30)
        await asyncio.sleep(1.5)  # past the second after which a slow one counts as slow
        held_at_start = live
        await producer()
        stop.set()
        await asyncio.gather(*attackers)
        async with store_for(cfg) as store:
            counted = (await store.reads.read_state("web")).counters.trials
        alive = daemon.proc is not None and daemon.proc.poll() is None
    finally:
        stop.set()
        daemon.kill()
    print(
        f"producer: {statuses} (resent after {resent}, {resent_once_in} of them once in), "
        f"slowest answer {slowest:.2f} s, "
        f"{len(sent)} trials sent, "
        f"{counted} counted; slow clients: {opened} connections, {ended} ended by the daemon "
        f"or the test, at most {peak_live} open at once, {held_at_start} open when the "
        "producer started"
    )
    assert alive, daemon.output()[-3000:]
    assert "Traceback" not in daemon.output(), daemon.output()[-3000:]
    assert set(statuses) == {"200"}, statuses
    assert resent_once_in == 0, resent
    # Slowed by the churn both processes share two cores with, never stopped.
    assert statuses["200"] >= 5, statuses
    assert counted == len(sent)
    # The slow clients were there all along: many held open, renewing to the end.
    assert held_at_start >= 64, held_at_start
    assert opened < RENEWALS, opened
