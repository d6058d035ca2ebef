"""The alert state machine: every transition, hysteresis, flapping, UNKNOWN, staleness."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliabilityd.alerts import AlertState, Observation, Rule, step, verdict

RULE = Rule(name="r", k=5, below=0.75, resolve_above=0.8)


def obs(ci_low: float | None, *, tasks: int = 20, last: float | None = None) -> Observation:
    value = None if ci_low is None else min(1.0, ci_low + 0.05)
    high = None if ci_low is None else min(1.0, ci_low + 0.1)
    return Observation(
        value=value, ci_low=ci_low, ci_high=high, tasks=tasks, runs=5, last_trial_at=last
    )


def run(
    rule: Rule, lows: Sequence[float | None], *, dt: float = 1.0
) -> list[tuple[str, str | None]]:
    state = AlertState()
    out: list[tuple[str, str | None]] = []
    for i, low in enumerate(lows):
        t = step(rule, state, obs(low), now=1000.0 + i * dt)
        state = t.new
        out.append((state.state, t.notify))
    return out


def test_inactive_to_firing_without_for() -> None:
    assert run(RULE, [0.9, 0.7]) == [("inactive", None), ("firing", "firing")]


def test_equal_to_below_is_not_a_breach() -> None:
    assert run(RULE, [0.75]) == [("inactive", None)]


def test_pending_then_firing_after_for() -> None:
    rule = Rule(name="r", k=5, below=0.75, for_seconds=2.0)
    assert run(rule, [0.7, 0.7, 0.7, 0.7]) == [
        ("pending", None),
        ("pending", None),
        ("firing", "firing"),
        ("firing", None),
    ]


def test_pending_back_to_inactive_when_the_breach_does_not_hold() -> None:
    rule = Rule(name="r", k=5, below=0.75, for_seconds=5.0)
    assert run(rule, [0.7, 0.76, 0.7]) == [
        ("pending", None),
        ("inactive", None),
        ("pending", None),
    ]


def test_firing_resolves_only_above_resolve_threshold() -> None:
    assert run(RULE, [0.7, 0.77, 0.79, 0.8]) == [
        ("firing", "firing"),
        ("firing", None),
        ("firing", None),
        ("resolved", "resolved"),
    ]


def test_resolved_can_fire_again_on_a_new_breach() -> None:
    assert [n for _, n in run(RULE, [0.7, 0.85, 0.7])] == ["firing", "resolved", "firing"]


def test_flapping_around_the_threshold_fires_once() -> None:
    lows = [0.74, 0.76, 0.74, 0.76, 0.745, 0.79, 0.749, 0.751] * 5
    notes = [n for _, n in run(RULE, lows) if n]
    assert notes == ["firing"]


@given(st.lists(st.floats(0.0, 1.0), max_size=60))
def test_notifications_alternate_and_match_thresholds(lows: list[float]) -> None:
    state = AlertState()
    notes = []
    for i, low in enumerate(lows):
        t = step(RULE, state, obs(low), now=float(i))
        if t.notify == "firing":
            assert low < RULE.below
        if t.notify == "resolved":
            assert low >= RULE.resolve_at
        if t.notify:
            notes.append(t.notify)
        state = t.new
    # firing, resolved, firing, ... never two of a kind in a row
    assert all(a != b for a, b in itertools.pairwise(notes))
    assert not notes or notes[0] == "firing"


def test_repeat_renotifies_while_firing() -> None:
    rule = Rule(name="r", k=5, below=0.75, repeat=3.0)
    notes = [n for _, n in run(rule, [0.7] * 8)]
    assert notes == ["firing", None, None, "repeat", None, None, "repeat", None]


def test_unknown_is_ignored_by_default_and_never_resolves() -> None:
    assert run(RULE, [None, None]) == [("inactive", None), ("inactive", None)]
    assert run(RULE, [0.7, None, None, 0.9]) == [
        ("firing", "firing"),
        ("firing", None),
        ("firing", None),
        ("resolved", "resolved"),
    ]


def test_unknown_alerts_when_asked() -> None:
    rule = Rule(name="r", k=5, below=0.75, on_unknown="alert")
    t = step(rule, AlertState(), obs(None), now=1.0)
    assert (t.new.state, t.notify, t.new.reason) == ("firing", "firing", "unknown")


def test_min_tasks_gives_no_verdict() -> None:
    rule = Rule(name="r", k=5, below=0.75, min_tasks=10)
    t = step(rule, AlertState(), obs(0.1, tasks=9), now=1.0)
    assert (t.new.state, t.notify) == ("inactive", None)
    t = step(rule, AlertState(), obs(0.1, tasks=10), now=1.0)
    assert t.notify == "firing"


def test_pending_holds_its_timer_without_a_verdict() -> None:
    rule = Rule(name="r", k=5, below=0.75, for_seconds=2.0)
    state = step(rule, AlertState(), obs(0.5), now=0.0).new
    state = step(rule, state, obs(None), now=1.0).new
    assert state.state == "pending"
    t = step(rule, state, obs(0.5), now=2.0)
    assert t.notify == "firing"
    assert t.new.started_at == 0.0  # the breach started when pending began


def test_stale_suite_breaches() -> None:
    rule = Rule(name="r", k=5, below=0.75, stale_after=60.0)
    fresh = step(rule, AlertState(), obs(0.9, last=1000.0), now=1030.0)
    assert fresh.notify is None
    stale = step(rule, AlertState(), obs(0.9, last=1000.0), now=1061.0)
    assert (stale.notify, stale.new.reason) == ("firing", "stale")
    back = step(rule, stale.new, obs(0.9, last=1070.0), now=1071.0)
    assert back.notify == "resolved"


@pytest.mark.parametrize(
    ("low", "expected"),
    [(0.74, "breach"), (0.75, "between"), (0.79, "between"), (0.8, "clear"), (None, "none")],
)
def test_verdicts(low: float | None, expected: str) -> None:
    assert verdict(RULE, obs(low), now=0.0)[0] == expected
