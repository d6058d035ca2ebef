"""gaffke's bound on each of its paths: exact where it exists, a corrected draw, the saddlepoint.

* Binary values: the shipped bound is Clopper-Pearson, and its coverage is
  computed exactly (a sum over the binomial distribution of the number of
  tasks at 1) at every T up to 200, at the truths where it is worst.
* Fractional values: the drawn bound lies inside the bound of infinitely
  many draws no more often than ``DRAW_INSIDE``.
* A suite that changes path by one trial keeps its bound up to the draw's
  noise: from exact to the draw, and from the draw to the saddlepoint.
"""

from __future__ import annotations

from fractions import Fraction
from math import comb, lgamma

import numpy as np
import pytest

from reliabilityd import Histogram, estimate
from reliabilityd.stats.estimate import estimate_many
from reliabilityd.stats.intervals import (
    DRAW_INSIDE,
    EXACT_DRAW_LIMIT,
    atoms,
    draw_rank,
    intervals,
    saddlepoint_level,
)

TAIL = 0.025
# The sd of a 2.5% quantile of B = 2000 draws, in sds of the distribution.
DRAW_SD = float(np.sqrt(TAIL * (1 - TAIL) / 2000) / 0.05844)


def binary_bounds(t: int) -> tuple[np.ndarray, np.ndarray]:
    """The shipped 95% bounds of every suite of t one-trial tasks, s = 0..t of them passing."""
    series = [Histogram([1, 1], [0, 1], [t - s, s]) for s in range(t + 1)]
    rows = estimate_many(series, [1], ("pass^k",))
    assert {row[0].method for row in rows} == {"exact"}
    low = np.array([row[0].ci_low for row in rows], dtype=np.float64)
    high = np.array([row[0].ci_high for row in rows], dtype=np.float64)
    return low, high


def test_binary_coverage_is_at_least_nominal_at_every_size_up_to_200() -> None:
    """Exact coverage, P(low <= p <= high) = sum_s P(S = s) [low(s) <= p <= high(s)].

    The misses are worst just below a lower bound and just above an upper
    one, where a truth leaves the interval of one more s: those truths are
    on the grid, beside a regular one. Float sums of at most 201 terms: the
    tolerance, 1e-9, is far above their rounding and far below any miss.
    """
    worst_side = 0.0
    for t in range(1, 201):
        low, high = binary_bounds(t)
        s = np.arange(t + 1)
        edges = np.concatenate([low, high, low - 1e-10, high + 1e-10, np.linspace(0, 1, 401)])
        p = np.unique(np.clip(edges, 0.0, 1.0))[:, None]
        log_comb = np.array([lgamma(t + 1) - lgamma(k + 1) - lgamma(t - k + 1) for k in s])
        with np.errstate(divide="ignore", invalid="ignore"):
            log_pmf = log_comb + s * np.log(p) + (t - s) * np.log1p(-p)
        pmf = np.exp(np.where(np.isnan(log_pmf), -np.inf, log_pmf))
        pmf[(p[:, 0] == 0.0), 0] = 1.0
        pmf[(p[:, 0] == 1.0), t] = 1.0
        above = (pmf * (low > p)).sum(axis=1)  # the interval wholly above the truth
        below = (pmf * (high < p)).sum(axis=1)
        assert (1.0 - above - below).min() >= 0.95 - 1e-9, t
        assert above.max() <= TAIL + 1e-9, t
        assert below.max() <= TAIL + 1e-9, t
        worst_side = max(worst_side, float(above.max()), float(below.max()))
    # Exact, not merely conservative: just below a bound a side misses 2.5% to 1e-6.
    assert worst_side > TAIL - 1e-6


def test_binary_bounds_are_clopper_pearson_in_exact_arithmetic() -> None:
    """At T = 40: P(Bin(T, low) >= s) = 2.5% and P(Bin(T, high) <= s) = 2.5%, in rationals."""
    t = 40
    low, high = binary_bounds(t)
    for s in range(t + 1):

        def upper_tail(x: float, start: int) -> Fraction:
            q = Fraction(x)
            return sum(
                (comb(t, j) * q**j * (1 - q) ** (t - j) for j in range(start, t + 1)), Fraction(0)
            )

        if s == 0:
            assert low[s] == 0.0
        else:
            assert abs(upper_tail(low[s], s) - Fraction(TAIL)) < Fraction(1, 10**14)
        if s == t:
            assert high[s] == 1.0
        else:
            assert abs(1 - upper_tail(high[s], s + 1) - Fraction(TAIL)) < Fraction(1, 10**14)
    # And the mirror image to the last bit: s passing is t - s failing.
    assert (high[::-1] == 1.0 - low).all()


