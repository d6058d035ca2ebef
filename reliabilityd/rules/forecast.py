"""The expected page rate of an alert rule at a suite's current data.

What a rule would cost on-call if the suite stayed as it is now, so on-call
sees what a threshold costs before being woken by it (``reliabilityd
forecast``). Pure: a simulation (``simulator``) of the suite with its current
per-task estimates taken as the truth, judged at the daemon's cadence with
the rule's own interval and trigger.
"""

from __future__ import annotations

import numpy as np

from reliabilityd.rules.pagerate import Pages
from reliabilityd.rules.simulator import steady
from reliabilityd.rules.threshold import Rule
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
    interval: str = "gaffke",
    tick: float = 5.0,
) -> Pages:
    """What this rule would cost on-call if the suite stayed exactly as it is now.

    The current per-task estimates are taken as the truth: every task in
    cell (n, c) of ``window_counts`` (the suite's windowed histogram) passes
    each trial with probability c / n, so a task that has not failed in its
    window never fails here, and the figure is a forecast under that
    assumption, not a measurement (``make study-pages`` states its error
    against a long simulation at the truth). The suite is simulated for
    ``hours`` with its window, trials arriving at ``rounds_per_day`` per
    task per day (the suite's own pace, as Poisson streams), and the rule
    judged every ``tick`` seconds (the daemon's ``ci_interval``) with
    ``rules.step`` on its own interval (``rule.interval``, else
    ``interval``, the suite's) and trigger.
    """
    if window < rule.k:
        raise ValueError(f"the simulation needs a window of at least k={rule.k} trials")
    if rounds_per_day <= 0 or hours <= 0:
        raise ValueError("rounds_per_day and hours must be positive")
    if window_counts.tasks == 0:
        raise ValueError("no tasks to simulate")
    p = np.repeat(window_counts.c / window_counts.n, window_counts.count).astype(np.float64)
    rates = np.full(p.size, rounds_per_day / 86400.0)
    got = steady(
        [rule],
        p,
        rates,
        window=window,
        k=rule.k,
        duration=hours * 3600.0,
        rng=np.random.default_rng(seed),
        tick=tick,
        interval=interval,
        n_boot=n_boot,
    )
    days = hours / 24.0
    (pages,), (firing,) = got.pages, got.firing
    return Pages(
        per_day=pages / days, pages=pages, days=days, firing_share=firing / max(got.ticks, 1)
    )
