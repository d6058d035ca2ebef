"""The forecast against a long simulation at the truth: a cell of the page-rate study's
forecast table (``studies.pages.forecast_error``), with its seed."""

from __future__ import annotations

import numpy as np

from reliabilityd.rules.pagerate import MAKE_UPS
from reliabilityd.rules.simulator import steady
from studies.pages import PER_MINUTE, TICK, WINDOW, K, forecasts, rules

SEED = 20261206


def test_a_forecast_from_a_window_and_a_day_of_history_is_within_2x_of_the_truth() -> None:
    """50 alike tasks at a true pass^5 of 0.85 under the gaffke lower-bound rule, which
    alternates between firing and resolving about 15 times a day: the forecast's page
    rate swings with the level it simulates, which one window does not pin down. With
    a day of history every one of five forecasts is within 2x of the truth; from each
    window's level alone (``history=0``) they spread from 0.2x to 1.1x."""
    rng = np.random.default_rng(SEED)
    _, rule = rules()[0]
    p = MAKE_UPS["alike"].rates(50, 0.85, K)
    rates = np.full(p.size, PER_MINUTE)
    long = steady([rule], p, rates, window=WINDOW, k=K, duration=14 * 86400.0, rng=rng, tick=TICK)
    truth = long.pages[0] / 14
    assert truth >= 5  # the cell is one that pages, so the ratio means something

    got = [
        g.per_day for g in forecasts(rule, p, rng=rng, reps=5, hours=48.0, seed=SEED, history=24)
    ]
    print(truth, got)
    assert all(truth / 2 <= g <= 2 * truth for g in got)
