"""Amplification: one payload of many invalid elements costs bounded letters, calls and memory."""

from __future__ import annotations

import tracemalloc

import msgspec
import redis.asyncio

from reliabilityd.events import MAX_LETTERS, decode
from reliabilityd.store import Store
from tests.support.daemon import make_config, running, store_for
from tests.support.helpers import publish, wait_until
from tests.support.http import event
from tests.support.servers import Mosquitto, RedisServer


def _invalid_elements(size: int) -> bytes:
    """A JSON array of about ``size`` bytes of one-digit elements: the worst case."""
    return b"[" + b",".join([b"1"] * (size // 2 - 1)) + b"]"


def test_one_payload_of_many_invalid_elements_costs_bounded_letters_and_memory() -> None:
    payload = _invalid_elements(1 << 20)
    elements = payload.count(b",") + 1
    tracemalloc.start()
    try:
        good, bad = decode(payload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert good == []
    assert len(bad) == MAX_LETTERS + 1
    assert bad[-1].reason.startswith(f"{elements - MAX_LETTERS} more rejected elements")
    assert sum(len(b.raw) + len(b.reason) for b in bad) < 4096
    # A reference and a view per element while splitting, nothing kept per element.
    print(f"peak {peak / 2**20:.1f} MiB for {elements} invalid elements in 1 MiB")
    assert peak < 64 * len(payload)


async def test_many_invalid_elements_cost_few_redis_calls_and_a_good_event_still_counts(
    private_redis: RedisServer, private_mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = make_config(redis_url=private_redis.url, mqtt_url=private_mosquitto.url, prefix=prefix)
    messages = [_invalid_elements(1 << 20) for _ in range(8)]
    good = msgspec.json.encode(event("good", "1"))
    admin = redis.asyncio.Redis.from_url(private_redis.url)
    try:
        async with running(cfg), store_for(cfg) as store:
            await admin.config_resetstat()
            await publish(private_mosquitto.port, f"{prefix}/trials/x", [*messages, good])

            async def counted() -> bool:
                return await store.reads.task_counts("web") == {"good": (1, 1)}

            await wait_until(counted, 60)
            stats = await admin.info("commandstats")
            letters = await store.reads.deadletters(1000)
            counted_letters = await _count(store)  # while the store's client is open
        xadds = stats.get("cmdstat_xadd", {}).get("calls", 0)
        assert xadds == len(messages) * (MAX_LETTERS + 1) == len(letters)
        assert all(len(d.payload) <= 2048 and len(d.reason) <= 1024 for d in letters)
        per_message = [d.reason for d in letters if "more rejected elements" in d.reason]
        assert len(per_message) == len(messages)
        assert counted_letters == len(letters)
    finally:
        await admin.aclose()


async def _count(store: Store) -> int:
    return await store.reads.deadletter_count()
