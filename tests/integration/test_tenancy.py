"""Tenancy at the edges against real mosquitto and redis-server: suites bound to MQTT
topics (``mqtt.bind_suite``), the Emitter's per-suite topics, HTTP token scopes for
writes, reads and OTLP, and look-alike suite names."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from reliabilityd.cli._main import main
from reliabilityd.client import Emitter, EmitterError
from reliabilityd.config import Config, GrantConfig, HttpConfig, HttpToken, OtlpConfig
from reliabilityd.daemon._daemon import Daemon
from tests.support.daemon import make_config, running, store_for
from tests.support.helpers import publish, wait_until
from tests.support.http import event, post, samples, serving
from tests.support.servers import Mosquitto, RedisServer, free_port

TEAM_A = "teamA-secret-7f3a"
TEAM_B = "teamB-secret-91c2"
READER = "reader-secret-55e0"
ALL = "all-suites-secret-d41d"
SECRETS = (TEAM_A, TEAM_B, READER, ALL)


def _bound(redis: RedisServer, broker: Mosquitto, prefix: str, bind: str) -> Config:
    cfg = make_config(redis_url=redis.url, mqtt_url=broker.url, prefix=prefix)
    return msgspec.structs.replace(
        cfg, mqtt=msgspec.structs.replace(cfg.mqtt, topic=f"{prefix}/trials/#", bind_suite=bind)
    )


def _raw(*events: dict[str, str]) -> bytes:
    return msgspec.json.encode(list(events))


def _rejected(daemon: Daemon, source: str, reason: str) -> float:
    found = samples(daemon.metrics.render().decode())
    return found.get(("reliabilityd_rejected_total", (("reason", reason), ("source", source))), 0.0)


async def test_a_bound_topic_counts_its_suite_and_dead_letters_each_other_element(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = _bound(redis_server, mosquitto, prefix, "last-level")
    async with running(cfg) as daemon, store_for(cfg) as store:
        mixed = _raw(
            event("t1", "1", suite="teamA"),
            event("t1", "2", suite="teamB"),  # a producer on teamA's topic writing teamB
            event("t1", "3", "fail", suite="teamA"),
        )
        await publish(mosquitto.port, f"{prefix}/trials/teamA", [mixed], client_id=f"{prefix}-p")
        await publish(
            mosquitto.port,
            f"{prefix}/trials/teamB",
            [_raw(event("t1", "4", suite="teamB"))],
            client_id=f"{prefix}-p",
        )

        async def landed() -> bool:
            return await store.reads.task_counts("teamB") == {"t1": (1, 1)}

        await wait_until(landed, 20)
        assert await store.reads.task_counts("teamA") == {"t1": (2, 1)}
        # Dead letters are at least once: a redelivered message writes its letter again.
        letters = await store.reads.deadletters()
        assert letters
        # Filed under the suite the topic binds (the publisher's), not the one it names.
        assert {(d.source, d.suite, d.reason_class) for d in letters} == {
            (f"mqtt:{prefix}/trials/teamA", "teamA", "topic_mismatch")
        }
        assert letters[0].reason == (
            f"topic '{prefix}/trials/teamA' binds suite 'teamA', not 'teamB' "
            "(mqtt.bind_suite 'last-level')"
        )
        assert _rejected(daemon, "mqtt", "topic_mismatch") == len(letters)
        state = await store.reads.read_state("teamB")
        assert state.counters.trials == 1  # the stray trial "2" never counted


async def test_a_pattern_binding_refuses_topics_outside_the_pattern(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = _bound(redis_server, mosquitto, prefix, f"{prefix}/trials/tenants/+/{{suite}}")
    async with running(cfg) as daemon, store_for(cfg) as store:
        good = _raw(event("t", "1", suite="deploy"), event("t", "2", suite="deploy"))
        await publish(
            mosquitto.port, f"{prefix}/trials/tenants/acme/deploy", [good], client_id=f"{prefix}-p"
        )
        await publish(
            mosquitto.port,
            f"{prefix}/trials/elsewhere/deploy",
            [_raw(event("t", "3", suite="deploy"))],
            client_id=f"{prefix}-p",
        )

        async def both() -> bool:
            return len(await store.reads.deadletters()) >= 1

        await wait_until(both, 20)
        await wait_until(lambda: _counted(store, "deploy", {"t": (2, 2)}), 20)
        letters = await store.reads.deadletters()  # at least once
        for letter in letters:
            assert letter.reason.startswith(
                f"topic '{prefix}/trials/elsewhere/deploy' names no suite"
            )
        assert _rejected(daemon, "mqtt", "topic_mismatch") == len(letters)


async def _counted(store: Any, suite: str, want: dict[str, tuple[int, int]]) -> bool:
    return bool(await store.reads.task_counts(suite) == want)


async def test_the_emitter_publishes_each_suite_on_its_own_topic_when_bound(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = _bound(redis_server, mosquitto, prefix, "last-level")
    suites = ["alpha", "beta", "gamma"]
    async with running(cfg) as daemon, store_for(cfg) as store:
        emitter = Emitter(mosquitto.url, topic=f"{prefix}/trials/{{suite}}", batch_size=7)
        with emitter:
            for i in range(60):  # interleaved, so batches must be split by suite
                emitter.emit(suites[i % 3], f"task-{i % 4}", "pass" if i % 5 else "fail")
            emitter.flush(20)
        for suite in suites:
            await wait_until(lambda s=suite: _trials(store, s, 20), 20)  # type: ignore[misc]
        assert await store.reads.deadletters() == []
        # A fixed topic under the same binding: every event is refused, none counted.
        with Emitter(mosquitto.url, topic=f"{prefix}/trials/emit") as fixed:
            fixed.emit("alpha", "task-0", "pass")
            fixed.flush(20)

        async def refused() -> bool:
            return len(await store.reads.deadletters()) >= 1

        await wait_until(refused, 20)
        assert await _trials(store, "alpha", 20)
        letters = await store.reads.deadletters()  # at least once
        assert {d.reason_class for d in letters} == {"topic_mismatch"}
        assert _rejected(daemon, "mqtt", "topic_mismatch") == len(letters)


async def _trials(store: Any, suite: str, want: int) -> bool:
    state = await store.reads.read_state(suite)
    return bool(state.counters.trials == want)


@pytest.fixture
def acl_broker(tmp_path: Path, prefix: str) -> Iterator[Mosquitto]:
    """A broker whose ACL lets producers write one suite's topic and the daemon read all."""
    acl = tmp_path / "acl"
    acl.write_text(f"topic read {prefix}/trials/#\ntopic write {prefix}/trials/teamA\n")
    broker = Mosquitto(
        "mosquitto", tmp_path, free_port(), extra=("allow_anonymous true", f"acl_file {acl}")
    )
    broker.start()
    yield broker
    broker.stop()


