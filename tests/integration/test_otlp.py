"""POST /v1/logs against a real daemon and redis-server, with the OpenTelemetry Python SDK's
own OTLP/HTTP log exporter as the client."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import math
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from reliabilityd import config as config_mod
from reliabilityd.config import Config, HttpConfig, IngestConfig, OtlpConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.errors import ConfigError
from tests.support.daemon import make_config, running, store_for
from tests.support.helpers import stored_snapshot, wait_until
from tests.support.servers import RedisServer, free_port

EVENT = "gen_ai.evaluation.result"
SERVICE = "support-agent"
MAPPING = OtlpConfig(enabled=True, pass_score={"Relevance": 0.7})


def otlp_config(
    redis: RedisServer, prefix: str, *, token: str = "", ks: list[int] | None = None
) -> Config:
    cfg = make_config(
        redis_url=redis.url,
        mqtt_url="mqtt://127.0.0.1:1",
        prefix=prefix,
        ks=ks,
        http=HttpConfig(port=free_port(), token=token, otlp=MAPPING),
        ingest=IngestConfig(max_payload=64 * 1024),
    )
    return msgspec.structs.replace(cfg, mqtt=msgspec.structs.replace(cfg.mqtt, enabled=False))


@contextlib.asynccontextmanager
async def serving(cfg: Config) -> AsyncIterator[tuple[Daemon, str]]:
    async with running(cfg) as daemon:
        await asyncio.wait_for(daemon.http_listening.wait(), 10)
        yield daemon, f"http://127.0.0.1:{cfg.http.port}"


def evaluation(name: str, response: str | None, **attrs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"gen_ai.evaluation.name": name, **attrs}
    if response is not None:
        out["gen_ai.response.id"] = response
    return out


LABEL = "gen_ai.evaluation.score.label"
SCORE = "gen_ai.evaluation.score.value"
# Six records that map, three that cannot.
MAPPABLE = [
    evaluation("Correctness", "resp-1", **{LABEL: "pass"}),
    evaluation("Correctness", "resp-2", **{LABEL: "FAIL"}),
    evaluation("Correctness", "resp-3", **{LABEL: "correct", SCORE: 0.1}),  # the label decides
    evaluation("Relevance", "resp-1", **{SCORE: 0.9}),
    evaluation("Relevance", "resp-2", **{SCORE: 0.4}),
    evaluation("Relevance", "resp-3", **{"error.type": "judge_timeout"}),
]
UNMAPPABLE = [
    (evaluation("Correctness", "resp-4", **{LABEL: "meh"}), "label 'meh' is in none"),
    (evaluation("Correctness", None, **{LABEL: "pass"}), "no trial"),
    (evaluation("Fluency", "resp-1", **{SCORE: 4.0}), "no pass_score for evaluation 'Fluency'"),
]
# Counted as the daemon should: Correctness 3 trials (2 passes), Relevance 2 (1 pass) + 1 error.
EXPECTED = {"Correctness": (3, 2), "Relevance": (2, 1)}


def sdk_export(
    endpoint: str,
    records: Sequence[dict[str, Any]],
    *,
    gzip_body: bool = False,
    token: str = "",
    timeout: float = 30.0,
    plain_logs: int = 0,
) -> None:
    """Emit the records through the SDK's LoggerProvider; its OTLP/HTTP exporter sends one batch."""
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    exporter = OTLPLogExporter(
        endpoint=f"{endpoint}/v1/logs",
        compression=Compression.Gzip if gzip_body else Compression.NoCompression,
        headers={"Authorization": f"Bearer {token}"} if token else None,
        timeout=timeout,
    )
    provider = LoggerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_log_record_processor(
        BatchLogRecordProcessor(exporter, schedule_delay_millis=60_000, max_export_batch_size=512)
    )
    logger = provider.get_logger("agent-evals")
    for attributes in records:
        logger.emit(event_name=EVENT, attributes=attributes)
    for i in range(plain_logs):  # an application's own logs on the same pipeline
        logger.emit(body=f"request {i} served", attributes={"http.route": "/chat"})
    provider.force_flush(int(timeout * 1000) + 5000)
    provider.shutdown()


