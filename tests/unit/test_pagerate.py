"""The page-rate simulation: suites as stated, the daemon's CIs, the cadence engine, forecasts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reliabilityd.rules import Rule
from reliabilityd.rules.forecast import STAYS_ON, expected_false_pages, poisson_upper
from reliabilityd.rules.pagerate import (
    MAKE_UPS,
    SHAPES,
    Pages,
    Shape,
    pass_hat,
    window_estimates,
)
from reliabilityd.rules.simulator import RATES, Path, false_pages_per_day, regressions
from reliabilityd.stats.estimate import estimate_metrics
from reliabilityd.stats.histogram import Histogram
from tests.support.query import cli

TODAY = Rule(name="r", k=5, below=0.75, resolve_above=0.8, trigger="ci-low")
PERCENTILE = Rule(
    name="p", k=5, below=0.75, resolve_above=0.8, interval="percentile", trigger="ci-low"
)
DETECTOR = Rule(name="d", k=5, below=0.75, resolve_above=0.8, trigger="detector")


@pytest.mark.parametrize("make_up", sorted(MAKE_UPS))
@pytest.mark.parametrize("target", [0.65, 0.85, 0.9])
def test_make_ups_reach_the_stated_pass_hat(make_up: str, target: float) -> None:
    p = MAKE_UPS[make_up].rates(50, target, 5)
    assert p.shape == (50,)
    assert pass_hat(p, 5) == pytest.approx(target, abs=1e-6)
    assert bool(((p >= 0) & (p <= 1)).all())


@pytest.mark.parametrize("make_up", sorted(MAKE_UPS))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_regressions_end_where_stated_and_touch_only_their_share(make_up: str, shape: str) -> None:
    before = MAKE_UPS[make_up].rates(50, 0.9, 5)
    after = SHAPES[shape].after(before, 5)
    assert pass_hat(after, 5) == pytest.approx(SHAPES[shape].target, abs=1e-6)
    moved = int((after < before - 1e-12).sum())
    assert moved == round(SHAPES[shape].share * 50)
    assert bool((after <= before + 1e-12).all())


def test_a_fifth_of_the_tasks_cannot_carry_the_suite_to_065() -> None:
    before = MAKE_UPS["mix"].rates(50, 0.9, 5)
    with pytest.raises(ValueError, match="cannot carry"):
        Shape("fifth", 0.2, 0.65).after(before, 5)


def test_the_fast_ci_is_the_daemon_ci_within_monte_carlo_error() -> None:
    rng = np.random.default_rng(2)
    p = MAKE_UPS["mix"].rates(50, 0.85, 5)
    counts = rng.binomial(20, p, size=(60, 50)).astype(np.int64)
    fast = window_estimates(counts, 20, 5)
    exact = window_estimates(counts, 20, 5, engine="exact")
    assert fast.value == pytest.approx(exact.value, abs=1e-12)
    # Different draws of the same bootstrap: B = 2000 puts their 2.5% points
    # about 0.004 apart; a wrong estimator would be off by far more.
    assert float(np.abs(fast.ci_low - exact.ci_low).max()) < 0.02
    assert float(np.abs(fast.ci_high - exact.ci_high).max()) < 0.02
    assert abs(float(np.mean(fast.ci_low - exact.ci_low))) < 0.003


def test_identical_tasks_get_the_daemons_wilson_interval() -> None:
    counts = np.full((1, 30), 20, dtype=np.int64)
    fast = window_estimates(counts, 20, 5)
    hist = Histogram.from_pairs([(20, 20)] * 30)
    est = estimate_metrics(hist, 5, ("pass^k",), interval="percentile")["pass^k"]
    assert est.ci is not None
    assert (float(fast.ci_low[0]), float(fast.ci_high[0])) == pytest.approx(est.ci)


def test_the_fast_gaffke_is_the_daemons_gaffke_within_monte_carlo_error() -> None:
    rng = np.random.default_rng(3)
    p = MAKE_UPS["lottery"].rates(30, 0.85, 5)
    counts = rng.binomial(20, p, size=(40, 30)).astype(np.int64)
    fast = window_estimates(counts, 20, 5, interval="gaffke")
    exact = window_estimates(counts, 20, 5, interval="gaffke", engine="exact")
    assert fast.value == pytest.approx(exact.value, abs=1e-12)
    assert float(np.abs(fast.ci_low - exact.ci_low).max()) < 0.03
    assert float(np.abs(fast.ci_high - exact.ci_high).max()) < 0.03
    # Gaffke's pseudo-task puts its bounds outside the percentile interval's.
    pct = window_estimates(counts, 20, 5)
    assert bool((fast.ci_low < pct.ci_low).all())


def test_paths_cross_where_the_truth_does() -> None:
    before = MAKE_UPS["mix"].rates(50, 0.9, 5)
    step = Path(before, 5, SHAPES["spread"], start=600.0)
    assert step.crossing(0.75) == 600.0
    assert step.crossing(0.6) == float("inf")
    drift = Path(before, 5, Shape("drift", 1.0, 0.7), start=600.0, ramp=7200.0)
    assert drift.crossing(0.75) == pytest.approx(600.0 + 7200.0 * 0.15 / 0.2)
    for at, truth in ((0.0, 0.9), (600.0 + 3600.0, 0.8), (600.0 + 7200.0, 0.7), (1e6, 0.7)):
        p = np.array([drift.rates_at(np.array([at]), j)[0] for j in range(50)])
        assert pass_hat(p, 5) == pytest.approx(truth, abs=1e-6), at


@pytest.mark.parametrize("pattern", sorted(RATES))
def test_rate_patterns_keep_the_mean_rate(pattern: str) -> None:
    p = MAKE_UPS["mix"].rates(50, 0.85, 5)
    r = RATES[pattern][1](p)
    assert float(r.mean()) == pytest.approx(1.0)
    if pattern != "uniform":
        assert float(r.max() / r.min()) == pytest.approx(10.0)
        assert int((r == r.max()).sum()) == 10


def test_a_seeded_run_replays_exactly() -> None:
    p = MAKE_UPS["lottery"].rates(30, 0.85, 5)

    def once() -> tuple[list[float], list[float]]:
        rng = np.random.default_rng(99)
        return false_pages_per_day(
            [TODAY, DETECTOR], p, np.full(30, 1 / 60), window=20, k=5, days=1 / 24, rng=rng
        )

    assert once() == once()


def test_a_perfect_suite_never_pages() -> None:
    rng = np.random.default_rng(4)
    pages, firing = false_pages_per_day(
        [TODAY, PERCENTILE, DETECTOR],
        np.ones(20),
        np.full(20, 1 / 60),
        window=20,
        k=5,
        days=1 / 24,
        rng=rng,
    )
    assert pages == [0.0, 0.0, 0.0]
    assert firing == [0.0, 0.0, 0.0]


def test_the_detector_is_quieter_and_no_slower_on_a_step_at_50_tasks() -> None:
    """A reduced grid of the study: 50 tasks of the mix, uniform rates, judged every 5 s."""
    rng = np.random.default_rng(20261130)
    p = MAKE_UPS["mix"].rates(50, 0.85, 5)
    rates = np.full(50, 1 / 60)
    (pct, det), _ = false_pages_per_day(
        [PERCENTILE, DETECTOR], p, rates, window=20, k=5, days=0.125, rng=rng
    )
    assert pct >= 8.0  # the lower bound dips under 0.75 many times a day at a true 0.85
    assert det * 10 <= pct
    before = MAKE_UPS["mix"].rates(50, 0.9, 5)
    path = Path(before, 5, SHAPES["spread"], start=600.0)
    d = regressions(
        [PERCENTILE, DETECTOR], path, rates, window=20, k=5, reps=3, horizon=1800, rng=rng
    ).delay
    assert bool(np.isfinite(d).all())
    d_pct, d_det = np.median(d, axis=1)
    assert d_det <= d_pct


def test_the_drift_is_caught_by_the_level_statistic_not_the_cusum() -> None:
    """0.90 -> 0.70 over 2 h: the CUSUM's baseline drifts along; the level does not."""
    rng = np.random.default_rng(7)
    before = MAKE_UPS["alike"].rates(20, 0.9, 5)
    path = Path(before, 5, Shape("drift", 1.0, 0.7), start=300.0, ramp=7200.0)
    cusum = Rule(name="c", k=5, below=0.75, resolve_above=0.8, trigger="detector", level_evidence=0)
    d = regressions(
        [DETECTOR, cusum],
        path,
        np.full(20, 1 / 60),
        window=20,
        k=5,
        reps=2,
        horizon=3 * 3600.0,
        rng=rng,
    ).delay
    assert bool(np.isfinite(d[0]).all())
    # The level pages first, or with the CUSUM when that fired first.
    assert bool((d[0] <= d[1]).all())
    assert float(d[0].sum()) < float(d[1].sum())


