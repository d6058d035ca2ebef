"""Every rejection's reason class, pinned: a table of inputs to the class each step sets.

The class is set where the rejection is made (the decoder, the topic
binding, the admission, the write scopes, the OTLP mapping), never read
back out of the reason's words; the words of msgspec's own errors are read
once, where the decoder catches them, and this table holds msgspec to them:
a release that rewords one fails here instead of moving a metric label.
"""

from __future__ import annotations

import math

import msgspec
import pytest

from reliabilityd.config import (
    Config,
    MqttConfig,
    OtlpConfig,
    RedisConfig,
    StatsConfig,
    SuiteOverride,
)
from reliabilityd.daemon.auth import Access
from reliabilityd.daemon.metrics import Metrics
from reliabilityd.events import MAX_LETTERS, TrialEvent, decode, elements, letters
from reliabilityd.integrations.otlp import map_request
from reliabilityd.rejections import REASON_CLASSES, Rejected
from reliabilityd.sources._admission import past_suite_cap, screen_labels
from reliabilityd.topics import Binding, decode_bound
from tests.support.otlp import records_request

GOOD = {"suite": "s", "task": "t", "trial": "1", "outcome": "pass"}
J = msgspec.json.encode
M = msgspec.msgpack.encode


def test_the_classes_and_their_order_are_the_metric_labels() -> None:
    assert REASON_CLASSES == (
        "too_large",
        "empty",
        "undecodable",
        "not_an_event",
        "missing_field",
        "invalid_field",
        "topic_mismatch",
        "forbidden",
        "too_many_suites",
        "other",
    )
    text = Metrics().render().decode()
    shown = {
        line.split("{", 1)[1].split("}", 1)[0]
        for line in text.splitlines()
        if line.startswith("reliabilityd_rejected_total{")
    }
    assert shown == {
        f'reason="{cls}",source="{source}"'
        for source in ("mqtt", "stream", "http")
        for cls in REASON_CLASSES
    }


# (payload, the class of its one rejection, words the reason holds). The words
# of the msgspec rows are msgspec's own: they are what the class is read from.
DECODER = [
    (b"x" * 10_001, "too_large", "exceeds 10000"),
    (b"", "empty", "empty payload"),
    (b"[]", "empty", "empty array"),
    (M([]), "empty", "empty array"),
    (b"hello world", "undecodable", "not JSON: plain text"),
    (b"\x05\x01", "undecodable", "not JSON, and not MessagePack"),
    (b"{not json", "undecodable", "not valid JSON"),
    (b"\xc1", "undecodable", "not valid MessagePack"),
    (b"[" * 5000, "undecodable", "nested too deeply"),
    (b"\x91" * 5000, "undecodable", "MessagePack nested too deeply"),
    (b'{"suite": "s", "task": "t", "trial": "1", "outcome": "pass", "ts": NaN}', "undecodable", ""),
    (b"42", "not_an_event", "Expected `object`, got `int`"),
    (b'"PASS"', "not_an_event", "Expected `object`, got `str`"),
    (b"null", "not_an_event", "Expected `object`, got `null`"),
    (M(7.5), "not_an_event", "Expected `object`, got `float`"),
    (M("text"), "not_an_event", "Expected `object`, got `str`"),
    (J({"suite": "s", "task": "t", "outcome": "pass"}), "missing_field", "missing required field"),
    (M({"suite": "s", "task": "t", "trial": "1"}), "missing_field", "`outcome`"),
    (J({**GOOD, "outcome": "PASS"}), "invalid_field", "- at `$.outcome`"),
    # A value in the words that a reason's prose could be taken for says nothing.
    (J({**GOOD, "outcome": "malformed"}), "invalid_field", "Invalid enum value 'malformed'"),
    (J({**GOOD, "trial": 7}), "invalid_field", "- at `$.trial`"),
    (M({**GOOD, "trial": 7}), "invalid_field", "- at `$.trial`"),
    (J({**GOOD, "ts": "noon"}), "invalid_field", "- at `$.ts`"),
    (J({**GOOD, "labels": 5}), "invalid_field", "- at `$.labels`"),
    (J({**GOOD, "suite": "a/b"}), "invalid_field", "suite contains one of"),
    (J({**GOOD, "suite": ""}), "invalid_field", "suite is empty"),
    (J({**GOOD, "task": "x" * 300}), "invalid_field", "longer than 200 bytes"),
    (J({**GOOD, "ts": 1764460800500}), "invalid_field", "milliseconds?"),
    (M({**GOOD, "ts": math.inf}), "invalid_field", "ts is not a finite number"),
    # Elements of an array, each classed alone.
    (J([GOOD, 5]), "not_an_event", "element 1: Expected `object`"),
    (J([GOOD, [GOOD]]), "not_an_event", "element 1: Expected `object`, got `array`"),
    (J([{"suite": "x"}]), "missing_field", "element 0: Object missing required field"),
    (J([{**GOOD, "outcome": 1}]), "invalid_field", "element 0: Expected `str`"),
    (J([{**GOOD, "task": ""}]), "invalid_field", "element 0: task is empty"),
    # A string that is no UTF-8 is undecodable, in an element as in a whole payload.
    (b'[{"suite": "s", "task": "\xff", "trial": "1", "outcome": "pass"}]', "undecodable", "UTF-8"),
    (M([GOOD, {**GOOD, "task": "Z"}]).replace(b"\xa1Z", b"\xa1\xff"), "undecodable", "UTF-8"),
]


