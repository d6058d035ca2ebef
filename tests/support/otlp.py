"""OTLP logs requests for tests: builders, a daemon config that takes them and a poster,
and Hypothesis strategies of OTLP/JSON documents and protobuf bodies, well-formed and not,
at every level of the message."""

from __future__ import annotations

import io
from typing import Any

import aiohttp
import msgspec
from hypothesis import strategies as st

from reliabilityd.config import Config, HttpConfig, OtlpConfig
from tests.support.daemon import make_config
from tests.support.servers import RedisServer, free_port

EVENT = "gen_ai.evaluation.result"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"


def otlp_config(redis: RedisServer, prefix: str, **sections: Any) -> Config:
    """A daemon on ``redis`` with its HTTP port's OTLP route on and MQTT off."""
    cfg = make_config(
        redis_url=redis.url,
        mqtt_url="mqtt://127.0.0.1:1",
        prefix=prefix,
        http=HttpConfig(port=free_port(), otlp=OtlpConfig(enabled=True)),
        **sections,
    )
    return msgspec.structs.replace(cfg, mqtt=msgspec.structs.replace(cfg.mqtt, enabled=False))


async def post_logs(base: str, body: bytes, kind: str) -> tuple[int, bytes, dict[str, str]]:
    """POST /v1/logs: the status, the body and the headers of the answer."""
    # A stream, so the client sends a large body in pieces (aiohttp warns of raw bytes).
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base}/v1/logs", data=io.BytesIO(body), headers={"Content-Type": kind}) as resp,
    ):
        return resp.status, await resp.read(), dict(resp.headers)


def records_request(records: list[dict[str, Any]], service: str = "svc") -> Any:
    """An ExportLogsServiceRequest: one resource (``service.name``), one scope, the records
    (each an attributes dict of strings; ``event_name`` the evaluation event's)."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    request = ExportLogsServiceRequest()
    resource = request.resource_logs.add()
    resource.resource.attributes.add(key="service.name").value.string_value = service
    scope = resource.scope_logs.add()
    for attributes in records:
        record = scope.log_records.add(event_name=EVENT)
        for key, value in attributes.items():
            record.attributes.add(key=key).value.string_value = value
    return request


def empty_records(count: int) -> bytes:
    """A protobuf request of ``count`` empty log records: two bytes each."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    request = ExportLogsServiceRequest()
    scope = request.resource_logs.add().scope_logs.add()
    for _ in range(count):
        scope.log_records.add()
    return bytes(request.SerializeToString())


# --- strategies ---------------------------------------------------------------

