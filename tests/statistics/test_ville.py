"""Thresholds without a simulation (``studies.ratestat.ville``): the rate CUSUM with its
local statistic over a common change point, on a minute's grid of change points, alarms
no more often than ``log(budget / spacing)`` allows, on a 20-task suite at its reference
rates. A seeded simulation."""

from __future__ import annotations

import numpy as np
import pytest

from reliabilityd.rules.pagerate import MAKE_UPS
from reliabilityd.rules.simulator import RATES, Path
from reliabilityd.stats.ratecusum import reference
from studies.commonpoint import advance_common
from studies.oracle import PER_MINUTE, TICK, K
from studies.ratecusum import prepare
from studies.ratestat import DAY, Design, Running, increments, ville

SEED = 20261208


def test_ville_thresholds_keep_the_budget_they_promise() -> None:
    rng = np.random.default_rng(SEED)
    grid = 12  # change points every minute, as the study's recommended design
    design = Design(form="common", threshold_by="ville", grid=grid)
    p = MAKE_UPS["mix"].rates(20, 0.85, K)
    rates = RATES["uniform"][1](p) * PER_MINUTE
    # A budget of an hour, so that two days hold alarms to count: the bound is loose
    # (about 10 alarms where it allows 48) and holds at any budget.
    budget = 3600.0
    suite = prepare(p, rates, design, rng, budget=budget)
    assert suite.h_g == suite.h_l == pytest.approx(ville(2.0 * budget, grid * TICK))
    # The null the bound is about: every task at its reference, the weights fixed.
    p0 = reference(suite.n, suite.c, design.prior)
    wt = suite.wt
    # What the bound rests on: each outcome's weight is a likelihood ratio, so its
    # exponential has mean 1 under the reference, for both statistics.
    for up, down in ((wt.up_g, wt.down_g), (wt.up_l[:, 0], wt.down_l[:, 0])):
        assert np.allclose(p0 * np.exp(up) + (1 - p0) * np.exp(down), 1.0)
    state = Running(0.0, np.zeros((0, p.size)), [])
    per, days = int(DAY / TICK), 2
    for day in range(days):
        g, loc, _, _ = increments(Path(p0, K), rates, wt, offset=0.0, ticks=per, rng=rng)
        state = advance_common(
            state,
            g,
            loc,
            h_g=suite.h_g,
            h_l=suite.h_l,
            first=day * per,
            share=wt.share,
            grid=grid,
        )
    # Each statistic alarms at most once per 2 x budget in expectation: 48 in two days.
    allowed = 2 * days * DAY / (2.0 * budget)
    assert 1 <= len(state.alarms) < allowed
