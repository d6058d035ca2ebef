"""The expected page rate of an alert rule at a suite's current data.

What a rule would cost on-call if the suite stayed as it is now, so on-call
sees what a threshold costs before being woken by it (``reliabilityd
forecast``). Pure: a simulation (``simulator``) of the suite, judged at the
daemon's cadence with the rule's own interval and trigger.

The truth it simulates has two parts, each estimated from what the suite
shows:

* **The level**: the suite's metric at the rule's k. By default the
  window's unbiased estimate; the CLI passes the mean of the suite's
  history over the last day instead, which one window's noise does not
  move (a page rate near ``below`` is steep in the level).
* **The make-up**: how the tasks' rates differ. Not the window's c / n (its
  sampling noise adds spread the tasks do not have, and a task that has not
  failed in its window would never fail): a Beta prior is fitted to every
  task's counts (``stats.prior``), and each task's rate is drawn from its
  posterior Beta(c + a, n - c + b), afresh for every ``DRAW_HOURS`` of
  simulated time, so the forecast averages over the make-ups the counts
  allow. Each draw is moved by one log-odds shift to the level
  (``provable.shift_logits``) and simulated after an uncounted
  ``SETTLE_HOURS`` in which the windows and the rule's state, carried on
  from the draw before, settle to it (the first draw settles for the
  rule's ``for`` as well).

Beside the rate it gives an upper bound: the exact Poisson upper limit, at
``confidence``, of the pages simulated.
"""

from __future__ import annotations

import math

import numpy as np

from reliabilityd.rules.pagerate import Pages
from reliabilityd.rules.provable import shift_logits
from reliabilityd.rules.simulator import Judging, Path, judge
from reliabilityd.rules.state import AlertState
from reliabilityd.rules.threshold import Rule
from reliabilityd.stats.estimators import pass_at_k_cells, pass_hat_k_cells
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.prior import beta_prior

__all__ = [
    "DRAW_HOURS",
    "ENOUGH",
    "RATE_WINDOW",
    "STAYS_ON",
    "expected_false_pages",
    "poisson_upper",
    "window_level",
]

# The window a rate rule's forecast simulates on a suite without one: the suite's
# estimate and interval only resolve its alerts and back up its alarms there.
RATE_WINDOW = 20
# Past this share of the simulated time firing, a rule stays on: one page that never
# resolves, where the time firing says what a rate of pages cannot.
STAYS_ON = 0.9
# The simulation stops once it has counted this many pages (the rate is then known to
# about +-45%) over at least MIN_DRAWS draws of the make-up, checked after each draw,
# else it runs all its hours.
ENOUGH = 20
MIN_DRAWS = 4
# Each draw of the tasks' rates is simulated this long, after this long uncounted.
DRAW_HOURS = 6.0
SETTLE_HOURS = 1.0
# A drawn rate is kept this far from 0 and 1, so its log-odds are finite.
EDGE = 1e-12


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


def window_level(rule: Rule, window_counts: Histogram) -> float:
    """The window's unbiased estimate of the rule's metric at its k (tasks with at least
    k trials; the mean pass rate when none has)."""
    n = np.repeat(window_counts.n, window_counts.count)
    c = np.repeat(window_counts.c, window_counts.count)
    cells = pass_hat_k_cells if rule.metric == "pass^k" else pass_at_k_cells
    kept = n >= rule.k
    return float(np.mean(cells(n[kept], c[kept], rule.k))) if kept.any() else float(np.mean(c / n))


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
    level: float | None = None,
) -> Pages:
    """What this rule would cost on-call if the suite stayed as it is now.

    The suite is simulated for at most ``hours`` counted hours, in draws of
    ``DRAW_HOURS`` (stopping after a draw once ``enough`` pages are counted
    over at least ``MIN_DRAWS`` draws): in each, every task's rate is drawn
    from its posterior under the Beta prior fitted to ``window_counts`` (the
    suite's windowed histogram), and all are moved by one log-odds shift to
    ``level`` (default: ``window_level``), the rule's metric at its k. Its
    window is ``window`` trials; trials arrive at ``rounds_per_day`` per
    task per day (the suite's own pace, as Poisson streams); the rule is
    judged every ``tick`` seconds (the daemon's ``ci_interval``) with
    ``rules.step`` on its own interval (``rule.interval``, else
    ``interval``, the suite's) and trigger. ``per_day`` is the pages counted
    over the counted days; ``upper`` the Poisson upper limit of that rate
    at ``confidence``. A forecast under those assumptions, not a
    measurement (``make study-pages`` states its error against long
    simulations at the truth).
    """
    if window < rule.k:
        raise ValueError(f"the simulation needs a window of at least k={rule.k} trials")
    if rounds_per_day <= 0 or hours <= 0:
        raise ValueError("rounds_per_day and hours must be positive")
    if window_counts.tasks == 0:
        raise ValueError("no tasks to simulate")
    if level is not None and not 0.0 <= level <= 1.0:
        raise ValueError("level must be in [0, 1]")
    n = np.repeat(window_counts.n, window_counts.count)
    c = np.repeat(window_counts.c, window_counts.count)
    truth = window_level(rule, window_counts) if level is None else level
    truth = min(max(truth, 1e-6), 1.0 - 1e-6)
    a, b = beta_prior(n, c)
    rng = np.random.default_rng(seed)
    rates = np.full(n.size, rounds_per_day / 86400.0)
    judging: Judging = {
        "window": window,
        "k": rule.k,
        "rng": rng,
        "tick": tick,
        "interval": interval,
        "n_boot": n_boot,
    }
    pages = firing = ticks = draws = 0
    counted = clock = 0.0
    states: list[AlertState] | None = None
    while counted < hours * 3600.0 - 1e-9:
        span = min(DRAW_HOURS * 3600.0, hours * 3600.0 - counted)
        q = np.clip(rng.beta(c + a, n - c + b), EDGE, 1.0 - EDGE)
        path = Path(shift_logits(rule, np.log(q / (1.0 - q)), truth), rule.k)
        # The rule's state runs on from one draw to the next on one clock; the first
        # settles for its `for` as well, so an alert that stays on is on when counting
        # starts whatever its `for`.
        settle = SETTLE_HOURS * 3600.0 + (rule.for_seconds if states is None else 0.0)
        # A rate rule's statistics start afresh on each draw, from a day of counts at its
        # rates (``simulator.reference_counts``): a suite whose rates have held that long.
        lead = judge([rule], path, rates, duration=settle, offset=clock, states=states, **judging)
        got = judge(
            [rule],
            path,
            rates,
            duration=span,
            offset=clock + settle,
            states=lead.states,
            prefill=lead.tail,
            trackers=lead.trackers,
            **judging,
        )
        states = got.states
        clock += settle + span
        pages += got.fired[0].size
        firing += int(got.firing[0].sum())
        ticks += got.firing[0].size
        counted += span
        draws += 1
        if enough is not None and pages >= enough and draws >= MIN_DRAWS:
            break
    days = ticks * tick / 86400.0
    return Pages(
        per_day=pages / days,
        pages=pages,
        days=days,
        firing_share=firing / max(ticks, 1),
        upper=poisson_upper(pages, confidence) / days,
        confidence=confidence,
    )