def test_a_suite_at_one_value_is_exact() -> None:
    """Every task at v: the lower bound is v times Beta(T, 1)'s quantile, the upper its mirror."""
    est = estimate([(4, 3)] * 30, 1)
    assert est.method == "exact"
    q = 0.025 ** (1 / 30)
    assert est.ci == pytest.approx((0.75 * q, 1.0 - 0.25 * q), rel=1e-13)


def at_least(b: int, tail: Fraction, k: int) -> Fraction:
    """P(Binomial(b, tail) >= k), exactly: one minus the terms below k, by their recurrence."""
    term = (1 - tail) ** b
    below = Fraction(0)
    for j in range(k):
        below += term
        term = term * (b - j) / (j + 1) * tail / (1 - tail)
    return 1 - below


def test_draw_rank_is_the_binomial_rule_in_exact_arithmetic() -> None:
    for b, tail in ((2000, Fraction(1, 40)), (500, Fraction(1, 40)), (2000, Fraction(1, 200))):
        r = draw_rank(b, float(tail))
        promise = 1 - Fraction(DRAW_INSIDE)
        assert at_least(b, tail, r) >= promise > at_least(b, tail, r + 1)
    assert draw_rank(2000, 0.025) == 37
    assert draw_rank(20, 0.025) == 0  # no rank can promise it: the saddlepoint takes over


def test_a_drawn_bound_is_inside_the_true_one_as_rarely_as_promised() -> None:
    """400 seeds on one fractional suite: each drawn bound inside the true one about 2.5% of
    the time (at most 5%); the plain quantile would be inside half the time."""
    rng = np.random.default_rng(20261201)
    values = rng.binomial(5, rng.beta(2.0, 1.0, 30)) / 5.0
    uniq, count = atoms(values, np.ones(values.size, dtype=np.int64))
    alpha = np.append(count.astype(np.float64), 1.0)
    # The true bounds from two million draws: their own noise is 0.002 sds.
    g = rng.standard_gamma(alpha, size=(2_000_000, alpha.size))
    w = g / g.sum(axis=1, keepdims=True)
    true_low = float(np.quantile(w @ np.append(uniq, 0.0), TAIL))
    true_high = float(np.quantile(w @ np.append(uniq, 1.0), 1 - TAIL))
    got = intervals(
        [(uniq, count)] * 400,
        "gaffke",
        confidence=0.95,
        n_boot=2000,
        rngs=[np.random.default_rng(seed) for seed in range(400)],
    )
    assert {ci.method for ci in got} == {"exact-draw"}
    inside = np.array([ci.low > true_low for ci in got] + [ci.high < true_high for ci in got])
    assert 0.005 <= inside.mean() <= 0.05, inside.mean()


def one_more_trial(pairs: list[tuple[int, int]], task: int, passed: bool) -> list[tuple[int, int]]:
    n, c = pairs[task]
    return [*pairs[:task], (n + 1, c + int(passed)), *pairs[task + 1 :]]


def reference_bounds(hist: Histogram, k: int, rng: np.random.Generator) -> tuple[float, float]:
    """gaffke's pass^k bounds from 600,000 draws (their noise: 0.004 sds)."""
    from reliabilityd.stats.estimators import metric_cells

    uniq, count = atoms(metric_cells("pass^k", hist.n, hist.c, k), hist.count)
    alpha = np.append(count.astype(np.float64), 1.0)
    g = rng.standard_gamma(alpha, size=(600_000, alpha.size))
    w = g / g.sum(axis=1, keepdims=True)
    return (
        float(np.quantile(w @ np.append(uniq, 0.0), TAIL)),
        float(np.quantile(w @ np.append(uniq, 1.0), 1 - TAIL)),
    )


