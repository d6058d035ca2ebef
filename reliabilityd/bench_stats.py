"""Benchmark: one full CI computation from the histogram against task resampling.

Prints, for 1e2 .. 1e6 tasks of 20 trials each, the time to build the
histogram from raw (n, c) pairs, the time of one full CI computation (pass@k
and pass^k at one k, B = 2000) from the histogram, and the time of a
straightforward task-by-task resampling bootstrap on the same data (numpy,
and pure Python for the small sizes), with the ratio measured in the same run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from functools import partial
from math import comb

import numpy as np
import numpy.typing as npt

from reliabilityd.estimate import estimate_metrics
from reliabilityd.histogram import Histogram

SIZES = (100, 1_000, 10_000, 100_000, 1_000_000)
TRIALS = 20
K = 5
N_BOOT = 2000
NUMPY_NAIVE_LIMIT = 100_000
PYTHON_NAIVE_LIMIT = 1_000


def _best_of(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def naive_numpy(
    pairs: npt.NDArray[np.int64], k: int, n_boot: int, seed: int = 0
) -> tuple[float, float]:
    """Resample task indices (B x T) and average per-task pass^k."""
    n = pairs[:, 0]
    c = pairs[:, 1]
    cells = list(zip(n.tolist(), c.tolist(), strict=True))
    hat = np.array([comb(ci, k) / comb(ni, k) for ni, ci in cells])
    at = np.array([1 - comb(ni - ci, k) / comb(ni, k) for ni, ci in cells])
    rng = np.random.default_rng(seed)
    t = len(pairs)
    rows = max(1, 20_000_000 // t)  # keep the index matrix near 160 MB
    means_hat = []
    means_at = []
    for start in range(0, n_boot, rows):
        idx = rng.integers(0, t, size=(min(rows, n_boot - start), t))
        means_hat.append(hat[idx].mean(axis=1))
        means_at.append(at[idx].mean(axis=1))
    reps = np.concatenate(means_hat)
    np.concatenate(means_at)
    lo, hi = np.quantile(reps, [0.025, 0.975])
    return float(lo), float(hi)


def naive_python(pairs: list[tuple[int, int]], k: int, n_boot: int, seed: int = 0) -> None:
    """The reference implementation's shape: a Python loop over resampled tasks."""
    rnd = random.Random(seed)
    t = len(pairs)
    for _ in range(n_boot):
        sample = [pairs[rnd.randrange(t)] for _ in range(t)]
        sum(comb(c, k) / comb(n, k) for n, c in sample) / t
        sum(1 - comb(n - c, k) / comb(n, k) for n, c in sample) / t


def main() -> None:
    rng = np.random.default_rng(0)
    print(f"one full CI: pass@{K} and pass^{K}, B={N_BOOT}, {TRIALS} trials per task")
    header = (
        f"{'tasks':>9} {'cells':>6} {'build hist':>11} {'CI (hist)':>10} "
        f"{'naive numpy':>12} {'ratio':>7} {'naive python':>13} {'ratio':>8}"
    )
    print(header)
    for t in SIZES:
        p = rng.beta(2, 0.7, size=t)  # a suite with many flaky tasks
        pairs = np.stack([np.full(t, TRIALS), rng.binomial(TRIALS, p)], axis=1).astype(np.int64)
        build = _best_of(partial(Histogram.from_pairs, pairs), 3)
        hist = Histogram.from_pairs(pairs)
        ci = _best_of(partial(estimate_metrics, hist, K, n_boot=N_BOOT), 5)
        row = f"{t:>9} {len(hist):>6} {build * 1e3:>9.2f}ms {ci * 1e3:>8.2f}ms"
        if t <= NUMPY_NAIVE_LIMIT:
            naive = _best_of(partial(naive_numpy, pairs, K, N_BOOT), 1)
            row += f" {naive * 1e3:>10.1f}ms {naive / ci:>6.0f}x"
        else:
            row += f" {'-':>12} {'-':>7}"
        if t <= PYTHON_NAIVE_LIMIT:
            as_list = [(int(a), int(b)) for a, b in pairs]
            slow = _best_of(partial(naive_python, as_list, K, N_BOOT), 1)
            row += f" {slow * 1e3:>11.0f}ms {slow / ci:>7.0f}x"
        else:
            row += f" {'-':>13} {'-':>8}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
