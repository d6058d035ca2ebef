"""Benchmark: one full CI (pass@k and pass^k at one k, B = 2000) and its alternatives.

Every figure is printed beside baselines measured in the same run, as ratios,
because this machine is shared and noisy; times are CPU time of this process
(``time.process_time``), which a busy neighbour inflates far less than wall
time:

* live-like suites (n uniform in [5, 100] per task, so the (n, c) cells grow
  with the task count) from 1e3 to 1e6 tasks, and tidy ones (20 trials each):
  the point estimates alone, the CI as ``estimate_metrics`` computes it (and
  the method it chose), one Multinomial draw over all (n, c) cells shared
  by both metrics, the same draw over merged values, a Poisson bootstrap over merged
  values, a task-index resampler in numpy and a pure-Python reference
  (per-task values computed once, ``random.choices`` over tasks);
* the daemon's load: 1,000 suites of 1,000 live-like tasks each, one CI
  (both metrics, one k) per suite, on one core, against a 5 s ``ci_interval``;
* accuracy of the large-suite approximations (normal, Cornish-Fisher,
  saddlepoint) against a 100,000-resample exact draw, in bootstrap standard
  deviations (a B = 2000 percentile bound itself wanders by 0.06 of them);
* binary suites (every task at 0 or 1) from 50 to 1e6 tasks: gaffke's exact
  bound (``stats.exact``) against the B = 2000 Dirichlet draw the same
  series would otherwise take, per series, in a batch of 1,000 (the tick's
  shape) and alone.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from functools import partial
from math import comb

import numpy as np
import numpy.typing as npt

from reliabilityd.stats.bootstrap import percentile_interval, replicate_means, resampled_cell_counts
from reliabilityd.stats.estimate import estimate_metrics
from reliabilityd.stats.estimators import METRICS, metric_cells
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.intervals import atoms, drawn_bounds, intervals
from reliabilityd.stats.saddlepoint import bootstrap_mean_quantiles

K = 5
N_BOOT = 2000
SIZES = (1_000, 10_000, 100_000, 1_000_000)
NUMPY_NAIVE_LIMIT = 100_000
PYTHON_LIMIT = 10_000
IntArray = npt.NDArray[np.int64]


def _best_of(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def live_like(rng: np.random.Generator, tasks: int) -> IntArray:
    """Tasks that gathered trials at their own pace: n uniform in [5, 100]."""
    n = rng.integers(5, 101, tasks)
    return np.stack([n, rng.binomial(n, rng.beta(2, 0.7, tasks))], axis=1).astype(np.int64)


def tidy(rng: np.random.Generator, tasks: int) -> IntArray:
    """Every task with 20 trials: few distinct values, the exact-draw path."""
    return np.stack([np.full(tasks, 20), rng.binomial(20, rng.beta(2, 0.7, tasks))], axis=1)


def exact_draw_cells(hist: Histogram) -> None:
    """One Multinomial over all (n, c) cells, shared by both metrics."""
    draw = resampled_cell_counts(hist.count, N_BOOT, np.random.default_rng(0))
    for metric in METRICS:
        percentile_interval(replicate_means(draw, metric_cells(metric, hist.n, hist.c, K)), 0.95)


def exact_draw_merged(hist: Histogram, poisson: bool = False) -> None:
    """The same draw over each metric's distinct values (cells with equal values merged)."""
    rng = np.random.default_rng(0)
    for metric in METRICS:
        values, count = atoms(metric_cells(metric, hist.n, hist.c, K), hist.count)
        m = int(count.sum())
        if poisson:
            w = rng.poisson(count.astype(np.float64), size=(N_BOOT, count.size))
            reps = (w @ values) / np.maximum(w.sum(axis=1), 1)
        else:
            reps = rng.multinomial(m, count / m, size=N_BOOT) @ values / m
        percentile_interval(reps, 0.95)


