"""What a rejection is called: its reason class, the suite it names, its reason's words."""

from __future__ import annotations

import msgspec
import pytest

from reliabilityd.cli._rejected import duration, excerpt, rejected_summary
from reliabilityd.events import TrialEvent, decode, named_suite
from reliabilityd.rejections import REASON_CLASSES

GOOD = {"suite": "s", "task": "t", "trial": "1", "outcome": "pass"}


def one(payload: bytes) -> tuple[str, str, str | None]:
    good, bad = decode(payload, max_payload=10_000)
    assert good == []
    (item,) = bad
    return item.reason, item.reason_class, named_suite(item.raw)


@pytest.mark.parametrize(
    ("payload", "cls", "suite"),
    [
        (b"x" * 10_001, "too_large", None),
        (b"", "empty", None),
        (b"[]", "empty", None),
        (b"hello world", "undecodable", None),
        (b"{not json", "undecodable", None),
        (b"\xc1", "undecodable", None),
        (b"[" * 5000, "undecodable", None),
        (b"42", "not_an_event", None),
        (b'"PASS"', "not_an_event", None),
        (msgspec.msgpack.encode(7.5), "not_an_event", None),
        (msgspec.msgpack.encode("text"), "not_an_event", None),
        (msgspec.json.encode({**GOOD, "outcome": "PASS"}), "invalid_field", "s"),
        (msgspec.json.encode({**GOOD, "trial": 7}), "invalid_field", "s"),
        (msgspec.msgpack.encode({**GOOD, "trial": 7}), "invalid_field", "s"),
        (msgspec.json.encode({"suite": "s", "task": "t", "outcome": "pass"}), "missing_field", "s"),
        (msgspec.json.encode({**GOOD, "suite": "a/b"}), "invalid_field", None),
        (msgspec.json.encode({**GOOD, "suite": ""}), "invalid_field", None),
        (msgspec.json.encode({**GOOD, "task": "x" * 300}), "invalid_field", "s"),
        (msgspec.json.encode({**GOOD, "ts": 1764460800500}), "invalid_field", "s"),
        (
            b'{"suite": "s", "task": "t", "trial": "1", "outcome": "pass", "ts": NaN}',
            "undecodable",
            None,
        ),
    ],
)
def test_every_kind_of_rejection_has_a_class_and_its_suite(
    payload: bytes, cls: str, suite: str | None
) -> None:
    reason, got, named = one(payload)
    assert got == cls, reason
    assert got in REASON_CLASSES
    assert named == suite


def test_elements_of_an_array_are_classed_alone() -> None:
    payload = msgspec.json.encode(
        [GOOD, {**GOOD, "trial": 2, "suite": "other"}, 5, {"suite": "x", "task": "t"}]
    )
    good, bad = decode(payload)
    assert [e.trial for e in good] == ["1"]
    assert [(b.reason_class, named_suite(b.raw)) for b in bad] == [
        ("invalid_field", "other"),
        ("not_an_event", None),
        ("missing_field", "x"),
    ]


def test_plain_text_is_reported_as_not_json() -> None:
    reason, _, _ = one(b"deploy-bot t1 pass")
    assert reason.startswith("not JSON: plain text 'deploy-bot t1 pass'")
    assert "MessagePack)" not in reason
    reason, _, _ = one(b"\x05\x01")
    assert "not JSON, and not MessagePack (first byte 0x05)" in reason


def test_a_millisecond_ts_is_rejected_saying_the_unit() -> None:
    reason, _, _ = one(msgspec.json.encode({**GOOD, "ts": 1764460800500}))
    assert "ts 1764460800500 is not Unix seconds (milliseconds?)" in reason
    # Seconds, with a fraction, are fine; so is the same batch path with many events.
    good, bad = decode(
        msgspec.json.encode([{**GOOD, "trial": str(i), "ts": 1764460800.5} for i in range(3)])
    )
    assert len(good) == 3
    assert bad == []
    batch = [TrialEvent("s", "t", str(i), "pass", ts=1764460800.5) for i in range(3)]
    batch.append(TrialEvent("s", "t", "3", "pass", ts=1764460800500.0))
    good, bad = decode(msgspec.json.encode(batch))
    assert [e.trial for e in good] == ["0", "1", "2"]
    assert "milliseconds" in bad[0].reason


def test_durations() -> None:
    assert duration("90") == 90.0
    assert duration("30m") == 1800.0
    assert duration("2h") == 7200.0
    assert duration("1.5d") == 1.5 * 86400
    for bad in ("", "0", "-1h", "2 hours", "h"):
        with pytest.raises(Exception, match="not a duration"):
            duration(bad)


def test_excerpts_are_one_line_of_text_or_hex() -> None:
    assert excerpt(b'{"a":\n 1}') == '{"a": 1}'
    assert excerpt(b"x" * 500, limit=10) == "x" * 10 + "..."
    assert excerpt(b"\x81\xa5suite\x01") == "0x81a5737569746501"


def test_rejected_summary() -> None:
    counts: dict[str | None, int] = {"b": 1, "a": 3, None: 2}
    assert rejected_summary(counts) == (
        "rejected in the last hour: a 3, b 1, no suite named 2 "
        "(listed by `reliabilityd rejected [SUITE]`)"
    )
    assert rejected_summary(counts, "b") == (
        "rejected in the last hour: b 1, no suite named 2 (listed by `reliabilityd rejected b`)"
    )
    many: dict[str | None, int] = {f"s{i:02d}": 100 - i for i in range(25)}
    line = rejected_summary(many)
    assert line is not None
    assert line.startswith("rejected in the last hour: s00 100, s01 99, ")
    assert ", s09 91, 15 more suites " + str(sum(range(76, 91))) + " (listed by" in line
    assert rejected_summary({}) is None
    assert rejected_summary({"a": 1}, "b") is None
