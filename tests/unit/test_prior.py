"""The beta-binomial fit of a suite's per-task rates (``stats.prior``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliabilityd.stats.prior import LOG_BOUNDS, beta_prior, log_likelihood


def _by_lgamma(a: float, b: float, n: list[int], c: list[int]) -> float:
    return sum(
        math.lgamma(ci + a)
        + math.lgamma(ni - ci + b)
        - math.lgamma(ni + a + b)
        - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
        for ni, ci in zip(n, c, strict=True)
    )


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0.02, 500.0),
    st.floats(0.02, 500.0),
    st.lists(st.tuples(st.integers(0, 400), st.floats(0.0, 1.0)), min_size=1, max_size=20),
)
def test_the_log_likelihood_is_the_lgamma_formula(
    a: float, b: float, tasks: list[tuple[int, float]]
) -> None:
    n = [t[0] for t in tasks]
    c = [round(t[0] * t[1]) for t in tasks]
    got = log_likelihood(a, b, np.asarray(n), np.asarray(c))
    assert got == pytest.approx(_by_lgamma(a, b, n, c), rel=1e-9, abs=1e-7)


def test_many_tasks_recover_the_population_they_were_drawn_from() -> None:
    rng = np.random.default_rng(20261206)
    for a, b in [(2.0, 0.7), (1.0, 1.0), (30.0, 3.0)]:
        n = rng.integers(10, 40, 4000)
        c = rng.binomial(n, rng.beta(a, b, n.size))
        fa, fb = beta_prior(n, c)
        # The mean and the spread (a + b) of the fitted prior: the MLE's sampling error
        # at 4,000 tasks is a few percent.
        assert fa / (fa + fb) == pytest.approx(a / (a + b), abs=0.01)
        assert fa + fb == pytest.approx(a + b, rel=0.2)


def test_alike_tasks_fit_a_prior_that_makes_them_one_rate() -> None:
    rng = np.random.default_rng(3)
    n = np.full(200, 20)
    c = rng.binomial(n, 0.9)
    a, b = beta_prior(n, c)
    # No spread beyond the binomial's: a + b runs to the search's edge (each task's
    # posterior then sits at the pooled rate whatever its own counts).
    assert a + b > 1e3
    assert a / (a + b) == pytest.approx(c.sum() / n.sum(), abs=0.005)


def test_tasks_that_never_failed_keep_room_to_fail() -> None:
    a, b = beta_prior(np.full(10, 20), np.full(10, 20))
    assert math.exp(LOG_BOUNDS[0]) <= b < 0.1
    rng = np.random.default_rng(1)
    drawn = rng.beta(20 + a, b, 100_000)
    assert float(drawn.min()) < 1.0  # a posterior draw is not certain


def test_tasks_without_trials_carry_nothing_and_bad_counts_are_refused() -> None:
    rng = np.random.default_rng(4)
    n = rng.integers(5, 30, 100)
    c = rng.binomial(n, rng.beta(2.0, 1.0, n.size))
    assert beta_prior(np.r_[n, [0, 0]], np.r_[c, [0, 0]]) == beta_prior(n, c)
    with pytest.raises(ValueError, match="no task"):
        beta_prior(np.zeros(3, dtype=np.int64), np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="c <= n"):
        beta_prior(np.asarray([5]), np.asarray([6]))
