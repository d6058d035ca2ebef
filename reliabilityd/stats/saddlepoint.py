"""Saddlepoint quantiles of resampled means: the bootstrap without the draw.

Two resampling distributions of a suite's mean per-task value are sums over
its D distinct per-task values, so their cumulant generating functions cost
O(D) to evaluate and their quantiles come from the Lugannani-Rice tail
formula with no random draw at all:

* the cluster bootstrap: the mean of m draws with replacement from the
  values (weights count / m), ``K(t) = m log sum_j p_j exp(t v_j / m)``;
* a Dirichlet-weighted mean ``sum_j w_j v_j`` with ``w ~ Dirichlet(alpha)``
  (the Bayesian bootstrap), through ``P(sum_j G_j (v_j - x) <= 0)`` for
  independent ``G_j ~ Gamma(alpha_j)`` (Davison and Hinkley's construction).

Both are the B -> infinity limit of the corresponding Monte Carlo draw,
accurate to O(1/m^{3/2}) in the centre of a smooth distribution; they are
poor on a lattice with a handful of atoms, which is why the callers use the
exact draw there. Every quantile lies within [min v, max v].
"""

from __future__ import annotations

from math import copysign, erfc, exp, inf, isfinite, log, nan, pi, sqrt
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

_ND = NormalDist()
_BISECT = 64
_NEWTON = 60
# Below this |w| the Lugannani-Rice terms cancel badly; the quantile sought is
# then within about 1e-4 standard deviations of the mean, where the normal
# approximation is exact to that order.
_W_SMALL = 1e-4


def _lugannani_rice(w: float, u: float) -> float:
    """P(X <= x) from the signed root w and the scaled tilt u at x."""
    cdf = 0.5 * erfc(-w / sqrt(2.0))
    if abs(w) < _W_SMALL or u == 0.0:
        return cdf
    phi = exp(-0.5 * w * w) / sqrt(2.0 * pi)
    return min(1.0, max(0.0, cdf + phi * (1.0 / w - 1.0 / u)))


def _cgf(t: float, v: FloatArray, vv: FloatArray, logp: FloatArray) -> tuple[float, float, float]:
    """kappa(t), kappa'(t), kappa''(t) of one draw: the O(D) step."""
    a = t * v + logp
    top = float(a.max())
    e = np.exp(a - top)
    total = float(e.sum())
    k1 = float(e @ v) / total
    k2 = max(float(e @ vv) / total - k1 * k1, 0.0)
    return log(total) + top, k1, k2


def bootstrap_mean_quantiles(
    values: FloatArray, count: npt.NDArray[np.int64], probs: FloatArray
) -> FloatArray:
    """Quantiles of the cluster-bootstrap mean (m = count.sum() draws) at ``probs``."""
    m = float(count.sum())
    p = count / m
    v = values.astype(np.float64)
    vv = v * v
    mu = float(p @ v)
    sd = sqrt(max(float(p @ vv) - mu * mu, 0.0))
    q = np.asarray(probs, dtype=np.float64)
    vmin, vmax = float(v.min()), float(v.max())
    if sd == 0.0 or vmin == vmax:
        return np.full(q.shape, mu)
    logp = np.log(p)

    def evaluate(t: float) -> tuple[float, float, float]:
        """(tail probability, the mean it is at, d tail / d t) at one-draw tilt t."""
        k, k1, k2 = _cgf(t, v, vv, logp)
        w = copysign(sqrt(max(2.0 * m * (t * k1 - k), 0.0)), t)
        u = t * sqrt(m * k2)
        # The saddlepoint density of the mean times dx/dt = kappa''(t).
        slope = exp(-0.5 * w * w) / sqrt(2.0 * pi) * sqrt(m * k2)
        return _lugannani_rice(w, u), k1, slope

    out = np.empty(q.shape)
    unit = 1.0 / (sd * sqrt(m))
    for i, target in enumerate(q.tolist()):
        # Newton on the tilt from the normal quantile's, inside a bracket that
        # every evaluation narrows; outside it, bisect (or step out while open).
        t = _ND.inv_cdf(min(max(target, 1e-12), 1.0 - 1e-12)) * unit
        lo, hi = -inf, inf
        x = mu
        for _ in range(_NEWTON):
            f, x, slope = evaluate(t)
            if abs(f - target) < 1e-10:
                break
            if f < target:
                lo = t
            else:
                hi = t
            step = t - (f - target) / slope if slope > 0 else nan
            if lo < step < hi:
                t = step
            elif isfinite(lo) and isfinite(hi):
                t = 0.5 * (lo + hi)
            elif isfinite(lo):
                t = lo + max(abs(lo), unit)
            else:
                t = hi - max(abs(hi), unit)
        out[i] = min(max(x, vmin), vmax)
    return out


