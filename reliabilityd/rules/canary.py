"""The canary rule: is the candidate less reliable than the baseline by more than a margin?

A canary rule is an ``[[alerts]]`` table with ``compare``. It compares two
sides paired over the tasks both have (``stats.compare``: the per-task
difference ``candidate - baseline`` in the rule's metric at its k, with a
paired cluster-bootstrap interval) and

* breaches (reason ``worse``) when the interval's upper bound is under
  ``-margin``: at the interval's confidence the candidate is worse by more
  than the margin;
* clears when the upper bound is back at or above ``-resolve_margin``
  (default ``margin / 2``), so a bound hovering between the two neither
  fires nor resolves;
* is UNKNOWN when fewer than ``min_shared`` tasks are shared, when k exceeds
  a shared task's trials on either side, or when a side cannot be read:
  with ``on_unknown = "alert"`` that breaches, and it never resolves a
  firing alert.

``for`` and ``repeat`` behave as for every rule (``rules.advance``).

A side is a table: ``suite`` names a suite, every other key is a label
filter (a slice of the suite). Either both sides name their suite (two
suites compared; the rule's state lives under the candidate suite's hash
tag) or neither does (two slices of each suite the rule's ``suite`` glob
matches; the state lives under that suite's tag). A label-filtered side is
the sum, task by task, of the suite's slices that carry those label values
(``stats.compare.Side`` with labels); a suite not sliced by a label the side
names gives an UNKNOWN comparison with that reason.

Pure: the daemon reads both sides' counts, compares, and applies the
transition by compare-and-set (``daemon._canary``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

import msgspec

from reliabilityd.rules.state import (
    AlertState,
    Reason,
    RuleName,
    Seconds,
    Transition,
    Verdict,
    advance,
)
from reliabilityd.stats.compare import DEFAULT_MIN_SHARED, Comparison, MovedTask, Side
from reliabilityd.stats.estimators import METRICS, Metric
from reliabilityd.stats.paired import Difference, PairedInterval

__all__ = [
    "CanaryDetail",
    "CanaryRule",
    "CanaryView",
    "Compare",
    "Pair",
    "SideRef",
    "detail",
    "fewest_runs",
    "pairs",
    "side",
    "side_parts",
    "step",
    "unknown",
    "verdict",
    "view",
]

# A side table's keys and values: label names and values (and `suite`, a suite name).
LabelKey = Annotated[
    str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
]
LabelValue = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
SideTable = Annotated[dict[LabelKey, LabelValue], msgspec.Meta(min_length=1)]
Margin = Annotated[float, msgspec.Meta(ge=0, lt=1)]


class Compare(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``compare = { baseline = {...}, candidate = {...} }``: the two sides of a canary rule."""

    baseline: SideTable
    candidate: SideTable


class CanaryRule(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="kind",
    tag="canary",
):
    """One ``[[alerts]]`` table with ``compare``: the candidate against the baseline."""

    name: RuleName
    compare: Compare
    # Glob over the suites whose slices are compared; only when the sides
    # name no suite (None = every suite).
    suite: str | None = None
    metric: Metric = "pass^k"
    k: Annotated[int, msgspec.Meta(ge=1)]
    # Fires when the difference's upper bound is under -margin.
    margin: Margin = 0.05
    # Resolves when the upper bound is back at or above -resolve_margin;
    # None = margin / 2; must not exceed margin.
    resolve_margin: Margin | None = None
    # UNKNOWN while fewer tasks are shared.
    min_shared: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_MIN_SHARED
    # The tasks that got worse named in a notification, most first.
    top: Annotated[int, msgspec.Meta(ge=1, le=50)] = 5
    for_seconds: Seconds = msgspec.field(default=0.0, name="for")
    repeat: Seconds = 0.0
    on_unknown: Literal["ignore", "alert"] = "ignore"
    severity: Annotated[str, msgspec.Meta(min_length=1)] = "page"
    # The difference's interval (stats.paired.PAIRED_INTERVALS: a suite's, or "student");
    # None = the candidate suite's.
    interval: PairedInterval | None = None

    @property
    def resolve_at(self) -> float:
        """The margin the upper bound must be back within to resolve."""
        return self.margin / 2 if self.resolve_margin is None else self.resolve_margin


class SideRef(msgspec.Struct, frozen=True):
    """One side of one comparison: a suite and the label filter within it (empty: all of it)."""

    suite: str
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        if not self.labels:
            return self.suite
        return side(self).label  # as stats.compare.Side labels a sliced side


class Pair(msgspec.Struct, frozen=True):
    """A rule's two sides in one place; ``home`` is the suite that holds its state."""

    home: str
    baseline: SideRef
    candidate: SideRef

    @property
    def suites(self) -> frozenset[str]:
        return frozenset((self.baseline.suite, self.candidate.suite))


def side_parts(table: Mapping[str, str]) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """A side table as (its suite or None, its label filters in key order)."""
    labels = tuple(sorted((k, v) for k, v in table.items() if k != "suite"))
    return table.get("suite"), labels


