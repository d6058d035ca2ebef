"""What a suite's snapshot says about the alert rules that watch it.

Computed beside the CIs, from the same committed state (one version), so
every replica that judges that snapshot sees the same evidence and the same
forecast: the change detector's evidence (``detector``) for rules with
``trigger = "detector"``, and each rule's expected page rate at the current
data (``pagerate``). Pure: the daemon reads the state and writes the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from reliabilityd.alerting.forecast import expected_false_pages
from reliabilityd.alerting.rules import Rule
from reliabilityd.stats.detector import evidence, recent_counts
from reliabilityd.stats.estimate import Estimate, estimate
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.snapshot import RuleView, StatsSettings

# A forecast simulates this much of the suite's future (the figure is per
# day), at most FORECAST_ROUNDS rounds of one trial per task: its cost is
# tasks x rounds.
FORECAST_HOURS = 6.0
FORECAST_ROUNDS = 1000
# A suite's pace counts only once a snapshot is this much older than the last.
PACE_MIN_SECONDS = 30.0


def pace(
    trials: int, tasks: int, now: float, previous: tuple[int, float, float | None] | None
) -> float | None:
    """Trials per task per day since the previous snapshot ``(trials, at, pace)``.

    Too soon after it, or with nothing new, the previous pace stands.
    """
    if previous is None or tasks < 1:
        return None
    before, at, last = previous
    elapsed = now - at
    if elapsed < PACE_MIN_SECONDS or trials <= before:
        return last
    return (trials - before) / tasks / elapsed * 86400.0


def rule_views(
    rules: Sequence[Rule],
    hist: Histogram,
    windows: Sequence[str] | None,
    *,
    window: int,
    suite_pace: float | None,
    previous: Mapping[str, RuleView],
    forecast: frozenset[str],
    now: float,
    settings: StatsSettings,
) -> list[RuleView]:
    """One view per rule: fresh evidence, the rule's own estimate when it names
    another interval than the suite's, and a fresh forecast for the rules in ``forecast``.

    A rule not in ``forecast`` keeps its previous forecast (forecasts cost a
    simulated day; the daemon decides when one is due). Without a window
    there is neither evidence (the detector reads each task's last outcomes)
    nor a forecast (the simulation runs the window).
    """
    views = []
    for rule in rules:
        nats = None
        if rule.trigger == "detector" and windows is not None and window > 0:
            nats = float(evidence(recent_counts(windows, rule.recent), rule.k, rule.below))
        before = previous.get(rule.name)
        expected = before.expected_pages_per_day if before else None
        expected_at = before.expected_at if before else None
        expected_pace = before.expected_pace if before else None
        if (
            rule.name in forecast
            and window >= rule.k
            and hist.tasks > 0
            and suite_pace is not None
            and suite_pace > 0
        ):
            expected = expected_false_pages(
                rule,
                hist,
                window=window,
                rounds_per_day=suite_pace,
                hours=min(FORECAST_HOURS, FORECAST_ROUNDS / suite_pace * 24.0),
                seed=settings.seed,
                n_boot=settings.n_boot,
            ).per_day
            expected_at, expected_pace = now, suite_pace
        own: Estimate | None = None
        if rule.interval is not None and rule.interval != settings.interval:
            own = estimate(
                hist,
                rule.k,
                rule.metric,
                confidence=settings.confidence,
                n_boot=settings.n_boot,
                seed=settings.seed,
                min_coverage=settings.min_coverage,
                interval=rule.interval,
            )
        views.append(
            RuleView(
                rule=rule.name,
                evidence=nats,
                estimate=own,
                expected_pages_per_day=expected,
                expected_at=expected_at,
                expected_pace=expected_pace,
            )
        )
    return views
