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

from collections.abc import Sequence
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
# Damped Newton takes the full step once the Newton decrement is under this.
_FULL_STEP = 0.25
# A full Newton step with a decrement under this is the last: self-concordance
# leaves the decrement after it below its square (1e-14 in the local norm).
_LAST_STEP = 1e-7
# An outer Newton step on x of under this many of the row's sds is taken as the
# answer without another evaluation: the next one would move x by about its
# square (1e-12 sd), well under what the 1e-10 tolerance on the tail allows.
_SETTLED_SD = 1e-6


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


def _row_sums(a: FloatArray) -> FloatArray:
    """Each row's sum, the same float whatever the row's padding.

    Rows are padded with zeros to a power-of-two width (``_width``); numpy's
    pairwise sum splits such a row into halves, so the zeros of a wider
    batch form whole blocks that add exactly nothing, and a series' bounds do
    not depend on which series are solved beside it.
    """
    sums: FloatArray = a.sum(axis=1)
    return sums


def _width(size: int) -> int:
    """The padded width of a row of ``size`` atoms: the next power of two, at least 8.

    numpy adds fewer than 8 numbers one by one and 8 or more in 8 lanes: at
    least 8 wide, every row takes the lanes.
    """
    return max(8, 1 << max(0, size - 1).bit_length())


def _lugannani_rice_rows(w: FloatArray, u: FloatArray) -> FloatArray:
    """``_lugannani_rice`` row by row."""
    cdf = np.array([0.5 * erfc(-x / sqrt(2.0)) for x in w.tolist()])
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = np.exp(-0.5 * w * w) / sqrt(2.0 * pi)
        tilted = np.clip(cdf + phi * (1.0 / w - 1.0 / u), 0.0, 1.0)
    out: FloatArray = np.where((np.abs(w) < _W_SMALL) | (u == 0.0), cdf, tilted)
    return out