def test_a_rule_already_firing_when_the_change_begins_is_recorded() -> None:
    """At 10 tasks the gaffke bound is under 0.75 at a true 0.90: it is on before a step."""
    rng = np.random.default_rng(11)
    before = MAKE_UPS["mix"].rates(10, 0.9, 5)
    path = Path(before, 5, SHAPES["spread"], start=1200.0)
    got = regressions(
        [TODAY, DETECTOR], path, np.full(10, 1 / 60), window=20, k=5, reps=3, horizon=600, rng=rng
    )
    assert bool(got.on_at_start[0].all())
    assert not bool(got.on_at_start[1].any())
    # Its delay counts from the change, as for an alert that was always on.
    assert bool((got.delay[0] == 0.0).all())


def test_the_forecast_simulates_the_rules_own_interval_and_trigger() -> None:
    rng = np.random.default_rng(5)
    p = MAKE_UPS["mix"].rates(50, 0.85, 5)
    hist = Histogram.from_pairs(np.c_[np.full(50, 20), rng.binomial(20, p)])
    pct = expected_false_pages(PERCENTILE, hist, window=20, rounds_per_day=1440, hours=3)
    gaffke = expected_false_pages(TODAY, hist, window=20, rounds_per_day=1440, hours=3)
    det = expected_false_pages(DETECTOR, hist, window=20, rounds_per_day=1440, hours=3)
    assert pct.days == pytest.approx(0.125)
    # Gaffke's lower bound sits lower: that rule spends more of its time firing.
    assert gaffke.firing_share > pct.firing_share
    assert pct.per_day > det.per_day
    # A suite whose windows are well under `below`: the detector's level fires in the
    # uncounted settling hour and stays on, which the time firing says.
    low = Histogram.from_pairs([(20, 17)] * 50)
    on = expected_false_pages(DETECTOR, low, window=20, rounds_per_day=1440, hours=1)
    assert on.firing_share >= STAYS_ON
    assert on.pages == 0
    # A suite whose tasks have not failed in their windows still may, and the upper
    # bound says how far a quiet simulation goes: 2.3 pages (90%) in an hour.
    perfect = Histogram.from_pairs([(20, 20)] * 50)
    clean = expected_false_pages(TODAY, perfect, window=20, rounds_per_day=1440, hours=1)
    assert clean.upper == pytest.approx(poisson_upper(clean.pages, 0.9) * 24)
    assert clean.upper > clean.per_day
    with pytest.raises(ValueError, match="window"):
        expected_false_pages(TODAY, hist, window=3, rounds_per_day=1440)


