"""The threshold rule: does a suite's metric at k stand under ``below``?

A threshold rule is an ``[[alerts]]`` table without ``compare``. It never
fires on the point estimate alone; its trigger says what breaches, and the
verdict moves the shared state machine (``state.advance``).

* ``trigger = "rate"``, the default, breaches on an alarm of the rate
  statistics (``stats.ratecusum``: each task's outcomes since the last tick
  against its reference rate from counts with a ``half_life`` of a day, with
  thresholds from Ville's inequality for at most one false alarm per
  ``budget_days``; no alarm counts in its first ``warmup`` seconds), or on
  the CI upper bound under ``below``. An alarm is a breach for ``hold``
  seconds (a regression that persists alarms again within its delay); a
  firing alert resolves when the point estimate is back at
  ``resolve_above`` and no alarm holds. It needs no window: the statistics
  difference each task's lifetime counts, which the store keeps for every
  suite. It is the default because the oracle study measured it within 2x
  of the fastest detector there can be, at one false page in two weeks
  (docs/studies.md, "The oracle").
* ``trigger = "detector"`` breaches on ``Observation.evidence``
  (nats, from ``detector.evidence`` over the suite's committed windows: a
  recent change) reaching ``evidence``, on ``Observation.level``
  (``detector.level``: the whole windows against ``below``, which catches
  drifts and small suites) reaching ``level_evidence``, or on the CI upper
  bound under ``below``; a firing alert resolves when the point estimate is
  back at ``resolve_above``. Without a window there is no evidence (None),
  and only the upper bound can breach. On a steady windowed suite
  it pages a tenth as often as the lower bound (docs/studies.md).
* ``trigger = "ci-low"``, a gate's criterion, breaches when
  ``ci_low < below`` (equal is not a breach) and resolves only when
  ``ci_low >= resolve_above`` (hysteresis: a bound hovering between the two
  thresholds neither fires nor resolves).

An UNKNOWN value is a visible state, never a pass: with
``on_unknown = "alert"`` it counts as a breach, and either way it never
resolves a firing alert. Too few tasks with n >= k (``min_tasks``) gives no
verdict. A suite without a counted trial for ``stale_after`` seconds
breaches too, so a dead judge or a stopped fleet is noticed.

Pure: the daemon reads the snapshot, judges, and applies the transition by
compare-and-set (``alerting.evaluator``).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from reliabilityd.rules.state import (
    AlertState,
    Probability,
    Reason,
    RuleName,
    Seconds,
    Transition,
    Verdict,
    advance,
)
from reliabilityd.stats.intervals import IntervalName
from reliabilityd.stats.ratecusum import Knobs

__all__ = ["Observation", "Rule", "Trigger", "for_slice", "step", "verdict"]

Trigger = Literal["ci-low", "detector", "rate"]


class Rule(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="kind",
    tag="threshold",
):
    """One ``[[alerts]]`` table of the config without ``compare`` (a canary rule has one)."""

    name: RuleName
    # Glob over suite names.
    suite: str = "*"
    metric: Literal["pass^k", "pass@k"] = "pass^k"
    k: Annotated[int, msgspec.Meta(ge=1)]
    # Fires when the CI lower bound is below this (equal is not a breach).
    below: Probability
    # The bound must reach this to resolve; defaults to `below`; must be >= below.
    resolve_above: Probability | None = None
    # Seconds the breach must hold before firing (`for` in the config).
    for_seconds: Seconds = msgspec.field(default=0.0, name="for")
    # No verdict while fewer tasks have n >= k.
    min_tasks: Annotated[int, msgspec.Meta(ge=1)] = 1
    # Re-notify every `repeat` seconds while firing; 0 = never.
    repeat: Seconds = 0.0
    on_unknown: Literal["ignore", "alert"] = "ignore"
    severity: Annotated[str, msgspec.Meta(min_length=1)] = "page"
    # Notify when the suite has had no counted trial for this many seconds.
    stale_after: Annotated[float, msgspec.Meta(gt=0)] | None = None
    # What breaches: "rate" (the default: an alarm of the rate statistics, or the
    # CI upper bound under `below`; pass^k only; reliabilityd/stats/ratecusum.py),
    # "detector" (``detector.evidence`` reaching `evidence` nats that pass^k has
    # moved to `below` or under it, ``detector.level`` reaching `level_evidence`,
    # or the CI upper bound under `below`; needs the suite's window;
    # reliabilityd/stats/detector.py) or "ci-low" (a gate's criterion: the CI
    # lower bound under `below`).
    trigger: Trigger = "rate"
    # The CI this rule judges (reliabilityd.INTERVALS); None = its suite's interval.
    interval: IntervalName | None = None
    # Nats of evidence a "detector" rule needs to breach.
    evidence: Annotated[float, msgspec.Meta(gt=0)] = 12.0
    # Nats of evidence from the whole windows that pass^k is under `below`
    # (``detector.level``) a "detector" rule needs to breach; 0 = not used.
    level_evidence: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    # How many of each task's most recent outcomes the detector scans.
    recent: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 5
    # A "rate" rule's statistics (reliabilityd/stats/ratecusum.py): at most one false
    # alarm per `budget_days` in expectation at the reference rates; change points
    # every `grid` seconds; the share of tasks a drop is expected to touch; the share
    # of a task's trials a new failure mode fails; the pseudo-trials that shrink a
    # task's reference to the suite's; the half-life (seconds) of the reference counts.
    budget_days: Annotated[float, msgspec.Meta(gt=0)] = 14.0
    grid: Annotated[float, msgspec.Meta(ge=1, le=3600)] = 60.0
    share: Annotated[float, msgspec.Meta(gt=0, lt=1)] = 0.3
    kill: Annotated[float, msgspec.Meta(gt=0, lt=1)] = 0.3
    prior: Annotated[float, msgspec.Meta(gt=0)] = 5.0
    half_life: Annotated[float, msgspec.Meta(gt=0)] = 86400.0
    # Seconds a "rate" rule's statistics run before their alarms count (its references
    # refresh at every tick until then); a new suite breaches only on the interval's
    # upper bound meanwhile.
    warmup: Seconds = 6 * 3600.0
    # Seconds an alarm of a "rate" rule is a breach; the evaluator must judge within
    # it (a few ci_intervals at least).
    hold: Annotated[float, msgspec.Meta(gt=0)] = 3600.0
    # Judge each slice of the suites the rule watches as well, each slice on
    # its own snapshot and with its own state (``for_slice``; docs/slices.md).
    slices: bool = False

    @property
    def resolve_at(self) -> float:
        return self.below if self.resolve_above is None else self.resolve_above

    def knobs(self) -> Knobs:
        """A "rate" rule's statistics, as ``stats.ratecusum`` takes them."""
        return Knobs(
            k=self.k,
            below=self.below,
            budget=self.budget_days * 86400.0,
            grid=self.grid,
            share=self.share,
            kill=self.kill,
            prior=self.prior,
            half_life=self.half_life,
            warmup=self.warmup,
        )