def pairs(rule: CanaryRule, suites: Sequence[str]) -> list[Pair]:
    """The comparisons a rule makes, given the suites Redis knows.

    Two named suites give one comparison, judged whether or not they exist
    yet (a suite without data shares no task: UNKNOWN). Label filters give
    one comparison per suite the rule's glob matches.
    """
    b_suite, b_labels = side_parts(rule.compare.baseline)
    c_suite, c_labels = side_parts(rule.compare.candidate)
    if b_suite is not None and c_suite is not None:
        return [Pair(c_suite, SideRef(b_suite, b_labels), SideRef(c_suite, c_labels))]
    pattern = rule.suite or "*"
    return [
        Pair(s, SideRef(s, b_labels), SideRef(s, c_labels))
        for s in suites
        if fnmatch.fnmatchcase(s, pattern)
    ]


def side(ref: SideRef) -> Side:
    """The ``stats.compare.Side`` a side names: a suite, or the slices its labels filter."""
    return Side(ref.suite, dict(ref.labels))


def unknown(rule: CanaryRule, pair: Pair, reason: str) -> Comparison:
    """An UNKNOWN comparison of a pair whose sides could not be read, with the reason."""
    metrics: tuple[Metric, ...] = (rule.metric, *(m for m in METRICS if m != rule.metric))
    return Comparison(
        baseline=pair.baseline.label,
        candidate=pair.candidate.label,
        k=rule.k,
        metric=rule.metric,
        shared=0,
        only_baseline=0,
        only_candidate=0,
        min_shared=rule.min_shared,
        differences={
            m: Difference(
                metric=m,
                k=rule.k,
                value=None,
                ci=None,
                baseline=None,
                candidate=None,
                tasks=0,
                unknown_reason=reason,
            )
            for m in metrics
        },
        moved=[],
        unknown_reason=reason,
    )


def verdict(rule: CanaryRule, cmp: Comparison) -> tuple[Verdict, Reason | None]:
    """How a comparison stands against a canary rule, and why it breaches."""
    diff = cmp.difference(rule.metric)
    if diff.ci is None:
        return ("breach", "unknown") if rule.on_unknown == "alert" else ("none", None)
    high = diff.ci[1]
    if high < -rule.margin:
        return "breach", "worse"
    if high >= -rule.resolve_at:
        return "clear", None
    return "between", None


def step(rule: CanaryRule, current: AlertState, cmp: Comparison, now: float) -> Transition:
    """The next state of one canary comparison, and what to notify (if anything)."""
    v, reason = verdict(rule, cmp)
    return advance(current, v, reason, now, for_seconds=rule.for_seconds, repeat=rule.repeat)


def fewest_runs(
    baseline: Mapping[str, tuple[int, int]], candidate: Mapping[str, tuple[int, int]]
) -> int:
    """The fewest counted trials a shared task has on either side (0 when none is shared)."""
    runs = [
        min(baseline[t][0], candidate[t][0])
        for t in baseline.keys() & candidate.keys()
        if baseline[t][0] > 0 and candidate[t][0] > 0
    ]
    return min(runs, default=0)


class CanaryDetail(msgspec.Struct, frozen=True, kw_only=True):
    """What a canary notification adds: the sides, the margins and the tasks that got worse.

    ``baseline_value`` and ``candidate_value`` are each side's mean over the
    shared tasks; ``worse`` lists the shared tasks whose value fell most,
    with n and c on each side.
    """

    baseline: str
    candidate: str
    margin: float
    resolve_margin: float
    baseline_value: float | None
    candidate_value: float | None
    shared: int
    only_baseline: int
    only_candidate: int
    min_shared: int
    confidence: float | None
    interval: str | None
    unknown_reason: str | None = None
    worse: list[MovedTask]


def detail(rule: CanaryRule, cmp: Comparison) -> CanaryDetail:
    diff = cmp.difference(rule.metric)
    return CanaryDetail(
        baseline=cmp.baseline,
        candidate=cmp.candidate,
        margin=rule.margin,
        resolve_margin=rule.resolve_at,
        baseline_value=diff.baseline,
        candidate_value=diff.candidate,
        shared=cmp.shared,
        only_baseline=cmp.only_baseline,
        only_candidate=cmp.only_candidate,
        min_shared=cmp.min_shared,
        confidence=diff.confidence,
        interval=diff.interval,
        unknown_reason=cmp.unknown_reason,
        worse=cmp.worse(rule.top),
    )


class CanaryView(msgspec.Struct, frozen=True, kw_only=True):
    """What the pages show of a canary between notifications: its latest comparison.

    Written by the judge each time it compares the pair (``daemon._canary``),
    beside the rule's state under the home suite's hash tag: the time, the
    difference ``candidate - baseline`` in the rule's metric at its k with
    its interval (None while UNKNOWN), and the notification's detail (both
    sides, the shared tasks, the tasks that got worse).
    """

    at: float
    value: float | None
    ci: tuple[float, float] | None
    detail: CanaryDetail


def view(rule: CanaryRule, cmp: Comparison, now: float) -> CanaryView:
    """The view of a comparison judged at ``now``."""
    diff = cmp.difference(rule.metric)
    ci = None if diff.ci is None else (float(diff.ci[0]), float(diff.ci[1]))
    return CanaryView(at=now, value=diff.value, ci=ci, detail=detail(rule, cmp))