@pytest.mark.parametrize(("payload", "cls", "words"), DECODER)
def test_the_decoder_classes_each_rejection_where_it_makes_it(
    payload: bytes, cls: str, words: str
) -> None:
    _, bad = decode(payload, max_payload=10_000)
    (rejected,) = bad
    assert words in rejected.reason
    assert rejected.reason_class == cls, rejected.reason
    # The HTTP port's decode of the same body says the same.
    whole, outcomes = elements(payload, max_payload=10_000)
    (same,) = [whole] if whole is not None else letters(outcomes)
    assert (same.reason, same.reason_class) == (rejected.reason, cls)


def test_the_letter_counting_the_rest_of_a_payload_is_other() -> None:
    _, bad = decode(J([5] * (MAX_LETTERS + 3)))
    assert [r.reason_class for r in bad] == ["not_an_event"] * MAX_LETTERS + ["other"]
    assert "3 more rejected elements" in bad[-1].reason


def test_the_topic_binding_classes_its_rejections() -> None:
    binding = Binding.parse("last-level")
    many = J([{**GOOD, "suite": "other", "trial": str(i)} for i in range(MAX_LETTERS + 2)])
    _, bad = decode_bound([(many, "mqtt:r/mine"), (J(GOOD), "mqtt:r/s")], binding)
    assert [r.reason_class for r, _ in bad] == ["topic_mismatch"] * (MAX_LETTERS + 1)
    # A source that names no topic is not held to one.
    good, bad = decode_bound([(many, "stream:k")], binding)
    assert (len(good), bad) == (MAX_LETTERS + 2, [])


def _config(**stats: object) -> Config:
    return Config(
        redis=RedisConfig(url="redis://127.0.0.1:1/0"),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(**stats),  # type: ignore[arg-type]
        suites=[SuiteOverride(match="sliced", slice_by=["model"])],
    )


def test_the_admission_classes_its_rejections_whatever_the_suite_is_called() -> None:
    cfg = _config(max_suites=1)
    # A suite named like a reason's words is classed by the step, not by the words.
    odd = "stats.max_suites"
    events = {
        "sliced": [TrialEvent("sliced", "t", "1", "pass", labels={"model": []})],
        odd: [TrialEvent(odd, "t", "1", "pass")],
    }
    refused: dict[int, Rejected] = {}
    kept, screened = screen_labels(cfg, events, refused)
    assert [r.reason_class for r in screened] == ["invalid_field"]
    assert "labels.model" in screened[0].reason
    capped = past_suite_cap(cfg, kept, {odd: "deployment"}, refused)
    assert [r.reason_class for r in capped] == ["too_many_suites"]
    assert sorted(r.reason_class for r in refused.values()) == ["invalid_field", "too_many_suites"]


def test_a_write_the_token_may_not_make_is_forbidden() -> None:
    grant = Access("tokens[0]", write=("team-a-*",), read=())
    outcomes: list[TrialEvent | Rejected] = [
        TrialEvent("team-a-x", "t", "1", "pass"),
        TrialEvent("team-b-x", "t", "1", "pass"),
        Rejected(b"5", "element 2: not an event", "not_an_event"),
        TrialEvent("team-b-x", "t", "2", "pass"),
    ]
    refused = grant.refused_writes(outcomes)
    assert sorted(refused) == [1, 3]
    assert {(r.reason_class, r.suite) for r in refused.values()} == {("forbidden", "team-b-x")}
    assert Access("http.token", write=("*",), read=()).refused_writes(outcomes) == {}


def test_the_otlp_mapping_classes_each_record_it_cannot_map() -> None:
    config = OtlpConfig(enabled=True, pass_score={"*": 0.5})
    name, response = "gen_ai.evaluation.name", "gen_ai.response.id"
    label, score = "gen_ai.evaluation.score.label", "gen_ai.evaluation.score.value"
    request = records_request(
        [
            {response: "r1"},  # no task: nothing the mapping reads
            {name: "acc", response: "r2"},  # no label, no score: no verdict
            {name: "acc", response: "r3", label: "maybe"},  # a label in no list
            {name: "acc", response: "r4", label: "pass"},  # mapped
            {name: "acc", response: "r5", score: "high"},  # a score that is no number
        ]
    )
    mapped = map_request(request, config)
    assert [e.trial for e in mapped.events] == ["r4"]
    assert [r.reason_class for r in mapped.rejected] == [
        "missing_field",
        "missing_field",
        "invalid_field",
        "invalid_field",
    ]
