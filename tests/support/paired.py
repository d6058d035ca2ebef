"""Live-like pairs of sides and the textbook paired resampler the compare tests check against."""

from __future__ import annotations

import numpy as np

Counts = dict[str, tuple[int, int]]


def live_like_pair(
    rng: np.random.Generator, tasks: int, effect: float = 0.0, extra: int = 0
) -> tuple[Counts, Counts]:
    """Two sides of one suite: each task's pass rate moves by about ``effect``; n uneven."""
    a, b = rng.choice([(2.0, 0.7), (5.0, 1.0), (1.0, 1.0), (0.5, 0.5)])
    p = rng.beta(a, b, tasks + extra)
    q = np.clip(p + effect + rng.normal(0.0, 0.05, p.size), 0.0, 1.0)
    nb = rng.integers(5, 41, p.size)
    nc = rng.integers(5, 41, p.size)
    cb = rng.binomial(nb, p)
    cc = rng.binomial(nc, q)
    base = {f"task {i}": (int(nb[i]), int(cb[i])) for i in range(tasks)}
    cand = {f"task {i}": (int(nc[i]), int(cc[i])) for i in range(p.size)}
    return base, cand


def aligned(base: Counts, cand: Counts) -> tuple[np.ndarray, ...]:
    shared = sorted(base.keys() & cand.keys())
    return tuple(
        np.array([side[t][j] for t in shared], dtype=np.int64)
        for side in (base, cand)
        for j in (0, 1)
    )


def brute_force_paired(
    vb: np.ndarray, vc: np.ndarray, interval: str, n_boot: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The textbook paired resampler: draw tasks, average each side over them, subtract.

    Returns the replicates the lower and the upper bound are quantiles of
    (the same array for ``percentile``; for ``gaffke`` the Bayesian
    bootstrap with the worst pseudo-task, baseline 1 and candidate 0 for the
    lower bound, the reverse for the upper).
    """
    t = vb.size
    if interval == "percentile":
        idx = rng.integers(0, t, (n_boot, t))
        reps = vc[idx].mean(axis=1) - vb[idx].mean(axis=1)
        return reps, reps
    w = rng.dirichlet(np.ones(t + 1), n_boot)
    low = w @ np.r_[vc, 0.0] - w @ np.r_[vb, 1.0]
    high = w @ np.r_[vc, 1.0] - w @ np.r_[vb, 0.0]
    return low, high


def cdf_level(reps: np.ndarray, x: float) -> float:
    """Share of replicates below x, ties counted half."""
    return float(((reps < x).mean() + (reps <= x).mean()) / 2.0)