def sdk_request(records: Sequence[dict[str, Any]], plain_logs: int = 0) -> Any:
    """The ExportLogsServiceRequest the SDK's exporter would send (its own encoder)."""
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    memory = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    provider = LoggerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    logger = provider.get_logger("agent-evals")
    for attributes in records:
        logger.emit(event_name=EVENT, attributes=attributes)
    for i in range(plain_logs):
        logger.emit(body=f"request {i} served")
    provider.shutdown()
    return encode_logs(memory.get_finished_logs())


async def http_ingest(base: str) -> dict[str, float]:
    """reliabilityd_http_ingest_requests_total by status code, from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    async with aiohttp.ClientSession() as http, http.get(f"{base}/metrics") as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "reliabilityd_http_ingest_requests_total":
                out[s.labels["code"]] = s.value
    return out


async def post(
    base: str, data: bytes, content_type: str, **headers: str
) -> tuple[int, bytes, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{base}/v1/logs", data=data, headers={"Content-Type": content_type, **headers}
        ) as resp,
    ):
        return resp.status, await resp.read(), dict(resp.headers)


async def test_the_sdk_exporter_delivers_a_mixed_batch(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = otlp_config(redis_server, prefix)
    records = MAPPABLE + [r for r, _ in UNMAPPABLE]
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        await asyncio.to_thread(sdk_export, base, records, gzip_body=True, plain_logs=2)
        assert await store.reads.task_counts(SERVICE) == EXPECTED
        state = await store.reads.read_state(SERVICE)
        assert (state.counters.trials, state.counters.errors) == (5, 1)
        letters = await store.reads.deadletters()
        assert [d.source for d in letters] == ["otlp"] * 3
        for letter, (_, reason) in zip(letters, UNMAPPABLE, strict=True):
            assert reason in letter.reason
            assert json.loads(letter.payload)["eventName"] == EVENT
        assert (await http_ingest(base)).get("200") == 1
        # Sent again (an exporter retrying an answer it never saw): nothing counts twice.
        await asyncio.to_thread(sdk_export, base, MAPPABLE)
        assert await store.reads.task_counts(SERVICE) == EXPECTED
        assert (await store.reads.read_state(SERVICE)).counters.duplicates == 6


async def test_the_suite_numbers_are_those_of_what_was_sent(
    redis_server: RedisServer, prefix: str, rng: np.random.Generator
) -> None:
    """Three evaluators judge 20 responses each: pass^k and pass@k of exactly those verdicts."""
    sent: dict[str, list[bool]] = {}
    records = []
    for name, skill in (("Correctness", 0.8), ("Relevance", 0.6), ("Safety", 0.95)):
        for i in range(20):
            passed = bool(rng.random() < skill)
            sent.setdefault(name, []).append(passed)
            label = "pass" if passed else "fail"
            records.append(evaluation(name, f"chatcmpl-{i}", **{LABEL: label}))
    cfg = otlp_config(redis_server, prefix, ks=[1, 2, 3])
    async with serving(cfg) as (daemon, base):
        await asyncio.to_thread(sdk_export, base, records)

        async def snapshotted() -> bool:
            snap = await stored_snapshot(daemon.store, SERVICE)
            return snap is not None and snap.trials == 60

        await wait_until(snapshotted, 20)
        snap = await stored_snapshot(daemon.store, SERVICE)
        assert snap is not None
    for k in (1, 2, 3):
        hat = np.mean([math.comb(sum(v), k) / math.comb(len(v), k) for v in sent.values()])
        at = np.mean(
            [1 - math.comb(len(v) - sum(v), k) / math.comb(len(v), k) for v in sent.values()]
        )
        ours_hat = snap.estimate("pass^k", k).value
        ours_at = snap.estimate("pass@k", k).value
        assert ours_hat is not None
        assert ours_at is not None
        print(f"k={k}: sent pass^k {hat:.6f} pass@k {at:.6f}; daemon {ours_hat:.6f} {ours_at:.6f}")
        assert ours_hat == pytest.approx(hat, rel=1e-12)
        assert ours_at == pytest.approx(at, rel=1e-12)


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
async def test_partial_success_counts_the_unmappable_records(
    redis_server: RedisServer, prefix: str, encoding: str
) -> None:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

    cfg = otlp_config(redis_server, prefix)
    request = sdk_request(MAPPABLE + [r for r, _ in UNMAPPABLE], plain_logs=1)
    if encoding == "protobuf":
        data, kind = request.SerializeToString(), "application/x-protobuf"
    else:
        data, kind = json_format.MessageToJson(request).encode(), "application/json"
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        status, raw, headers = await post(
            base, gzip.compress(data), kind, **{"Content-Encoding": "gzip"}
        )
        assert status == 200
        assert headers["Content-Type"].startswith(kind)
        response = ExportLogsServiceResponse()
        if encoding == "protobuf":
            response.ParseFromString(raw)
        else:
            json_format.Parse(raw, response)
        assert response.partial_success.rejected_log_records == 3
        message = response.partial_success.error_message
        assert message.startswith("resource_logs[0].scope_logs[0].log_records[6]: no verdict")
        assert await store.reads.task_counts(SERVICE) == EXPECTED
        # All mappable: no partial_success at all.
        ok, raw, _ = await post(
            base, sdk_request(MAPPABLE[:1]).SerializeToString(), "application/x-protobuf"
        )
        assert ok == 200
        assert not ExportLogsServiceResponse.FromString(raw).HasField("partial_success")


async def test_the_sdk_retries_after_a_503_and_the_batch_counts_once(
    private_redis: RedisServer, prefix: str
) -> None:
    cfg = otlp_config(private_redis, prefix)
    async with serving(cfg) as (_, base):
        private_redis.kill()
        # The exporter honours Retry-After (2 s) and keeps trying within its 30 s.
        export = asyncio.create_task(asyncio.to_thread(sdk_export, base, MAPPABLE, timeout=30.0))

        async def refused() -> bool:
            return (await http_ingest(base)).get("503", 0) >= 1

        await wait_until(refused, within=20, interval=0.1)
        assert not export.done()
        private_redis.start()
        await asyncio.wait_for(export, 40)
        codes = await http_ingest(base)
        assert codes.get("503", 0) >= 1
        assert codes.get("200") == 1
        async with store_for(cfg) as store:
            assert await store.reads.task_counts(SERVICE) == EXPECTED


async def test_limits_auth_and_bad_bodies(redis_server: RedisServer, prefix: str) -> None:
    cfg = otlp_config(redis_server, prefix, token="s3cret")
    good = sdk_request(MAPPABLE).SerializeToString()
    auth = {"Authorization": "Bearer s3cret"}
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        assert (await post(base, good, "application/x-protobuf"))[0] == 401
        assert (await post(base, good, "text/plain", **auth))[0] == 415
        assert (await post(base, b"\xff\x00garbage", "application/x-protobuf", **auth))[0] == 400
        assert (await post(base, b"[1, 2]", "application/json", **auth))[0] == 400
        # 2 KiB of gzip that inflates past ingest.max_payload (64 KiB): refused after inflating.
        bomb = gzip.compress(b"\x00" * (4 << 20))
        assert len(bomb) < 8 * 1024
        status, body, _ = await post(
            base, bomb, "application/x-protobuf", **auth, **{"Content-Encoding": "gzip"}
        )
        assert status == 413, body
        assert await store.reads.task_counts(SERVICE) == {}
        # The SDK with the token: accepted.
        await asyncio.to_thread(sdk_export, base, MAPPABLE, token="s3cret")
        assert await store.reads.task_counts(SERVICE) == EXPECTED


def test_a_label_in_two_lists_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[http.otlp]\nenabled = true\nfail_labels = ["no", "PASS"]\n')
    with pytest.raises(ConfigError, match=r"\$\.http\.otlp\.fail_labels.*'PASS' is also in pass"):
        config_mod.load(path)
    path.write_text('[http.otlp]\nsuite = ["service.name"]\n')
    with pytest.raises(ConfigError, match=r"http\.otlp\.suite"):
        config_mod.load(path)


def test_without_the_otlp_extra_the_config_says_what_to_install(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[http.otlp]\nenabled = true\n")
    code = (
        "import sys\nsys.modules['opentelemetry.proto'] = None\n"
        "from reliabilityd import config\n"
        f"config.load({str(path)!r})\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "pip install 'reliabilityd[otlp]'" in proc.stderr


# --- what faces the network never raises but OtlpError ------------------------

_attr_values = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=True)
    | st.text(max_size=30)
    | st.binary(max_size=10)
)
_keys = st.sampled_from(
    ["gen_ai.evaluation.name", "gen_ai.response.id", LABEL, SCORE, "error.type", "x"]
)


# What decode_request says of a body that is not OTLP logs, by encoding.
NOT_LOGS = {
    "application/x-protobuf": ("not an OTLP ExportLogsServiceRequest: ",),
    "application/json": ("not OTLP/JSON logs: ", "OTLP/JSON logs are an object with resourceLogs"),
}


@given(st.binary(max_size=300), st.sampled_from(["application/x-protobuf", "application/json"]))
# Each way a body is refused, and a body that decodes, in every run.
@example(b"\xff", "application/x-protobuf")
@example(b"{", "application/json")
@example(b"[]", "application/json")
@example(b"", "application/x-protobuf")
@example(b'{"resourceLogs": []}', "application/json")
def test_any_body_decodes_or_is_refused_with_a_reason(data: bytes, kind: str) -> None:
    from reliabilityd.events import validate
    from reliabilityd.integrations import otlp

    try:
        request = otlp.decode_request(data, kind)
    except otlp.OtlpError as exc:
        refused: otlp.OtlpError | None = exc
    else:
        refused = None
    if refused is not None:
        # A 400 that says which format the body is not, and why.
        assert refused.status == 400
        assert str(refused).startswith(NOT_LOGS[kind]), str(refused)
        return
    mapped = otlp.map_request(request, MAPPING)
    assert all(validate(e) is None for e in mapped.events)
    assert all(r.reason for r in mapped.rejected)


@given(st.lists(st.dictionaries(_keys, _attr_values, max_size=6), max_size=8))
def test_any_attributes_map_to_a_valid_trial_or_a_reason(records: list[dict[str, Any]]) -> None:
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue

    from reliabilityd.events import validate
    from reliabilityd.integrations import otlp

    request = ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add()
    resource_logs.resource.attributes.add(key="service.name").value.string_value = "svc"
    scope = resource_logs.scope_logs.add()
    for attrs in records:
        record = scope.log_records.add(event_name=EVENT)
        for key, value in attrs.items():
            field = {
                bool: "bool_value",
                int: "int_value",
                float: "double_value",
                str: "string_value",
                bytes: "bytes_value",
            }
            kv = record.attributes.add(key=key)
            if value is not None:
                kv.value.CopyFrom(AnyValue(**{field[type(value)]: value}))
    mapped = otlp.map_request(request, MAPPING)
    assert len(mapped.events) + len(mapped.rejected) == len(records)
    assert all(validate(e) is None for e in mapped.events)
    assert all(e.suite == "svc" for e in mapped.events)
    otlp.encode_response(mapped, otlp.PROTOBUF)