def test_the_poisson_upper_limit_is_exact() -> None:
    # The mean at which count or fewer events have probability 1 - confidence.
    assert poisson_upper(0, 0.9) == pytest.approx(math.log(10), rel=1e-9)
    assert poisson_upper(1, 0.9) == pytest.approx(3.889720, rel=1e-6)
    assert poisson_upper(10, 0.95) == pytest.approx(16.962219, rel=1e-6)
    assert poisson_upper(1000, 0.9) == pytest.approx(1000 + 1.2816 * math.sqrt(1000) + 1, rel=2e-3)


def test_the_forecast_stops_once_it_has_counted_enough_pages() -> None:
    """A rule that pages often is simulated only until its rate is known; a quiet one for
    all its hours, and the rate is over the time simulated either way."""
    rng = np.random.default_rng(6)
    p = MAKE_UPS["alike"].rates(10, 0.85, 5)
    hist = Histogram.from_pairs(np.c_[np.full(10, 20), rng.binomial(20, p)])
    short = expected_false_pages(PERCENTILE, hist, window=20, rounds_per_day=1440, hours=48)
    assert short.pages >= 20
    assert short.days < 2.0
    assert short.per_day == pytest.approx(short.pages / short.days)
    full = expected_false_pages(
        PERCENTILE, hist, window=20, rounds_per_day=1440, hours=48, enough=None
    )
    assert full.days == pytest.approx(2.0)
    assert full.pages > short.pages