def naive_numpy(pairs: IntArray) -> None:
    """Resample task indices (B x T) and average per-task values."""
    values = [metric_cells(m, pairs[:, 0], pairs[:, 1], K) for m in METRICS]
    rng = np.random.default_rng(0)
    t = len(pairs)
    rows = max(1, 20_000_000 // t)  # keep the index matrix near 160 MB
    for v in values:
        reps = []
        for start in range(0, N_BOOT, rows):
            idx = rng.integers(0, t, size=(min(rows, N_BOOT - start), t))
            reps.append(v[idx].mean(axis=1))
        percentile_interval(np.concatenate(reps), 0.95)


def pure_python(pairs: list[tuple[int, int]]) -> None:
    """The reference implementation's shape: per-task values once, tasks resampled in Python."""
    rnd = random.Random(0)
    t = len(pairs)
    hat = [comb(c, K) / comb(n, K) for n, c in pairs]
    at = [1 - comb(n - c, K) / comb(n, K) for n, c in pairs]
    idx = range(t)
    reps_hat = []
    reps_at = []
    for _ in range(N_BOOT):
        sample = rnd.choices(idx, k=t)
        reps_hat.append(sum(hat[i] for i in sample) / t)
        reps_at.append(sum(at[i] for i in sample) / t)
    for reps in (reps_hat, reps_at):
        reps.sort()


def _ms(x: float) -> str:
    return f"{x * 1e3:.2f}" if x < 0.1 else f"{x * 1e3:.0f}"


def size_table(shape: str, make: Callable[[np.random.Generator, int], IntArray]) -> None:
    rng = np.random.default_rng(0)
    print(
        f"\n{shape}: one full CI (pass@{K} and pass^{K}), B={N_BOOT}; CPU ms, x = ratio to the CI"
    )
    print(
        f"{'tasks':>9} {'cells':>6} {'values':>6} {'point':>7} {'CI':>7} {'method':>11}"
        f" {'cell draw':>14} {'merged draw':>14} {'Poisson':>14} {'naive numpy':>14}"
        f" {'pure Python':>15}"
    )
    for t in SIZES:
        pairs = make(rng, t)
        hist = Histogram.from_pairs(pairs)
        n_values = max(
            atoms(metric_cells(m, hist.n, hist.c, K), hist.count)[0].size for m in METRICS
        )
        point = _best_of(partial(estimate_metrics, hist, K, with_ci=False), 5)
        ci = _best_of(partial(estimate_metrics, hist, K), 5)
        method = estimate_metrics(hist, K, interval="percentile")["pass^k"].method or "-"

        def vs(fn: Callable[[], object], ci: float = ci) -> str:
            took = _best_of(fn, 1)
            return f"{_ms(took)} {took / ci:>5.0f}x"

        row = (
            f"{t:>9} {len(hist):>6} {n_values:>6} {_ms(point):>7} {_ms(ci):>7} {method:>11}"
            f" {vs(partial(exact_draw_cells, hist)):>14}"
            f" {vs(partial(exact_draw_merged, hist)):>14}"
            f" {vs(partial(exact_draw_merged, hist, poisson=True)):>14}"
        )
        row += (
            f" {vs(partial(naive_numpy, pairs)):>14}" if t <= NUMPY_NAIVE_LIMIT else f" {'-':>14}"
        )
        if t <= PYTHON_LIMIT:
            as_list = [(int(a), int(b)) for a, b in pairs]
            row += f" {vs(partial(pure_python, as_list)):>15}"
        else:
            row += f" {'-':>15}"
        print(row, flush=True)


def daemon_load(suites: int = 1000, tasks: int = 1000, ci_interval: float = 5.0) -> None:
    rng = np.random.default_rng(1)
    hists = [Histogram.from_pairs(live_like(rng, tasks)) for _ in range(suites)]
    wall = time.perf_counter()
    start = time.process_time()
    for h in hists:
        estimate_metrics(h, K, interval="percentile")
    new = time.process_time() - start
    wall = time.perf_counter() - wall
    start = time.process_time()
    for h in hists:
        estimate_metrics(h, K, interval="gaffke")
    gaffke = time.process_time() - start
    # The draw over every (n, c) cell, on a tenth of the suites, in the same run.
    sample = hists[: suites // 10]
    start = time.process_time()
    for h in sample:
        exact_draw_cells(h)
    old = time.process_time() - start
    print(
        f"\ndaemon load: {suites} suites x {tasks} live-like tasks, one CI each (both metrics,"
        f" k={K}): percentile {new:.2f} s CPU ({wall:.2f} s wall) = {new / ci_interval:.0%} of"
        f" one core over a {ci_interval:g} s ci_interval; gaffke (the default) {gaffke:.2f} s CPU;"
        f" the all-cells draw: {old:.1f} s CPU for {len(sample)} of the suites"
    )


def _cornish_fisher(values: npt.NDArray[np.float64], count: IntArray, z: float) -> float:
    m = float(count.sum())
    p = count / m
    mu = float(p @ values)
    d = values - mu
    var = float(p @ d**2)
    g1 = float(p @ d**3) / var**1.5 / np.sqrt(m)
    g2 = (float(p @ d**4) / var**2 - 3.0) / m
    w = z + (z * z - 1) * g1 / 6 + (z**3 - 3 * z) * g2 / 24 - (2 * z**3 - 5 * z) * g1 * g1 / 36
    return float(mu + w * np.sqrt(var / m))


def accuracy(suites: int = 6) -> None:
    """Worst error of each approximation's 2.5% / 97.5% bounds, in bootstrap sds."""
    rng = np.random.default_rng(2)
    cases = [("live-like 1,000 tasks", live_like(rng, 1000)) for _ in range(suites)]
    # Near the ceiling: 150 distinct weak tasks among many perfect ones.
    ceiling = np.concatenate(
        [np.tile([[100, 100]], (5000, 1)), live_like(rng, 150)], axis=0
    ).astype(np.int64)
    cases.append(("150 varied tasks among 5,000 at 1.0", ceiling))
    print("\naccuracy against a 100,000-resample exact draw (bootstrap sds; B=2000 noise: 0.06)")
    print(f"{'suite':>36} {'metric':>7} {'normal':>8} {'Cornish-Fisher':>15} {'saddlepoint':>12}")
    for name, pairs in cases:
        hist = Histogram.from_pairs(pairs)
        for metric in METRICS:
            values, count = atoms(metric_cells(metric, hist.n, hist.c, K), hist.count)
            m = int(count.sum())
            reps = np.concatenate(
                [rng.multinomial(m, count / m, size=10_000) @ values / m for _ in range(10)]
            )
            exact = np.quantile(reps, [0.025, 0.975])
            sd = float(reps.std())
            mu = float(count @ values) / m
            normal = np.array([mu - 1.959964 * sd, mu + 1.959964 * sd])
            cf = np.array([_cornish_fisher(values, count, z) for z in (-1.959964, 1.959964)])
            sp = bootstrap_mean_quantiles(values, count, np.array([0.025, 0.975]))
            errs = [float(np.abs(x - exact).max() / sd) for x in (normal, cf, sp)]
            print(
                f"{name:>36} {metric:>7} {errs[0]:>8.3f} {errs[1]:>15.3f} {errs[2]:>12.3f}",
                flush=True,
            )


def drawn_gaffke(values: npt.NDArray[np.float64], count: IntArray) -> tuple[float, float]:
    """gaffke's bounds by the B = 2000 Dirichlet draw, as a non-binary series takes them."""
    alpha = np.append(count.astype(np.float64), 1.0)
    g = np.random.default_rng(0).standard_gamma(alpha, size=(N_BOOT, alpha.size))
    w = g / g.sum(axis=1, keepdims=True)
    return drawn_bounds(w @ np.append(values, 0.0), w @ np.append(values, 1.0), 0.025)


def binary_table(series: int = 1000) -> None:
    """The exact path's cost beside the draw's on the same binary series."""
    rng = np.random.default_rng(3)
    print(
        f"\nbinary suites: gaffke's exact bound against the B={N_BOOT} draw, both bounds,"
        " CPU us per series"
    )
    head = ("exact, batch", "draw, batch", "exact, alone", "draw, alone")
    print(f"{'tasks':>9} " + " ".join(f"{h:>13}" for h in head))
    for t in (50, 200, 10_000, 1_000_000):
        ok = rng.integers(0, t + 1, series)
        jobs = [(np.array([0.0, 1.0]), np.array([t - s, s], dtype=np.int64)) for s in ok.tolist()]

        def exact(chosen: list[tuple[npt.NDArray[np.float64], IntArray]]) -> None:
            gen = [np.random.default_rng(0) for _ in chosen]
            out = intervals(chosen, "gaffke", confidence=0.95, n_boot=N_BOOT, rngs=gen)
            assert {ci.method for ci in out} == {"exact"}

        def draw(chosen: list[tuple[npt.NDArray[np.float64], IntArray]]) -> None:
            for values, count in chosen:
                drawn_gaffke(values, count)

        per = 1e6 / series
        print(
            f"{t:>9} {_best_of(partial(exact, jobs), 3) * per:>13.1f}"
            f" {_best_of(partial(draw, jobs), 3) * per:>13.1f}"
            f" {_best_of(partial(exact, jobs[:1]), 30) * 1e6:>13.1f}"
            f" {_best_of(partial(draw, jobs[:1]), 30) * 1e6:>13.1f}",
            flush=True,
        )


def main() -> None:
    size_table("live-like (n uniform in [5, 100])", live_like)
    size_table("tidy (20 trials per task)", tidy)
    daemon_load()
    accuracy()
    binary_table()


if __name__ == "__main__":
    main()
