"""Exact per-task estimators: pass@k (capability) and pass^k (reliability).

A task with ``n`` counted trials of which ``c`` passed gives

* ``pass@k = 1 - C(n-c, k) / C(n, k)``: the chance that at least one of ``k``
  trials drawn without replacement from its ``n`` succeeds (the unbiased
  HumanEval estimator);
* ``pass^k = C(c, k) / C(n, k)``: the chance that all ``k`` succeed (the exact
  hypergeometric analogue).

The plug-in ``(c/n)**k`` samples with replacement from a finite pool and
flatters the number; it is deliberately not implemented anywhere.

Scalar functions are exact rationals rounded once to a float. The vectorised
forms work over arrays of distinct ``(n, c)`` cells as a running product of
``k`` ratios, which stays finite for ``n`` in the millions (the binomial
coefficients themselves would overflow a float at ``n`` ~ 1030).
"""

from __future__ import annotations

from fractions import Fraction
from math import comb
from typing import Literal

import numpy as np
import numpy.typing as npt

Metric = Literal["pass@k", "pass^k"]
METRICS: tuple[Metric, ...] = ("pass@k", "pass^k")


def _check(n: int, c: int, k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got k={k}")
    if n < 1:
        raise ValueError(
            f"n must be at least 1 (a task with no counted trials has no estimate), got n={n}"
        )
    if not 0 <= c <= n:
        raise ValueError(f"c must lie in [0, n]: got c={c} with n={n}")
    if k > n:
        raise ValueError(
            f"k={k} exceeds the n={n} trials recorded: the estimate would be an "
            "extrapolation; record at least k trials or lower k"
        )


def pass_at_k_exact(n: int, c: int, k: int) -> Fraction:
    """pass@k as an exact rational."""
    _check(n, c, k)
    return 1 - Fraction(comb(n - c, k), comb(n, k))


def pass_hat_k_exact(n: int, c: int, k: int) -> Fraction:
    """pass^k as an exact rational."""
    _check(n, c, k)
    return Fraction(comb(c, k), comb(n, k))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k trials (of n, c passed) succeeds."""
    return float(pass_at_k_exact(n, c, k))


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Probability that all k trials (of n, c passed) succeed."""
    return float(pass_hat_k_exact(n, c, k))


def lottery_gap(n: int, c: int, k: int) -> Fraction:
    """pass@k - pass^k exactly: how far a task is from doing reliably what it can do.

    Zero for every task at k = 1 and for tasks that always or never pass; a
    float subtraction would leave noise of order 1e-17 there.
    """
    _check(n, c, k)
    return Fraction(comb(n, k) - comb(n - c, k) - comb(c, k), comb(n, k))


def _ratio_product(
    top: npt.NDArray[np.int64], n: npt.NDArray[np.int64], k: int
) -> npt.NDArray[np.float64]:
    """prod_{i<k} (top - i) / (n - i), i.e. C(top, k) / C(n, k), per cell."""
    out = np.ones(top.shape, dtype=np.float64)
    # Cells with top < k have a zero factor: exactly 0, no float residue.
    live = top >= k
    out[~live] = 0.0
    if not live.any():
        return out
    t = top[live].astype(np.float64)
    m = n[live].astype(np.float64)
    # Factor by factor, left to right (a row's np.prod rounds the same way),
    # without a (cells, k) temporary or a reduction over its short axis.
    acc = t / m
    for i in range(1, k):
        acc *= (t - i) / (m - i)
    out[live] = acc
    return out


def _check_cells(n: npt.NDArray[np.int64], c: npt.NDArray[np.int64], k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got k={k}")
    if n.shape != c.shape:
        raise ValueError(f"n and c must have the same shape, got {n.shape} and {c.shape}")
    if n.size and int(n.min()) < k:
        raise ValueError(
            f"k={k} exceeds the n={int(n.min())} trials of some cell: "
            "select cells with n >= k first"
        )
    if n.size and (int(c.min()) < 0 or bool((c > n).any())):
        raise ValueError("every cell needs 0 <= c <= n")


def pass_at_k_cells(n: npt.ArrayLike, c: npt.ArrayLike, k: int) -> npt.NDArray[np.float64]:
    """Vectorised pass@k over cells; every cell must have n >= k."""
    na = np.asarray(n, dtype=np.int64)
    ca = np.asarray(c, dtype=np.int64)
    _check_cells(na, ca, k)
    if k == 1:
        # 1 - (n - c) / n is c / n: one rounding instead of two, so pass@1 and
        # pass^1 are the same float.
        return _ratio_product(ca, na, 1)
    return 1.0 - _ratio_product(na - ca, na, k)


def pass_hat_k_cells(n: npt.ArrayLike, c: npt.ArrayLike, k: int) -> npt.NDArray[np.float64]:
    """Vectorised pass^k over cells; every cell must have n >= k."""
    na = np.asarray(n, dtype=np.int64)
    ca = np.asarray(c, dtype=np.int64)
    _check_cells(na, ca, k)
    return _ratio_product(ca, na, k)


def metric_cells(
    metric: Metric, n: npt.ArrayLike, c: npt.ArrayLike, k: int
) -> npt.NDArray[np.float64]:
    """The named metric over cells."""
    if metric == "pass@k":
        return pass_at_k_cells(n, c, k)
    if metric == "pass^k":
        return pass_hat_k_cells(n, c, k)
    raise ValueError(f"metric must be 'pass@k' or 'pass^k', got {metric!r}")


ESTIMATOR_NAME: dict[Metric, str] = {
    "pass@k": "combinatorial-unbiased",
    "pass^k": "hypergeometric-exact",
}
