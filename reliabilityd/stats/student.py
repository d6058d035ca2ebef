"""The ``student`` paired interval: a Student-t interval over shared-task differences.

The comparison's unit is the task: shared tasks are independent draws from
the suite's population of tasks, and the per-task differences ``d`` in
[-1, 1] (``stats.paired``) are the sample. The interval is

    mean(d) +- t(df, 1 - (1 - confidence) / 2) * s / sqrt(T)

with ``s`` the sample standard deviation over the T shared tasks and the
degrees of freedom matched to the spread of ``s`` itself: a sample variance
over T draws of a variable with kurtosis ``kappa`` varies like a chi-square
with ``2 (T - 1) / (kappa - 1)`` degrees of freedom (Satterthwaite's
moment match; ``T - 1`` for normal differences, kappa = 3). So ``df`` is
that, with the sample kurtosis, capped at ``T - 1`` (never narrower than
Student's own interval) and floored at 1: a sample whose spread rests on a
few tasks gets a wider quantile. Where the differences lean to one side
(sample skewness within ``SKEW_LIMIT``), the interval is Johnson's
skewness-corrected t (``student_bounds``): the mean's sampling distribution
leans the same way, and a symmetric interval would give the side the
differences lean away from too much room. When every shared task has the same
difference (``s = 0``, or differences within ``SAME`` of each other: float
rounding of equal ones) the interval is gaffke's exact one for that sample
(``stats.intervals.exact_gaffke``), never a point.

Closed form, no resampling: the same numbers on every replica and at every
look, O(T). Its coverage is measured, not proven (docs/statistics.md,
the compare study): near its level where the differences spread over many
tasks, under it where a few tasks carry the whole difference.
"""

from __future__ import annotations

from functools import lru_cache
from math import atan, cos, pi, sin, sqrt
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from reliabilityd.stats.intervals import atoms, exact_gaffke

__all__ = ["SKEW_LIMIT", "student_bounds", "student_df", "student_interval", "t_quantile"]

FloatArray = npt.NDArray[np.float64]
# Differences that span no more than this are one value (float rounding of equal ones).
SAME = 1e-12
# Past this sample skewness the skewness correction is not applied (``student_bounds``).
SKEW_LIMIT = 1.0


