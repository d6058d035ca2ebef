"""Page-rate simulation parts: suites' make-ups, regressions, and the daemon's CI at scale.

Pure numpy, no I/O. A make-up gives a suite's per-task pass rates at any true
pass^k, a ``Shape`` how a regression spreads over its tasks; ``simulator``
streams trials from them and judges the rules at the daemon's cadence.

The CI is the daemon's: the percentile cluster bootstrap or gaffke.
Recomputing it with ``estimate_metrics`` at every simulated tick for days
would take hours on a shared machine, so the default engine draws the same
bootstrap for a whole batch of ticks at once: B resamples of the T tasks (a
fixed (B, T) Multinomial count matrix for ``percentile``, flat Dirichlet
weights over the tasks and the pseudo-task for ``gaffke``, as the daemon's
fixed seed fixes its draw) applied to each tick's per-task values sorted
canonically, one matrix product per batch. It is the same estimator (the
percentile at linear interpolation, the Wilson fallback when every task has
the same value); ``engine="exact"`` calls ``estimate_metrics`` itself
(cached per distinct histogram), and the tests check that both agree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import comb

import numpy as np
import numpy.typing as npt

from reliabilityd.stats.bootstrap import wilson_interval
from reliabilityd.stats.estimate import estimate_metrics
from reliabilityd.stats.histogram import Histogram

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

MINUTES_PER_DAY = 1440


# --- suites: make-ups and regressions ----------------------------------------


def pass_hat(p: FloatArray, k: int) -> float:
    """The suite's true pass^k: the mean over tasks of p^k (a property of the truth)."""
    return float(np.mean(p**k))


def scale_failures(base: FloatArray, target: float, k: int) -> FloatArray:
    """Per-task pass rates ``1 - s (1 - base)`` with s chosen so the true pass^k is ``target``.

    Scaling every task's failure rate by one factor keeps a make-up's shape
    (which tasks are reliable, which are lottery cases) at any level.
    """
    if not 0.0 < target < 1.0:
        raise ValueError(f"target must lie in (0, 1), got {target}")
    fail = 1.0 - np.asarray(base, dtype=np.float64)
    if bool((fail <= 0).any()):
        raise ValueError("every base rate must be below 1, or scaling cannot move it")
    lo, hi = 0.0, 1.0 / float(fail.min())
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if pass_hat(np.clip(1.0 - mid * fail, 0.0, 1.0), k) > target:
            lo = mid
        else:
            hi = mid
    p = np.clip(1.0 - lo * fail, 0.0, 1.0)
    if abs(pass_hat(p, k) - target) > 1e-6:
        raise ValueError(f"this make-up cannot reach pass^{k} = {target}")
    return p


def _beta22_quantiles(m: int) -> FloatArray:
    """Evenly spaced quantiles of Beta(2, 2) (CDF 3x^2 - 2x^3), by bisection."""
    u = (np.arange(m) + 0.5) / m
    lo, hi = np.zeros(m), np.ones(m)
    for _ in range(60):
        mid = (lo + hi) / 2.0
        below = 3 * mid**2 - 2 * mid**3 < u
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class MakeUp:
    """A suite's shape: per-task base pass rates, scaled to any true pass^k."""

    name: str
    describe: str
    base: Callable[[int], FloatArray]

    def rates(self, tasks: int, target: float, k: int) -> FloatArray:
        return scale_failures(self.base(tasks), target, k)


def _mix(t: int) -> FloatArray:
    flaky = t // 5
    return np.concatenate([np.full(t - flaky, 0.98), _beta22_quantiles(flaky)])


def _alike(t: int) -> FloatArray:
    return np.full(t, 0.9)


def _lottery(t: int) -> FloatArray:
    lot = min(10, t // 2)
    return np.concatenate([np.full(t - lot, 0.995), np.full(lot, 0.6)])


MAKE_UPS: dict[str, MakeUp] = {
    m.name: m
    for m in (
        MakeUp("mix", "80% of tasks at 0.98, 20% at Beta(2, 2) quantiles", _mix),
        MakeUp("alike", "every task at the same rate", _alike),
        MakeUp("lottery", "reliable tasks at 0.995 with 10 lottery tasks at 0.6", _lottery),
    )
}


@dataclass(frozen=True)
class Shape:
    """A regression: a share of the tasks (the most reliable first) fail more, to ``target``."""

    name: str
    share: float
    target: float

    def after(self, p: FloatArray, k: int) -> FloatArray:
        t = p.size
        hit = np.argsort(-p, kind="stable")[: max(1, round(self.share * t))]
        fail = 1.0 - p[hit]
        lo, hi = 0.0, 1.0 / max(float(fail.min()), 1e-12)
        out = p.copy()
        for _ in range(200):
            mid = (lo + hi) / 2.0
            out[hit] = np.clip(1.0 - mid * fail, 0.0, 1.0)
            if pass_hat(out, k) > self.target:
                lo = mid
            else:
                hi = mid
        out[hit] = np.clip(1.0 - lo * fail, 0.0, 1.0)
        if abs(pass_hat(out, k) - self.target) > 1e-6:
            raise ValueError(
                f"{self.name}: {self.share:.0%} of the tasks cannot carry pass^{k} "
                f"down to {self.target}"
            )
        return out


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        # A fifth of the tasks holds at most 0.20 of the suite's pass^k, so the
        # concentrated shape needs 30% of the tasks to reach 0.65.
        Shape("concentrated", 0.3, 0.65),
        Shape("spread", 1.0, 0.65),
    )
}


def pass_hat_table(n: int, k: int) -> FloatArray:
    """pass^k of a task with n trials and c passes, for c = 0..n (exact, then rounded)."""
    return np.array([comb(c, k) / comb(n, k) for c in range(n + 1)], dtype=np.float64)


