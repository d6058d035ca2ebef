"""The regularized incomplete beta function for integer parameters, and its inverse.

For positive integers a and b, with n = a + b - 1,

    I_x(a, b) = P(Binomial(n, x) >= a) = sum_{j >= a} C(n, j) x^j (1 - x)^(n - j),

so the Beta(a, b) distribution function is a binomial tail sum. This module
evaluates that sum in floating point and inverts it, vectorised over rows:

* ``binomial_upper_tail(n, a, x)``: P(Binomial(n, x) >= a) per row.
* ``beta_cdf(x, a, b)``: I_x(a, b) per row.
* ``beta_quantiles(a, b, p)``: the q with I_q(a, b) = p per row (Halley's
  method inside a bracket that every evaluation narrows).

Gaffke's bound over per-task values that take at most two distinct values
(every task at 0 or 1, or every task at one value) is a Beta quantile
(``stats.intervals``): for s of T tasks at 1 it is the Clopper-Pearson
interval, ``beta_quantiles(s, T - s + 1, alpha / 2)`` and one minus
``beta_quantiles(T - s, s + 1, alpha / 2)``.

How the sum is taken: from the tail's first term outward, away from the
binomial's mode, so every term is smaller than the one before; the rest
comes from the ratio of consecutive terms, a running product. log t(j) is
concave in j, so a row's terms fall at least as fast as a Gaussian whose
width the row's parameters bound, and the sum stops where the rest adds
less than e^-40 of it (``_Rows.tail``): O(sqrt(n)) terms, whatever a and b.
The first term is C(n, k) x^k (1 - x)^(n - k) from log-factorials up to
n = ``_SMALL`` (a relative error of a few eps times log n!, at most 1e-12),
and past it in Loader's form (Fast and accurate computation of binomial
probabilities, 2000: Stirling's remainders and two deviance terms, each
small), whose error grows like sqrt(n) eps. Measured against rational
arithmetic (tests/unit/test_exact.py): tails to 1e-12 of themselves,
quantiles to 1e-12 of themselves.

Every row is computed on its own (its own window, its own iterations, sums
taken in an order its padding does not change), so a row's result is the
same float whichever rows share its batch.
"""

from __future__ import annotations

from decimal import Decimal, localcontext
from math import factorial, lgamma, pi
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
# Which side each row's tail is summed from: 0 upper, 1 lower (a view of a boolean array).
SideArray = npt.NDArray[np.int8]

_ND = NormalDist()
_EPS = float(np.finfo(np.float64).eps)
# Terms past a row's window add less than e^-_TAIL_NATS (4e-18) of its sum.
_TAIL_NATS = 40.0
# Halley's step is accepted without another evaluation once it moves the
# quantile by less than this many of the distribution's sds: the next step
# would move it by about the cube of that.
_SETTLED = 1e-7
_MAX_STEPS = 200
# Rows evaluated together, and the most (rows x window) terms they may hold:
# a few tens of MB of temporaries.
_BATCH_ROWS = 4096
_BATCH_TERMS = 1 << 21
# Up to this n the first term comes from a table of log k!.
_SMALL = 2000
_LOG_FACTORIAL = np.array([lgamma(k + 1.0) for k in range(_SMALL + 1)])


def _stirling_table(size: int) -> FloatArray:
    """stirlerr(m) for m < size, to 40 digits before the one rounding."""
    with localcontext() as ctx:
        ctx.prec = 40
        pi_40 = Decimal("3.141592653589793238462643383279502884197")
        half_log_2pi = (2 * pi_40).ln() / 2
        out = [0.0]
        for m in range(1, size):
            dm = Decimal(m)
            exact = Decimal(factorial(m)).ln() - (
                (dm + Decimal("0.5")) * dm.ln() - dm + half_log_2pi
            )
            out.append(float(exact))
    return np.array(out)