def test_the_forecast_simulates_the_level_it_is_given_and_repeats_with_its_seed() -> None:
    rng = np.random.default_rng(8)
    p = MAKE_UPS["alike"].rates(20, 0.85, 5)
    hist = Histogram.from_pairs(np.c_[np.full(20, 20), rng.binomial(20, p)])

    def forecast(rule: Rule, *, seed: int = 0, level: float | None = None) -> Pages:
        return expected_false_pages(
            rule, hist, window=20, rounds_per_day=1440.0, hours=6.0, seed=seed, level=level
        )

    # The same window at a level well under `below` stays on; well above, it is quiet.
    low = forecast(DETECTOR, level=0.5)
    high = forecast(DETECTOR, level=0.99)
    assert low.firing_share >= STAYS_ON
    assert high.pages == 0
    assert high.firing_share == 0.0
    # Seeded: the same inputs give the same forecast, another seed another draw.
    again = forecast(PERCENTILE, seed=3)
    assert again == forecast(PERCENTILE, seed=3)
    assert again != forecast(PERCENTILE, seed=4)
    with pytest.raises(ValueError, match="level"):
        forecast(DETECTOR, level=1.5)


def test_each_draw_of_the_make_up_is_counted_after_it_settles() -> None:
    """A rule that stays on pages once as the simulation starts; that page falls in
    the uncounted settling hour of each draw, so a day of draws counts no page."""
    rng = np.random.default_rng(9)
    p = MAKE_UPS["mix"].rates(10, 0.85, 5)
    hist = Histogram.from_pairs(np.c_[np.full(10, 20), rng.binomial(20, p)])
    got = expected_false_pages(TODAY, hist, window=20, rounds_per_day=1440.0, hours=24.0)
    assert got.days == pytest.approx(1.0)
    assert got.firing_share >= STAYS_ON
    assert got.pages <= 1
    # A `for` longer than the settling hour: the rule's state runs on from draw to
    # draw, and the first draw settles for its `for` too, so it is still on.
    low = Histogram.from_pairs([(20, 12)] * 10)
    held = Rule(
        name="h",
        k=5,
        below=0.75,
        resolve_above=0.8,
        interval="percentile",
        trigger="ci-low",
        for_seconds=7200.0,
    )
    on = expected_false_pages(held, low, window=20, rounds_per_day=1440.0, hours=24.0, tick=60.0)
    assert on.firing_share >= STAYS_ON
    assert on.pages == 0


@pytest.mark.parametrize("hours", ["-1", "nan", "inf", "a day"])
def test_a_level_span_that_is_not_a_finite_number_of_hours_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], hours: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli(capsys, "forecast", "s", "--level-hours", hours)
    assert exited.value.code == 2
    assert "argument --level-hours: " in capsys.readouterr().err
