"""The wire format: JSON or MessagePack, one event or an array, bad elements alone."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

from reliabilityd.events import TrialEvent, decode


def ev(**over: object) -> dict[str, object]:
    base: dict[str, object] = {"suite": "deploy-bot", "task": "t", "trial": "r1", "outcome": "pass"}
    base.update(over)
    return base


@pytest.mark.parametrize("encode", [msgspec.json.encode, msgspec.msgpack.encode])
def test_one_event_and_arrays_in_both_formats(encode: Callable[[object], bytes]) -> None:
    good, bad = decode(encode(ev(ts=1764460800.5, labels={"model": "m1"})))
    assert bad == []
    assert good == [
        TrialEvent("deploy-bot", "t", "r1", "pass", ts=1764460800.5, labels={"model": "m1"})
    ]
    good, bad = decode(encode([ev(trial="a"), ev(trial="b", outcome="skip")]))
    assert [e.trial for e in good] == ["a", "b"]
    assert bad == []


def test_json_with_leading_whitespace() -> None:
    good, _ = decode(b"  \n" + msgspec.json.encode(ev()))
    assert len(good) == 1


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (ev(suite=""), "suite is empty"),
        (ev(task="a\nb"), "task contains a control character"),
        (ev(suite="a/b"), "suite contains one of"),
        (ev(suite="a{b"), "suite contains one of"),
        (ev(suite="a#"), "suite contains one of"),
        (ev(trial="x" * 201), "trial is longer than 200 bytes"),
        (ev(task="é" * 101), "task is longer than 200 bytes"),
        (ev(outcome="maybe"), "Invalid enum value 'maybe'"),
        ({"suite": "s", "task": "t", "outcome": "pass"}, "missing required field `trial`"),
        (ev(ts="yesterday"), "Expected `float | null`"),
    ],
)
def test_bad_elements_are_rejected_alone_with_reason(event: dict[str, object], reason: str) -> None:
    payload = msgspec.json.encode([ev(trial="ok1"), event, ev(trial="ok2")])
    good, bad = decode(payload)
    assert [e.trial for e in good] == ["ok1", "ok2"]
    assert len(bad) == 1
    assert reason in bad[0].reason
    assert bad[0].reason.startswith("element 1")
    assert msgspec.json.decode(bad[0].raw) == event
    # Alone, the same event is rejected whole with the same reason.
    good, bad = decode(msgspec.json.encode(event))
    assert good == []
    assert reason in bad[0].reason


def test_names_at_the_limit_are_fine() -> None:
    good, bad = decode(msgspec.json.encode(ev(task="é" * 100, suite="s" * 200)))
    assert bad == []
    assert len(good) == 1


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "empty payload"),
        (b"{not json", "not valid JSON"),
        (b"[1,", "not valid JSON"),
        (b"hello", "not JSON: plain text 'hello'"),
        (b"\xc1", "not valid MessagePack"),
        (b"42", "not a trial event"),
    ],
)
def test_undecodable_payloads(payload: bytes, reason: str) -> None:
    good, bad = decode(payload)
    assert good == []
    assert len(bad) == 1
    assert reason in bad[0].reason
    assert bad[0].raw == payload


def test_payload_size_limit() -> None:
    payload = msgspec.json.encode([ev(trial=str(i)) for i in range(100)])
    good, bad = decode(payload, max_payload=len(payload) - 1)
    assert good == []
    assert "exceeds" in bad[0].reason
    good, _ = decode(payload, max_payload=len(payload))
    assert len(good) == 100
