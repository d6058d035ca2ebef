"""The alert state machine: every transition, hysteresis, flapping, UNKNOWN, staleness."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliabilityd.config import load
from reliabilityd.errors import ConfigError
from reliabilityd.rules.state import AlertState
from reliabilityd.rules.threshold import Observation, Rule, step, verdict

RULE = Rule(name="r", k=5, below=0.75, resolve_above=0.8, trigger="ci-low")


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
    rule = Rule(name="r", k=5, below=0.75, for_seconds=2.0, trigger="ci-low")
    assert run(rule, [0.7, 0.7, 0.7, 0.7]) == [
        ("pending", None),
        ("pending", None),
        ("firing", "firing"),
        ("firing", None),
    ]


def test_pending_back_to_inactive_when_the_breach_does_not_hold() -> None:
    rule = Rule(name="r", k=5, below=0.75, for_seconds=5.0, trigger="ci-low")
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
    rule = Rule(name="r", k=5, below=0.75, repeat=3.0, trigger="ci-low")
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
    rule = Rule(name="r", k=5, below=0.75, on_unknown="alert", trigger="ci-low")
    t = step(rule, AlertState(), obs(None), now=1.0)
    assert (t.new.state, t.notify, t.new.reason) == ("firing", "firing", "unknown")


def test_min_tasks_gives_no_verdict() -> None:
    rule = Rule(name="r", k=5, below=0.75, min_tasks=10, trigger="ci-low")
    t = step(rule, AlertState(), obs(0.1, tasks=9), now=1.0)
    assert (t.new.state, t.notify) == ("inactive", None)
    t = step(rule, AlertState(), obs(0.1, tasks=10), now=1.0)
    assert t.notify == "firing"


def test_pending_holds_its_timer_without_a_verdict() -> None:
    rule = Rule(name="r", k=5, below=0.75, for_seconds=2.0, trigger="ci-low")
    state = step(rule, AlertState(), obs(0.5), now=0.0).new
    state = step(rule, state, obs(None), now=1.0).new
    assert state.state == "pending"
    t = step(rule, state, obs(0.5), now=2.0)
    assert t.notify == "firing"
    assert t.new.started_at == 0.0  # the breach started when pending began


def test_stale_suite_breaches() -> None:
    rule = Rule(name="r", k=5, below=0.75, stale_after=60.0, trigger="ci-low")
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


# --- trigger = "detector" ----------------------------------------------------

DETECTOR = Rule(name="d", k=5, below=0.75, resolve_above=0.8, trigger="detector", evidence=12.0)


def dobs(
    evidence: float | None, value: float = 0.85, *, low: float = 0.7, high: float = 0.95
) -> Observation:
    return Observation(value=value, ci_low=low, ci_high=high, tasks=50, runs=20, evidence=evidence)


def test_the_rate_trigger_is_the_default_and_ci_low_ignores_evidence() -> None:
    assert Rule(name="r", k=5, below=0.75).trigger == "rate"
    detector = Rule(name="r", k=5, below=0.75, trigger="detector")
    assert verdict(detector, dobs(100.0, low=0.8), now=0.0)[0] == "breach"
    # Evidence is the detector's alone: the default rule ignores it.
    assert verdict(Rule(name="r", k=5, below=0.75), dobs(100.0, low=0.8), now=0.0)[0] == "clear"
    gate = Rule(name="r", k=5, below=0.75, trigger="ci-low")
    # Evidence is ignored by a ci-low rule: only the bound counts.
    assert verdict(gate, dobs(100.0, low=0.8), now=0.0)[0] == "clear"


def test_rule_config_names_the_trigger() -> None:
    rule = msgspec.toml.decode(
        b'name = "d"\nk = 5\nbelow = 0.75\ntrigger = "detector"\nevidence = 10\nrecent = 8\n',
        type=Rule,
    )
    assert (rule.trigger, rule.evidence, rule.recent) == ("detector", 10.0, 8)
    with pytest.raises(msgspec.ValidationError, match="trigger"):
        msgspec.toml.decode(b'name = "d"\nk = 5\nbelow = 0.75\ntrigger = "mean"\n', type=Rule)
    with pytest.raises(msgspec.ValidationError, match="evidence"):
        msgspec.toml.decode(b'name = "d"\nk = 5\nbelow = 0.75\nevidence = 0\n', type=Rule)


@pytest.mark.parametrize(
    ("ob", "expected"),
    [
        (dobs(12.0), "breach"),  # enough evidence of a drop to the threshold
        (dobs(11.9), "clear"),  # not enough, and the window is well above
        (dobs(None), "clear"),  # no detector input yet: the window decides
        (dobs(0.0, low=0.5), "clear"),  # a low CI lower bound alone is no breach
        (dobs(0.0, value=0.7, low=0.6, high=0.74), "breach"),  # the whole CI is under
        (dobs(0.0, value=0.78, low=0.7, high=0.85), "between"),  # under resolve_above
        (dobs(0.0, value=0.8), "clear"),
    ],
)
def test_detector_verdicts(ob: Observation, expected: str) -> None:
    assert verdict(DETECTOR, ob, now=0.0)[0] == expected


def test_detector_unknown_and_min_tasks_behave_as_before() -> None:
    unknown = Observation(value=None, ci_low=None, ci_high=None, tasks=50, runs=3, evidence=50.0)
    assert verdict(DETECTOR, unknown, now=0.0)[0] == "none"
    few = Rule(name="d", k=5, below=0.75, trigger="detector", min_tasks=60)
    assert verdict(few, dobs(50.0), now=0.0)[0] == "none"


def test_detector_fires_once_and_resolves_once() -> None:
    evs = [0.0, 3.0, 13.0, 20.0, 5.0, 0.0, 0.0]
    values = [0.9, 0.88, 0.8, 0.74, 0.7, 0.76, 0.82]
    state = AlertState()
    notes = []
    for i, (ev, v) in enumerate(zip(evs, values, strict=True)):
        t = step(DETECTOR, state, dobs(ev, v, low=v - 0.08, high=v + 0.08), now=float(i))
        state = t.new
        notes.append(t.notify)
    assert notes == [None, None, "firing", None, None, None, "resolved"]


@given(
    st.lists(
        st.tuples(st.floats(0.0, 30.0), st.floats(0.0, 1.0), st.floats(0.0, 0.2)),
        max_size=60,
    )
)
def test_detector_notifications_alternate_and_match_their_reasons(
    seq: list[tuple[float, float, float]],
) -> None:
    state = AlertState()
    notes = []
    for i, (ev, value, half) in enumerate(seq):
        high = min(1.0, value + half)
        t = step(DETECTOR, state, dobs(ev, value, low=max(0.0, value - half), high=high), float(i))
        if t.notify == "firing":
            assert ev >= DETECTOR.evidence or high < DETECTOR.below
        if t.notify == "resolved":
            assert value >= DETECTOR.resolve_at
            assert ev < DETECTOR.evidence
        if t.notify:
            notes.append(t.notify)
        state = t.new
    assert all(a != b for a, b in itertools.pairwise(notes))
    assert not notes or notes[0] == "firing"


def test_a_detector_rule_on_pass_at_k_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[[alerts]]\nname = "d"\nk = 5\nbelow = 0.75\nmetric = "pass@k"\ntrigger = "detector"\n'
    )
    with pytest.raises(ConfigError, match=r"alerts\[0\]\.trigger"):
        load(path, environ={})


def test_the_level_breaches_a_detector_rule_unless_turned_off() -> None:
    def lobs(level: float | None) -> Observation:
        return Observation(
            value=0.72, ci_low=0.6, ci_high=0.85, tasks=10, runs=20, evidence=1.0, level=level
        )

    assert DETECTOR.level_evidence == 1.0
    assert verdict(DETECTOR, lobs(1.0), now=0.0) == ("breach", "below")
    assert verdict(DETECTOR, lobs(0.9), now=0.0)[0] == "between"
    assert verdict(DETECTOR, lobs(None), now=0.0)[0] == "between"
    cusum_only = msgspec.structs.replace(DETECTOR, level_evidence=0.0)
    assert verdict(cusum_only, lobs(50.0), now=0.0)[0] == "between"
    # A ci-low rule reads neither statistic.
    assert (
        verdict(Rule(name="r", k=5, below=0.5, trigger="ci-low"), lobs(50.0), now=0.0)[0] == "clear"
    )
    with pytest.raises(msgspec.ValidationError, match="level_evidence"):
        msgspec.toml.decode(b'name = "d"\nk = 5\nbelow = 0.75\nlevel_evidence = -1\n', type=Rule)


def test_a_notification_says_what_its_trigger_breached_on() -> None:
    from reliabilityd.alerting.notify import Notification, describe

    note = Notification(
        id="s/r/1",
        rule="r",
        suite="s",
        metric="pass^k",
        k=5,
        trigger="detector",
        state="firing",
        reason="below",
        value=0.6,
        ci_low=0.5,
        ci_high=0.7,
        below=0.75,
        resolve_above=0.8,
        tasks=20,
        runs=20,
        started_at=None,
        severity="page",
        lottery=[],
        at="2026-12-01T00:00:00Z",
    )
    assert describe(note).endswith("the change detector says below 0.750")
    assert describe(msgspec.structs.replace(note, trigger="ci-low")).endswith(
        "lower bound below 0.750"
    )
    back = msgspec.structs.replace(note, state="resolved")
    assert describe(back).endswith(": back at or above 0.800")
    assert describe(msgspec.structs.replace(back, trigger="ci-low")).endswith(
        "lower bound back at or above 0.800"
    )
    assert msgspec.json.decode(msgspec.json.encode(note))["trigger"] == "detector"
