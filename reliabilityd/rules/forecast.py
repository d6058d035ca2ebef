"""The expected page rate of an alert rule at a suite's current data.

What a rule would cost on-call if the suite stayed as it is now, so on-call
sees what a threshold costs before being woken by it (``reliabilityd
forecast``). Pure: a simulation (``simulator``) of the suite, judged at the
daemon's cadence with the rule's own interval and trigger. The truth it
simulates is not the window's c / n per task (a task that has not failed in
its window would then never fail, and a forecast of 0 would say nothing):
each task's rate is its counts with half a pass and half a fail added, all
moved by one log-odds shift until the suite's metric at the rule's k is the
window's unbiased estimate (``provable.shifted_rates``), so the level is the
data's and no task is certain. Beside the rate it gives an upper bound: the
exact Poisson upper limit, at ``confidence``, of the pages simulated.
"""

from __future__ import annotations

import math

import numpy as np

from reliabilityd.rules.pagerate import Pages
from reliabilityd.rules.provable import shifted_rates
from reliabilityd.rules.simulator import steady
from reliabilityd.rules.threshold import Rule
from reliabilityd.stats.estimators import pass_at_k_cells, pass_hat_k_cells
from reliabilityd.stats.histogram import Histogram

__all__ = ["STAYS_ON", "expected_false_pages", "poisson_upper"]

# Past this share of the simulated time firing, a rule stays on: one page that never
# resolves, where the time firing says what a rate of pages cannot.
STAYS_ON = 0.9
# The simulation stops once it has counted this many pages (the rate is then known to
# about +-45%), checked every CHUNK_HOURS simulated hours, else it runs all its hours.
ENOUGH = 20
CHUNK_HOURS = 6.0


def poisson_upper(count: int, confidence: float) -> float:
    """The exact upper confidence limit of a Poisson mean after ``count`` events: the
    mean at which ``count`` or fewer events have probability ``1 - confidence``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError("confidence must be in (0, 1)")
    tail = 1.0 - confidence

    def at_most(mean: float) -> float:
        # P(X <= count) for X ~ Poisson(mean), summed in logs (no overflow for large counts).
        terms = [j * math.log(mean) - mean - math.lgamma(j + 1) for j in range(count + 1)]
        top = max(terms)
        return math.exp(top) * sum(math.exp(t - top) for t in terms)

    lo, hi = float(count), float(count) + 10.0 * math.sqrt(count + 1) + 10.0
    while at_most(hi) > tail:
        hi *= 2.0
    for _ in range(200):  # P(X <= count) falls as the mean grows
        mid = (lo + hi) / 2.0
        if at_most(mid) > tail:
            lo = mid
        else:
            hi = mid
    return hi


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
    confidence: float = 0.9,
    enough: int | None = ENOUGH,
) -> Pages:
    """What this rule would cost on-call if the suite stayed as it is now.

    The suite is simulated for at most ``hours`` (stopping, checked every
    ``CHUNK_HOURS``, once ``enough`` pages are counted) at the rates ``shifted_rates``
    gives from ``window_counts`` (the suite's windowed histogram) and the
    window's unbiased estimate of the rule's metric, with its window, trials
    arriving at ``rounds_per_day`` per task per day (the suite's own pace,
    as Poisson streams), the rule judged every ``tick`` seconds (the
    daemon's ``ci_interval``) with ``rules.step`` on its own interval
    (``rule.interval``, else ``interval``, the suite's) and trigger.
    ``per_day`` is the pages counted over the simulated days; ``upper`` the
    Poisson upper limit of that rate at ``confidence``. A forecast under
    those assumptions, not a measurement (``make study-pages`` states its
    error against long simulations at the truth).
    """
    if window < rule.k:
        raise ValueError(f"the simulation needs a window of at least k={rule.k} trials")
    if rounds_per_day <= 0 or hours <= 0:
        raise ValueError("rounds_per_day and hours must be positive")
    if window_counts.tasks == 0:
        raise ValueError("no tasks to simulate")
    n = np.repeat(window_counts.n, window_counts.count)
    c = np.repeat(window_counts.c, window_counts.count)
    cells = pass_hat_k_cells if rule.metric == "pass^k" else pass_at_k_cells
    kept = n >= rule.k
    level = float(np.mean(cells(n[kept], c[kept], rule.k))) if kept.any() else float(np.mean(c / n))
    p = shifted_rates(rule, n, c, min(max(level, 1e-6), 1.0 - 1e-6))
    got = steady(
        [rule],
        p,
        np.full(n.size, rounds_per_day / 86400.0),
        window=window,
        k=rule.k,
        duration=hours * 3600.0,
        chunk=min(hours, CHUNK_HOURS) * 3600.0,
        enough=enough,
        rng=np.random.default_rng(seed),
        tick=tick,
        interval=interval,
        n_boot=n_boot,
    )
    days = got.ticks * tick / 86400.0
    (pages,), (firing,) = got.pages, got.firing
    return Pages(
        per_day=pages / days,
        pages=pages,
        days=days,
        firing_share=firing / max(got.ticks, 1),
        upper=poisson_upper(pages, confidence) / days,
        confidence=confidence,
    )
