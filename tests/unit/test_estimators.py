"""The per-task estimators against exact rational arithmetic."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliabilityd import pass_at_k, pass_hat_k
from reliabilityd.stats.estimators import (
    lottery_gap,
    pass_at_k_cells,
    pass_hat_k_cells,
)


@st.composite
def nck(draw: st.DrawFn, max_n: int = 60) -> tuple[int, int, int]:
    n = draw(st.integers(1, max_n))
    c = draw(st.integers(0, n))
    k = draw(st.integers(1, n))
    return n, c, k


def exact_at(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(comb(n - c, k), comb(n, k))


def exact_hat(n: int, c: int, k: int) -> Fraction:
    return Fraction(comb(c, k), comb(n, k))


def test_the_readme_example() -> None:
    assert pass_at_k(5, 3, 2) == 0.9
    assert pass_hat_k(5, 3, 2) == 0.3
    # The plug-in (3/5)**2 = 0.36 would flatter by 6pp; the exact value is not it.
    assert pass_hat_k(5, 3, 2) != pytest.approx((3 / 5) ** 2)


@given(nck())
def test_scalars_are_the_exact_rational_rounded_once(args: tuple[int, int, int]) -> None:
    n, c, k = args
    assert pass_at_k(n, c, k) == float(exact_at(n, c, k))
    assert pass_hat_k(n, c, k) == float(exact_hat(n, c, k))


@given(st.lists(nck(max_n=200), min_size=1, max_size=30), st.integers(1, 12))
def test_vectorised_agree_with_exact(cells: list[tuple[int, int, int]], k: int) -> None:
    cells = [(n, c, 0) for n, c, _ in cells if n >= k]
    if not cells:
        return
    n = np.array([x[0] for x in cells])
    c = np.array([x[1] for x in cells])
    at = pass_at_k_cells(n, c, k)
    hat = pass_hat_k_cells(n, c, k)
    for i, (ni, ci, _) in enumerate(cells):
        assert abs(at[i] - float(exact_at(ni, ci, k))) <= 1e-12
        assert abs(hat[i] - float(exact_hat(ni, ci, k))) <= 1e-12


@pytest.mark.parametrize("k", [1, 2, 5, 20, 100, 3000])
def test_vectorised_lifetime_counters_do_not_overflow(k: int) -> None:
    """n in the tens of thousands: C(n, k) overflows a float, the product does not."""
    rng = np.random.default_rng(7)
    n = rng.integers(max(k, 10_000), 60_000, size=40)
    c = (n * rng.uniform(0.5, 1.0, size=40)).astype(np.int64)
    c[0] = n[0]
    c[1] = 0
    at = pass_at_k_cells(n, c, k)
    hat = pass_hat_k_cells(n, c, k)
    assert np.isfinite(at).all()
    assert np.isfinite(hat).all()
    for i in range(0, 40, 7):
        assert abs(at[i] - float(exact_at(int(n[i]), int(c[i]), k))) <= 1e-12
        assert abs(hat[i] - float(exact_hat(int(n[i]), int(c[i]), k))) <= 1e-12
    assert hat[0] == 1.0
    assert at[1] == 0.0


def test_degenerate_cells_are_exact_zero_and_one() -> None:
    # c < k: pass^k is exactly 0; n - c < k: pass@k is exactly 1 (no float residue).
    assert pass_hat_k_cells([10], [3], 4)[0] == 0.0
    assert pass_at_k_cells([10], [8], 4)[0] == 1.0


@given(nck())
def test_gap_is_exact_and_zero_at_k1(args: tuple[int, int, int]) -> None:
    n, c, k = args
    gap = lottery_gap(n, c, k)
    assert gap == exact_at(n, c, k) - exact_hat(n, c, k)
    assert gap >= 0
    if k == 1 or c in (0, n):
        assert gap == 0
    else:
        assert gap > 0


@pytest.mark.parametrize(
    ("n", "c", "k", "message"),
    [
        (5, 3, 0, "k must be at least 1"),
        (5, 3, -2, "k must be at least 1"),
        (0, 0, 1, "n must be at least 1"),
        (5, 6, 2, "c must lie in"),
        (5, -1, 2, "c must lie in"),
        (5, 3, 6, "exceeds the n=5 trials"),
    ],
)
def test_invalid_inputs_raise_clear_errors(n: int, c: int, k: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pass_at_k(n, c, k)
    with pytest.raises(ValueError, match=message):
        pass_hat_k(n, c, k)


def test_vectorised_invalid_inputs() -> None:
    with pytest.raises(ValueError, match="k must be at least 1"):
        pass_hat_k_cells([5], [3], 0)
    with pytest.raises(ValueError, match="select cells with n >= k"):
        pass_hat_k_cells([5, 2], [3, 1], 3)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k_cells([5], [6], 2)
    with pytest.raises(ValueError, match="same shape"):
        pass_at_k_cells([5, 5], [3], 2)