async def test_a_topic_acl_with_a_binding_confines_a_producer_to_its_suite(
    redis_server: RedisServer, acl_broker: Mosquitto, prefix: str
) -> None:
    cfg = make_config(redis_url=redis_server.url, mqtt_url=acl_broker.url, prefix=prefix)
    cfg = msgspec.structs.replace(
        cfg, mqtt=msgspec.structs.replace(cfg.mqtt, bind_suite="last-level")
    )
    async with running(cfg), store_for(cfg) as store:
        topic = f"{prefix}/trials/{{suite}}"
        with Emitter(acl_broker.url, topic=topic) as em:
            em.emit("teamA", "t", "pass")
            em.flush(10)
        # teamB's topic: the broker refuses it.
        em = Emitter(acl_broker.url, topic=topic).start()
        em.emit("teamB", "t", "pass")
        with pytest.raises(EmitterError, match="refused"):
            em.flush(10)
        with pytest.raises(EmitterError):
            em.close()
        # teamB's events on teamA's topic: the broker takes them, the daemon does not count them.
        with Emitter(acl_broker.url, topic=f"{prefix}/trials/teamA") as em:
            em.emit("teamB", "t", "pass")
            em.flush(10)

        async def refused() -> bool:
            return len(await store.reads.deadletters()) >= 1

        await wait_until(refused, 20)
        # A batch's dead letters are written before its events are applied.
        await wait_until(lambda: _trials(store, "teamA", 1), 20)
        assert await store.reads.task_counts("teamA") == {"t": (1, 1)}
        assert await store.reads.suites() == ["teamA"]
        assert {d.reason_class for d in await store.reads.deadletters()} == {"topic_mismatch"}


async def test_emit_takes_the_per_suite_topic_from_a_bound_config(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str, tmp_path: Path
) -> None:
    cfg = _bound(redis_server, mosquitto, prefix, "last-level")
    path = tmp_path / "c.toml"
    path.write_text(
        f'[mqtt]\nurl = "{mosquitto.url}"\ntopic = "{prefix}/trials/#"\nbind_suite = "last-level"\n'
    )
    async with running(cfg), store_for(cfg) as store:
        for suite in ("one", "two"):
            argv = ["emit", suite, "task", "pass", "-c", str(path)]
            assert await asyncio.to_thread(main, argv) == 0
        for suite in ("one", "two"):
            await wait_until(lambda s=suite: _trials(store, s, 1), 20)  # type: ignore[misc]
        assert await store.reads.deadletters() == []


