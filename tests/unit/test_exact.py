"""The incomplete beta function and its inverse against exact rational arithmetic.

For integers a, b >= 1, I_x(a, b) is the binomial tail P(Binomial(a + b - 1, x) >= a):
at a rational x that is a finite sum of rationals, computed here with
``fractions`` and compared with the float module (``reliabilityd.stats.exact``).
"""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliabilityd.stats.exact import beta_cdf, beta_quantiles, binomial_upper_tail


def rational_tail(n: int, a: int, x: Fraction) -> Fraction:
    """P(Binomial(n, x) >= a), exactly."""
    return sum((comb(n, j) * x**j * (1 - x) ** (n - j) for j in range(a, n + 1)), Fraction(0))


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 250),
    frac=st.floats(0.0, 1.0),
    x=st.floats(1e-6, 1.0 - 1e-6),
)
def test_the_tail_is_the_rational_binomial_tail(n: int, frac: float, x: float) -> None:
    a = max(1, min(n, round(frac * n)))
    want = rational_tail(n, a, Fraction(x))
    got = float(binomial_upper_tail(n, a, x)[0])
    # 1e-12 of the smaller of the tail and its complement, or the float's own rounding near 1.
    tolerance = Fraction(1, 10**12) * min(want, 1 - want) + Fraction(1, 2**53)
    assert abs(Fraction(got) - want) <= tolerance


@settings(max_examples=25, deadline=None)
@given(
    t=st.integers(1, 200),
    frac=st.floats(0.0, 1.0),
    p=st.sampled_from([0.025, 0.975, 0.005, 0.5, 0.1, 1e-9]),
)
def test_a_quantile_is_within_1e_12_of_the_rational_root(t: int, frac: float, p: float) -> None:
    """I at q (1 - 1e-12) is below p and at q (1 + 1e-12) above it, in exact arithmetic."""
    a = max(1, min(t, round(frac * t)))
    b = t - a + 1
    q = float(beta_quantiles(a, b, p)[0])
    assert 0.0 < q < 1.0
    lo, hi = Fraction(q) * (1 - Fraction(1, 10**12)), Fraction(q) * (1 + Fraction(1, 10**12))
    hi = min(hi, Fraction(1))
    assert rational_tail(t, a, lo) <= Fraction(p) <= rational_tail(t, a, hi)


def test_the_clopper_pearson_ends_have_closed_forms() -> None:
    for t in (1, 2, 7, 50, 200, 10_000, 1_000_000):
        # Beta(t, 1): x^t = p; Beta(1, t): 1 - (1 - x)^t = p.
        assert beta_quantiles(t, 1, 0.025)[0] == pytest.approx(0.025 ** (1 / t), rel=1e-13)
        assert beta_quantiles(1, t, 0.025)[0] == pytest.approx(
            -np.expm1(np.log1p(-0.025) / t), rel=1e-12
        )


def test_a_large_tail_in_integer_arithmetic() -> None:
    """At x = 1/2 the tail is a sum of binomial coefficients over 2^n: exact for any n."""
    n, a = 20_001, 10_130
    term, total = comb(n, a), 0
    for j in range(a, n + 1):  # C(n, j + 1) = C(n, j) (n - j) / (j + 1), in integers
        total += term
        term = term * (n - j) // (j + 1)
    tail = Fraction(total, 2**n)
    got = float(binomial_upper_tail(n, a, 0.5)[0])
    assert abs(Fraction(got) - tail) <= tail * Fraction(1, 10**12)
    # The root of I_x(a, n - a + 1) = tail is x = 1/2 (to the rounding of the tail).
    assert beta_quantiles(a, n - a + 1, float(tail))[0] == pytest.approx(0.5, abs=1e-12)


def test_the_mirror_identity_holds_at_every_size() -> None:
    rng = np.random.default_rng(5)
    for n in (10, 1_000, 100_000, 2_000_000):
        a = rng.integers(1, n + 1, 40)
        b = n - a + 1
        x = rng.random(40)
        # I_x(a, b) = 1 - I_{1-x}(b, a).
        assert np.allclose(beta_cdf(x, a, b), 1.0 - beta_cdf(1.0 - x, b, a), rtol=0, atol=1e-12)
        q = beta_quantiles(a, b, 0.025)
        assert np.allclose(beta_cdf(q, a, b), 0.025, rtol=1e-9, atol=0)
        assert np.allclose(1.0 - beta_quantiles(b, a, 0.975), q, rtol=1e-11, atol=1e-15)


def test_empty_parameters_are_point_masses_and_edges_are_exact() -> None:
    q = beta_quantiles([0, 3, 3, 3, 2], [4, 0, 2, 2, 5], [0.3, 0.3, 0.0, 1.0, 0.5])
    assert q[:4].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert 0.0 < q[4] < 1.0
    assert binomial_upper_tail([5, 5, 5, 5], [0, 6, 3, 3], [0.5, 0.5, 0.0, 1.0]).tolist() == [
        1.0,
        0.0,
        0.0,
        1.0,
    ]
    with pytest.raises(ValueError, match="a, b >= 0"):
        beta_quantiles(0, 0, 0.5)
    with pytest.raises(ValueError, match="probabilities"):
        beta_quantiles(1, 1, 1.5)
    with pytest.raises(ValueError, match="a, b >= 1"):
        beta_cdf(0.5, 0, 2)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 3000), st.integers(0, 3000), st.floats(0.0, 1.0)),
        min_size=1,
        max_size=30,
    ).filter(lambda rows: all(a + b > 0 for a, b, _ in rows))
)
def test_a_batch_gives_every_row_the_float_it_gets_alone(
    rows: list[tuple[int, int, float]],
) -> None:
    a, b, p = (np.array(col) for col in zip(*rows, strict=True))
    batch = beta_quantiles(a, b, p)
    alone = [float(beta_quantiles(ai, bi, pi)[0]) for ai, bi, pi in rows]
    assert batch.tolist() == alone
    x = np.clip(p, 0.0, 1.0)
    tails = binomial_upper_tail(a + b, a, x)
    assert tails.tolist() == [
        float(binomial_upper_tail(ai + bi, ai, xi)[0]) for ai, bi, xi in zip(a, b, x, strict=True)
    ]
