"""The rate trigger in the simulation (``rules.simulator``) and the forecast: fed the
lifetime counts the daemon would see, carried across chunks, and faster than the
detector on a step."""

from __future__ import annotations

import numpy as np
import pytest

from reliabilityd.rules import Rule
from reliabilityd.rules.forecast import expected_false_pages
from reliabilityd.rules.pagerate import MAKE_UPS, SHAPES
from reliabilityd.rules.simulator import Path, false_pages_per_day, judge, regressions
from reliabilityd.stats import ratecusum
from reliabilityd.stats.histogram import Histogram

RATE = Rule(name="r", k=5, below=0.75, resolve_above=0.8, trigger="rate")
DETECTOR = Rule(name="d", k=5, below=0.75, resolve_above=0.8, trigger="detector")


def test_the_tracker_sees_every_trial_once_across_chunks() -> None:
    rng = np.random.default_rng(3)
    p = MAKE_UPS["mix"].rates(10, 0.85, 5)
    rates = np.full(10, 1 / 30)
    path = Path(p, 5)
    first = judge([RATE], path, rates, window=20, k=5, duration=1800.0, rng=rng)
    tracker = first.trackers[0]
    assert isinstance(tracker, ratecusum.Tracker)
    start = tracker.seen_n.copy()
    assert 1700.0 < tracker.last <= 1800.0
    second = judge(
        [RATE],
        path,
        rates,
        window=20,
        k=5,
        duration=1800.0,
        offset=1800.0,
        rng=rng,
        states=first.states,
        prefill=first.tail,
        trackers=first.trackers,
    )
    assert second.trackers[0] is tracker  # carried on, not started afresh
    gained = tracker.seen_n - start
    # About a trial a task per 30 s over the half hour: 60 each, give or take.
    assert 30 < float(gained.mean()) < 90
    assert 3500.0 < tracker.last <= 3600.0  # the last tick that brought a trial


def test_a_perfect_suite_never_pages_and_a_run_replays() -> None:
    def once() -> tuple[list[float], list[float]]:
        rng = np.random.default_rng(8)
        return false_pages_per_day(
            [RATE], np.ones(20), np.full(20, 1 / 60), window=20, k=5, days=0.25, rng=rng
        )

    assert once() == ([0.0], [0.0])
    p = MAKE_UPS["lottery"].rates(20, 0.85, 5)

    def noisy() -> tuple[list[float], list[float]]:
        rng = np.random.default_rng(9)
        return false_pages_per_day(
            [RATE], p, np.full(20, 1 / 60), window=20, k=5, days=0.25, rng=rng
        )

    assert noisy() == noisy()


def test_a_concentrated_step_is_caught_sooner_than_by_the_detector() -> None:
    """A reduced cell of the oracle study: 20 tasks of the mix, 0.90 to 0.65 on a fifth of
    the tasks; the rate trigger's delays are each under the detector's median."""
    rng = np.random.default_rng(20261207)
    before = MAKE_UPS["mix"].rates(20, 0.9, 5)
    path = Path(before, 5, SHAPES["concentrated"], start=1200.0)
    got = regressions(
        [RATE, DETECTOR],
        path,
        np.full(20, 1 / 60),
        window=20,
        k=5,
        reps=4,
        horizon=3600.0,
        crossing=1200.0,
        rng=rng,
    )
    assert bool(np.isfinite(got.delay).all())
    assert not bool(got.on_at_start.any())
    assert float(got.delay[0].max()) < float(np.median(got.delay[1]))


def test_the_forecast_of_a_rate_rule_runs_each_draw_from_its_own_references() -> None:
    rng = np.random.default_rng(5)
    p = MAKE_UPS["mix"].rates(20, 0.85, 5)
    hist = Histogram.from_pairs(np.c_[np.full(20, 20), rng.binomial(20, p)])
    got = expected_false_pages(RATE, hist, window=20, rounds_per_day=1440, hours=2, seed=1)
    assert got.days == pytest.approx(2 / 24)
    assert got.firing_share < 0.5
    # At a suite well under `below` the interval's upper bound breaches and stays on.
    low = Histogram.from_pairs([(20, 14)] * 50)
    on = expected_false_pages(RATE, low, window=20, rounds_per_day=1440, hours=1)
    assert on.firing_share >= 0.9