# stirlerr(m) = log m! - ((m + 1/2) log m - m + log(2 pi) / 2): a table below
# _TABLE, Stirling's series past it (its first omitted term, 3617 / (122400
# m^15), is below 1e-16 of the sum at m = 10).
_TABLE = 10
_STIRLERR = _stirling_table(_TABLE)
_SERIES = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156)
# bd0's series near the mean: sum_{j >= 1} u^(j - 1) / (2j + 1), u = v^2 < 0.01.
_BD0 = tuple(1.0 / (2 * j + 1) for j in range(1, 9))


def _stirlerr(m: FloatArray) -> FloatArray:
    """log m! - ((m + 1/2) log m - m + log(2 pi) / 2) per element, m a whole number >= 0."""
    z = np.maximum(m, float(_TABLE))
    zi2 = 1.0 / (z * z)
    series = np.full(z.shape, _SERIES[-1])
    for c in _SERIES[-2::-1]:
        series = series * zi2 + c
    out: FloatArray = np.where(
        m < _TABLE, _STIRLERR[np.minimum(m, _TABLE - 1).astype(np.int64)], series / z
    )
    return out


def _log_factorial_any(m: FloatArray) -> FloatArray:
    """log m! per element, m a whole number >= 0 (from stirlerr: accurate to eps of itself)."""
    safe = np.maximum(m, 1.0)
    out: FloatArray = np.where(
        m < 1.0, 0.0, _stirlerr(safe) + (safe + 0.5) * np.log(safe) - safe + 0.5 * np.log(2.0 * pi)
    )
    return out


def _bd0(k: FloatArray, mean: FloatArray) -> FloatArray:
    """k log(k / mean) + mean - k (Loader's deviance term) without cancellation, k, mean > 0.

    Near the mean, with v = (k - mean) / (k + mean), it is
    (k - mean) v + 2 k v^3 sum_{j >= 1} v^(2j - 2) / (2j + 1), and |v| < 0.1
    there: eight terms reach 1e-17 of it.
    """
    d = k - mean
    s = k + mean
    v = d / s
    u = v * v
    poly = np.full(u.shape, _BD0[-1])
    for c in _BD0[-2::-1]:
        poly = poly * u + c
    near = d * v + 2.0 * k * v * u * poly
    # A mean below 1e-300 leaves the term at exp(-inf) either way; the floor keeps k / mean finite.
    far = k * np.log(k / np.maximum(mean, 1e-300)) - d
    out: FloatArray = np.where(np.abs(d) < 0.1 * s, near, far)
    return out


def _window(n: FloatArray) -> FloatArray:
    """The most terms a row of n ever sums: 5 sqrt(n + 2) + 40, at most n + 1.

    Whatever the start, the curvature bound alone leaves a remainder below
    e^-40 by then (2 W (W - 1) / (n + 2) >= 50).
    """
    return np.minimum(np.ceil(5.0 * np.sqrt(n + 2.0)) + 40.0, n + 1.0)


def _row_sums(a: FloatArray) -> FloatArray:
    """Each row's sum, the same float whatever zeros pad the row past its terms.

    Rows are padded to a power-of-two width of at least 8 (``_columns``):
    numpy's pairwise sum splits such a row into halves and adds blocks of up
    to 128 in 8 lanes, so the zeros a wider batch adds form whole blocks or
    lanes that add exactly nothing (as ``stats.saddlepoint._row_sums``).
    """
    sums: FloatArray = a.sum(axis=1)
    return sums


def _columns(terms: int) -> int:
    """The padded width for rows of at most ``terms`` terms: a power of two, at least 8."""
    return max(8, 1 << max(0, terms - 1).bit_length())