def _gamma_sum_tails(
    d: FloatArray, alpha: FloatArray, t0: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """P(sum_j G_j d_j <= 0) per row, for independent G_j ~ Gamma(alpha_j), with d = v - x.

    Rows of ``d`` and ``alpha`` (padding: alpha 0 beside a d the row already
    holds). Returns (tail, the saddlepoint t, the density of sum w_j v_j at
    x) per row, the last for Newton steps on x. Every row of d must hold both
    signs, so the saddlepoint exists.
    """
    # K(t) = -sum a log(1 - t d) lives on (1/min d, 1/max d) and is convex
    # there: a sum of a_j times -log, self-concordant with constant
    # 1 / sqrt(min(a, 1)). Damped Newton (Nesterov's) on K'(t) = 0, each row on
    # its own, stopped rows frozen: a step of at most the Dikin radius while
    # the Newton decrement is large, the full step once it is small. Every
    # iterate stays inside the domain, and the convergence is quadratic from
    # the start of the second phase, near a pole too (where a bracketed
    # search halves its interval for dozens of steps).
    lo = 1.0 / d.min(axis=1)
    hi = 1.0 / d.max(axis=1)
    inside = (lo < t0) & (t0 < hi) & (t0 != 0.0)
    # One Newton step from 0 without the division: K'(0) + K''(0) t = 0.
    start = np.where(inside, t0, -_row_sums(alpha * d) / _row_sums(alpha * d * d))
    t = np.where((lo < start) & (start < hi), start, 0.0)
    smallest = np.min(np.where(alpha > 0.0, alpha, np.inf), axis=1)
    scale = 1.0 / np.sqrt(np.minimum(smallest, 1.0))
    live = np.arange(d.shape[0])
    dl, al, sl, tl = d, alpha, scale, t.copy()
    for _ in range(_NEWTON):
        r = dl / (1.0 - tl[:, None] * dl)
        ar = al * r
        g = _row_sums(ar)
        h = _row_sums(ar * r)
        decrement = sl * np.abs(g) / np.sqrt(h)
        step = -g / h
        t_new = tl + np.where(decrement < _FULL_STEP, step, step / (1.0 + decrement))
        done = (decrement < _LAST_STEP) | (
            np.abs(t_new - tl) <= 1e-12 * np.maximum(1.0, np.abs(tl))
        )
        t[live] = t_new
        if done.all():
            break
        if done.any():
            # Finished rows leave the working set; the others go on unchanged.
            keep = ~done
            live, dl, al, sl = live[keep], dl[keep], al[keep], sl[keep]
            t_new = t_new[keep]
        tl = t_new
    one = 1.0 - t[:, None] * d
    k = -_row_sums(alpha * np.log(one))
    k2 = _row_sums(alpha * (d / one) ** 2)
    w = np.copysign(np.sqrt(np.maximum(-2.0 * k, 0.0)), t)
    u = t * np.sqrt(k2)
    # d/dx P(X <= x) = f_S(0) E[sum G | S = 0]; under the tilt E[G_j] = a_j / (1 - t d_j).
    density = np.exp(np.minimum(k, 0.0)) / np.sqrt(2.0 * pi * k2) * _row_sums(alpha / one)
    return _lugannani_rice_rows(w, u), t, density


# Rows solved together: a few MB of temporaries at a thousand atoms.
_BATCH_ROWS = 256


def dirichlet_mean_quantiles(
    values: Sequence[FloatArray], alpha: Sequence[FloatArray], probs: Sequence[float]
) -> FloatArray:
    """The ``probs[i]`` quantile of sum_j w_j values[i]_j, w ~ Dirichlet(alpha[i]), for each i.

    One vectorised pass over many (values, alpha, prob) rows of any lengths:
    each row follows exactly the iteration it would follow alone, and its
    sums are taken left to right, so a row's quantile is bit-identical
    whichever rows share its batch (``dirichlet_mean_quantile`` is a batch of
    one).
    """
    if not values:
        return np.empty(0)
    sizes = np.array([len(v) for v in values], dtype=np.int64)
    starts = np.zeros(sizes.size, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return ragged_dirichlet_mean_quantiles(
        np.concatenate(values).astype(np.float64),
        np.concatenate(alpha).astype(np.float64),
        starts,
        sizes,
        np.asarray(probs, dtype=np.float64),
    )


def ragged_dirichlet_mean_quantiles(
    values: FloatArray,
    alpha: FloatArray,
    starts: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    probs: FloatArray,
) -> FloatArray:
    """``dirichlet_mean_quantiles`` of rows stored end to end: row i is
    ``values[starts[i] : starts[i] + sizes[i]]`` with its ``alpha`` (every size at least 1).

    The same floats as the rows given one by one; the batch is gathered into
    its padded matrix in a few array operations, with no loop over rows.
    """
    rows = starts.size
    out = np.empty(rows)
    if rows == 0:
        return out
    # Rows of similar length together, so little of each batch is padding.
    order = np.argsort(sizes, kind="stable")
    for begin in range(0, rows, _BATCH_ROWS):
        chosen = order[begin : begin + _BATCH_ROWS]
        size = sizes[chosen]
        cols = np.arange(_width(int(size.max())))[None, :]
        held = cols < size[:, None]
        # Padding repeats the row's first value with weight 0: no minimum,
        # maximum or sum changes.
        at = starts[chosen][:, None] + np.where(held, cols, 0)
        out[chosen] = _solve_rows(values[at], np.where(held, alpha[at], 0.0), probs[chosen])
    return out


def _solve_rows(v: FloatArray, a: FloatArray, prob: FloatArray) -> FloatArray:
    """Each padded row's quantile (``ragged_dirichlet_mean_quantiles``)."""
    vmin, vmax = v.min(axis=1), v.max(axis=1)
    x = vmin.copy()
    total = _row_sums(a)
    mean = _row_sums(a * v) / total
    dev = v - mean[:, None]
    var = np.maximum(_row_sums(a * dev * dev) / total, 0.0) / (total + 1.0)
    sd = np.sqrt(var)
    # The third central moment of a Dirichlet-weighted mean: 2 sum a d^3 / (A (A + 1) (A + 2)).
    third = 2.0 * _row_sums(a * dev * dev * dev) / (total * (total + 1.0) * (total + 2.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        skew = np.where(sd > 0.0, third / np.where(sd > 0.0, var * sd, 1.0), 0.0)
    # Newton on x from the Cornish-Fisher guess (the normal one with the
    # skewness term: fewer steps in the tails a gaffke bound sits in),
    # inside a bracket every evaluation narrows (the tail is increasing in
    # x); bisect when a step leaves it.
    lo, hi = vmin.copy(), vmax.copy()
    z = np.array([_ND.inv_cdf(min(max(p, 1e-12), 1.0 - 1e-12)) for p in prob.tolist()])
    spread = vmax - vmin
    live = np.flatnonzero(vmax != vmin)
    guess = mean + sd * (z + skew * (z * z - 1.0) / 6.0)
    x[live] = np.minimum(
        np.maximum(guess[live], (vmin + 1e-3 * spread)[live]),
        (vmax - 1e-3 * spread)[live],
    )
    t = np.zeros(v.shape[0])
    # The unfinished rows' working copies, compacted as rows finish.
    vl, al, pl, lol, hil, sdl = v[live], a[live], prob[live], lo[live], hi[live], sd[live]
    xl, tl = x[live], t[live]
    for _ in range(_BISECT):
        if live.size == 0:
            break
        f, tl, density = _gamma_sum_tails(vl - xl[:, None], al, tl)
        settled = np.abs(f - pl) < 1e-10
        below = f < pl
        lol = np.where(below, xl, lol)
        hil = np.where(below, hil, xl)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(density > 0, xl - (f - pl) / density, np.nan)
        inside = (lol < step) & (step < hil)
        x_new = np.where(inside, step, 0.5 * (lol + hil))
        still = np.abs(x_new - xl) < 1e-14 * np.maximum(1.0, np.abs(xl))
        last = inside & (np.abs(x_new - xl) < _SETTLED_SD * sdl)
        finished = settled | still | last
        xl = np.where(settled | still, xl, x_new)
        x[live] = xl
        if finished.any():
            keep = ~finished
            live = live[keep]
            vl, al, pl, lol, hil, sdl, xl, tl = (
                arr[keep] for arr in (vl, al, pl, lol, hil, sdl, xl, tl)
            )
    clamped: FloatArray = np.minimum(np.maximum(x, vmin), vmax)
    return clamped


def dirichlet_mean_quantile(values: FloatArray, alpha: FloatArray, prob: float) -> float:
    """The ``prob`` quantile of sum_j w_j v_j, w ~ Dirichlet(alpha)."""
    return float(
        dirichlet_mean_quantiles(
            [values.astype(np.float64)], [np.asarray(alpha, dtype=np.float64)], [prob]
        )[0]
    )