# --- the CI the daemon computes, for many minutes at once ---------------------


@dataclass(frozen=True)
class Window:
    """The daemon's view of a windowed suite after each round: value and 95% CI."""

    value: FloatArray
    ci_low: FloatArray
    ci_high: FloatArray


def window_estimates(
    counts: IntArray,
    window: int,
    k: int,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    engine: str = "fast",
    chunk: int = 2048,
    interval: str = "percentile",
) -> Window:
    """pass^k and its CI (``interval``) for every row of (rows, T) counts.

    Every task has n = window trials (the window is full). ``engine="exact"``
    calls ``estimate_metrics`` per distinct histogram; ``"fast"`` applies one
    fixed resample matrix to all rows (see the module docstring): Multinomial
    counts for ``percentile``, flat Dirichlet weights over the tasks and the
    pseudo-task for ``gaffke`` (the same distribution as the daemon's draw
    over merged cells).
    """
    rows, t = counts.shape
    if engine == "exact":
        return _exact_estimates(counts, window, k, n_boot=n_boot, seed=seed, interval=interval)
    if engine != "fast":
        raise ValueError(f"engine must be 'fast' or 'exact', got {engine!r}")
    if interval == "gaffke":
        return _fast_gaffke(counts, window, k, n_boot=n_boot, seed=seed, chunk=chunk)
    if interval != "percentile":
        raise ValueError(f"interval must be 'percentile' or 'gaffke', got {interval!r}")
    table = pass_hat_table(window, k)
    resample = np.random.default_rng(seed).multinomial(t, np.full(t, 1.0 / t), size=n_boot)
    weights = resample.astype(np.float64).T / t  # (T, B)
    # np.quantile's "linear" method: position (B - 1) q between order statistics.
    positions = [(n_boot - 1) * 0.025, (n_boot - 1) * 0.975]
    low = np.empty(rows)
    high = np.empty(rows)
    value = np.empty(rows)
    for start in range(0, rows, chunk):
        v = np.sort(table[counts[start : start + chunk]], axis=1)
        value[start : start + chunk] = v.mean(axis=1)
        reps = v @ weights  # (chunk, B)
        for pos, dest in zip(positions, (low, high), strict=True):
            lo_i = int(np.floor(pos))
            hi_i = min(lo_i + 1, n_boot - 1)
            part = np.partition(reps, (lo_i, hi_i), axis=1)
            frac = pos - lo_i
            dest[start : start + chunk] = part[:, lo_i] + (part[:, hi_i] - part[:, lo_i]) * frac
        same = np.flatnonzero((v == v[:, :1]).all(axis=1))
        for i in same:
            lo_w, hi_w = wilson_interval(float(v[i, 0]), t)
            low[start + i], high[start + i] = lo_w, hi_w
    value = np.clip(value, 0.0, 1.0)
    return Window(value=np.clip(value, low, high), ci_low=low, ci_high=high)


def _fast_gaffke(
    counts: IntArray, window: int, k: int, *, n_boot: int, seed: int, chunk: int
) -> Window:
    rows, t = counts.shape
    table = pass_hat_table(window, k)
    g = np.random.default_rng(seed).standard_gamma(1.0, size=(n_boot, t + 1))
    w = (g / g.sum(axis=1, keepdims=True)).T  # (T + 1, B); the last row is the pseudo-task
    lo_pos, hi_pos = (n_boot - 1) * 0.025, (n_boot - 1) * 0.975
    low = np.empty(rows)
    high = np.empty(rows)
    value = np.empty(rows)
    for start in range(0, rows, chunk):
        v = np.sort(table[counts[start : start + chunk]], axis=1)
        value[start : start + chunk] = v.mean(axis=1)
        base = v @ w[:t]  # (chunk, B)
        for pos, dest, extra in ((lo_pos, low, 0.0), (hi_pos, high, 1.0)):
            reps = base + extra * w[t][None, :]
            lo_i = int(np.floor(pos))
            hi_i = min(lo_i + 1, n_boot - 1)
            part = np.partition(reps, (lo_i, hi_i), axis=1)
            frac = pos - lo_i
            dest[start : start + chunk] = part[:, lo_i] + (part[:, hi_i] - part[:, lo_i]) * frac
    low = np.clip(low, 0.0, 1.0)
    high = np.clip(high, 0.0, 1.0)
    return Window(value=np.clip(value, 0.0, 1.0), ci_low=low, ci_high=high)


def _exact_estimates(
    counts: IntArray, window: int, k: int, *, n_boot: int, seed: int, interval: str = "percentile"
) -> Window:
    cache: dict[bytes, tuple[float, float, float]] = {}
    out = np.empty((counts.shape[0], 3))
    for i, row in enumerate(counts):
        hist = np.bincount(row, minlength=window + 1)
        key = hist.tobytes()
        if key not in cache:
            h = Histogram(np.full(window + 1, window), np.arange(window + 1), hist)
            est = estimate_metrics(h, k, ("pass^k",), n_boot=n_boot, seed=seed, interval=interval)[
                "pass^k"
            ]
            assert est.value is not None
            assert est.ci is not None
            cache[key] = (est.value, est.ci[0], est.ci[1])
        out[i] = cache[key]
    return Window(value=out[:, 0], ci_low=out[:, 1], ci_high=out[:, 2])


@dataclass(frozen=True)
class Pages:
    """False pages of one rule on a stationary suite (``forecast.expected_false_pages``)."""

    per_day: float
    pages: int
    days: float
    firing_share: float
    # The Poisson upper limit of ``per_day`` at ``confidence`` (nan: not computed).
    upper: float = float("nan")
    confidence: float = 0.9