class _Rows:
    """Binomial tails P(Binomial(n, x) >= a) of fixed rows (1 <= a <= n) at varying x.

    Each row's tail is summed from a (the upper side) when a lies above the
    mode, else from a - 1 down (the lower side, and one minus the sum). What
    does not depend on x is computed once, for both sides (index 0 upper,
    1 lower): the first term's k, its constant part, the first ratio's
    constant part and the curvature bound.
    """

    def __init__(self, n: FloatArray, a: FloatArray) -> None:
        self.n, self.a = n, a
        self.rows = np.arange(n.size)
        self.loader = bool(n.size) and float(n.max()) > _SMALL
        self.k = np.stack([a, a - 1.0])
        # Terms i past the first are prod_{l <= i} (top - l) / (bottom + l) * odds.
        self.top = np.stack([n - a + 1.0, a])
        self.bottom = np.stack([a, n - a + 1.0])
        with np.errstate(divide="ignore"):
            self.first_ratio = np.log((self.top - 1.0) / (self.bottom + 1.0))
        rest = n - self.k
        if self.loader:
            inner = np.clip(self.k, 1.0, np.maximum(n - 1.0, 1.0))
            s = _stirlerr(np.concatenate([n, inner.reshape(-1), (n - inner).reshape(-1)]))
            size = n.size
            s_k, s_rest = s[size : 3 * size].reshape(2, -1), s[3 * size :].reshape(2, -1)
            width = np.maximum(n - inner, 1.0)
            self.const = s[:size] - s_k - s_rest + 0.5 * np.log(n / (2.0 * pi * inner * width))
        else:
            lf = _LOG_FACTORIAL
            ni = n.astype(np.int64)
            self.const = lf[ni] - lf[self.k.astype(np.int64)] - lf[rest.astype(np.int64)]
        self.rest = rest
        # log t is concave: each step's log-ratio falls by at least
        # 1 / (n - j) + 1 / (j + 2) >= 4 / (n + 2), and by that sum at the
        # start when the side runs away from n / 2, where the sum is least.
        centre = 4.0 / (n + 2.0)
        self.bend = np.stack(
            [
                np.where(2.0 * a >= n, 1.0 / np.maximum(n - a, 1.0) + 1.0 / (a + 2.0), centre),
                np.where(
                    2.0 * (a - 1.0) <= n,
                    1.0 / np.maximum(a - 1.0, 1.0) + 1.0 / (n - a + 3.0),
                    centre,
                ),
            ]
        )
        self.most = _window(n)
        self.up_shift = np.log((n - a + 1.0) / a)

    def take(self, rows: IntArray) -> _Rows:
        out = object.__new__(_Rows)
        out.n, out.a, out.rows, out.loader = (
            self.n[rows],
            self.a[rows],
            self.rows[: rows.size],
            self.loader,
        )
        out.k, out.top, out.bottom = self.k[:, rows], self.top[:, rows], self.bottom[:, rows]
        out.first_ratio, out.const, out.rest = (
            self.first_ratio[:, rows],
            self.const[:, rows],
            self.rest[:, rows],
        )
        out.bend, out.most, out.up_shift = self.bend[:, rows], self.most[rows], self.up_shift[rows]
        return out

    def _log_first(
        self, side: SideArray, x: FloatArray, log_x: FloatArray, log_1mx: FloatArray
    ) -> FloatArray:
        """log P(Binomial(n, x) = k) at each row's start k."""
        r = self.rows
        n, k, rest, const = self.n, self.k[side, r], self.rest[side, r], self.const[side, r]
        if not self.loader:
            table: FloatArray = const + k * log_x + rest * log_1mx
            return table
        inner = np.clip(k, 1.0, np.maximum(n - 1.0, 1.0))
        deviance = _bd0(np.concatenate([inner, n - inner]), np.concatenate([n * x, n * (1.0 - x)]))
        middle = const - deviance[: n.size] - deviance[n.size :]
        out: FloatArray = np.where(k <= 0.0, n * log_1mx, np.where(k >= n, n * log_x, middle))
        return out

    def tail(self, x: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(P(Bin(n, x) >= a), log of the Beta(a, n - a + 1) density at x), 0 < x < 1."""
        n, a, r = self.n, self.a, self.rows
        log_x, log_1mx = np.log(x), np.log1p(-x)
        # The side of a that holds no mode: its terms fall from the start on.
        upper = a > np.floor((n + 1.0) * x)
        side = (~upper).view(np.int8)
        log_first = self._log_first(side, x, log_x, log_1mx)
        log_odds = np.where(upper, log_x - log_1mx, log_1mx - log_x)
        # The pmf at a, for the density: from a - 1 by one ratio on the lower side.
        log_up = np.where(upper, log_first, log_first + self.up_shift - log_odds)
        # This row's window at this x: with the first log-ratio -lam and the
        # curvature bound c, term i is below exp(-lam i - c i (i - 1) / 2)
        # times the first, and the terms past W sum to at most the W-th over
        # 1 - exp(-(lam + c W)) <= 1 + 1 / (lam + c W): W solves
        # lam W + c W (W - 1) / 2 = 40 + log 2, then takes log(1 + 1 / rate) / rate more.
        lam = np.maximum(-(self.first_ratio[side, r] + log_odds), 0.0)
        c = self.bend[side, r]
        half = lam - 0.5 * c
        need = _TAIL_NATS + 0.7
        # The positive root of c W^2 / 2 + half W = need, written without cancellation.
        width = 2.0 * need / (np.sqrt(half * half + 2.0 * c * need) + half)
        rate = lam + c * width
        width += np.log1p(1.0 / rate) / rate
        window = np.minimum(np.ceil(width) + 2.0, self.most).astype(np.int64)
        # Columns: the terms after the first, in a power-of-two width (_row_sums).
        cols = _columns(int(window.max()))
        i = np.arange(1.0, cols + 1.0)
        odds = np.exp(log_odds)
        # Past the support's end a factor is 0 (top - i), and the running product stays 0.
        ratio = (self.top[side, r][:, None] - i) * (
            odds[:, None] / (self.bottom[side, r][:, None] + i)
        )
        # A zero at the row's window ends its running product there.
        ratio[r, window - 1] = 0.0
        total = np.exp(log_first) * (1.0 + _row_sums(np.cumprod(ratio, axis=1)))
        tail = np.clip(np.where(upper, total, 1.0 - total), 0.0, 1.0)
        return tail, log_up + np.log(a) - log_x


def _as_rows(*arrays: npt.ArrayLike) -> list[npt.NDArray[np.generic]]:
    out = [np.atleast_1d(np.asarray(v)) for v in arrays]
    shape = np.broadcast_shapes(*(v.shape for v in out))
    return [np.broadcast_to(v, shape).reshape(-1).copy() for v in out]


def _by_size(n: FloatArray) -> list[IntArray]:
    """Row indices in batches: table rows and Loader rows apart, each sorted by n, at
    most _BATCH_ROWS rows and about _BATCH_TERMS terms a batch."""
    order = np.argsort(n, kind="stable")
    out: list[IntArray] = []
    for part in (order[n[order] <= _SMALL], order[n[order] > _SMALL]):
        windows = _window(n[part])
        begin = 0
        while begin < part.size:
            # Sorted by n, so the candidate batch's last row has its widest window.
            widest = float(windows[min(begin + _BATCH_ROWS, part.size) - 1])
            size = max(1, min(_BATCH_ROWS, int(_BATCH_TERMS / widest)))
            out.append(part[begin : begin + size])
            begin += size
    return out


def binomial_upper_tail(n: npt.ArrayLike, a: npt.ArrayLike, x: npt.ArrayLike) -> FloatArray:
    """P(Binomial(n, x) >= a) per row; any integers n >= 0, a, and 0 <= x <= 1."""
    nn, aa, xx = _as_rows(n, a, x)
    nf, af, xf = nn.astype(np.float64), aa.astype(np.float64), xx.astype(np.float64)
    out = np.where(af <= 0.0, 1.0, 0.0)
    live = np.flatnonzero((af >= 1.0) & (af <= nf))
    out[live[xf[live] >= 1.0]] = 1.0
    live = live[(xf[live] > 0.0) & (xf[live] < 1.0)]
    for batch in _by_size(nf[live]):
        rows = live[batch]
        out[rows] = _Rows(nf[rows], af[rows]).tail(xf[rows])[0]
    return out


def beta_cdf(x: npt.ArrayLike, a: npt.ArrayLike, b: npt.ArrayLike) -> FloatArray:
    """I_x(a, b), the Beta(a, b) distribution function, for integers a, b >= 1."""
    xx, aa, bb = _as_rows(x, a, b)
    ai, bi = aa.astype(np.int64), bb.astype(np.int64)
    if ai.size and int(min(ai.min(), bi.min())) < 1:
        raise ValueError("beta_cdf needs integer parameters a, b >= 1")
    return binomial_upper_tail(ai + bi - 1, ai, np.clip(xx.astype(np.float64), 0.0, 1.0))


def _start(a: FloatArray, b: FloatArray, p: FloatArray) -> FloatArray:
    """A first guess at the p quantile of Beta(a, b), p <= 1/2.

    Exact for a = 1 or b = 1; otherwise the Cornish-Fisher expansion in the
    Beta distribution's skewness and excess kurtosis, kept inside (0, 1):
    within a few thousandths of a sd where min(a, b) >= 10, a tenth at worst,
    and within 1e-8 of a sd at half a million tasks, where one evaluation
    then settles the quantile.
    """
    z = _normal_quantiles(p)
    s = a + b
    sd = np.sqrt(a * b / (s * s * (s + 1.0)))
    skew = 2.0 * (b - a) * np.sqrt(s + 1.0) / ((s + 2.0) * np.sqrt(a * b))
    kurt = 6.0 * ((a - b) ** 2 * (s + 1.0) - a * b * (s + 2.0)) / (a * b * (s + 2.0) * (s + 3.0))
    z2 = z * z
    w = (
        z
        + skew * (z2 - 1.0) / 6.0
        + kurt * z * (z2 - 3.0) / 24.0
        - skew * skew * z * (2.0 * z2 - 5.0) / 36.0
    )
    guess = a / s + sd * w
    # Where the expansion leaves (0, 1) (small a, far tails): the tail's
    # leading term, I_x(a, b) ~ C(a + b - 1, a) x^a near 0.
    out = np.flatnonzero((guess <= 0.0) | (guess >= 1.0))
    if out.size:
        ao, no = a[out], s[out] - 1.0
        log_comb = _log_factorial_any(no) - _log_factorial_any(ao) - _log_factorial_any(no - ao)
        guess[out] = np.minimum(np.exp((np.log(p[out]) - log_comb) / ao), 0.5)
    guess = np.where(a == 1.0, -np.expm1(np.log1p(-p) / b), guess)
    guess = np.where(b == 1.0, np.exp(np.log(p) / a), guess)
    return np.clip(guess, np.finfo(np.float64).tiny, 1.0 - 1e-16)


def _normal_quantiles(p: FloatArray) -> FloatArray:
    """The standard normal's quantile of each p (usually one level for every row)."""
    if p.size and bool((p == p[0]).all()):
        return np.full(p.size, _ND.inv_cdf(float(p[0])))
    return np.array([_ND.inv_cdf(q) for q in p.tolist()])


def _lower_quantiles(a: FloatArray, b: FloatArray, p: FloatArray) -> FloatArray:
    """The p quantile of Beta(a, b) per row, a, b >= 1, 0 < p <= 1/2."""
    n = a + b - 1.0
    x = _start(a, b, p)
    sd = np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1.0)))
    # Below this |I_x - p| its sign is rounding: the first term carries a few
    # eps times log n! (from the table) or sqrt(n) (Loader's), the running
    # product eps a term.
    log_nf = _LOG_FACTORIAL[np.minimum(n, _SMALL).astype(np.int64)]
    noise = 4.0 * (_window(n) + np.where(n <= _SMALL, log_nf, 0.0)) * _EPS * p
    live = np.arange(a.size)
    rows = _Rows(n, a)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        _halley(rows, x, p=p, sd=sd, noise=noise, live=live)
    return x


