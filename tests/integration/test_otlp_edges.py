"""POST /v1/logs at its edges, against a real daemon and redis-server: dead letters bounded per
request as for an MQTT payload, malformed bodies answered 400 with the path of the bad field,
and a large body decoded off the event loop."""

from __future__ import annotations

import json
import logging
from typing import Any

import msgspec
import pytest

from reliabilityd.config import StoreConfig
from reliabilityd.events import MAX_LETTERS
from tests.support.daemon import store_for
from tests.support.http import post, serving
from tests.support.otlp import JSON, PROTOBUF, otlp_config, post_logs, records_request
from tests.support.servers import RedisServer


def _unmappable(count: int, start: int = 0) -> list[dict[str, Any]]:
    """Evaluation records without a verdict: no label, no score, no error."""
    return [
        {"gen_ai.evaluation.name": "Correctness", "gen_ai.response.id": f"r{i}"}
        for i in range(start, start + count)
    ]


def _body(records: list[dict[str, Any]], kind: str) -> bytes:
    from google.protobuf import json_format

    request = records_request(records, service="support-agent")
    if kind == PROTOBUF:
        return bytes(request.SerializeToString())
    return json_format.MessageToJson(request).encode()


@pytest.mark.parametrize("kind", [PROTOBUF, JSON])
async def test_a_request_of_unmappable_records_writes_eleven_letters_and_evicts_no_one(
    redis_server: RedisServer, prefix: str, kind: str
) -> None:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

    cfg = otlp_config(redis_server, prefix, store=StoreConfig(deadletter_maxlen=200))
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        # Another producer's dead letter, written first.
        bad = {"suite": "other", "task": "t", "trial": "x", "outcome": "PASS"}
        assert (await post(base, [bad]))[0] == 422
        for i in range(5):
            status, raw, _ = await post_logs(base, _body(_unmappable(200, 200 * i), kind), kind)
            assert status == 200
            response = ExportLogsServiceResponse()
            if kind == PROTOBUF:
                response.ParseFromString(raw)
            else:
                json_format.Parse(raw, response)
            # Every record counts in partial_success, however few letters it got.
            assert response.partial_success.rejected_log_records == 200
        letters = await store.reads.deadletters(count=1000)
    assert letters[0].suite == "other"  # still there: the stream held 1 + 5 x 11 letters
    otlp = [letter for letter in letters if letter.source == "otlp"]
    assert len(otlp) == 5 * (MAX_LETTERS + 1)
    for request in range(5):
        mine = otlp[request * (MAX_LETTERS + 1) : (request + 1) * (MAX_LETTERS + 1)]
        for i, letter in enumerate(mine[:MAX_LETTERS]):
            assert letter.reason.startswith(f"resource_logs[0].scope_logs[0].log_records[{i}]: ")
            assert json.loads(letter.payload)["eventName"] == "gen_ai.evaluation.result"
            # Filed under the suite the record's resource names.
            assert letter.suite == "support-agent"
        assert mine[-1].reason.startswith("190 more rejected records in the same payload")


MALFORMED = [
    (JSON, b'{"resourceLogs": 5}', "resourceLogs"),
    (JSON, b'{"resourceLogs": [{"scopeLogs": 5}]}', "resourceLogs[0].scopeLogs"),
    (
        JSON,
        b'{"resourceLogs": [{"scopeLogs": [{"logRecords": 5}]}]}',
        "resourceLogs[0].scopeLogs[0].logRecords",
    ),
    (
        JSON,
        b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"attributes": [{"key": "k", '
        b'"value": {"intValue": "many"}}]}]}]}]}',
        "resourceLogs[0].scopeLogs[0].logRecords[0].attributes[0].value.intValue",
    ),
    (JSON, b'{"resourceLogs": [{"resource": []}]}', "resourceLogs[0].resource"),
    (PROTOBUF, b"\x08\x05", "resource_logs[0]"),
    (PROTOBUF, b"\x0a\x02\x10\x05", "resource_logs[0].scope_logs[0]"),
    (PROTOBUF, b"\x0a\x04\x12\x02\x10\x05", "resource_logs[0].scope_logs[0].log_records[0]"),
]


async def test_malformed_otlp_is_answered_400_with_the_path_and_logs_no_traceback(
    redis_server: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    cfg = otlp_config(redis_server, prefix)
    async with serving(cfg) as (_, base):
        for _ in range(3):  # repeated: each time the same answer, never a log line of its own
            for kind, body, path in MALFORMED:
                status, raw, headers = await post_logs(base, body, kind)
                assert (status, headers["Content-Type"]) == (400, "application/json"), raw
                answer = msgspec.json.decode(raw)
                assert answer["path"] == path
                assert f"{path}: " in answer["error"]
        # The port still counts a good request.
        good = _body([{**_unmappable(1)[0], "gen_ai.evaluation.score.label": "pass"}], PROTOBUF)
        assert (await post_logs(base, good, PROTOBUF))[0] == 200
    assert [r for r in caplog.records if r.exc_info is not None] == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