def _gamma_sum_tail(
    d: FloatArray, alpha: FloatArray, t0: float = 0.0
) -> tuple[float, float, float]:
    """P(sum_j G_j d_j <= 0) for independent G_j ~ Gamma(alpha_j), with d = v - x.

    Returns (tail, the saddlepoint t, the density of sum w_j v_j at x), the
    last for Newton steps on x. d must hold both signs, so the saddlepoint
    exists.
    """
    # K(t) = -sum a log(1 - t d) lives on (1/min d, 1/max d), where K' is
    # increasing from -inf to +inf: safeguarded Newton on K'(t) = 0.
    lo = 1.0 / float(d.min())
    hi = 1.0 / float(d.max())
    if not lo < t0 < hi or t0 == 0.0:
        # One Newton step from 0 without the division: K'(0) + K''(0) t = 0.
        t0 = -float(alpha @ d) / float(alpha @ (d * d))
    t = t0 if lo < t0 < hi else 0.0
    for _ in range(_NEWTON):
        r = d / (1.0 - t * d)
        ar = alpha * r
        g = float(ar.sum())
        h = float(ar @ r)
        if g < 0:
            lo = t
        else:
            hi = t
        step = t - g / h
        t_new = step if lo < step < hi else 0.5 * (lo + hi)
        done = abs(t_new - t) <= 1e-12 * max(1.0, abs(t))
        t = t_new
        if done:
            break
    one = 1.0 - t * d
    k = -float(alpha @ np.log(one))
    k2 = float(alpha @ (d / one) ** 2)
    w = copysign(sqrt(max(-2.0 * k, 0.0)), t)
    u = t * sqrt(k2)
    # d/dx P(X <= x) = f_S(0) E[sum G | S = 0]; under the tilt E[G_j] = a_j / (1 - t d_j).
    density = exp(min(k, 0.0)) / sqrt(2.0 * pi * k2) * float((alpha / one).sum())
    return _lugannani_rice(w, u), t, density


def dirichlet_mean_quantile(values: FloatArray, alpha: FloatArray, prob: float) -> float:
    """The ``prob`` quantile of sum_j w_j v_j, w ~ Dirichlet(alpha)."""
    v = values.astype(np.float64)
    a = np.asarray(alpha, dtype=np.float64)
    vmin, vmax = float(v.min()), float(v.max())
    if vmax == vmin:
        return vmin
    total = float(a.sum())
    mean = float(a @ v) / total
    sd = sqrt(max(float(a @ (v - mean) ** 2) / total, 0.0) / (total + 1.0))
    # Newton on x from the normal guess, inside a bracket every evaluation
    # narrows (the tail is increasing in x); bisect when a step leaves it.
    lo, hi = vmin, vmax
    z = _ND.inv_cdf(min(max(prob, 1e-12), 1.0 - 1e-12))
    x = min(max(mean + z * sd, vmin + 1e-3 * (vmax - vmin)), vmax - 1e-3 * (vmax - vmin))
    t = 0.0
    for _ in range(_BISECT):
        f, t, density = _gamma_sum_tail(v - x, a, t)
        if abs(f - prob) < 1e-10:
            break
        if f < prob:
            lo = x
        else:
            hi = x
        step = x - (f - prob) / density if density > 0 else nan
        x_new = step if lo < step < hi else 0.5 * (lo + hi)
        if abs(x_new - x) < 1e-14 * max(1.0, abs(x)):
            break
        x = x_new
    return min(max(x, vmin), vmax)