def test_an_emitter_topic_with_a_wildcard_is_refused() -> None:
    with pytest.raises(ValueError, match="wildcard"):
        Emitter("mqtt://127.0.0.1:1", topic="reliability/trials/+")


def _scoped(redis: RedisServer, prefix: str, *, host: str = "0.0.0.0", **http: Any) -> Config:
    cfg = make_config(
        redis_url=redis.url,
        mqtt_url="mqtt://127.0.0.1:1",
        prefix=prefix,
        http=HttpConfig(
            host=host,
            port=free_port(),
            token=ALL,
            tokens=[
                HttpToken(token=TEAM_A, grant="teamA"),
                HttpToken(token=TEAM_B, grant="teamB"),
                HttpToken(token=READER, read=["*"]),
            ],
            **http,
        ),
    )
    return msgspec.structs.replace(
        cfg, mqtt=msgspec.structs.replace(cfg.mqtt, enabled=False), grants=TEAMS
    )


TEAMS = [
    GrantConfig(name="teamA", suites=["teamA-*"]),
    GrantConfig(name="teamB", suites=["teamB-*"]),
]


async def test_a_token_writes_only_its_suites_and_the_rest_is_neither_counted_nor_dead_lettered(
    redis_server: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    cfg = _scoped(redis_server, prefix)
    async with serving(cfg) as (daemon, base), store_for(cfg) as store:
        batch = [
            event("t", "1", suite="teamA-deploy"),
            event("t", "2", suite="teamB-deploy"),
            event("t", "3", suite="teamA-deploy", outcome="fail"),
            event("t", "4", suite="bad/suite"),
        ]
        status, body, _ = await post(base, batch, token=TEAM_A)
        assert status == 422
        assert [r["status"] for r in body["results"]] == [
            "accepted",
            "forbidden",
            "accepted",
            "rejected",
        ]
        assert body["results"][1]["reason"] == (
            "forbidden: this token may not write suite 'teamB-deploy'"
        )
        assert (body["accepted"], body["rejected"]) == (2, 2)
        assert list(body["suites"]) == ["teamA-deploy"]
        assert await store.reads.task_counts("teamA-deploy") == {"t": (2, 1)}
        assert await store.reads.task_counts("teamB-deploy") == {}
        assert "teamB-deploy" not in await store.reads.suites()
        # Only the invalid element is a dead letter; the forbidden one is answered.
        letters = await store.reads.deadletters()
        assert [d.reason_class for d in letters] == ["invalid_field"]
        assert _rejected(daemon, "http", "forbidden") == 1.0

        # Every element forbidden: 403, nothing counted.
        status, body, _ = await post(base, [event("t", "5", suite="teamB-x")], token=TEAM_A)
        assert status == 403
        assert [r["status"] for r in body["results"]] == ["forbidden"]
        # A read-only token writes nothing; a wrong or missing token is 401.
        status, _, _ = await post(base, [event("t", "6", suite="teamA-deploy")], token=READER)
        assert status == 403
        for token in (None, "wrong", TEAM_A + "x", TEAM_A[:-1]):
            status, _, headers = await post(
                base, [event("t", "7", suite="teamA-deploy")], token=token
            )
            assert status == 401
            assert "Bearer" in headers["WWW-Authenticate"]
        # The other team's token and the all-suites token write theirs.
        status, _, _ = await post(base, [event("t", "8", suite="teamB-deploy")], token=TEAM_B)
        assert status == 200
        status, _, _ = await post(
            base, [event("t", "9", suite="teamB-deploy"), event("u", "9", suite="other")], token=ALL
        )
        assert status == 200
        assert await store.reads.task_counts("teamB-deploy") == {"t": (2, 2)}
        assert await store.reads.task_counts("teamA-deploy") == {"t": (2, 1)}
        assert _rejected(daemon, "http", "forbidden") == 3.0
    logged = caplog.text
    assert "event=http_forbidden" in logged
    assert "token=http.tokens[0]" in logged
    for secret in SECRETS:
        assert secret not in logged


async def _get(base: str, path: str, token: str | None = None) -> int:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession() as http, http.get(base + path, headers=headers) as resp:
        await resp.read()
        return resp.status


async def test_beyond_loopback_a_suite_is_read_only_with_a_token_that_may_read_it(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _scoped(redis_server, prefix)
    async with serving(cfg) as (daemon, base):
        status, _, _ = await post(base, [event("t", "1", suite="teamA-deploy")], token=TEAM_A)
        assert status == 200

        async def snapshot() -> bool:
            return await _get(base, "/suites/teamA-deploy", TEAM_A) == 200

        await wait_until(snapshot, 20)
        assert await _get(base, "/suites/teamA-deploy") == 401
        assert await _get(base, "/suites/teamA-deploy", "wrong") == 401
        assert await _get(base, "/suites/teamA-deploy", TEAM_B) == 403
        assert await _get(base, "/suites/teamA-deploy", READER) == 200
        assert await _get(base, "/suites/teamA-deploy", ALL) == 200
        # Outside its scope a token learns nothing, not even whether the suite exists.
        assert await _get(base, "/suites/teamB-missing", TEAM_A) == 403
        assert await _get(base, "/suites/teamA-missing", TEAM_A) == 404
        # /metrics shows every suite: only a token that may read them all.
        assert await _get(base, "/metrics") == 401
        assert await _get(base, "/metrics", TEAM_A) == 403
        assert await _get(base, "/metrics", READER) == 200
        assert await _get(base, "/metrics", ALL) == 200
        # Probes carry no suite data and stay open.
        assert await _get(base, "/healthz") == 200
        assert daemon.is_paused() is False


async def test_a_comparison_needs_read_scope_on_both_sides_suites(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _scoped(redis_server, prefix)
    async with serving(cfg) as (_, base):
        for suite, token in (("teamA-deploy", TEAM_A), ("teamB-deploy", TEAM_B)):
            status, _, _ = await post(base, [event("t", "1", suite=suite)], token=token)
            assert status == 200
        both = "/v1/compare?baseline=teamA-deploy&candidate=teamB-deploy"
        assert await _get(base, both) == 401
        assert await _get(base, both, "wrong") == 401
        # Either side out of the token's scope: 403, before Redis is asked anything.
        assert await _get(base, both, TEAM_A) == 403
        assert await _get(base, both, TEAM_B) == 403
        assert (
            await _get(base, "/v1/compare?baseline=teamB-missing&candidate=teamA-x", TEAM_A) == 403
        )
        sliced = "/v1/compare?suite=teamB-deploy&baseline=model%3Da&candidate=model%3Db"
        assert await _get(base, sliced, TEAM_A) == 403
        # Within its scope the comparison is answered (a missing suite: 404).
        assert (
            await _get(base, "/v1/compare?baseline=teamA-deploy&candidate=teamA-x", TEAM_A) == 404
        )
        assert await _get(base, both, READER) == 200
        assert await _get(base, both, ALL) == 200


async def test_on_loopback_reads_stay_open_and_metrics_open_opens_metrics(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _scoped(redis_server, prefix, host="127.0.0.1")
    async with serving(cfg) as (_, base):
        status, _, _ = await post(base, [event("t", "1", suite="teamA-deploy")], token=TEAM_A)
        assert status == 200

        async def snapshot() -> bool:
            return await _get(base, "/suites/teamA-deploy") == 200

        await wait_until(snapshot, 20)
        assert await _get(base, "/suites/teamA-deploy", TEAM_B) == 200
        assert await _get(base, "/metrics") == 200
        # Writes still need the token on loopback.
        status, _, _ = await post(base, [event("t", "2", suite="teamA-deploy")])
        assert status == 401
    cfg = _scoped(redis_server, prefix + "-open", metrics_open=True)
    async with serving(cfg) as (_, base):
        assert await _get(base, "/metrics") == 200
        assert await _get(base, "/suites/teamA-deploy") == 401


def _otlp_request(suites: list[str]) -> bytes:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

    records = [
        LogRecord(
            event_name="gen_ai.evaluation.result",
            attributes=[
                KeyValue(key="suite", value=AnyValue(string_value=suite)),
                KeyValue(key="gen_ai.evaluation.name", value=AnyValue(string_value="Correct")),
                KeyValue(key="gen_ai.response.id", value=AnyValue(string_value=f"r{i}")),
                KeyValue(key="gen_ai.evaluation.score.label", value=AnyValue(string_value="pass")),
            ],
        )
        for i, suite in enumerate(suites)
    ]
    request = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=records)])]
    )
    return request.SerializeToString()


