"""The HTTP port against a real redis-server: POST /v1/trials, probes, snapshots, /metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from reliabilityd import config as config_mod
from reliabilityd.config import Config, HttpConfig, MqttConfig
from reliabilityd.errors import ConfigError
from tests.support.daemon import store_for
from tests.support.helpers import publish, toml_of, wait_until
from tests.support.http import event, get, http_config, post, scrape, serving
from tests.support.servers import Mosquitto, RedisServer, free_port


async def test_post_answers_200_only_after_the_commit(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix)
    batch = [
        event("t1", "a"),
        event("t1", "b", "fail"),
        event("t2", "a"),
        event("t2", "e", "error"),
    ]
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, body, _ = await post(base, batch)
        assert status == 200
        assert [r["status"] for r in body["results"]] == ["accepted"] * 4
        assert body["suites"]["web"] == {"counted": 3, "duplicates": 0, "errors": 1, "skips": 0}
        # No waiting: the 200 means Redis has it.
        assert await store.reads.task_counts("web") == {"t1": (2, 1), "t2": (1, 1)}
        # The same trials again: idempotent, counted as duplicates.
        status, body, _ = await post(base, batch)
        assert status == 200
        assert body["suites"]["web"]["duplicates"] == 4
        assert await store.reads.task_counts("web") == {"t1": (2, 1), "t2": (1, 1)}


async def test_rejected_elements_get_a_reason_each_and_the_good_ones_count(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix)
    batch: list[Any] = [
        event("t1", "a"),
        event("t1", "b", suite="bad/suite"),
        {"suite": "web", "task": "t1", "trial": "c"},
        event("t1", "d", "fail"),
    ]
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, body, _ = await post(base, batch)
        assert status == 422
        assert body["accepted"] == 2
        assert body["rejected"] == 2
        results = body["results"]
        assert [r["status"] for r in results] == ["accepted", "rejected", "rejected", "accepted"]
        assert "suite contains one of" in results[1]["reason"]
        assert results[1]["reason"].startswith("element 1:")
        assert "outcome" in results[2]["reason"]
        assert await store.reads.task_counts("web") == {"t1": (2, 1)}
        letters = await store.reads.deadletters()
        assert [d.source for d in letters] == ["http:127.0.0.1", "http:127.0.0.1"]


async def test_a_body_that_does_not_decode_is_400_and_counts_nothing(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix)
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, body, _ = await post(base, None, raw=b'{"suite": "web", "task"')
        assert status == 400
        assert "not" in body["error"]
        status, body, _ = await post(base, None, raw=b"")
        assert status == 400
        assert body["error"] == "empty payload"
        # Well-formed, but not a trial event: a rejected element, not a bad body.
        status, body, _ = await post(base, {"suite": "web", "task": "t", "trial": "1"})
        assert status == 422
        (result,) = body["results"]
        assert result["status"] == "rejected"
        assert "outcome" in result["reason"]
        assert await store.reads.suites() == []
        assert await store.reads.deadletter_count() == 3


async def test_a_body_past_max_payload_is_413(redis_server: RedisServer, prefix: str) -> None:
    cfg = http_config(redis_server, prefix, max_payload=1000)
    big = [event(f"task {i}", str(i)) for i in range(40)]
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, body, _ = await post(base, big)
        assert status == 413
        assert "exceeds 1000" in body["error"]
        assert await store.reads.suites() == []
        status, _, _ = await post(base, big[:5])
        assert status == 200


async def test_a_token_is_required_when_set(redis_server: RedisServer, prefix: str) -> None:
    cfg = http_config(redis_server, prefix, token="s3cret")
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, _, headers = await post(base, [event("t", "1")])
        assert status == 401
        assert headers["WWW-Authenticate"].startswith("Bearer")
        status, _, _ = await post(base, [event("t", "1")], token="wrong")
        assert status == 401
        assert await store.reads.suites() == []
        status, _, _ = await post(base, [event("t", "1")], token="s3cret")
        assert status == 200
        # Reads stay open: Prometheus and probes carry no token.
        assert (await get(base, "/healthz"))[0] == 200
        assert (await get(base, "/metrics"))[0] == 200


def test_listening_beyond_loopback_needs_a_token(tmp_path: Path) -> None:
    cfg = Config(http=HttpConfig(host="0.0.0.0", port=9780))
    path = tmp_path / "c.toml"
    path.write_bytes(toml_of(cfg))
    with pytest.raises(ConfigError) as err:
        config_mod.load(path, environ={})
    assert err.value.field == "$.http.token"
    loaded = config_mod.load(path, environ={"RELIABILITYD_HTTP_TOKEN": "t0ken"})
    assert loaded.http.token == "t0ken"
    # Loopback and off need none.
    for http in (HttpConfig(host="127.0.0.1", port=9780), HttpConfig(host="0.0.0.0", port=0)):
        path.write_bytes(toml_of(Config(http=http)))
        assert config_mod.load(path, environ={}).http == http


async def test_redis_down_is_503_with_retry_after_and_nothing_is_lost(
    private_redis: RedisServer, prefix: str
) -> None:
    cfg = http_config(private_redis, prefix)
    cfg = msgspec.structs.replace(cfg, redis=msgspec.structs.replace(cfg.redis, timeout=1.0))
    async with serving(cfg) as (_, base):
        assert (await post(base, [event("t", "1")]))[0] == 200
        private_redis.kill()
        status, body, headers = await post(base, [event("t", "2", "fail")])
        assert status == 503
        assert int(headers["Retry-After"]) > 0
        # Refused up front when the daemon already knows Redis is down, or
        # after the commit failed: 503 with a reason either way.
        assert body["error"].startswith(("not committed", "ingest is paused"))
        # Liveness is the process; readiness is Redis.
        assert (await get(base, "/healthz"))[0] == 200
        status, unready = await get(base, "/readyz")
        assert status == 503
        assert "redis" in msgspec.json.decode(unready)["problems"]
        private_redis.start()

        # A client retries on 503 after Retry-After (the first call on a pooled
        # connection that died with the old server may still fail once).
        async def accepted() -> bool:
            return (await post(base, [event("t", "2", "fail")]))[0] == 200

        await wait_until(accepted, within=20, interval=0.2)
        # Sent again (an answer the client never saw): counted once all the same.
        status, body, _ = await post(base, [event("t", "2", "fail")])
        assert status == 200
        assert body["suites"]["web"]["duplicates"] == 1

        async def ready() -> bool:
            return (await get(base, "/readyz"))[0] == 200

        await wait_until(ready, within=20, interval=0.2)
        async with store_for(cfg) as store:
            assert await store.reads.task_counts("web") == {"t": (2, 1)}


async def test_readyz_names_an_unreachable_broker(
    redis_server: RedisServer, private_mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix, broker=private_mosquitto)
    async with serving(cfg) as (_, base):
        assert (await get(base, "/readyz"))[0] == 200
        private_mosquitto.stop()
        status, body = await get(base, "/readyz")
        assert status == 503
        assert list(msgspec.json.decode(body)["problems"]) == ["mqtt"]
        assert (await get(base, "/healthz"))[0] == 200
        private_mosquitto.start()


async def test_suite_url_answers_the_newest_snapshot(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix)
    batch = [event(f"t{i}", str(j), "pass" if j else "fail") for i in range(4) for j in range(3)]
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        assert (await post(base, batch))[0] == 200

        async def answered_as_stored() -> bool:
            # The stored snapshot read on both sides of the GET: equal, the answer must be it.
            before = await store.snapshots.snapshot_json("web")
            status, raw = await get(base, "/suites/web?rule=whatever")
            assert status in (200, 404)
            if before is None or before != await store.snapshots.snapshot_json("web"):
                return False
            assert status == 200
            assert raw == before.rstrip()[:-1] + b',"slice_snapshots":[],"alerts":[]}'
            return bool(msgspec.json.decode(raw)["tasks"] == 4)

        await wait_until(answered_as_stored)
        doc = msgspec.json.decode((await get(base, "/suites/web"))[1])
        assert doc["suite"] == "web"
        status, _ = await get(base, "/suites/nope")
        assert status == 404


async def test_replicas_export_the_same_suite_gauges_and_their_own_counters(
    redis_server: RedisServer, prefix: str
) -> None:
    a = http_config(redis_server, prefix)
    b = msgspec.structs.replace(
        a,
        http=HttpConfig(port=free_port()),
        mqtt=MqttConfig(enabled=False, client_id=f"{prefix}-b"),
        daemon=msgspec.structs.replace(a.daemon, instance=f"{prefix}-b"),
    )
    # 4 tasks x 3 trials: pass^3 is 1 on two tasks, 0 on the others.
    batch = [
        event(f"t{i}", str(j), "pass" if i < 2 or j == 0 else "fail")
        for i in range(4)
        for j in range(3)
    ]
    async with serving(a) as (_, base_a), serving(b) as (_, base_b):
        assert (await post(base_a, [*batch, event("t0", "x", "skip")]))[0] == 200
        assert (await post(base_a, batch[:2]))[0] == 200

        exported = [
            (name, (("k", "3"), ("suite", "web")))
            for name in (
                "reliabilityd_pass_hat_k_ratio",
                "reliabilityd_pass_hat_k_ci_lower_ratio",
                "reliabilityd_pass_hat_k_ci_upper_ratio",
                "reliabilityd_pass_at_k_ratio",
            )
        ]
        seen_a, seen_b = {}, {}

        async def both_export_the_interval() -> bool:
            # Each replica's gauges follow the snapshot it last read: wait until both
            # carry every series asserted below.
            nonlocal seen_a, seen_b
            seen_a, seen_b = await scrape(base_a), await scrape(base_b)
            return all(key in seen for seen in (seen_a, seen_b) for key in exported)

        await wait_until(both_export_the_interval)
    key = ("reliabilityd_pass_hat_k_ratio", (("k", "3"), ("suite", "web")))
    assert seen_a[key] == seen_b[key] == 0.5
    for name in (
        "reliabilityd_pass_hat_k_ci_lower_ratio",
        "reliabilityd_pass_hat_k_ci_upper_ratio",
        "reliabilityd_pass_at_k_ratio",
    ):
        k3 = (name, (("k", "3"), ("suite", "web")))
        assert seen_a[k3] == seen_b[k3]
    low = seen_a[("reliabilityd_pass_hat_k_ci_lower_ratio", (("k", "3"), ("suite", "web")))]
    assert 0 <= low <= 0.5
    assert seen_a[("reliabilityd_tasks", (("suite", "web"),))] == 4
    # Counters are each process's own work: b committed nothing.
    passed = ("reliabilityd_trials_total", (("outcome", "pass"), ("suite", "web")))
    failed = ("reliabilityd_trials_total", (("outcome", "fail"), ("suite", "web")))
    assert (seen_a[passed], seen_a[failed]) == (8, 4)
    assert passed not in seen_b
    assert seen_a[("reliabilityd_trials_total", (("outcome", "skip"), ("suite", "web")))] == 1
    assert seen_a[("reliabilityd_duplicates_total", (("suite", "web"),))] == 2
    assert seen_a[("reliabilityd_commit_duration_seconds_count", ())] == 2
    assert seen_a[("reliabilityd_http_ingest_requests_total", (("code", "200"),))] == 2
    assert seen_a[("reliabilityd_ingest_paused", ())] == 0
    assert seen_a[("reliabilityd_redis_up", ())] == 1


async def test_ingest_paused_while_redis_refuses_mqtt_commits(
    private_redis: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = http_config(private_redis, prefix, broker=mosquitto)
    cfg = msgspec.structs.replace(cfg, redis=msgspec.structs.replace(cfg.redis, timeout=1.0))
    async with serving(cfg) as (daemon, base):
        assert (await scrape(base))[("reliabilityd_ingest_paused", ())] == 0
        private_redis.kill()
        message = msgspec.json.encode(event("t", "1"))
        await publish(mosquitto.port, f"{prefix}/trials/x", [message], client_id=f"{prefix}-p")

        async def paused() -> bool:
            return daemon.is_paused()

        await wait_until(paused)
        seen = await scrape(base)
        assert seen[("reliabilityd_ingest_paused", ())] == 1
        assert seen[("reliabilityd_redis_up", ())] == 0
        status, body = await get(base, "/healthz")
        assert status == 200
        assert msgspec.json.decode(body)["paused"] is True
        # While the MQTT consumer holds its batch, HTTP is told to come back later.
        status, _, headers = await post(base, [event("t", "2")])
        assert status == 503
        assert "Retry-After" in headers
        private_redis.start()

        async def resumed() -> bool:
            return not daemon.is_paused()

        await wait_until(resumed)
        seen = await scrape(base)
        assert seen[("reliabilityd_ingest_paused", ())] == 0
        assert seen[("reliabilityd_trials_total", (("outcome", "pass"), ("suite", "web")))] == 1
        assert seen[("reliabilityd_last_commit_age_seconds", ())] < 60
