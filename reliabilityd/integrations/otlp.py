"""OpenTelemetry evaluation events as trials: OTLP/HTTP log requests in, TrialEvents out.

Sans-I/O, for the daemon's ``POST /v1/logs`` (aiohttp undoes a gzip
Content-Encoding, bounded after decompression): ``decode_request`` reads both
OTLP encodings (protobuf, and JSON through protobuf's ``json_format`` into
the same messages), ``map_request`` turns each ``gen_ai.evaluation.result``
record into a trial by the configured mapping (``OtlpConfig``) or into a
``Rejected`` with the reason, and ``encode_response`` writes the OTLP
response, with ``partial_success`` when records were rejected.

The mapping never guesses: a record without a suite, task or trial source,
or without a verdict (``error.type``, a configured label, or a score with a
configured threshold), is rejected and dead-lettered with what was missing.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from reliabilityd.config import OtlpConfig
from reliabilityd.errors import ReliabilitydError
from reliabilityd.events import MAX_LETTERS, UNREPORTED, Outcome, TrialEvent, letters, validate
from reliabilityd.importers.trials import suite_name, task_name
from reliabilityd.integrations._otlp_shape import ShapeProblem, json_problem, wire_problem
from reliabilityd.names import RECORD_PLACEHOLDER, suite_name_problem
from reliabilityd.rejections import ReasonClass, Rejected

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# Reasons of rejected records the response's error_message carries.
REASONS_SHOWN = 3


class OtlpError(ReliabilitydError):
    """A request that is not OTLP logs at all; ``status`` is the HTTP answer.

    ``path`` names the field that does not fit, when one does not.
    """

    def __init__(self, message: str, status: int = 400, *, path: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.path = path


def media_type(content_type: str) -> str:
    """``application/x-protobuf`` or ``application/json``; OtlpError 415 otherwise."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind in (PROTOBUF, JSON):
        return kind
    raise OtlpError(
        f"Content-Type {content_type or '(none)'!r}: OTLP/HTTP is {PROTOBUF} or {JSON}", 415
    )


def _malformed(problem: ShapeProblem, what: str) -> OtlpError:
    return OtlpError(f"{what}: {problem}", path=problem.path)


def _load_json(payload: bytes) -> Any:
    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    # The standard library's decoder, not msgspec's: it keeps a number past a
    # double's range (as inf) for the shape check to name its field.
    return json.loads(payload, parse_constant=constant)


def decode_request(payload: bytes, kind: str) -> ExportLogsServiceRequest:
    """An ``ExportLogsServiceRequest`` from either encoding; OtlpError 400 if it is not one.

    The error names the path of the first field that does not fit
    (``_otlp_shape``); a wrong wire type protobuf would keep as an unknown
    field is one of them. CPU-bound on large bodies: the daemon calls it in
    a worker thread.
    """
    descriptor = ExportLogsServiceRequest.DESCRIPTOR
    request = ExportLogsServiceRequest()
    if kind == PROTOBUF:
        try:
            request.ParseFromString(payload)
        except (DecodeError, RecursionError) as exc:
            problem = wire_problem(payload, descriptor)
            if problem is not None:
                raise _malformed(problem, "not an OTLP ExportLogsServiceRequest") from None
            raise OtlpError(f"not an OTLP ExportLogsServiceRequest: {exc}") from None
        # Unknown fields, or known ones of another wire type, which upb keeps as
        # unknown: the size of what is left tells, without a walk in Python.
        request.DiscardUnknownFields()
        if request.ByteSize() != len(payload):
            problem = wire_problem(payload, descriptor)
            if problem is not None:
                raise _malformed(problem, "not an OTLP ExportLogsServiceRequest")
        return request
    try:
        doc = _load_json(payload)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise OtlpError(f"not OTLP/JSON logs: not JSON: {exc}") from None
    problem = json_problem(doc, descriptor)
    if problem is not None:
        raise _malformed(problem, "not OTLP/JSON logs")
    try:
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except Exception as exc:  # the shape check should leave nothing; never a 500 if it does
        raise OtlpError(f"not OTLP/JSON logs: {type(exc).__name__}: {exc}") from None
    return request


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