async def _post_logs(base: str, body: bytes, token: str | None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/x-protobuf"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base}/v1/logs", data=body, headers=headers) as resp,
    ):
        return resp.status, await resp.read()


async def test_otlp_logs_obey_the_same_write_scopes(redis_server: RedisServer, prefix: str) -> None:
    pytest.importorskip("opentelemetry.proto")
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

    otlp = OtlpConfig(enabled=True, suite=["attribute:suite"])
    cfg = _scoped(redis_server, prefix, otlp=otlp)
    async with serving(cfg) as (daemon, base), store_for(cfg) as store:
        body = _otlp_request(["teamA-evals", "teamB-evals", "teamA-evals"])
        status, raw = await _post_logs(base, body, TEAM_A)
        assert status == 200
        answer = ExportLogsServiceResponse.FromString(raw)
        assert answer.partial_success.rejected_log_records == 1
        assert "may not write suite 'teamB-evals'" in answer.partial_success.error_message
        assert await store.reads.task_counts("teamA-evals") == {"Correct": (2, 2)}
        assert await store.reads.task_counts("teamB-evals") == {}
        assert await store.reads.deadletters() == []
        status, _ = await _post_logs(base, _otlp_request(["teamB-evals"]), TEAM_A)
        assert status == 403
        status, _ = await _post_logs(base, _otlp_request(["teamB-evals"]), None)
        assert status == 401
        status, _ = await _post_logs(base, _otlp_request(["teamB-evals"]), TEAM_B)
        assert status == 200
        assert await store.reads.task_counts("teamB-evals") == {"Correct": (1, 1)}
        assert _rejected(daemon, "http", "forbidden") == 2.0
        await asyncio.sleep(0)