def _halley(
    rows: _Rows, x: FloatArray, *, p: FloatArray, sd: FloatArray, noise: FloatArray, live: IntArray
) -> None:
    """Solve I_x(a, b) = p in place for the rows of x, starting from x."""
    lo = np.zeros(x.size)
    hi = np.ones(x.size)
    for _ in range(_MAX_STEPS):
        if live.size == 0:
            break
        xl = x[live]
        tail, log_density = rows.tail(xl)
        f = tail - p[live]
        below = f < 0.0
        lol = np.where(below, xl, lo[live])
        hil = np.where(below, hi[live], xl)
        lo[live], hi[live] = lol, hil
        # Halley's step: f' is the Beta density and f'' / f' = (a - 1) / x - (b - 1) / (1 - x).
        # Near the root bend is close to 1; far from it (a strongly curved
        # tail) Halley's step crawls, and Newton's leaves the bracket for a bisection.
        newton = f / np.exp(log_density)
        bend = 1.0 - 0.5 * newton * ((rows.a - 1.0) / xl - (rows.n - rows.a) / (1.0 - xl))
        near = (bend > 0.5) & (bend < 1.5)
        step = xl - np.where(near, newton / np.where(near, bend, 1.0), newton)
        inside = (lol < step) & (step < hil)
        # Outside the bracket, bisect: geometrically while the bracket spans
        # orders of magnitude (small tails have quantiles near 0).
        mid = np.where(
            lol * 4.0 < hil, np.where(lol > 0.0, np.sqrt(lol * hil), hil / 16.0), 0.5 * (lol + hil)
        )
        settled = inside & near & (np.abs(newton) <= _SETTLED * sd[live])
        done = settled | (np.abs(f) <= noise[live]) | (hil - lol <= 1e-15 * xl)
        x[live] = np.where(settled, step, np.where(done, xl, np.where(inside, step, mid)))
        if done.any():
            keep = np.flatnonzero(~done)
            live = live[keep]
            rows = rows.take(keep)


