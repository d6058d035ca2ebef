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
exact draw there. Every quantile lies strictly inside [min v, max v].
"""

from __future__ import annotations

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


def _phi(x: FloatArray) -> FloatArray:
    return np.asarray(np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi), dtype=np.float64)


def _norm_cdf(x: FloatArray) -> FloatArray:
    # numpy has no erf; the vectorised form of NormalDist().cdf.
    return np.asarray(np.frompyfunc(_ND.cdf, 1, 1)(x), dtype=np.float64)


def _lugannani_rice(w: FloatArray, u: FloatArray) -> FloatArray:
    small = np.abs(w) < _W_SMALL
    ws = np.where(small, 1.0, w)
    us = np.where(small | (u == 0.0), 1.0, u)
    tail = _norm_cdf(w) + _phi(w) * (1.0 / ws - 1.0 / us)
    tail = np.where(small, _norm_cdf(w), tail)
    return np.clip(tail, 0.0, 1.0)


def _log_mgf(
    t: FloatArray, v: FloatArray, logp: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """kappa(t), kappa'(t), kappa''(t) of one draw, for each t (shape (Q,))."""
    a = t[:, None] * v[None, :] + logp[None, :]
    top = a.max(axis=1, keepdims=True)
    e = np.exp(a - top)
    s = e.sum(axis=1)
    mean = (e @ v) / s
    second = (e @ (v * v)) / s
    return np.log(s) + top[:, 0], mean, np.maximum(second - mean * mean, 0.0)


def bootstrap_mean_quantiles(
    values: FloatArray, count: npt.NDArray[np.int64], probs: FloatArray
) -> FloatArray:
    """Quantiles of the cluster-bootstrap mean (m = count.sum() draws) at ``probs``."""
    m = float(count.sum())
    p = count / m
    v = values.astype(np.float64)
    mu = float(p @ v)
    sd = float(np.sqrt(max(float(p @ (v - mu) ** 2), 0.0)))
    q = np.asarray(probs, dtype=np.float64)
    if sd == 0.0:
        return np.full(q.shape, mu)
    logp = np.log(p)
    root_m = np.sqrt(m)

    def evaluate(t: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """(tail probability, the mean it is at, d tail / d t) at one-draw tilt t."""
        k, k1, k2 = _log_mgf(t, v, logp)
        w = np.sign(t) * np.sqrt(np.maximum(2.0 * m * (t * k1 - k), 0.0))
        u = t * np.sqrt(m * k2)
        # The saddlepoint density of the mean times dx/dt = kappa''(t).
        slope = _phi(w) * np.sqrt(m * k2)
        return _lugannani_rice(w, u), k1, slope

    # Start at the normal quantile's tilt and Newton-step on the tilt,
    # keeping a bracket so a step never leaves the region the root is in.
    z = np.array([_ND.inv_cdf(min(max(x, 1e-12), 1.0 - 1e-12)) for x in q.tolist()])
    t = z / (sd * root_m)
    lo = np.full(q.shape, -np.inf)
    hi = np.full(q.shape, np.inf)
    x = np.full(q.shape, mu)
    for _ in range(_NEWTON):
        f, x, slope = evaluate(t)
        below = f < q
        lo = np.where(below, t, lo)
        hi = np.where(below, hi, t)
        step = t - (f - q) / np.where(slope > 0, slope, np.inf)
        bad = ~((step > lo) & (step < hi)) | (slope <= 0)
        # Outside the bracket: bisect it, or double outwards while one side is open.
        fallback = np.where(
            np.isfinite(lo) & np.isfinite(hi),
            0.5 * (lo + hi),
            np.where(np.isfinite(lo), np.maximum(2.0 * np.abs(lo), 1.0 / (sd * root_m)), 0.0)
            + np.where(np.isfinite(hi), -np.maximum(2.0 * np.abs(hi), 1.0 / (sd * root_m)), 0.0),
        )
        t_new = np.where(bad, fallback, step)
        if bool(np.all(np.abs(f - q) < 1e-10)):
            break
        t = t_new
    return np.asarray(np.clip(x, float(v.min()), float(v.max())), dtype=np.float64)


def _gamma_sum_tail(d: FloatArray, alpha: FloatArray, t0: float = 0.0) -> tuple[float, float]:
    """(P(sum_j G_j d_j <= 0), the saddlepoint t), G_j ~ Gamma(alpha_j) independent.

    d must hold both signs, so the saddlepoint exists.
    """
    # K(t) = -sum a log(1 - t d) lives on (1/min d, 1/max d), where K' is
    # increasing from -inf to +inf: safeguarded Newton on K'(t) = 0.
    lo = 1.0 / float(d.min())
    hi = 1.0 / float(d.max())
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
        done = abs(t_new - t) <= 1e-13 * max(1.0, abs(t))
        t = t_new
        if done:
            break
    one = 1.0 - t * d
    k = -float(alpha @ np.log(one))
    k2 = float(alpha @ (d / one) ** 2)
    w = np.sign(t) * np.sqrt(max(-2.0 * k, 0.0))
    u = t * np.sqrt(k2)
    return float(_lugannani_rice(np.array([w]), np.array([u]))[0]), t


def dirichlet_mean_quantile(values: FloatArray, alpha: FloatArray, prob: float) -> float:
    """The ``prob`` quantile of sum_j w_j v_j, w ~ Dirichlet(alpha)."""
    v = values.astype(np.float64)
    a = np.asarray(alpha, dtype=np.float64)
    vmin, vmax = float(v.min()), float(v.max())
    if vmax == vmin:
        return vmin
    total = float(a.sum())
    mean = float(a @ v) / total
    sd = float(np.sqrt(max(float(a @ (v - mean) ** 2) / total, 0.0) / (total + 1.0)))
    t_warm = 0.0

    def f(x: float) -> float:
        nonlocal t_warm
        if x <= vmin:
            return -prob
        if x >= vmax:
            return 1.0 - prob
        tail, t_warm = _gamma_sum_tail(v - x, a, t_warm)
        return tail - prob

    # A bracket around the normal guess, widened until it straddles the root,
    # then Illinois steps (regula falsi that halves a stuck end's weight).
    guess = mean + _ND.inv_cdf(min(max(prob, 1e-12), 1 - 1e-12)) * sd
    width = max(sd, 1e-12)
    a_x, b_x = max(vmin, guess - width), min(vmax, guess + width)
    fa, fb = f(a_x), f(b_x)
    while fa > 0:
        a_x = max(vmin, a_x - 2.0 * (b_x - a_x))
        fa = f(a_x)
    while fb < 0:
        b_x = min(vmax, b_x + 2.0 * (b_x - a_x))
        fb = f(b_x)
    side = 0
    x = a_x
    for _ in range(_BISECT):
        if fb == fa or b_x - a_x < 1e-13:
            break
        x = b_x - fb * (b_x - a_x) / (fb - fa)
        if not a_x < x < b_x:
            x = 0.5 * (a_x + b_x)
        fx = f(x)
        if abs(fx) < 1e-11:
            break
        if fx < 0:
            a_x, fa = x, fx
            if side == -1:
                fb *= 0.5
            side = -1
        else:
            b_x, fb = x, fx
            if side == 1:
                fa *= 0.5
            side = 1
    return min(max(x, vmin), vmax)
