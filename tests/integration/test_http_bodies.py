"""Bodies HTTP and MQTT must treat alike: nested arrays, empty arrays, deep nesting,
scalars, and the amplification of many invalid elements, against real servers."""

from __future__ import annotations

from typing import Any

import msgspec

from tests.support.daemon import make_config, running, store_for
from tests.support.helpers import publish, wait_until
from tests.support.http import event, http_config, post, serving
from tests.support.servers import Mosquitto, RedisServer


async def _over_mqtt(
    redis: RedisServer, broker: Mosquitto, prefix: str, payload: bytes
) -> tuple[dict[str, tuple[int, int]], list[str]]:
    """What the daemon counts and dead-letters for one MQTT message (suite "web")."""
    cfg = make_config(redis_url=redis.url, mqtt_url=broker.url, prefix=prefix)
    async with running(cfg), store_for(cfg) as store:
        before = await store.reads.deadletter_count()
        marker = msgspec.json.encode(event("marker", f"{prefix}-m"))
        await publish(broker.port, f"{prefix}/trials/x", [payload, marker])

        async def marked() -> bool:
            return "marker" in await store.reads.task_counts("web")

        await wait_until(marked)
        counts = await store.reads.task_counts("web")
        counts.pop("marker")
        letters = await store.reads.deadletters(1000)
        assert len(letters) == await store.reads.deadletter_count() - before + 0
        return counts, [d.reason for d in letters]


async def test_a_nested_array_is_one_rejected_element_over_http_as_over_mqtt(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    nested: list[Any] = [[event("t", "a"), event("t", "b")], event("t", "c")]
    raw = msgspec.json.encode(nested)
    mqtt_counts, mqtt_reasons = await _over_mqtt(redis_server, mosquitto, prefix + "m", raw)
    cfg = http_config(redis_server, prefix)
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, body, _ = await post(base, None, raw=raw)
        assert status == 422
        assert (body["accepted"], body["rejected"]) == (1, 1)
        assert body["results"][0]["status"] == "rejected"
        assert "Expected `object`, got `array`" in body["results"][0]["reason"]
        assert await store.reads.task_counts("web") == mqtt_counts == {"t": (1, 1)}
        letters = [d.reason for d in await store.reads.deadletters()]
        assert letters == mqtt_reasons
        assert len(letters) == 1


async def test_an_empty_array_is_400_and_dead_lettered_as_over_mqtt(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    _, mqtt_reasons = await _over_mqtt(redis_server, mosquitto, prefix + "m", b"[]")
    cfg = http_config(redis_server, prefix)
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, body, _ = await post(base, None, raw=b" [ ]")
        assert status == 400
        assert body["error"] == "empty array: no trial events"
        assert [d.reason for d in await store.reads.deadletters()] == mqtt_reasons
        assert mqtt_reasons == ["empty array: no trial events"]


async def test_json_nested_200000_deep_is_400_with_a_reason(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix)
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, body, _ = await post(base, None, raw=b"[" * 200_000 + b"]" * 200_000)
        assert status == 400
        assert body["error"] == "JSON nested too deeply to decode (RecursionError)"
        # Deep where a name belongs: that field's type error, found before any depth.
        deep = b'{"suite": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
        status, body, _ = await post(base, None, raw=deep)
        assert status == 422
        assert "Expected `str`, got `array`" in body["results"][0]["reason"]
        # An element nested too deeply beside a good one: the array cannot be
        # split, so it is rejected whole, never a 500.
        good = msgspec.json.encode(event("t", "1"))
        status, body, _ = await post(
            base, None, raw=b"[" + good + b"," + b"[" * 5000 + b"]" * 5000 + b"]"
        )
        assert status == 400
        assert await store.reads.deadletter_count() == 3


async def test_a_json_scalar_is_reported_as_json(redis_server: RedisServer, prefix: str) -> None:
    cfg = http_config(redis_server, prefix)
    async with serving(cfg) as (_, base):
        for raw, kind in ((b"5", "int"), (b"null", "null"), (b' "x"', "str"), (b"-1.5", "float")):
            status, body, _ = await post(base, None, raw=raw)
            assert status == 422
            assert body["results"][0]["reason"] == (
                f"not a trial event (JSON): Expected `object`, got `{kind}`"
            )
        status, body, _ = await post(base, [event("t", "1"), 5, None])
        assert status == 422
        reasons = [r.get("reason") for r in body["results"]]
        assert reasons == [
            None,
            "element 1: Expected `object`, got `int`",
            "element 2: Expected `object`, got `null`",
        ]


# --- amplification ------------------------------------------------------------
