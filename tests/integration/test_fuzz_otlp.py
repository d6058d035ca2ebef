"""A fuzzer at POST /v1/logs, against a real daemon and redis-server: OTLP/JSON documents and
protobuf bodies of every shape (well-formed, wrong in any field at any depth, cut, spliced,
nested too deep, bytes of any kind), plain and gzip, under each content type. Every request
gets a well-formed answer, never a 500 or a traceback in the log, and the daemon keeps serving.

Derandomised (the suite's "ci" Hypothesis profile, whatever the environment), so a red run
replays.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import time
from typing import Any

import aiohttp
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reliabilityd.config import Config, HttpConfig, IngestConfig, OtlpConfig
from tests.support.daemon import make_config, store_for
from tests.support.http import serving
from tests.support.otlp import JSON, PROTOBUF, json_bodies, protobuf_bodies, records_request
from tests.support.servers import RedisServer, free_port

# Every answer POST /v1/logs may give; 503 only with Retry-After.
WELL_FORMED = {200, 400, 403, 413, 415, 503}


def _config(redis: RedisServer, prefix: str) -> Config:
    cfg = make_config(
        redis_url=redis.url,
        mqtt_url="mqtt://127.0.0.1:1",
        prefix=prefix,
        http=HttpConfig(port=free_port(), otlp=OtlpConfig(enabled=True), max_inflight=64),
        ingest=IngestConfig(max_payload=64 * 1024),
    )
    return msgspec.structs.replace(cfg, mqtt=msgspec.structs.replace(cfg.mqtt, enabled=False))


bodies = st.one_of(
    st.tuples(json_bodies, st.sampled_from([JSON, "application/json; charset=utf-8"])),
    st.tuples(protobuf_bodies, st.just(PROTOBUF)),
    # The other encoding's body under each content type, and types OTLP/HTTP has not.
    st.tuples(json_bodies, st.just(PROTOBUF)),
    st.tuples(protobuf_bodies, st.sampled_from([JSON, "text/plain", ""])),
)


async def test_fuzzed_otlp_requests_get_a_well_formed_answer_and_the_daemon_keeps_serving(
    redis_server: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    cfg = _config(redis_server, prefix)
    seen: dict[int, int] = {}
    loop = asyncio.get_running_loop()
    async with serving(cfg) as (_, base), aiohttp.ClientSession() as http:

        async def send(body: bytes, kind: str, zipped: bool) -> tuple[int, dict[str, str], bytes]:
            headers = {"Content-Type": kind} if kind else {}
            if zipped:
                body = gzip.compress(body)
                headers["Content-Encoding"] = "gzip"
            async with http.post(f"{base}/v1/logs", data=body, headers=headers) as resp:
                return resp.status, dict(resp.headers), await resp.read()

        @settings(
            # The suite's profile (derandomised, or make fuzz's random one), with three
            # times its examples: a few ms each.
            max_examples=3 * settings().max_examples,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(sent=bodies, zipped=st.booleans())
        def check(sent: tuple[bytes, str], zipped: bool) -> None:
            body, kind = sent
            status, headers, raw = asyncio.run_coroutine_threadsafe(
                send(body, kind, zipped), loop
            ).result(30)
            seen[status] = seen.get(status, 0) + 1
            assert status in WELL_FORMED, (status, body[:200], raw[:200])
            if status == 503:
                assert headers["Retry-After"] == "2"
            if status != 200:  # an error is a JSON object that says what is wrong
                answer: Any = msgspec.json.decode(raw)
                assert isinstance(answer["error"], str)
                assert answer["error"]

        started = time.monotonic()
        await asyncio.to_thread(check)
        print(f"otlp fuzz: statuses {seen} in {time.monotonic() - started:.1f} s")
        # Still serving: a probe and a good request, its trial counted.
        async with http.get(f"{base}/healthz") as resp:
            assert resp.status == 200
        request = records_request(
            [
                {
                    "gen_ai.evaluation.name": "after-fuzz",
                    "gen_ai.response.id": "r1",
                    "gen_ai.evaluation.score.label": "pass",
                }
            ],
            service="fuzz-after",
        )
        status, _, _ = await send(bytes(request.SerializeToString()), PROTOBUF, False)
        assert status == 200
        async with store_for(cfg) as store:
            assert await store.reads.task_counts("fuzz-after") == {"after-fuzz": (1, 1)}
    assert [r.getMessage() for r in caplog.records if r.exc_info is not None] == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