def _attributes(pairs: Iterator[KeyValue] | Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


@dataclass(frozen=True)
class Mapped:
    """What one request came to: trials, rejected records, records of other events.

    ``rejected`` has one entry per rejected record, in order: the first
    ``events.MAX_LETTERS`` with the record and the reason, each later one the
    shared ``events.UNREPORTED`` marker, as ``events.decode`` keeps a
    payload's elements; ``letters`` are the dead letters they come to (those
    first ones and one counting the rest), so a request of ten thousand bad
    records writes eleven, as an MQTT payload would.
    """

    events: list[TrialEvent]
    rejected: list[Rejected]
    ignored: int

    @property
    def letters(self) -> list[Rejected]:
        return letters(self.rejected, noun="records")


class _Refused(Exception):
    """One record cannot be mapped; the message is the dead letter's reason.

    ``reason_class``: ``missing_field`` when the record lacks what the mapping
    reads (a name, a verdict), ``invalid_field`` when what it holds cannot be
    used.
    """

    def __init__(self, reason: str, reason_class: ReasonClass = "invalid_field") -> None:
        super().__init__(reason)
        self.reason_class: ReasonClass = reason_class


def _name(
    sources: list[str], record: Mapping[str, Any], resource: Mapping[str, Any], what: str
) -> str:
    for source in sources:
        scope, _, key = source.partition(":")
        value = (record if scope == "attribute" else resource).get(key)
        if value is None or value == "":
            continue
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise _Refused(f"{what} source {source} is a {type(value).__name__}, not a string")
        return str(value)
    raise _Refused(f"no {what}: the record has none of {', '.join(sources)}", "missing_field")


def _verdict(config: OtlpConfig, attrs: Mapping[str, Any], evaluation: str) -> Outcome:
    error = attrs.get(config.error_attribute)
    if error not in (None, ""):
        return "error"
    label = attrs.get(config.label_attribute)
    if isinstance(label, str) and label:
        low = label.lower()
        for outcome, labels in (
            ("pass", config.pass_labels),
            ("fail", config.fail_labels),
            ("error", config.error_labels),
            ("skip", config.skip_labels),
        ):
            if low in (x.lower() for x in labels):
                return outcome  # type: ignore[return-value]  # one of the four
    score = attrs.get(config.score_attribute)
    threshold = config.pass_score.get(evaluation, config.pass_score.get("*"))
    if isinstance(score, int | float) and not isinstance(score, bool) and threshold is not None:
        if math.isnan(score):
            raise _Refused(f"{config.score_attribute} is NaN")
        return "pass" if score >= threshold else "fail"
    said: list[str] = []
    if label is not None:
        said.append(f"label {label!r} is in none of the configured label lists")
    if score is None:
        said.append(f"no {config.score_attribute}")
    elif threshold is None:
        said.append(f"score {score!r} but no pass_score for evaluation {evaluation!r} (or '*')")
    else:
        said.append(f"{config.score_attribute} is a {type(score).__name__}, not a number")
    # Nothing that could be a verdict is missing_field; a label or score that is
    # there and cannot be read as one is invalid_field.
    missing = label is None and (score is None or threshold is None)
    why = f"no verdict: {'; '.join(said)}"
    raise _Refused(why, "missing_field" if missing else "invalid_field")


def _record_json(record: LogRecord) -> bytes:
    return json_format.MessageToJson(record, indent=None).encode()


def _event_name(record: LogRecord) -> Any:
    """The record's event: ``event_name``, else its ``event.name`` attribute."""
    if record.event_name:
        return record.event_name
    for kv in record.attributes:
        if kv.key == "event.name":
            return _value(kv.value)
    return None


def map_request(request: ExportLogsServiceRequest, config: OtlpConfig) -> Mapped:
    """Each evaluation record as a trial or a rejection, in order; other records ignored.

    CPU-bound on large requests (a Python step per record): the daemon calls
    it in a worker thread.
    """
    events: list[TrialEvent] = []
    rejected: list[Rejected] = []
    bad = 0
    ignored = 0
    wanted = config.event_name
    for r, resource_logs in enumerate(request.resource_logs):
        resource = _attributes(resource_logs.resource.attributes)
        for s, scope_logs in enumerate(resource_logs.scope_logs):
            for i, record in enumerate(scope_logs.log_records):
                if _event_name(record) != wanted:
                    ignored += 1
                    continue
                attrs = _attributes(record.attributes)
                try:
                    event = _map_record(config, record, attrs, resource)
                except _Refused as exc:
                    bad += 1
                    if bad > MAX_LETTERS:  # counted, neither copied nor given a reason
                        rejected.append(UNREPORTED)
                        continue
                    where = f"resource_logs[{r}].scope_logs[{s}].log_records[{i}]"
                    suite = _suite_of(config, attrs, resource)
                    reason = f"{where}: {exc}"
                    record_json = _record_json(record)
                    rejected.append(Rejected(record_json, reason, exc.reason_class, suite))
                    continue
                events.append(event)
    return Mapped(events, rejected, ignored)


def decode_and_map(payload: bytes, kind: str, config: OtlpConfig) -> Mapped:
    """``decode_request`` then ``map_request``: the worker thread's whole job for one body."""
    return map_request(decode_request(payload, kind), config)


def _suite_of(config: OtlpConfig, attrs: Mapping[str, Any], resource: Mapping[str, Any]) -> str:
    """The suite a rejected record names, to file its dead letter under; "" when none."""
    try:
        suite = suite_name(_name(config.suite, attrs, resource, "suite"))
    except _Refused:
        return ""
    return "" if suite_name_problem(suite) else suite


def _map_record(
    config: OtlpConfig, record: LogRecord, attrs: Mapping[str, Any], resource: Mapping[str, Any]
) -> TrialEvent:
    suite = _name(config.suite, attrs, resource, "suite")
    task = _name(config.task, attrs, resource, "task")
    trial = _name(config.trial, attrs, resource, "trial")
    outcome = _verdict(config, attrs, str(attrs.get("gen_ai.evaluation.name") or ""))
    nanos = record.time_unix_nano or record.observed_time_unix_nano
    run = _name(config.run, attrs, resource, "run") if config.run else None
    event = TrialEvent(
        suite=suite_name(suite),
        task=task_name(task),
        trial=trial,
        outcome=outcome,
        ts=nanos / 1e9 if nanos else None,
        url=_link(config.link_template, record, attrs, resource) or None,
        run=run,
    )
    problem = validate(event)
    if problem:
        raise _Refused(problem)
    return event


def _link(
    template: str, record: LogRecord, attrs: Mapping[str, Any], resource: Mapping[str, Any]
) -> str:
    """The record's link from ``OtlpConfig.link_template``; "" when the template is
    empty or names something the record lacks (no trace id, no such attribute)."""
    if not template:
        return ""
    missing = False

    def fill(match: re.Match[str]) -> str:
        nonlocal missing
        name = match.group(1)
        if name == "trace_id":
            value: Any = record.trace_id.hex()
        elif name == "span_id":
            value = record.span_id.hex()
        else:
            scope, _, key = name.partition(":")
            value = (attrs if scope == "attribute" else resource).get(key)
        if value is None or value == "" or isinstance(value, bool | dict | list):
            missing = True
            return ""
        return quote(str(value), safe="")

    url = RECORD_PLACEHOLDER.sub(fill, template)
    return "" if missing else url


def encode_response(mapped: Mapped, kind: str) -> bytes:
    """The ExportLogsServiceResponse, with partial_success naming the first rejections."""
    response = ExportLogsServiceResponse()
    if mapped.rejected:
        given = (r.reason for r in mapped.rejected if r is not UNREPORTED)
        reasons = list(itertools.islice(given, REASONS_SHOWN))
        more = len(mapped.rejected) - len(reasons)
        message = "; ".join(reasons) + (f"; and {more} more" if more else "")
        response.partial_success.CopyFrom(
            ExportLogsPartialSuccess(
                rejected_log_records=len(mapped.rejected), error_message=message
            )
        )
    if kind == PROTOBUF:
        return response.SerializeToString()
    return json_format.MessageToJson(response, indent=None).encode()