def test_one_trial_out_of_binary_moves_the_bound_by_the_draws_noise() -> None:
    """Tasks of 5 trials at k = 5 are 0 or 1 (exact); one task's sixth trial makes it 1/6.

    The shipped bound moves from the exact one (checked against 600,000
    draws) to the corrected draw, which lies outside the true bound by the
    correction (0.13 sds at the median) give or take its noise (0.06 sds):
    beyond what the data move the true bound, never more than 0.35 sds, and
    0.05 to 0.25 sds outward on average.
    """
    rng = np.random.default_rng(7)
    offsets, moves = [], []
    for _ in range(14):
        t = int(rng.integers(30, 201))
        ok = int(rng.integers(t // 4, t - 3))
        pairs = [(5, 5)] * ok + [(5, 4)] * (t - ok)
        before = estimate(pairs, 5, "pass^k")
        after_pairs = one_more_trial(pairs, t - 1, passed=True)  # (6, 5): pass^5 = 1/6
        after = estimate(after_pairs, 5, "pass^k")
        assert (before.method, after.method) == ("exact", "exact-draw")
        assert before.ci is not None
        assert after.ci is not None
        was_low, was_high = reference_bounds(Histogram.from_pairs(pairs), 5, rng)
        true_low, true_high = reference_bounds(Histogram.from_pairs(after_pairs), 5, rng)
        p = ok / t
        sd = np.sqrt(p * (1 - p) / t)
        # The exact bound is the bound of infinitely many draws (the
        # reference's noise: 0.004 sds) ...
        assert abs(was_low - before.ci[0]) < 0.02 * sd
        assert abs(was_high - before.ci[1]) < 0.02 * sd
        # ... and the shipped bound moved with the data and by the draw's correction and noise.
        offsets += [(true_low - after.ci[0]) / sd, (after.ci[1] - true_high) / sd]
        moves += [
            (abs(after.ci[0] - before.ci[0]) - abs(true_low - was_low)) / sd,
            (abs(after.ci[1] - before.ci[1]) - abs(true_high - was_high)) / sd,
        ]
    assert max(moves) < 0.35, max(moves)
    assert 0.05 < float(np.mean(offsets)) < 0.25, np.mean(offsets)


def test_one_trial_past_the_draw_limit_moves_the_bound_by_the_draws_noise() -> None:
    """99 distinct values (100 atoms with the pseudo-task) are drawn; one trial that makes a
    100th value takes the saddlepoint, which sits at the corrected draw's median: no jump."""
    rng = np.random.default_rng(11)
    assert EXACT_DRAW_LIMIT // 2000 == 100
    offsets = []
    for _ in range(24):
        # Values c / 199 for 99 distinct c, each held by 2-4 tasks.
        cs = rng.choice(np.arange(20, 199), size=99, replace=False)
        pairs = [(199, int(c)) for c in cs for _ in range(int(rng.integers(2, 5)))]
        before = estimate(pairs, 1, "pass^k")
        after = estimate(one_more_trial(pairs, 0, passed=bool(rng.integers(2))), 1, "pass^k")
        assert (before.method, after.method) == ("exact-draw", "saddlepoint")
        assert before.ci is not None
        assert after.ci is not None
        p = float(np.mean([c / 199 for _, c in pairs]))
        sd = float(np.std([c / 199 for _, c in pairs])) / np.sqrt(len(pairs))
        assert before.value == pytest.approx(p)
        offsets += [(after.ci[0] - before.ci[0]) / sd, (before.ci[1] - after.ci[1]) / sd]
    offsets_a = np.array(offsets)
    # The draw's noise, 0.06 sds a bound: within 4 of it each, and no offset on average.
    assert np.abs(offsets_a).max() < 4 * DRAW_SD + 0.03, offsets_a
    assert abs(offsets_a.mean()) < 0.04, offsets_a.mean()


def test_the_saddlepoint_level_is_the_corrected_draws_median() -> None:
    level = saddlepoint_level(2000, TAIL)
    assert level == pytest.approx(0.01833, abs=1e-5)
    # The 37th of 2000 uniforms has that median: half of a million such order statistics below it.
    rng = np.random.default_rng(3)
    u = rng.beta(37, 2000 + 1 - 37, 1_000_000)
    assert float((u < level).mean()) == pytest.approx(0.5, abs=0.002)
    assert saddlepoint_level(20, TAIL) == TAIL