def for_slice(rule: Rule, slice_id: str) -> Rule:
    """The rule as it judges one slice: named ``<rule>[<slice id>]``.

    That name keys the slice's own state, outboxes and notifications (under
    the suite's hash tag) and names the slice in every page. A slice id
    holds no ``/ + #`` (``stats.slices.escape``), so the name stays a valid
    MQTT topic level.
    """
    return msgspec.structs.replace(rule, name=f"{rule.name}[{slice_id}]", slices=False)


class Observation(msgspec.Struct, frozen=True, kw_only=True):
    """What the latest snapshot says about a rule's metric at its k."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    tasks: int
    runs: int
    last_trial_at: float | None = None
    # The change detector's evidence that pass^k is below `below` now
    # (``detector.evidence``); only rules with ``trigger = "detector"`` read it.
    evidence: float | None = None
    # ``detector.level``: the whole windows' evidence that pass^k is under `below`.
    level: float | None = None
    # Unix seconds of the rate statistics' last alarm (``trigger = "rate"`` rules).
    alarmed_at: float | None = None


def verdict(rule: Rule, obs: Observation, now: float) -> tuple[Verdict, Reason | None]:
    """How an observation stands against a rule, and why it breaches."""
    if (
        rule.stale_after is not None
        and obs.last_trial_at is not None
        and now - obs.last_trial_at > rule.stale_after
    ):
        return "breach", "stale"
    if obs.value is None or obs.ci_low is None:
        return ("breach", "unknown") if rule.on_unknown == "alert" else ("none", None)
    if obs.tasks < rule.min_tasks:
        return "none", None
    if rule.trigger == "detector":
        return _detector_verdict(rule, obs)
    if rule.trigger == "rate":
        return _rate_verdict(rule, obs, now)
    if obs.ci_low < rule.below:
        return "breach", "below"
    if obs.ci_low >= rule.resolve_at:
        return "clear", None
    return "between", None


def _detector_verdict(rule: Rule, obs: Observation) -> tuple[Verdict, Reason | None]:
    # Evidence of a change now, of the windows under the threshold, or a
    # whole CI under it.
    if (
        (obs.evidence is not None and obs.evidence >= rule.evidence)
        or (rule.level_evidence > 0 and obs.level is not None and obs.level >= rule.level_evidence)
        or (obs.ci_high is not None and obs.ci_high < rule.below)
    ):
        return "breach", "below"
    assert obs.value is not None  # verdict() returned on UNKNOWN
    if obs.value >= rule.resolve_at:
        return "clear", None
    return "between", None


def _rate_verdict(rule: Rule, obs: Observation, now: float) -> tuple[Verdict, Reason | None]:
    # An alarm breaches for `hold` seconds; then, as for every trigger, a firing alert
    # stays firing until the point estimate is back at `resolve_above`.
    held = obs.alarmed_at is not None and now - obs.alarmed_at < rule.hold
    if held or (obs.ci_high is not None and obs.ci_high < rule.below):
        return "breach", "below"
    if obs.value is not None and obs.value >= rule.resolve_at:
        return "clear", None
    return "between", None


def step(rule: Rule, current: AlertState, obs: Observation, now: float) -> Transition:
    """The next state of one rule on one suite, and what to notify (if anything)."""
    v, reason = verdict(rule, obs, now)
    return advance(current, v, reason, now, for_seconds=rule.for_seconds, repeat=rule.repeat)
