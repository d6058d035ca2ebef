"""Grants against real redis-server and mosquitto: suite quotas that one tenant cannot
fill for another, from every source, and dead letters each tenant keeps to itself."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from reliabilityd.cli._main import main
from reliabilityd.config import (
    Config,
    GrantConfig,
    HttpConfig,
    HttpToken,
    OtlpConfig,
    StatsConfig,
    StoreConfig,
)
from reliabilityd.events import TrialEvent
from reliabilityd.importers import ImportFileError, import_file
from reliabilityd.store import Store
from reliabilityd.testing import TestingSource
from tests.support.daemon import make_config, running, store_for, with_stream
from tests.support.helpers import publish, toml_of, wait_until
from tests.support.http import event, post, serving
from tests.support.result_files import tau_bench_doc
from tests.support.servers import Mosquitto, RedisServer, free_port

TEAM_A = "teamA-secret-0b1e"
TEAM_B = "teamB-secret-77c4"
# Five places: two reserved for each team, one shared by the suites of no team.
GRANTS = [
    GrantConfig(name="teamA", suites=["teamA-*"], max_suites=2),
    GrantConfig(name="teamB", suites=["teamB-*"], max_suites=2),
]


def _config(redis: RedisServer, prefix: str, mqtt_url: str = "", **sections: Any) -> Config:
    cfg = make_config(
        redis_url=redis.url,
        mqtt_url=mqtt_url or "mqtt://127.0.0.1:1",
        prefix=prefix,
        stats=StatsConfig(k=[1], ci_interval=0.3, n_boot=100, max_suites=5),
        http=HttpConfig(
            port=free_port(),
            tokens=[HttpToken(token=TEAM_A, grant="teamA"), HttpToken(token=TEAM_B, grant="teamB")],
            otlp=OtlpConfig(enabled=True, suite=["attribute:suite"]),
        ),
    )
    mqtt = msgspec.structs.replace(cfg.mqtt, enabled=bool(mqtt_url))
    return msgspec.structs.replace(cfg, mqtt=mqtt, grants=GRANTS, **sections)


def _events(*suites: str, tag: str = "1") -> list[TrialEvent]:
    return [TrialEvent(s, "t", f"{tag}-{s}", "pass") for s in suites]


async def _letters(store: Store, suite: str | None = None) -> list[Any]:
    return await store.reads.recent_deadletters(since=0, suite=suite, limit=1000)


async def test_over_mqtt_one_grant_fills_its_own_places_never_another_grants(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = _config(redis_server, prefix, mosquitto.url)
    cfg = msgspec.structs.replace(
        cfg, mqtt=msgspec.structs.replace(cfg.mqtt, topic=f"{prefix}/trials/#")
    )
    topic = f"{prefix}/trials/x"
    async with running(cfg), store_for(cfg) as store:
        # teamA's producer tries to create six suites, more than the deployment holds.
        flood = _events(*(f"teamA-{i}" for i in range(6)), "loose-1", "loose-2")
        await publish(mosquitto.port, topic, [msgspec.json.encode(flood)], client_id=f"{prefix}-a")

        async def settled() -> bool:
            return len(await _letters(store)) >= 5

        await wait_until(settled, 20)
        # teamB's suites still find their places.
        await publish(
            mosquitto.port,
            topic,
            [msgspec.json.encode(_events("teamB-1", "teamB-2", "teamB-3"))],
            client_id=f"{prefix}-b",
        )

        async def landed() -> bool:
            return "teamB-2" in await store.reads.suites()

        await wait_until(landed, 20)

        async def refused_b3() -> bool:
            return any(x.suite == "teamB-3" for x in await _letters(store))

        await wait_until(refused_b3, 20)
        assert await store.reads.suites() == ["loose-1", "teamA-0", "teamA-1", "teamB-1", "teamB-2"]
        letters = await _letters(store)
        by_suite = {x.suite: x for x in letters}
        assert set(by_suite) == {"teamA-2", "teamA-3", "teamA-4", "teamA-5", "loose-2", "teamB-3"}
        assert {x.reason_class for x in letters} == {"too_many_suites"}
        assert "grant 'teamA' already holds its max_suites (2)" in by_suite["teamA-2"].reason
        assert "what the quotas leave of stats.max_suites (1 of 5)" in by_suite["loose-2"].reason
        # Each letter is in the stream of the grant that owns its suite.
        assert by_suite["teamA-2"].grant == "teamA"
        assert by_suite["teamB-3"].grant == "teamB"
        assert by_suite["loose-2"].grant is None
        a_stream = await store.client.xlen(store.keys.deadletter_of("teamA"))
        assert a_stream == 4


async def test_http_otlp_streams_and_import_are_admitted_within_the_same_quotas(
    redis_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    pytest.importorskip("opentelemetry.proto")
    from tests.support.otlp import records_request

    cfg = with_stream(_config(redis_server, prefix), f"{prefix}:in")
    async with serving(cfg) as (daemon, base), store_for(cfg) as store:
        # HTTP: teamA's token takes its two places; its third suite is refused.
        status, body, _ = await post(
            base,
            [event("t", "1", suite=s) for s in ("teamA-h1", "teamA-h2", "teamA-h3")],
            token=TEAM_A,
        )
        assert status == 422
        assert [r["status"] for r in body["results"]] == ["accepted", "accepted", "rejected"]
        assert "grant 'teamA' already holds its max_suites (2)" in body["results"][2]["reason"]
        # OTLP: the same quota, whoever sends it.
        request = records_request(
            [
                {
                    "suite": "teamA-o1",
                    "gen_ai.evaluation.name": "Correct",
                    "gen_ai.response.id": "r1",
                    "gen_ai.evaluation.score.label": "pass",
                }
            ]
        )
        headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {TEAM_A}"}
        async with (
            aiohttp.ClientSession() as http,
            http.post(f"{base}/v1/logs", data=request.SerializeToString(), headers=headers) as r,
        ):
            assert r.status == 200
        # A Redis Stream producer carries no token: the suite's grant is its name's.
        assert (await post(base, [event("t", "1", suite="teamB-h1")], token=TEAM_B))[0] == 200
        stream_event = msgspec.json.encode(event("t", "1", suite="teamB-s1"))
        await store.client.xadd(f"{prefix}:in", {"payload": stream_event})
        stream_over = msgspec.json.encode(event("t", "1", suite="teamA-s1"))
        await store.client.xadd(f"{prefix}:in", {"payload": stream_over})

        async def streamed() -> bool:
            suites = {x.suite for x in await _letters(store)}
            return "teamB-s1" in await store.reads.suites() and "teamA-s1" in suites

        await wait_until(streamed, 20)
        # An import is admitted like a live event: past the quota, refused with the reason.
        lines = "\n".join(
            json.dumps({"suite": "teamA-i1", "task": "t", "trial": str(i), "outcome": "pass"})
            for i in range(3)
        )
        (tmp_path / "a.jsonl").write_text(lines + "\n")
        report = await import_file(store, tmp_path / "a.jsonl", config=cfg)
        assert (report.counted, report.rejected) == (0, 3)
        assert "grant 'teamA' already holds its max_suites (2)" in report.rejections[0]
        (tmp_path / "b.json").write_text(json.dumps(tau_bench_doc({"1": ["pass", "fail"]})))
        with pytest.raises(ImportFileError, match="grant 'teamB' already holds"):
            await import_file(
                store, tmp_path / "b.json", suite="teamB-i2", fmt="tau-bench", config=cfg
            )
        assert await store.reads.suites() == ["teamA-h1", "teamA-h2", "teamB-h1", "teamB-s1"]
        letters = {x.suite: x for x in await _letters(store)}
        assert {"teamA-h3", "teamA-o1", "teamA-s1"} <= set(letters)
        assert letters["teamA-o1"].reason_class == "too_many_suites"
        assert daemon.store is not None


async def test_a_reset_frees_a_place_in_the_grant_that_held_it(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _config(redis_server, prefix)
    from reliabilityd.daemon._daemon import Daemon

    daemon = Daemon(cfg)
    try:
        sink = await TestingSource(_events("teamA-1", "teamA-2", "teamA-3")).run(daemon.commit)
        assert sink.reason_classes() == ["too_many_suites"]
        await daemon.store.admin.reset_suite("teamA-1")
        sink = await TestingSource(_events("teamA-3", tag="2")).run(daemon.commit)
        assert sink.counted() == 1
        assert await daemon.store.reads.suites() == ["teamA-2", "teamA-3"]
        sink = await TestingSource(_events("teamA-4", tag="3")).run(daemon.commit)
        assert sink.reason_classes() == ["too_many_suites"]
    finally:
        await daemon.store.client.aclose()


async def test_status_shows_each_grants_suites_against_its_quota(
    redis_server: RedisServer, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(redis_server, prefix)
    from reliabilityd.daemon._daemon import Daemon

    daemon = Daemon(cfg)
    try:
        await TestingSource(_events("teamA-1", "teamA-2", "teamA-3", "x")).run(daemon.commit)
    finally:
        await daemon.store.client.aclose()
    path = tmp_path / "c.toml"
    path.write_bytes(toml_of(cfg))
    assert await asyncio.to_thread(main, ["status", "-c", str(path)]) == 0
    out = capsys.readouterr().out
    assert "suites by grant: teamA 2 of 2, teamB 0 of 2, shared 1 of 1 (stats.max_suites 5)" in out


async def test_one_tenants_letters_never_evict_anothers(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _config(redis_server, prefix, store=StoreConfig(deadletter_maxlen=100))
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, _, _ = await post(base, [{"suite": "teamB-1", "task": "t"}], token=TEAM_B)
        assert status == 422
        (kept,) = await _letters(store, "teamB-1")
        # teamA sends 2,000 bad elements: they fill teamA's stream, never teamB's.
        bad = [{"suite": "teamA-1", "task": "t", "trial": str(i)} for i in range(10)]
        for _ in range(200):
            assert (await post(base, bad, token=TEAM_A))[0] == 422
        assert await _letters(store, "teamB-1") == [kept]
        # Approximate trimming keeps at most a node's worth beyond the cap.
        assert await store.client.xlen(store.keys.deadletter_of("teamA")) < 300


async def test_a_letter_naming_a_suite_its_sender_may_not_write_is_filed_under_the_sender(
    redis_server: RedisServer, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(redis_server, prefix)
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, _, _ = await post(base, [{"suite": "teamA-1", "task": "t"}], token=TEAM_B)
        assert status == 422
        (letter,) = await _letters(store)
        assert (letter.suite, letter.grant) == (None, "teamB")
        assert await _letters(store, "teamA-1") == []
        assert (await store.reads.rejected_counts(letter.time)).get("teamA-1") is None
        # Listed by the sender's grant, and not under the suite it names.
        url = f"{redis_server.url}"
        argv = ["rejected", "--redis", url, "--prefix", prefix]
        assert await asyncio.to_thread(main, [*argv, "teamA-1"]) == 0
        assert "no dead letters filed under suite 'teamA-1'" in capsys.readouterr().out
        assert await asyncio.to_thread(main, [*argv, "--grant", "teamB", "--json"]) == 0
        (shown,) = json.loads(capsys.readouterr().out)
        assert (shown["suite"], shown["grant"]) == (None, "teamB")


async def test_a_topic_mismatch_is_filed_under_the_suite_its_topic_binds(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = _config(redis_server, prefix, mosquitto.url)
    mqtt = msgspec.structs.replace(cfg.mqtt, topic=f"{prefix}/trials/#", bind_suite="last-level")
    cfg = msgspec.structs.replace(cfg, mqtt=mqtt)
    async with running(cfg), store_for(cfg) as store:
        stray = msgspec.json.encode(event("t", "1", suite="teamA-1"))
        await publish(mosquitto.port, f"{prefix}/trials/teamB-1", [stray], client_id=f"{prefix}-p")

        async def filed() -> bool:
            return bool(await _letters(store))

        await wait_until(filed, 20)
        (letter,) = (await _letters(store))[:1]
        assert (letter.suite, letter.grant, letter.reason_class) == (
            "teamB-1",
            "teamB",
            "topic_mismatch",
        )
