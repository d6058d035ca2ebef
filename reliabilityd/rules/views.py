"""What a suite's snapshot says about the alert rules that watch it.

Computed beside the CIs, from the same committed state (one version), so
every replica that judges that snapshot sees the same evidence: the change
detector's evidence (``detector``) for rules with ``trigger = "detector"``,
whether a rate alarm holds for rules with ``trigger = "rate"`` (``rate``, on
the state the daemon keeps per series and rule), and a rule's own estimate
when it names another interval than the suite's. Pure: the daemon reads the
state and writes the result. A rule's expected page rate is not computed
here: ``reliabilityd forecast`` simulates it on demand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from reliabilityd.rules.threshold import Rule
from reliabilityd.stats import ratecusum
from reliabilityd.stats.detector import evidence, level, recent_counts
from reliabilityd.stats.estimate import Estimate, estimate
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.snapshot import RuleView, StatsSettings

# A suite's pace counts only once a snapshot is this much older than the last.
PACE_MIN_SECONDS = 30.0
# A rate rule's state last judged further ahead of this replica's clock than this is
# damage or a clock gone wrong: judging would follow it, so the state starts afresh.
FUTURE = 3600.0


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


def rate(
    rule: Rule,
    stored: ratecusum.Tracker | None,
    tasks: Sequence[str],
    n: Sequence[int],
    c: Sequence[int],
    *,
    version: int,
    now: float,
) -> ratecusum.Tracker:
    """A "rate" rule's state advanced to the series' lifetime counts at ``now``; its
    ``alarmed_at`` is the time of its last alarm.

    ``stored`` is the stored state (it is advanced in place); none, one kept under
    other settings, or one from a clock more than ``FUTURE`` seconds ahead starts
    afresh on these counts, with a warm-up.
    """
    knobs = rule.knobs()
    counts = np.asarray(n, dtype=np.int64), np.asarray(c, dtype=np.int64)
    tracker = stored
    if tracker is None or tracker.knobs != knobs or tracker.last > now + FUTURE:
        return ratecusum.Tracker(knobs, tasks, *counts, now=now, version=version)
    tracker.tick(tasks, *counts, now=now, version=version)
    return tracker


def rule_views(
    rules: Sequence[Rule],
    hist: Histogram,
    windows: Sequence[str] | None,
    *,
    window: int,
    settings: StatsSettings,
    alarms: Mapping[str, float | None] | None = None,
) -> list[RuleView]:
    """One view per rule: fresh evidence, a rate rule's last alarm (``alarms``, by rule
    name, from ``rate``), and the rule's own estimate when it names another interval
    than the suite's.

    Without a window there is no evidence (the detector reads each task's
    last outcomes).
    """
    views = []
    for rule in rules:
        nats = lvl = None
        if rule.trigger == "detector" and windows is not None and window > 0:
            counts = recent_counts(windows, rule.recent)
            nats = float(evidence(counts, rule.k, rule.below))
            lvl = float(level(counts, rule.k, rule.below))
        own: Estimate | None = None
        if rule.interval is not None and rule.interval != settings.interval:
            own = estimate(hist, rule.k, rule.metric, **settings.options(rule.interval))
        views.append(
            RuleView(
                rule=rule.name,
                evidence=nats,
                level=lvl,
                alarmed_at=None if alarms is None else alarms.get(rule.name),
                estimate=own,
            )
        )
    return views