_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["", "0", "-1", "1e3", "NaN", "Infinity", "AAAA", "zz", "\ud800"])
)
# Any JSON value: what a field gets when it is the wrong shape (a scalar as often as not).
junk = _leaf | st.recursive(
    _leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


def _or_junk(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the well-formed value, sometimes anything at all."""
    return st.one_of(strategy, strategy, junk)


_ints = st.integers(0, 2**64 - 1) | st.integers(0, 2**63).map(str)
_any_value: st.SearchStrategy[Any] = st.deferred(
    lambda: st.one_of(
        st.fixed_dictionaries({"stringValue": _or_junk(st.text(max_size=20))}),
        st.fixed_dictionaries({"intValue": _or_junk(st.integers(-(2**63), 2**63 - 1))}),
        st.fixed_dictionaries({"doubleValue": _or_junk(st.floats(allow_nan=False))}),
        st.fixed_dictionaries({"boolValue": _or_junk(st.booleans())}),
        st.fixed_dictionaries({"bytesValue": _or_junk(st.sampled_from(["", "AAAA", "3q2+7w=="]))}),
        st.fixed_dictionaries(
            {
                "arrayValue": _or_junk(
                    st.fixed_dictionaries({"values": st.lists(_any_value, max_size=3)})
                )
            }
        ),
        st.fixed_dictionaries(
            {
                "kvlistValue": _or_junk(
                    st.fixed_dictionaries({"values": st.lists(_key_value, max_size=3)})
                )
            }
        ),
        st.fixed_dictionaries({}),
    )
)
_key_value: st.SearchStrategy[Any] = st.fixed_dictionaries(
    {
        "key": _or_junk(
            st.sampled_from(
                [
                    "gen_ai.evaluation.name",
                    "gen_ai.response.id",
                    "gen_ai.evaluation.score.label",
                    "gen_ai.evaluation.score.value",
                    "error.type",
                    "event.name",
                    "service.name",
                ]
            )
        ),
        "value": _or_junk(_any_value),
    }
)
_attributes = _or_junk(st.lists(_or_junk(_key_value), max_size=5))
_record = st.fixed_dictionaries(
    {},
    optional={
        "eventName": _or_junk(st.just(EVENT) | st.text(max_size=10)),
        "timeUnixNano": _or_junk(_ints),
        "observedTimeUnixNano": _or_junk(_ints),
        "severityNumber": _or_junk(st.integers(0, 24) | st.just("SEVERITY_NUMBER_INFO")),
        "severityText": _or_junk(st.text(max_size=8)),
        "body": _or_junk(_any_value),
        "attributes": _attributes,
        "droppedAttributesCount": _or_junk(st.integers(0, 2**32 - 1)),
        "flags": _or_junk(st.integers(0, 2**32 - 1)),
        "traceId": _or_junk(st.sampled_from(["", "5b8efff798038103d269b633813fc60c"])),
        "spanId": _or_junk(st.sampled_from(["", "eee19b7ec3c1b174"])),
        "log_records": junk,  # a name of the wrong message: unknown here, ignored
    },
)


def _string_attribute(key: str, values: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {"key": st.just(key), "value": _or_junk(st.fixed_dictionaries({"stringValue": values}))}
    )


# A record the default mapping makes a trial of (with the resource's service.name), or
# nearly: any of its values may be of the wrong shape.
_evaluation = st.fixed_dictionaries(
    {
        "eventName": st.just(EVENT),
        "attributes": st.tuples(
            _string_attribute("gen_ai.evaluation.name", st.sampled_from(["Correctness", "Tone"])),
            _string_attribute("gen_ai.response.id", st.text(min_size=1, max_size=6)),
            _string_attribute(
                "gen_ai.evaluation.score.label", st.sampled_from(["pass", "fail", "meh", ""])
            ),
        ).map(list),
    },
    optional={"timeUnixNano": _ints},
)
_service = st.fixed_dictionaries(
    {"attributes": st.tuples(_string_attribute("service.name", st.just("fuzz"))).map(list)}
)
_scope_logs = st.fixed_dictionaries(
    {},
    optional={
        "scope": _or_junk(st.fixed_dictionaries({}, optional={"name": _or_junk(st.text())})),
        "logRecords": _or_junk(st.lists(_or_junk(_record | _evaluation), max_size=4)),
        "schemaUrl": _or_junk(st.text(max_size=8)),
    },
)
_resource_logs = st.fixed_dictionaries(
    {},
    optional={
        "resource": _or_junk(
            _service | st.fixed_dictionaries({}, optional={"attributes": _attributes})
        ),
        "scopeLogs": _or_junk(st.lists(_or_junk(_scope_logs), max_size=3)),
        "scope_logs": _or_junk(st.lists(_scope_logs, max_size=1)),
    },
)
# Documents of evaluation records under a named service: mostly trials.
_evaluations = st.lists(_evaluation, min_size=1, max_size=5).map(
    lambda records: {
        "resourceLogs": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "fuzz"}}]
                },
                "scopeLogs": [{"logRecords": records}],
            }
        ]
    }
)
# OTLP/JSON documents: well-formed, or wrong in any field at any depth.
json_documents = _evaluations | _or_junk(
    st.fixed_dictionaries(
        {}, optional={"resourceLogs": _or_junk(st.lists(_or_junk(_resource_logs), max_size=3))}
    )
)


def _encode_json(doc: Any) -> bytes:
    try:
        return msgspec.json.encode(doc)
    except (msgspec.EncodeError, OverflowError, UnicodeEncodeError, TypeError, ValueError):
        return b'{"resourceLogs": ['


def _protobuf(doc: Any) -> bytes:
    """The document as protobuf when it parses, else a body of the same shape by hand."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    request = ExportLogsServiceRequest()
    try:
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except Exception:  # an ill-formed document has no protobuf: a record with one field
        return b"\x0a\x06\x12\x04\x12\x02\x1a\x00"
    return bytes(request.SerializeToString())


def _splice(body: bytes, at: int, cut: int, insert: bytes) -> bytes:
    at %= len(body) + 1
    return body[:at] + insert + body[at + cut :]


def _field(number: int, wire: int, payload: bytes) -> bytes:
    """One field as protobuf writes it (a tag varint, then the payload as is)."""
    key = (number << 3) | wire
    tag = bytearray()
    while True:
        byte = key & 0x7F
        key >>= 7
        tag.append(byte | (0x80 if key else 0))
        if not key:
            return bytes(tag) + payload


_wire_fields = st.builds(
    _field, st.integers(0, 20), st.integers(0, 7), st.binary(max_size=6)
) | st.builds(
    lambda number, inner: _field(number, 2, bytes([len(inner)]) + inner),
    st.integers(1, 12),
    st.binary(max_size=20),
)
# Protobuf bodies: well-formed requests, the same spliced, cut or grown by fields of any
# number and wire type, nested as length-delimited fields, and bytes of any kind.
protobuf_bodies = st.one_of(
    json_documents.map(_protobuf),
    st.builds(
        _splice,
        json_documents.map(_protobuf),
        st.integers(0, 400),
        st.integers(0, 3),
        st.binary(max_size=4) | _wire_fields,
    ),
    st.lists(_wire_fields, max_size=6).map(b"".join),
    st.lists(_wire_fields, max_size=3).map(
        lambda fields: _field(1, 2, bytes([sum(map(len, fields)) & 0x7F]) + b"".join(fields))
    ),
    st.binary(max_size=300),
)
json_bodies = st.one_of(
    json_documents.map(_encode_json),
    st.binary(max_size=200),
    st.integers(1, 3000).map(lambda n: b'{"resourceLogs": ' + b"[" * n + b"]" * n + b"}"),
    st.sampled_from([b"", b"{}", b"[]", b"null", b'{"resourceLogs": NaN}', b"\xef\xbb\xbf{}"]),
)