# Look-alike names: visible letters of other scripts are distinct suites; what
# hides a difference (invisible, bidirectional, edge white space, a non-NFC
# spelling) is refused with its reason.
DISTINCT = {
    "deploy": "Latin",
    "d\u0435ploy": "Cyrillic ie U+0435",
    "\uff44\uff45\uff50\uff4c\uff4f\uff59": "fullwidth Latin (NFC keeps it)",
    "caf\u00e9": "NFC e-acute",
}
REFUSED = {
    "de\u200bploy": "an invisible format character U+200B",
    "deploy\u202e": "an invisible format character U+202E",
    "\u202edeploy": "an invisible format character U+202E",
    "deploy ": "begins or ends with white space",
    "deploy\u00a0": "begins or ends with white space",
    "cafe\u0301": "not in Unicode normalization form NFC",
}


async def test_look_alike_suites_over_mqtt_are_distinct_or_refused_with_a_reason(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix)
    names = [*DISTINCT, *REFUSED]
    batch = _raw(*(event("t", str(i), suite=name) for i, name in enumerate(names)))
    async with running(cfg), store_for(cfg) as store:
        await publish(mosquitto.port, f"{prefix}/trials/x", [batch], client_id=f"{prefix}-p")

        async def all_there() -> bool:
            # The suite cap admits a suite into the set just before its events apply.
            counted = [await store.reads.task_counts(name) for name in DISTINCT]
            return all(counted)

        await wait_until(all_there, 20)
        assert sorted(await store.reads.suites()) == sorted(DISTINCT)
        for name, what in DISTINCT.items():
            assert await store.reads.task_counts(name) == {"t": (1, 1)}, what
        letters = await store.reads.deadletters()
        for i, (name, why) in enumerate(REFUSED.items(), start=len(DISTINCT)):
            mine = [d for d in letters if d.reason.startswith(f"element {i}: ")]
            assert mine, name
            assert all(why in d.reason and d.reason_class == "invalid_field" for d in mine)


async def test_look_alike_suites_over_http_are_answered_per_element(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = make_config(
        redis_url=redis_server.url,
        mqtt_url="mqtt://127.0.0.1:1",
        prefix=prefix,
        http=HttpConfig(port=free_port()),
    )
    cfg = msgspec.structs.replace(cfg, mqtt=msgspec.structs.replace(cfg.mqtt, enabled=False))
    names = [*DISTINCT, *REFUSED]
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, body, _ = await post(
            base, [event("t", str(i), suite=name) for i, name in enumerate(names)]
        )
        assert status == 422
        results = body["results"]
        assert [r["status"] for r in results] == ["accepted"] * len(DISTINCT) + ["rejected"] * len(
            REFUSED
        )
        for result, why in zip(results[len(DISTINCT) :], REFUSED.values(), strict=True):
            assert why in result["reason"]
        assert sorted(body["suites"]) == sorted(DISTINCT)
        assert sorted(await store.reads.suites()) == sorted(DISTINCT)
