"""The expected page rate of an alert rule at a suite's current data.

What a rule would cost on-call if the suite stayed as it is now, for the
daemon to store in the rule's state (``AlertState.expected_pages_per_day``)
so on-call sees what a threshold costs before being woken by it. Pure: a
simulation (``pagesim``) of the suite with its current per-task estimates
taken as the truth.
"""

from __future__ import annotations

import numpy as np

from reliabilityd.alerting.pagesim import Pages, false_pages
from reliabilityd.alerting.rules import Rule
from reliabilityd.stats.histogram import Histogram


def expected_false_pages(
    rule: Rule,
    window_counts: Histogram,
    *,
    window: int,
    rounds_per_day: float,
    hours: float = 24.0,
    seed: int = 0,
    n_boot: int = 2000,
) -> Pages:
    """What this rule would cost on-call if the suite stayed exactly as it is now.

    The current per-task estimates are taken as the truth: every task in
    cell (n, c) of ``window_counts`` (the suite's windowed histogram) passes
    each trial with probability c / n, so a task that has not failed in its
    window never fails here, and the figure is a forecast under that
    assumption, not a measurement. The suite is simulated for ``hours``
    with its window, ``rounds_per_day`` trials per task per day (the
    suite's own pace), and the rule judged after every round with
    ``alerts.step``. Cost grows with tasks x rounds (x n_boot for a
    ``ci-low`` rule): call it when a suite's version moves, not on every tick.
    """
    if window < rule.k:
        raise ValueError(f"the simulation needs a window of at least k={rule.k} trials")
    if rounds_per_day <= 0 or hours <= 0:
        raise ValueError("rounds_per_day and hours must be positive")
    if window_counts.tasks == 0:
        raise ValueError("no tasks to simulate")
    p = np.repeat(window_counts.c / window_counts.n, window_counts.count).astype(np.float64)
    return false_pages(
        [rule],
        p,
        window=window,
        days=hours / 24.0,
        rng=np.random.default_rng(seed),
        k=rule.k,
        rounds_per_day=rounds_per_day,
        n_boot=n_boot,
    )[0]
