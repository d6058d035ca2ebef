"""Fuzzing the wire decoder: whatever arrives, `decode` answers and never raises.

A payload that made `decode` raise would never be acknowledged, and the
broker would redeliver it to every restarted daemon: a crash loop. These
properties run over raw bytes and over structure (JSON and MessagePack with
nesting of every depth, numbers at and past every limit, NaN and infinities,
wrong types, enormous strings and arrays, invalid UTF-8, arrays mixing good
and bad elements).
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any

import msgspec
from hypothesis import assume, example, given
from hypothesis import strategies as st
from hypothesis.internal.charmap import CategoryName

from reliabilityd.events import MAX_TS, TrialEvent, decode, decode_many, validate
from reliabilityd.names import MAX_NAME_BYTES

OUTCOMES = ("pass", "fail", "error", "skip")
# A valid name: no control, format or surrogate character, no noncharacter
# (Cn, with the unassigned code points), no line or paragraph separator; NFC,
# with no white space at either end.
_EXCLUDED: tuple[CategoryName, ...] = ("Cc", "Cf", "Cs", "Cn", "Zl", "Zp")


def _name(chars: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return (
        st.text(chars, min_size=1, max_size=40)
        .map(lambda text: unicodedata.normalize("NFC", text).strip())
        .filter(lambda text: 0 < len(text.encode()) <= MAX_NAME_BYTES)
    )


GOOD_NAME = _name(st.characters(codec="utf-8", exclude_categories=_EXCLUDED))
GOOD_SUITE = _name(
    st.characters(codec="utf-8", exclude_categories=_EXCLUDED, exclude_characters="{}/+#")
)


def _check(payload: bytes, max_payload: int = 1 << 20) -> tuple[list[TrialEvent], list[Any]]:
    good, bad = decode(payload, max_payload)
    # Every message yields something: counted events or dead letters with a reason.
    assert good or bad
    for event in good:
        assert validate(event) is None
    for item in bad:
        assert item.reason
        assert isinstance(item.raw, bytes)
    return good, bad


good_events = st.builds(
    lambda s, t, r, o, ts: {"suite": s, "task": t, "trial": r, "outcome": o, "ts": ts},
    GOOD_SUITE,
    GOOD_NAME,
    GOOD_NAME,
    st.sampled_from(OUTCOMES),
    # Unix seconds: anything at or past MAX_TS is a millisecond stamp, rejected.
    st.none() | st.floats(min_value=-MAX_TS, max_value=MAX_TS, exclude_min=True, exclude_max=True),
)

numbers = (
    st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()  # NaN and infinities included (MessagePack carries them)
    | st.sampled_from([0, -0.0, 2**63, -(2**63) - 1, 2**64, 1e308, 5e-324])
)
scalars = (
    st.none()
    | st.booleans()
    | numbers
    | st.text(max_size=30)
    | st.binary(max_size=30)
    | st.text(min_size=190, max_size=260)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=30,
)
# Events with any field replaced by any value, or missing, or extra.
mangled_events = st.builds(
    lambda base, field, value, drop: (
        {k: v for k, v in base.items() if k != field} if drop else {**base, field: value}
    ),
    good_events,
    st.sampled_from(["suite", "task", "trial", "outcome", "ts", "labels", "extra"]),
    values,
    st.booleans(),
)


def _encode(obj: Any, fmt: str) -> bytes:
    """Encode in the preferred format, else the other (JSON has no NaN or bytes,
    MessagePack no integers past 64 bits); a document neither can carry is skipped."""
    encoders = [msgspec.json.encode, msgspec.msgpack.encode]
    if fmt != "json":
        encoders.reverse()
    for encode in encoders:
        try:
            return encode(obj)
        except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
            continue
    assume(False)
    raise AssertionError("unreachable")


@given(st.binary(max_size=4096))
@example(b"\x91" * 10_000 + b"\x90")  # MessagePack nested 10,000 deep
@example(b"[" * 5000 + b"]" * 5000)  # JSON nested 5,000 deep: about 10 KB
@example(b"\xdd\xff\xff\xff\xff")  # MessagePack array header claiming 4 billion elements
@example(b"\xff\xfe\xfd")
@example(b"  ")
@example(b"")
def test_raw_bytes_never_raise(payload: bytes) -> None:
    _check(payload)


@given(st.lists(mangled_events | good_events | values, max_size=8), st.sampled_from(["json", "mp"]))
def test_structured_garbage_never_raises_and_good_elements_count(
    items: list[Any], fmt: str
) -> None:
    payload = _encode(items, fmt)
    good, bad = _check(payload)
    if len(items) > 0:
        # Elements are judged alone: each one is either counted or dead-lettered.
        assert len(good) + len(bad) == len(items)


def _nested(depth: int, fmt: str) -> bytes:
    """An empty array nested `depth` deep, built as bytes (encoders refuse such depths)."""
    if fmt == "json":
        return b"[" * depth + b"]" * depth
    return b"\x91" * depth + b"\x90"


EVENT = {"suite": "s", "task": "t", "trial": "1", "outcome": "pass"}


@given(st.integers(min_value=1, max_value=20_000), st.sampled_from(["json", "mp"]), st.booleans())
def test_nesting_of_every_depth(depth: int, fmt: str, in_labels: bool) -> None:
    deep = _nested(depth, fmt)
    if fmt == "json":
        event = msgspec.json.encode(EVENT)
        if in_labels:
            payload = event[:-1] + b',"labels":{"deep":' + deep + b"}}"
        else:
            payload = b"[" + event + b"," + deep + b"]"
    else:
        event = msgspec.msgpack.encode(EVENT)
        if in_labels:
            # fixmap of 5 entries: the 4 fields, then "labels": {"deep": <nested>}
            payload = b"\x85" + event[1:] + b"\xa6labels\x81\xa4deep" + deep
        else:
            payload = b"\x92" + event + deep
    good, bad = _check(payload)
    if depth < 100:
        # Shallow enough to split: the good event counts, the culprit alone is rejected.
        assert len(good) == 1
        assert len(bad) == (0 if in_labels else 1)


def test_deep_element_in_an_array_rejects_only_what_cannot_be_split() -> None:
    payload = b"[" + msgspec.json.encode(EVENT) + b"," + _nested(5000, "json") + b"]"
    good, bad = _check(payload)
    # Nested past the decoder's limit, the array cannot be split into elements:
    # it is dead-lettered whole, with the reason, and acknowledged.
    assert good == []
    assert len(bad) == 1
    assert "RecursionError" in bad[0].reason


@given(good_events, st.sampled_from(["json", "mp"]))
def test_good_events_round_trip(event: dict[str, Any], fmt: str) -> None:
    good, bad = _check(_encode(event, fmt))
    assert bad == []
    assert [(e.suite, e.task, e.trial, e.outcome) for e in good] == [
        (event["suite"], event["task"], event["trial"], event["outcome"])
    ]


@given(st.sampled_from([math.nan, math.inf, -math.inf]))
def test_non_finite_timestamps_are_rejected(ts: float) -> None:
    payload = msgspec.msgpack.encode(
        {"suite": "s", "task": "t", "trial": "1", "outcome": "pass", "ts": ts}
    )
    good, bad = _check(payload)
    assert good == []
    assert "ts is not a finite number" in bad[0].reason


@given(st.binary(min_size=1, max_size=64))
def test_invalid_utf8_names_are_dead_lettered(junk: bytes) -> None:
    # MessagePack str with arbitrary bytes (often invalid UTF-8) as the task name.
    header = bytes([0xD9, len(junk)])
    body = b"\x84\xa5suite\xa1s\xa4task" + header + junk + b"\xa5trial\xa11\xa7outcome\xa4pass"
    good, _ = _check(body)
    for event in good:
        assert 0 < len(event.task.encode("utf-8", "surrogatepass")) <= MAX_NAME_BYTES


@given(st.integers(min_value=1, max_value=2000))
def test_payload_limit_holds_for_any_size(limit: int) -> None:
    payload = msgspec.json.encode(
        [{"suite": "s", "task": "t", "trial": str(i), "outcome": "pass"} for i in range(40)]
    )
    good, bad = _check(payload, max_payload=limit)
    if len(payload) > limit:
        assert good == []
        assert "exceeds" in bad[0].reason
    else:
        assert len(good) == 40


# Events that decode but fail validation: a name empty, too long, with a
# control character, a suite with a forbidden character, a non-finite ts.
invalid_events = st.builds(
    lambda base, field, value: {**base, field: value},
    good_events,
    st.sampled_from(["suite", "task", "trial"]),
    st.sampled_from(["", "a\x00b", "x" * 201, "é" * 101, "a{b", "a/b", "#"]),
) | st.builds(
    lambda base, ts: {**base, "ts": ts}, good_events, st.sampled_from([math.nan, math.inf])
)

# One message of each kind a batch can hold: a good, invalid or mangled event
# alone (the fast path's shape), an array, arbitrary structure, raw bytes.
batch_payloads = st.lists(
    st.builds(
        _encode,
        good_events | invalid_events | mangled_events | st.lists(good_events, max_size=3),
        st.sampled_from(["json", "mp"]),
    )
    | st.builds(_encode, values, st.sampled_from(["json", "mp"]))
    | st.binary(max_size=64),
    max_size=12,
)


@given(batch_payloads, st.sampled_from([1 << 20, 40]))
# Found by make fuzz: a label holding NaN (equal events, but NaN != NaN).
@example(
    [
        _encode(
            {
                "suite": "s",
                "task": "t",
                "trial": "1",
                "outcome": "pass",
                "labels": {"": [math.nan]},
            },
            "mp",
        )
    ],
    1 << 20,
)
def test_a_batch_decodes_exactly_as_its_messages_alone(payloads: list[bytes], limit: int) -> None:
    """The batch decoder's fast path accepts and rejects exactly what `decode` does."""
    sources = [f"mqtt:t{i}" for i in range(len(payloads))]
    good, bad = decode_many(list(zip(payloads, sources, strict=True)), limit)
    want_good: list[TrialEvent] = []
    want_bad: list[tuple[Any, str]] = []
    for payload, source in zip(payloads, sources, strict=True):
        g, b = decode(payload, limit)
        want_good += g
        want_bad += [(item, source) for item in b]
    # Compared by their reprs: a label may hold NaN, which equals nothing, itself included,
    # or an integer past 64 bits, which MessagePack cannot carry.
    assert repr(good) == repr(want_good)
    assert bad == want_bad
