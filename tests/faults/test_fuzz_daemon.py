"""Fuzzed messages through the whole daemon, over real MQTT, with a Redis outage.

Thousands of hostile payloads (random bytes, nesting past every limit,
array headers claiming billions of elements, wrong types, enormous strings,
invalid UTF-8, NaN and huge numbers, oversize payloads, arrays mixing good
and bad elements) are published between good events while Redis goes away
for a few seconds. Every bad piece must land in the dead-letter stream with
a reason, every good event must be counted exactly once, the daemon must
stay alive and its memory bounded.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from reliabilityd.config import IngestConfig, StoreConfig
from reliabilityd.events import TrialEvent, decode
from tests.support.daemon import make_config, store_for
from tests.support.faults import SUITES, assert_exact, mqtt_flush
from tests.support.helpers import DaemonProcess, make_events, publish, truth_of
from tests.support.servers import Mosquitto, RedisServer

MAX_PAYLOAD = 64 * 1024
GOOD = {"suite": "alpha", "task": "t", "trial": "x", "outcome": "pass"}


def _hostile(rng: np.random.Generator, i: int) -> bytes:
    """One payload that can contain no countable event."""
    kind = i % 12
    if kind == 0:
        return rng.bytes(int(rng.integers(0, 4096)))
    if kind == 1:
        depth = int(rng.integers(1, 20_000))
        return b"[" * depth + b"]" * depth
    if kind == 2:
        return b"\x91" * int(rng.integers(1, 20_000)) + b"\x90"
    if kind == 3:
        return b"\xdd\xff\xff\xff\xff" + rng.bytes(int(rng.integers(0, 64)))
    if kind == 4:  # a wrong type in every field in turn
        field = ["suite", "task", "trial", "outcome", "ts", "labels"][i % 6]
        # Wrong for every field (None and numbers are fine for ts and labels).
        wrong: list[Any] = [[], True, "x" * 300, [None], {"a": 1} if field != "labels" else 7]
        return msgspec.json.encode({**GOOD, field: wrong[i % len(wrong)]})
    if kind == 5:  # names too long, empty, with control characters, or forbidden in suites
        bad = ["", "x" * 201, "a\x00b", "tab\there", "a/b", "{tag}", "#", "+"][i % 8]
        field = "suite" if i % 2 else "task"
        if field == "task" and bad in ("a/b", "{tag}", "#", "+"):
            field = "suite"
        return msgspec.json.encode({**GOOD, field: bad})
    if kind == 6:  # non-finite and huge numbers (MessagePack carries them)
        ts = [math.nan, math.inf, -math.inf][i % 3]
        return msgspec.msgpack.encode({**GOOD, "ts": ts})
    if kind == 7:
        return b'{"suite":"alpha","task":"t","trial":"1","outcome":"pass","ts":' + b"9" * 400 + b"}"
    if kind == 8:  # invalid UTF-8 in a MessagePack string
        junk = rng.bytes(int(rng.integers(1, 60))) + b"\xff"
        return (
            b"\x84\xa5suite\xa5alpha\xa4task"
            + bytes([0xD9, len(junk)])
            + junk
            + b"\xa5trial\xa11\xa7outcome\xa4pass"
        )
    if kind == 9:  # larger than ingest.max_payload
        return b"[" + b" " * (MAX_PAYLOAD + int(rng.integers(1, 4096))) + b"]"
    if kind == 10:  # an enormous array of junk elements
        return msgspec.json.encode([int(x) for x in rng.integers(0, 9, 100)])
    # truncated, or the outcome misspelt
    doc = msgspec.json.encode({**GOOD, "outcome": "passed"})
    return doc if i % 2 else doc[: int(rng.integers(1, len(doc)))]


def _bad_element(i: int) -> Any:
    return [None, 7, "text", {"suite": "alpha"}, {**GOOD, "outcome": "great"}, [1, [2]]][i % 6]


def build_stream(
    rng: np.random.Generator,
) -> tuple[list[bytes], list[TrialEvent], int]:
    """Messages in publish order, the good events among them, and how many are hostile."""
    events = make_events(rng, count=4000, suites=SUITES, tasks=30, flip=False)
    messages: list[bytes] = []
    hostile = 0
    e = 0
    i = 0
    while e < len(events):
        if i % 3 == 0:
            payload = _hostile(rng, hostile)
            assert not decode(payload, MAX_PAYLOAD)[0], payload[:200]  # really hostile
            messages.append(payload)
            hostile += 1
        elif i % 3 == 1:  # one good event, JSON or MessagePack
            encode = msgspec.json.encode if i % 2 else msgspec.msgpack.encode
            messages.append(encode(events[e]))
            e += 1
        else:  # an array mixing good events and bad elements
            good = events[e : e + 3]
            e += len(good)
            items: list[Any] = [*good, _bad_element(i), _bad_element(i + 1)]
            order = rng.permutation(len(items))
            messages.append(msgspec.json.encode([items[j] for j in order]))
        i += 1
    return messages, list(events), hostile


# Room for the interpreter's own arenas and Redis and MQTT buffers beyond the payloads.
ARENAS = 24 << 20


def _largest_window(messages: list[bytes], width: int) -> int:
    """The most payload bytes in any ``width`` consecutive messages."""
    sizes = [len(m) for m in messages]
    width = min(width, len(sizes))
    best = window = sum(sizes[:width])
    for i in range(width, len(sizes)):
        window += sizes[i] - sizes[i - width]
        best = max(best, window)
    return best


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.timeout(300)
async def test_fuzzed_messages_through_the_daemon_with_a_redis_outage(
    private_redis: RedisServer,
    mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
) -> None:
    cfg = make_config(redis_url=private_redis.url, mqtt_url=mosquitto.url, prefix=prefix)
    cfg = msgspec.structs.replace(
        cfg,
        ingest=IngestConfig(max_payload=MAX_PAYLOAD),
        store=StoreConfig(deadletter_maxlen=100_000),  # keep every letter to check its reason
    )
    messages, events, hostile = build_stream(rng)
    truth = truth_of(events)
    want_letters = sum(len(decode(m, MAX_PAYLOAD)[1]) for m in messages)
    daemon = DaemonProcess(cfg, tmp_path)
    daemon.start()
    await daemon.wait_subscribed()
    assert daemon.proc is not None
    pid = daemon.proc.pid
    rss: list[int] = []
    outage: list[asyncio.Task[None]] = []

    async def redis_away() -> None:
        await asyncio.to_thread(private_redis.kill)
        await asyncio.sleep(3.0)
        await asyncio.to_thread(private_redis.start)

    async def on_progress(sent: int) -> None:
        if sent >= len(messages) // 10 and not rss:
            rss.append(_rss_kib(pid))  # warmed up: every code path has run
        if sent >= len(messages) // 2 and not outage:
            outage.append(asyncio.create_task(redis_away()))

    try:
        async with store_for(cfg) as store:
            await publish(mosquitto.port, f"{prefix}/trials/x", messages, on_progress=on_progress)
            await outage[0]
            await assert_exact(
                store, truth, events, flush=mqtt_flush(mosquitto.port, f"{prefix}/trials/x", store)
            )
            # At least once: a batch whose reply the outage lost is dead-lettered again.
            assert await store.reads.deadletter_count() >= want_letters
            letters = await store.reads.deadletters(count=2 * want_letters)
            assert len(letters) >= want_letters
            assert all(d.reason for d in letters)
            assert daemon.proc is not None
            assert daemon.proc.poll() is None, daemon.output()
            rss.append(_rss_kib(pid))
    finally:
        daemon.kill()
    assert hostile >= 1000
    assert want_letters >= hostile
    # Bounded by what the daemon may hold: every message the broker may have in
    # flight to it (receive_maximum consecutive messages), once as received and
    # once decoded, plus the interpreter's arenas. Anything kept per message
    # past its acknowledgement would grow past this over the stream.
    held = _largest_window(messages, cfg.mqtt.receive_maximum)
    allowed_kib = (2 * held + ARENAS) // 1024
    print(
        f"daemon RSS {rss[0]} KiB warmed up, {rss[1]} KiB at the end; "
        f"in flight at most {held // 1024} KiB, growth allowed {allowed_kib} KiB"
    )
    assert rss[1] - rss[0] <= allowed_kib