def beta_quantiles(a: npt.ArrayLike, b: npt.ArrayLike, p: npt.ArrayLike) -> FloatArray:
    """The p quantile of Beta(a, b) per row, for integers a, b >= 0 and 0 <= p <= 1.

    a = 0 is the point mass at 0 and b = 0 the point mass at 1 (the limits of
    Beta(a, b) as a or b falls to 0), so a caller with an empty atom needs no
    case of its own.
    """
    aa, bb, pp = _as_rows(a, b, p)
    ai, bi, pf = aa.astype(np.int64), bb.astype(np.int64), pp.astype(np.float64)
    if ai.size and (int(min(ai.min(), bi.min())) < 0 or bool(((ai == 0) & (bi == 0)).any())):
        raise ValueError("beta_quantiles needs integers a, b >= 0, not both 0")
    if pf.size and not bool(((pf >= 0.0) & (pf <= 1.0)).all()):
        raise ValueError("beta_quantiles needs probabilities in [0, 1]")
    out = np.where(ai == 0, 0.0, 1.0)
    live = (ai > 0) & (bi > 0)
    out[live & (pf == 0.0)] = 0.0
    out[live & (pf == 1.0)] = 1.0
    solve = np.flatnonzero(live & (pf > 0.0) & (pf < 1.0))
    # The upper half through the mirror, Beta(a, b) at p = 1 - Beta(b, a) at
    # 1 - p: every solve is of a small tail, which the sum evaluates to full
    # relative precision.
    mirror = pf[solve] > 0.5
    sa = np.where(mirror, bi[solve], ai[solve]).astype(np.float64)
    sb = np.where(mirror, ai[solve], bi[solve]).astype(np.float64)
    sp = np.where(mirror, 1.0 - pf[solve], pf[solve])
    q = np.empty(solve.size)
    for rows in _by_size(sa + sb - 1.0):
        q[rows] = _lower_quantiles(sa[rows], sb[rows], sp[rows])
    out[solve] = np.where(mirror, 1.0 - q, q)
    return out
