"""The spread of a suite's per-task pass rates, from their counts: a beta-binomial fit.

One window's c / n per task overstates how much the tasks differ (its
sampling noise adds to their true spread) and says a task that has not
failed yet never will. ``beta_prior`` fits one Beta(a, b) to every task's
(n, c) by maximum likelihood under the beta-binomial law; a task's rate
given its own counts is then Beta(c + a, n - c + b). Drawing each task's
rate from that posterior gives a set of rates spread as the tasks' true
rates are (to the fit's accuracy), where the counts alone or their
posterior means give too much spread or too little. Alike tasks fit a
prior so narrow that every task is drawn near the suite's pooled rate.

Pure numpy; no scipy. The log-likelihood of integer counts is a sum of
logs (``lgamma(x + m) - lgamma(x) = sum of log(x + i), i < m``), so it is
accurate to float rounding for any n, computed once per distinct (n, c).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["LOG_BOUNDS", "beta_prior", "log_likelihood"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# log a and log b are searched in this range: e^-4 (a prior that puts its mass at the
# ends) to e^12 (a prior so narrow that the tasks are one rate).
LOG_BOUNDS = (-4.0, 12.0)
_COARSE = 17  # grid points per axis of the first search (1 in log a, log b)
_FINEST = 1e-3  # the pattern search stops at this step in log a and log b


def _rising_logs(x: float, upto: int) -> FloatArray:
    """cumulative sums of log(x + i) for i < m, m = 0 .. upto: lgamma(x + m) - lgamma(x)."""
    out = np.zeros(upto + 1)
    if upto:
        out[1:] = np.cumsum(np.log(x + np.arange(upto)))
    return out


def log_likelihood(
    a: float, b: float, n: IntArray, c: IntArray, weight: IntArray | None = None
) -> float:
    """The beta-binomial log-likelihood of the counts (without the binomial
    coefficients, which do not depend on a and b), each (n, c) counted ``weight``
    times."""
    w = np.ones(n.size) if weight is None else weight
    top = int(n.max()) if n.size else 0
    ra, rb, rab = _rising_logs(a, top), _rising_logs(b, top), _rising_logs(a + b, top)
    return float(np.sum(w * (ra[c] + rb[n - c] - rab[n])))


def beta_prior(n: IntArray, c: IntArray) -> tuple[float, float]:
    """The maximum-likelihood Beta(a, b) of the tasks' pass rates given each task's
    trials ``n`` and passes ``c`` (tasks with no trials carry nothing).

    A coarse grid over (log a, log b) in ``LOG_BOUNDS``, then a pattern search from
    its best point, halving its step to ``_FINEST``. Deterministic.
    """
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    if n.shape != c.shape or (n < 0).any() or (c < 0).any() or (c > n).any():
        raise ValueError("counts need 0 <= c <= n, one pair per task")
    ran = n > 0
    if not ran.any():
        raise ValueError("no task has a trial")
    pairs, weight = np.unique(np.c_[n[ran], c[ran]], axis=0, return_counts=True)
    nn, cc = pairs[:, 0], pairs[:, 1]
    lo, hi = LOG_BOUNDS

    def ll(la: float, lb: float) -> float:
        return log_likelihood(float(np.exp(la)), float(np.exp(lb)), nn, cc, weight)

    axis = np.linspace(lo, hi, _COARSE)
    best = max((ll(x, y), x, y) for x in axis for y in axis)
    here, la, lb = best
    step = float(axis[1] - axis[0]) / 2.0
    while step >= _FINEST:
        top = max(
            (ll(x, y), x, y)
            for x in (la - step, la, la + step)
            for y in (lb - step, lb, lb + step)
            if lo <= x <= hi and lo <= y <= hi
        )
        if top[0] > here:  # a strictly better neighbour: move there
            here, la, lb = top
        else:
            step /= 2.0
    return float(np.exp(la)), float(np.exp(lb))