def _t_central(x: float, df: int) -> float:
    """P(|X| <= x) for X ~ Student t with integer ``df`` (Abramowitz & Stegun 26.7.3-4)."""
    theta = atan(x / sqrt(df))
    c2 = cos(theta) ** 2
    if df % 2:
        if df == 1:
            return 2.0 * theta / pi
        term = acc = cos(theta)
        for j in range(1, (df - 1) // 2):
            term *= c2 * (2 * j) / (2 * j + 1)
            acc += term
        return 2.0 / pi * (theta + sin(theta) * acc)
    term = acc = 1.0
    for j in range(1, df // 2):
        term *= c2 * (2 * j - 1) / (2 * j)
        acc += term
    return sin(theta) * acc


# Past this many degrees of freedom the quantile is the Cornish-Fisher series in
# the normal quantile (A&S 26.7.5, four terms: error under 1e-9 at df = 200 for
# p <= 0.9995), not a bisection over a closed form whose sum has df / 2 terms.
SERIES_DF = 200


def _t_series(z: float, df: int) -> float:
    z2 = z * z
    g1 = (z2 + 1.0) * z / 4.0
    g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0
    g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0
    g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


@lru_cache(maxsize=4096)
def t_quantile(p: float, df: int) -> float:
    """The p quantile of Student's t with integer ``df >= 1``, for 0.5 <= p < 1 (bisection
    on the closed-form CDF to 1e-12; a series in the normal quantile past SERIES_DF)."""
    if df < 1:
        raise ValueError(f"df must be at least 1, got {df}")
    if not 0.5 <= p < 1.0:
        raise ValueError(f"t_quantile needs 0.5 <= p < 1, got {p}")
    if df > SERIES_DF:
        return _t_series(NormalDist().inv_cdf(p), df)
    target = 2.0 * p - 1.0
    lo, hi = 0.0, 1.0
    while _t_central(hi, df) < target:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if _t_central(mid, df) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def student_df(centred_sq: FloatArray, tasks: int) -> FloatArray:
    """Degrees of freedom per row from the squared centred differences (rows x tasks):
    ``2 (T - 1) / (kappa - 1)`` with the sample kurtosis, in [1, T - 1], rounded down."""
    m2 = centred_sq.mean(axis=-1)
    m4 = (centred_sq**2).mean(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(m2 > 0.0, m4 / np.where(m2 > 0.0, m2, 1.0) ** 2, np.inf)
    df = 2.0 * (tasks - 1) / np.maximum(kappa - 1.0, 2.0)
    return np.floor(np.clip(df, 1.0, max(tasks - 1, 1)))


def _quantiles(p: float, df: FloatArray) -> FloatArray:
    """``t_quantile(p, df)`` for each entry of ``df`` (integers >= 1)."""
    uniq, where = np.unique(df.astype(np.int64), return_inverse=True)
    return np.asarray([t_quantile(p, int(x)) for x in uniq])[where].reshape(df.shape)


def student_bounds(d: FloatArray, confidence: float) -> tuple[FloatArray, FloatArray]:
    """The ``student`` interval of each row's mean, rows x T shared-task differences in
    [-1, 1], T >= 2, rows whose differences are not all equal (``student_interval``
    handles those): (low, high), each held to [-1, 1].

    The t statistic corrected for the skewness of the differences (Johnson, 1978),
    ``(x + m3 / (6 s^2 T) + m3 / (3 s^4) x^2) / (s / sqrt(T))`` with ``x`` the mean
    minus the true difference and ``m3`` the unbiased third cumulant
    ``T sum((d - mean)^3) / ((T - 1)(T - 2))``, is held
    to +-t(df): a sample skewed to one side moves its interval that way, where the
    mean's own sampling distribution leans. The correction is an Edgeworth
    expansion, accurate for moderate skewness: a row whose sample skewness is past
    ``SKEW_LIMIT`` (a few tasks carry the difference), or whose equation has no
    root, keeps the plain t interval.
    """
    t = d.shape[-1]
    mean = d.mean(axis=-1)
    centred = d - mean[..., None]
    sq = centred * centred
    s2 = sq.sum(axis=-1) / (t - 1)
    m3 = (sq * centred).sum(axis=-1) * t / ((t - 1) * (t - 2)) if t > 2 else np.zeros_like(mean)
    q = _quantiles(1.0 - (1.0 - confidence) / 2.0, student_df(sq, t))
    se = np.sqrt(s2 / t)
    with np.errstate(divide="ignore", invalid="ignore"):
        skew = np.where(s2 > 0.0, m3 / s2**1.5, 0.0)
        shift = np.where(s2 > 0.0, m3 / (6.0 * s2 * t), 0.0)
        curve = np.where(s2 > 0.0, m3 / (3.0 * s2 * s2), 0.0)
    used = np.abs(skew) <= SKEW_LIMIT

    def root(e: FloatArray) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
        # The root of curve x^2 + x + e = 0 on the branch through x = -e, where the
        # statistic grows with x (stable as curve -> 0).
        disc = 1.0 - 4.0 * curve * e
        ok = disc >= 0.0
        return -2.0 * e / (1.0 + np.sqrt(np.where(ok, disc, 1.0))), ok

    x_high, ok_high = root(np.where(used, shift, 0.0) + q * se)
    x_low, ok_low = root(np.where(used, shift, 0.0) - q * se)
    used &= ok_high & ok_low
    low = np.where(used, mean - x_low, mean - q * se)
    high = np.where(used, mean - x_high, mean + q * se)
    return np.maximum(-1.0, low), np.minimum(1.0, high)


def student_interval(d: FloatArray, confidence: float) -> tuple[float, float, str]:
    """The ``student`` interval of mean(d), d in [-1, 1] per shared task; its method name."""
    t = d.size
    if t < 2 or float(np.ptp(d)) <= SAME:
        # Equal in exact arithmetic may differ in the last bit: one value, not a spread
        # of 1e-17 that would make the interval a point.
        d = np.full(t, float(d.mean()))
        uniq, merged = atoms(d, np.ones(t, dtype=np.int64))
        exact = exact_gaffke(uniq, merged, confidence, (-1.0, 1.0))
        if exact is not None:
            return exact.low, exact.high, exact.method
    low, high = student_bounds(d[None, :], confidence)
    return float(low[0]), float(high[0]), "student-t"
