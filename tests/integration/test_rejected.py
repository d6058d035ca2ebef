"""Rejected input made visible: dead letters over MQTT and HTTP, `rejected`, `status`, /metrics."""

from __future__ import annotations

import asyncio
import json
import time

import msgspec
import pytest

from reliabilityd.cli._main import main
from reliabilityd.config import Config
from tests.support.daemon import store_for
from tests.support.helpers import publish, wait_until
from tests.support.http import event, http_config, post, scrape, serving
from tests.support.servers import Mosquitto, RedisServer

GOOD = {"suite": "support-bot", "task": "t1", "trial": "1", "outcome": "pass"}
MQTT_BAD = [
    msgspec.json.encode({**GOOD, "trial": "2", "outcome": "PASS"}),
    msgspec.json.encode({**GOOD, "trial": 3}),  # an integer trial id, as harnesses send
    b"support-bot t1 pass",  # plain text names no suite
]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def feed(
    cfg: Config, mosquitto: Mosquitto, prefix: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Bad input over MQTT and HTTP into a running daemon; the /metrics samples after it."""

    async def go() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        async with serving(cfg) as (_, base), store_for(cfg) as store:
            await publish(
                mosquitto.port, f"{prefix}/trials/agents", [msgspec.json.encode(GOOD), *MQTT_BAD]
            )

            async def counted(n: int) -> bool:
                return await store.reads.deadletter_count() == n

            await wait_until(lambda: counted(3), 30)  # the broker's PUBACK is not the daemon's
            status, _, _ = await post(base, [event("t2", "a"), {"suite": "web", "task": "t2"}])
            assert status == 422
            assert await counted(4)
            return await scrape(base)

    return asyncio.run(go())


def test_dead_letters_name_suite_source_and_class_and_are_listed(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = http_config(redis_server, prefix, broker=mosquitto)
    cfg = msgspec.structs.replace(
        cfg, mqtt=msgspec.structs.replace(cfg.mqtt, topic=f"{prefix}/trials/#")
    )
    samples = feed(cfg, mosquitto, prefix)

    # One counter, by source kind and reason class; every class exported from the start.
    def rejected(source: str, reason: str) -> float:
        return samples[("reliabilityd_rejected_total", (("reason", reason), ("source", source)))]

    assert rejected("mqtt", "invalid_field") == 2
    assert rejected("mqtt", "undecodable") == 1
    assert rejected("http", "missing_field") == 1
    assert rejected("stream", "too_large") == 0
    assert not [name for name, _ in samples if "deadletters" in name]

    redis = ["--redis", redis_server.url, "--prefix", prefix]
    code, out, _ = cli(capsys, "rejected", "--json", *redis)
    assert code == 0
    letters = json.loads(out)
    # Newest first: the HTTP element, then the MQTT messages in reverse.
    assert [(x["source"], x["suite"], x["reason_class"]) for x in letters] == [
        ("http:127.0.0.1", "web", "missing_field"),
        (f"mqtt:{prefix}/trials/agents", None, "undecodable"),
        (f"mqtt:{prefix}/trials/agents", "support-bot", "invalid_field"),
        (f"mqtt:{prefix}/trials/agents", "support-bot", "invalid_field"),
    ]
    assert "Expected `str`, got `int` - at `$.trial`" in letters[2]["reason"]
    assert "Invalid enum value 'PASS'" in letters[3]["reason"]
    assert letters[1]["excerpt"] == "support-bot t1 pass"
    assert abs(letters[0]["time"] - time.time()) < 120

    # One suite's: only the letters whose payload names it, each with reason and excerpt.
    code, out, _ = cli(capsys, "rejected", "support-bot", *redis)
    assert code == 0
    assert out.count("support-bot  invalid_field") == 2
    assert "reason:  not a trial event (JSON): Invalid enum value 'PASS'" in out
    assert '"trial":3' in out
    assert "2 dead letters filed under suite 'support-bot', newest first" in out
    code, out, _ = cli(capsys, "rejected", "nobody", *redis)
    assert code == 0
    assert f"no dead letters filed under suite 'nobody' in the last 1h in {redis_server.url}" in out
    code, out, _ = cli(capsys, "rejected", "--limit", "1", *redis)
    assert out.count("reason:") == 1
    assert "(--limit for more)" in out

    # status ends with the last hour's counts, the suites it names and those it cannot.
    code, out, _ = cli(capsys, "status", *redis)
    assert code == 0
    assert (
        "rejected in the last hour: support-bot 2, web 1, no suite named 1 "
        "(listed by `reliabilityd rejected [SUITE]`)"
    ) in out
    code, out, _ = cli(capsys, "status", "support-bot", *redis)
    assert "rejected in the last hour: support-bot 2, no suite named 1" in out


def test_since_bounds_what_is_listed(
    redis_server: RedisServer, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from reliabilityd.rejections import Rejected

    cfg = http_config(redis_server, prefix)

    async def go() -> None:
        async with store_for(cfg) as store:
            await store.ingest.deadletter(
                [(Rejected(b'{"suite": "old"}', "not a trial event", "other"), "stream:k")],
                maxlen=100,
            )

    asyncio.run(go())
    redis = ["--redis", redis_server.url, "--prefix", prefix]
    time.sleep(1.2)
    code, out, _ = cli(capsys, "rejected", "--since", "1s", *redis)
    assert "no dead letters in the last 1s" in out
    code, out, _ = cli(capsys, "rejected", "--since", "1m", *redis)
    assert code == 0
    assert "stream:k  old  other" in out


async def test_the_last_hour_counts_of_every_suite_or_of_some_and_a_bad_count_is_zero(
    redis_server: RedisServer, prefix: str
) -> None:
    """The per-minute counts as ingest writes them, one of them not a number (a hand edit):
    every suite's, or one suite's with the unattributable ones; the bad field counts 0."""
    cfg = http_config(redis_server, prefix)
    now = 1_800_000_000.0
    async with store_for(cfg) as store:
        minute = int(now // 60)
        written: list[tuple[int, dict[str, int | str]]] = [
            (minute, {"a": 2, "b": 1, "": 4}),
            (minute - 5, {"a": 3, "c": "x"}),
        ]
        for m, fields in written:
            for field, value in fields.items():
                await store.client.hset(store.keys.rejected_minute(m), field, value)
        await store.client.hset(store.keys.rejected_minute(minute - 61), mapping={"a": 100})
        reads = store.reads
        assert await reads.rejected_counts(now) == {"a": 5, "b": 1, None: 4, "c": 0}
        assert await reads.rejected_counts(now, only=["a"]) == {"a": 5, None: 4}
        assert await reads.rejected_counts(now, only=["nobody"]) == {None: 4}
        assert await reads.rejected_of("a", now) == 5
