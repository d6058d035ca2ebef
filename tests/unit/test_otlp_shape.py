"""OTLP requests that do not fit the message: refused with the path of the bad field, in both
encodings; and a request's rejected records, bounded in dead letters as a payload's are."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from reliabilityd.config import OtlpConfig
from reliabilityd.events import MAX_LETTERS, UNREPORTED
from reliabilityd.integrations import otlp
from tests.support.otlp import json_bodies, protobuf_bodies, records_request

MAPPING = OtlpConfig(enabled=True)
_R = '{"resourceLogs": [{"scopeLogs": [{"logRecords": [%s]}]}]}'


@pytest.mark.parametrize(
    ("body", "path", "says"),
    [
        ('{"resourceLogs": 5}', "resourceLogs", "expected an array, got the number 5"),
        ('{"resourceLogs": [5]}', "resourceLogs[0]", "expected an object"),
        ('{"resourceLogs": [{"scopeLogs": 5}]}', "resourceLogs[0].scopeLogs", "expected an array"),
        ('{"resourceLogs": [{"resource": 3}]}', "resourceLogs[0].resource", "expected an object"),
        (
            '{"resourceLogs": [{"scopeLogs": [{"logRecords": 5}]}]}',
            "resourceLogs[0].scopeLogs[0].logRecords",
            "expected an array",
        ),
        (
            '{"resourceLogs": [{"scope_logs": [{"log_records": [{}, "x"]}]}]}',
            "resourceLogs[0].scope_logs[0].log_records[1]",
            "expected an object, got the string 'x'",
        ),
        (_R % '{"attributes": 5}', "resourceLogs[0].scopeLogs[0].logRecords[0].attributes", ""),
        (
            _R % '{"attributes": [{"key": 5}]}',
            "resourceLogs[0].scopeLogs[0].logRecords[0].attributes[0].key",
            "expected a string",
        ),
        (
            _R % '{}, {"attributes": [{"key": "k", "value": {"stringValue": 5}}]}',
            "resourceLogs[0].scopeLogs[0].logRecords[1].attributes[0].value.stringValue",
            "expected a string, got the number 5",
        ),
        (
            _R % '{"timeUnixNano": "soon"}',
            "resourceLogs[0].scopeLogs[0].logRecords[0].timeUnixNano",
            "expected an integer",
        ),
        (
            _R % '{"timeUnixNano": 1e400}',
            "resourceLogs[0].scopeLogs[0].logRecords[0].timeUnixNano",
            "expected an integer",
        ),
        (
            _R % '{"flags": 4294967296}',
            "resourceLogs[0].scopeLogs[0].logRecords[0].flags",
            "4294967296 is out of range [0, 4294967295]",
        ),
        (
            _R % '{"body": {"doubleValue": true}}',
            "resourceLogs[0].scopeLogs[0].logRecords[0].body.doubleValue",
            "expected a number, got a boolean",
        ),
        (
            _R % '{"body": {"stringValue": "a", "intValue": 1}}',
            "resourceLogs[0].scopeLogs[0].logRecords[0].body.intValue",
            "stringValue is set too",
        ),
        (
            _R % '{"body": {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": 1}}]}}}',
            "resourceLogs[0].scopeLogs[0].logRecords[0].body.kvlistValue.values[0].value.boolValue",
            "expected true or false",
        ),
        (
            _R % '{"eventName": "a", "event_name": "b"}',
            "resourceLogs[0].scopeLogs[0].logRecords[0].event_name",
            "the same field as eventName, given twice",
        ),
        ("[1]", "(the request)", "expected an object, got an array"),
    ],
)
def test_otlp_json_of_the_wrong_shape_names_the_field(body: str, path: str, says: str) -> None:
    with pytest.raises(otlp.OtlpError) as raised:
        otlp.decode_request(body.encode(), otlp.JSON)
    assert raised.value.status == 400
    assert raised.value.path == path
    assert f"{path}: {says}" in str(raised.value)


def test_deep_otlp_json_is_refused_with_its_path_not_a_recursion_error() -> None:
    value = '{"kvlistValue": {"values": [{"key": "k", "value": %s}]}}'
    nested = "{}"
    for _ in range(150):
        nested = value % nested
    body = _R % ('{"body": ' + nested + "}")
    with pytest.raises(otlp.OtlpError) as raised:
        otlp.decode_request(body.encode(), otlp.JSON)
    assert "nested more than 100 messages deep" in str(raised.value)
    assert raised.value.path is not None
    assert raised.value.path.startswith("resourceLogs[0].scopeLogs[0].logRecords[0].body.")


def _pb_field(number: int, wire: int, payload: bytes) -> bytes:
    return bytes([(number << 3) | wire]) + payload


def _len(number: int, inner: bytes) -> bytes:
    return _pb_field(number, 2, bytes([len(inner)]) + inner)


@pytest.mark.parametrize(
    ("body", "path", "says"),
    [
        # resource_logs (1) as a varint, not a message
        (_pb_field(1, 0, b"\x05"), "resource_logs[0]", "sent as varint"),
        # resource_logs[0].scope_logs (2) as a varint
        (_len(1, _pb_field(2, 0, b"\x05")), "resource_logs[0].scope_logs[0]", "sent as varint"),
        # resource_logs[0].scope_logs[0].log_records (2) as a 32-bit value
        (
            _len(1, _len(2, _pb_field(2, 5, b"\x00\x00\x00\x00"))),
            "resource_logs[0].scope_logs[0].log_records[0]",
            "sent as 32-bit",
        ),
        # a second record whose time_unix_nano (fixed64, 1) comes as a varint
        (
            _len(1, _len(2, _len(2, b"") + _len(2, _pb_field(1, 0, b"\x01")))),
            "resource_logs[0].scope_logs[0].log_records[1].time_unix_nano",
            "sent as varint, but an integer is 64-bit",
        ),
        # a record's severity_text (3) that is not UTF-8
        (
            _len(1, _len(2, _len(2, _len(3, b"\xff\xfe")))),
            "resource_logs[0].scope_logs[0].log_records[0].severity_text",
            "not valid UTF-8",
        ),
        # a scope_logs length past the end of its resource_logs
        (_len(1, b"\x12\x05"), "resource_logs[0].scope_logs[0]", "says 5 bytes, 0 are left"),
    ],
)
def test_protobuf_of_the_wrong_shape_names_the_field(body: bytes, path: str, says: str) -> None:
    with pytest.raises(otlp.OtlpError) as raised:
        otlp.decode_request(body, otlp.PROTOBUF)
    assert raised.value.status == 400
    assert raised.value.path == path
    assert says in str(raised.value)


def test_unknown_protobuf_fields_are_skipped_as_protobuf_skips_them() -> None:
    good = records_request([{"gen_ai.evaluation.name": "c", "gen_ai.response.id": "r"}])
    body = good.SerializeToString() + _pb_field(15, 0, b"\x01")  # a field OTLP may add later
    request = otlp.decode_request(body, otlp.PROTOBUF)
    assert len(request.resource_logs[0].scope_logs[0].log_records) == 1


def test_otlp_json_trace_ids_in_hex_are_accepted() -> None:
    body = _R % '{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174"}'
    request = otlp.decode_request(body.encode(), otlp.JSON)
    assert len(request.resource_logs[0].scope_logs[0].log_records) == 1


def test_a_request_of_many_unmappable_records_comes_to_eleven_letters() -> None:
    # No verdict: neither a label nor a score nor an error.
    records = [{"gen_ai.evaluation.name": "c", "gen_ai.response.id": f"r{i}"} for i in range(50)]
    mapped = otlp.map_request(records_request(records), MAPPING)
    assert len(mapped.rejected) == 50  # each one counts in partial_success
    assert all(r is not UNREPORTED for r in mapped.rejected[:MAX_LETTERS])
    assert all(r is UNREPORTED for r in mapped.rejected[MAX_LETTERS:])
    letters = mapped.letters
    assert len(letters) == MAX_LETTERS + 1
    assert letters[0].reason.startswith("resource_logs[0].scope_logs[0].log_records[0]: no verdict")
    assert letters[-1].raw == b""
    assert letters[-1].reason.startswith("40 more rejected records in the same payload")
    response = otlp.encode_response(mapped, otlp.PROTOBUF)
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

    partial = ExportLogsServiceResponse.FromString(response).partial_success
    assert partial.rejected_log_records == 50
    assert partial.error_message.endswith("; and 47 more")


def test_a_few_unmappable_records_get_a_letter_each_and_no_summary() -> None:
    records = [{"gen_ai.evaluation.name": "c", "gen_ai.response.id": f"r{i}"} for i in range(3)]
    letters = otlp.map_request(records_request(records), MAPPING).letters
    assert [letter.reason.split(":")[0] for letter in letters] == [
        f"resource_logs[0].scope_logs[0].log_records[{i}]" for i in range(3)
    ]


def _refused_or_decoded(body: bytes, kind: str) -> None:
    """Mapped (every record a trial, a rejection or ignored), or refused with a reason."""
    refused: otlp.OtlpError | None = None
    try:
        mapped = otlp.decode_and_map(body, kind, MAPPING)
    except otlp.OtlpError as exc:
        refused = exc
    if refused is not None:
        assert refused.status == 400
        assert str(refused)
        return
    assert all(e.suite == "fuzz" for e in mapped.events)
    assert len(mapped.letters) <= MAX_LETTERS + 1


@settings(settings.get_profile("ci"), suppress_health_check=[HealthCheck.too_slow])
@given(json_bodies)
def test_any_otlp_json_is_mapped_or_refused_with_a_reason(body: bytes) -> None:
    _refused_or_decoded(body, otlp.JSON)


@settings(settings.get_profile("ci"), suppress_health_check=[HealthCheck.too_slow])
@given(protobuf_bodies)
def test_any_protobuf_body_is_mapped_or_refused_with_a_reason(body: bytes) -> None:
    _refused_or_decoded(body, otlp.PROTOBUF)
