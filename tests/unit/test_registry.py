"""The registry of what is watched: every rule expanded onto the series it judges, pure."""

from __future__ import annotations

from reliabilityd.rules import CanaryRule, Rule
from reliabilityd.rules.canary import Compare
from reliabilityd.rules.registry import describe, involving, sliced_suites, watches

THRESHOLD = Rule(
    name="low",
    suite="deploy-*",
    k=5,
    below=0.75,
    resolve_above=0.8,
    slices=True,
    trigger="detector",
)
RATE = Rule(name="rate", suite="deploy-*", k=5, below=0.75, resolve_above=0.8)
GATE = Rule(name="gate", suite="deploy-a", k=5, below=0.75, trigger="ci-low")
CANARY = CanaryRule(
    name="canary",
    compare=Compare(baseline={"suite": "prod"}, candidate={"suite": "deploy-b"}),
    k=1,
)


def test_every_rule_on_every_series_it_watches_in_the_configs_order() -> None:
    suites = ["deploy-a", "deploy-b", "other", "prod"]
    assert sliced_suites([THRESHOLD, GATE], suites) == ["deploy-a", "deploy-b"]
    got = watches([THRESHOLD, GATE, CANARY], suites, {"deploy-a": ["model=x", "model=y"]})
    assert [(w.suite, w.name, w.slice, w.kind) for w in got] == [
        ("deploy-a", "low", None, "threshold"),
        ("deploy-b", "low", None, "threshold"),
        ("deploy-a", "low[model=x]", "model=x", "threshold"),
        ("deploy-a", "low[model=y]", "model=y", "threshold"),
        ("deploy-a", "gate", None, "threshold"),
        ("deploy-b", "canary", None, "canary"),
    ]
    assert {w.configured for w in got} == {"low", "gate", "canary"}
    # A canary reads both sides: it is on the baseline's list too, not on a slice's.
    assert [w.name for w in involving(got, "prod")] == ["canary"]
    assert [w.name for w in involving(got, "deploy-b")] == ["low", "canary"]
    assert [w.name for w in involving(got, "deploy-a", "model=y")] == ["low[model=y]"]
    (canary,) = involving(got, "prod")
    assert (canary.baseline, canary.candidate) == ("prod", "deploy-b")


def test_each_rule_is_described_by_its_trigger() -> None:
    detector = describe(THRESHOLD)
    assert detector.startswith("Fires when the change detector's evidence that pass^5 fell")
    assert "lower bound" not in detector
    assert "75.0%" in detector
    assert "back at 80.0% or above" in detector
    rate = describe(RATE)
    assert rate.startswith("Fires when each task's outcomes, against its reference rate from ")
    assert "24 h half-life" in rate
    assert "at most one false alarm in 14 days" in rate
    assert "an alarm holds 3600 s" in rate
    assert "back at 80.0% or above" in rate
    gate = describe(GATE)
    assert gate.startswith("Fires when the lower bound of pass^5's interval is under 75.0%")
    (watch,) = watches([CANARY], [], {})
    text = describe(watch)
    assert text.startswith("Compares pass^1 of deploy-b - prod")
    assert "upper bound is under -5.0 pp" in text
    (sliced,) = [w for w in watches([THRESHOLD], ["deploy-a"], {"deploy-a": ["m=x"]}) if w.slice]
    assert "judged on the slice m=x alone" in describe(sliced)
