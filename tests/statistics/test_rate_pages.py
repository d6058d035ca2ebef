"""The shipped rate trigger's false alarms, simulated as the daemon runs it
(``rules.simulator``: references from a day of counts, each task's lifetime counts fed
at every tick that brought a trial): within what Ville's inequality allows at a short
budget, and within the page budget at the default one. Seeded simulations."""

from __future__ import annotations

import numpy as np
import pytest

from reliabilityd.rules import Rule
from reliabilityd.rules.pagerate import MAKE_UPS
from reliabilityd.rules.simulator import RATES, Path, false_pages_per_day, judge
from reliabilityd.stats import ratecusum

SEED = 20261210
PER_MINUTE = 1.0 / 60.0


def test_alarms_at_a_healthy_level_stay_within_the_bound() -> None:
    """A budget of an hour (h = 4.8 nats), so that two days hold alarms to count: at most
    48 in expectation by the bound, which leaves out the references' error."""
    rng = np.random.default_rng(SEED)
    p = MAKE_UPS["mix"].rates(20, 0.85, 5)
    rates = RATES["uniform"][1](p) * PER_MINUTE
    rule = Rule(name="r", k=5, below=0.75, budget_days=1 / 24, hold=5.0)
    assert ratecusum.threshold(rule.knobs()) == pytest.approx(np.log(120.0))
    got = judge([rule], Path(p, 5), rates, window=20, k=5, duration=2 * 86400.0, rng=rng)
    tracker = got.trackers[0]
    assert isinstance(tracker, ratecusum.Tracker)
    assert 1 <= tracker.alarms <= 48, tracker.alarms


def test_the_default_rule_keeps_its_page_budget_on_a_lottery_suite() -> None:
    """28 simulated days at a true 0.85, 20 tasks of which 10 are lottery tasks at 0.6:
    the budget allows 2 false pages (one in two weeks)."""
    rng = np.random.default_rng(SEED + 1)
    p = MAKE_UPS["lottery"].rates(20, 0.85, 5)
    rates = RATES["uniform"][1](p) * PER_MINUTE
    rule = Rule(name="r", k=5, below=0.75, resolve_above=0.8)
    (per_day,), (firing,) = false_pages_per_day(
        [rule], p, rates, window=20, k=5, days=28.0, rng=rng
    )
    assert per_day * 28.0 <= 2.0
    assert firing < 0.01
