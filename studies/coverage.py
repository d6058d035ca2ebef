"""The coverage study: how often each interval covers the superpopulation value.

A suite is T tasks drawn from a population of per-task pass rates p, each
run n times. The value it estimates is the population's ``E[p^k]`` (pass^k)
or ``E[1 - (1 - p)^k]`` (pass@k): the exact per-task estimators are unbiased
for it, and it is what a user of the agent meets on the next task. For every
cell of populations x T x n x k the study simulates ``reps`` suites and
counts the intervals that contain that value, and reports their median
width beside it (an interval that covers by being uselessly wide has not
solved anything).

Vectorised: within a block of suites one bootstrap draw of task weights,
(B x T), is shared, so the B resampled means of every suite, metric and k are
one matrix product. Each suite's interval is still a full B-resample
interval; sharing the weights across independent suites changes no suite's
distribution. ``gaffke`` is the shipped interval: the library's exact Beta
quantiles where every task is at 0 or 1 or at one value, else its corrected
order statistics of the draw (``reliabilityd.stats.intervals``). The library
computes the same intervals from histograms; tests/unit/test_coverage.py
checks the two agree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from math import prod
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from reliabilityd.stats.bootstrap import z_value
from reliabilityd.stats.estimators import METRICS, Metric, metric_cells
from reliabilityd.stats.exact import beta_quantiles
from reliabilityd.stats.intervals import draw_rank

FloatArray = npt.NDArray[np.float64]
Sampler = Callable[[np.random.Generator, tuple[int, ...]], FloatArray]

STUDY_INTERVALS = ("percentile", "gaffke")
# Measured for comparison only (``--compare``); not offered by the library.
COMPARED = ("bca",)
_ORDER = (*STUDY_INTERVALS, *COMPARED)
TASKS = (10, 20, 50, 200)
TRIALS = (5, 10, 20)
KS = (1, 3, 5)


@dataclass(frozen=True)
class Component:
    """A point mass at ``point`` or, when ``beta`` is set, Beta(a, b)."""

    weight: float
    point: float = 0.0
    beta: tuple[float, float] | None = None

    def moment(self, k: int, failure: bool) -> float:
        """E[p^k], or E[(1 - p)^k] with ``failure``."""
        if self.beta is None:
            return (1.0 - self.point if failure else self.point) ** k
        a, b = self.beta
        if failure:
            a, b = b, a
        return prod((a + j) / (a + b + j) for j in range(k))


@dataclass(frozen=True)
class Population:
    name: str
    components: tuple[Component, ...]

    def sample(self, rng: np.random.Generator, shape: tuple[int, ...]) -> FloatArray:
        which = rng.choice(len(self.components), size=shape, p=[c.weight for c in self.components])
        p = np.empty(shape)
        for i, comp in enumerate(self.components):
            mask = which == i
            if comp.beta is None:
                p[mask] = comp.point
            else:
                p[mask] = rng.beta(*comp.beta, size=int(mask.sum()))
        return p

    def truth(self, metric: Metric, k: int) -> float:
        if metric == "pass^k":
            return sum(c.weight * c.moment(k, failure=False) for c in self.components)
        return 1.0 - sum(c.weight * c.moment(k, failure=True) for c in self.components)


def _beta(a: float, b: float) -> Population:
    return Population(f"Beta({a:g}, {b:g})", (Component(1.0, beta=(a, b)),))


POPULATIONS: tuple[Population, ...] = (
    _beta(1, 1),
    _beta(2, 2),
    _beta(5, 1),
    _beta(0.5, 0.5),
    Population("all p = 0.9", (Component(1.0, 0.9),)),
    Population("all p = 0.98", (Component(1.0, 0.98),)),
    Population("bimodal 50% 0.1, 50% 0.95", (Component(0.5, 0.1), Component(0.5, 0.95))),
    Population(
        "mostly reliable 80% 0.98, 20% Beta(2, 2)",
        (Component(0.8, 0.98), Component(0.2, beta=(2.0, 2.0))),
    ),
    Population("lottery 95% 0.99, 5% 0.5", (Component(0.95, 0.99), Component(0.05, 0.5))),
)


@dataclass(frozen=True)
class CellResult:
    population: str
    tasks: int
    trials: int
    k: int
    metric: Metric
    interval: str
    truth: float
    coverage: float
    # Share of intervals lying wholly above the truth: the miss that overstates reliability.
    above: float
    median_width: float
    reps: int


def _quantile_rows(x: npt.NDArray[np.floating], qs: Sequence[float]) -> list[FloatArray]:
    """np.quantile(x, q, axis=1, method="linear") for each q, from one partial sort."""
    b = x.shape[1]
    spots = []
    for q in qs:
        pos = q * (b - 1)
        lo = int(np.floor(pos))
        spots.append((lo, min(lo + 1, b - 1), pos - lo))
    kth = sorted({i for lo, hi, _ in spots for i in (lo, hi)})
    part = np.partition(x, kth, axis=1)
    return [
        np.asarray(part[:, lo], dtype=np.float64)
        + frac * (part[:, hi].astype(np.float64) - part[:, lo])
        for lo, hi, frac in spots
    ]


def _wilson_rows(p: FloatArray, m: int, confidence: float) -> tuple[FloatArray, FloatArray]:
    z = z_value(confidence)
    z2 = z * z
    denom = 1.0 + z2 / m
    centre = (p + z2 / (2.0 * m)) / denom
    half = (z / denom) * np.sqrt(np.maximum(p * (1.0 - p), 0.0) / m + z2 / (4.0 * m * m))
    return np.maximum(0.0, centre - half), np.minimum(1.0, centre + half)


def intervals_for_block(
    values: FloatArray,
    n_boot: int,
    confidence: float,
    rng: np.random.Generator,
    names: Sequence[str] = STUDY_INTERVALS,
) -> dict[str, tuple[FloatArray, FloatArray]]:
    """Each named interval for every row of ``values`` (rows: suites, columns: tasks)."""
    t = values.shape[1]
    alpha = 1.0 - confidence
    out: dict[str, tuple[FloatArray, FloatArray]] = {}
    same = (values == values[:, :1]).all(axis=1)
    if "percentile" in names or "bca" in names:
        w = rng.multinomial(t, np.full(t, 1.0 / t), size=n_boot) / t
        # float32 halves the memory the partial sorts walk; 1e-7 is far below
        # any width that decides coverage.
        reps = (values @ w.T).astype(np.float32)
        lo, hi = _quantile_rows(reps, (alpha / 2.0, 1.0 - alpha / 2.0))
        if same.any():
            wlo, whi = _wilson_rows(values[same, 0], t, confidence)
            lo[same], hi[same] = wlo, whi
        out["percentile"] = (lo, hi)
        if "bca" in names:
            out["bca"] = _bca_rows(values, reps, confidence, same, out["percentile"])
    if "gaffke" in names:
        out["gaffke"] = _gaffke_rows(values, n_boot, alpha / 2.0, rng)
    return out


def _gaffke_rows(
    values: FloatArray, n_boot: int, tail: float, rng: np.random.Generator
) -> tuple[FloatArray, FloatArray]:
    """The library's gaffke bounds row by row: exact for two atoms, else the corrected draw."""
    t = values.shape[1]
    r = draw_rank(n_boot, tail)
    if r == 0:
        raise ValueError(f"n_boot = {n_boot} is too small for a {tail:.2%} bound")
    g = rng.standard_exponential(size=(n_boot, t + 1))
    w = g / g.sum(axis=1, keepdims=True)
    reps = values @ w[:, :t].T
    # The r-th smallest and the r-th largest draw (stats.intervals.drawn_bounds);
    # the pseudo-task sits at 1 for the upper bound: it adds its weight. In
    # float32, which halves the memory the partial sorts walk (1e-7 is far
    # below any width that decides coverage).
    low_reps = reps.astype(np.float32)
    lo = np.partition(low_reps, r - 1, axis=1)[:, r - 1].astype(np.float64)
    high_reps = (reps + w[None, :, t]).astype(np.float32)
    hi = np.partition(high_reps, n_boot - r, axis=1)[:, n_boot - r].astype(np.float64)
    # Every task at 0 or 1, or every task at one value: the Beta quantiles of
    # stats.intervals.exact_gaffke, in the same arithmetic.
    binary = ((values == 0.0) | (values == 1.0)).all(axis=1)
    same = (values == values[:, :1]).all(axis=1) & ~binary
    if binary.any():
        ok = values[binary].sum(axis=1).round().astype(np.int64)
        fail = t - ok
        lo[binary] = beta_quantiles(ok, fail + 1, tail)
        hi[binary] = 1.0 - beta_quantiles(fail, ok + 1, tail)
    if same.any():
        v = values[same, 0]
        q = beta_quantiles(np.full(v.size, t), np.ones(v.size, dtype=np.int64), tail)
        lo[same] = v * q
        hi[same] = 1.0 - (1.0 - v) * q
    return np.maximum(lo, 0.0), np.minimum(hi, 1.0)


def _bca_rows(
    values: FloatArray,
    reps: npt.NDArray[np.float32],
    confidence: float,
    same: npt.NDArray[np.bool_],
    fallback: tuple[FloatArray, FloatArray],
) -> tuple[FloatArray, FloatArray]:
    """Bias-corrected and accelerated percentile bounds from the same resamples.

    Acceleration from the jackknife of the mean, sum d^3 / (6 (sum d^2)^1.5)
    with d the per-task deviations; rows of identical values keep the
    percentile interval's Wilson fallback.
    """
    b = reps.shape[1]
    mean = values.mean(axis=1)
    below = (reps < mean[:, None].astype(np.float32)).mean(axis=1)
    below = np.clip(below, 1.0 / (2 * b), 1.0 - 1.0 / (2 * b))
    inv = np.frompyfunc(NormalDist().inv_cdf, 1, 1)
    cdf = np.frompyfunc(NormalDist().cdf, 1, 1)
    z0 = np.asarray(inv(below), dtype=np.float64)
    d = values - mean[:, None]
    s2 = (d * d).sum(axis=1)
    accel = np.where(s2 > 0, (d**3).sum(axis=1) / (6.0 * np.maximum(s2, 1e-300) ** 1.5), 0.0)
    ordered = np.sort(reps, axis=1).astype(np.float64)
    bounds = []
    for z in (-z_value(confidence), z_value(confidence)):
        level = np.asarray(cdf(z0 + (z0 + z) / (1.0 - accel * (z0 + z))), dtype=np.float64)
        pos = np.clip(level, 0.0, 1.0) * (b - 1)
        i = np.minimum(np.floor(pos).astype(np.int64), b - 2)
        frac = pos - i
        rows = np.arange(values.shape[0])
        bounds.append(ordered[rows, i] + frac * (ordered[rows, i + 1] - ordered[rows, i]))
    lo, hi = bounds
    lo = np.where(same, fallback[0], lo)
    hi = np.where(same, fallback[1], hi)
    return lo, hi


def study_cell(
    population: Population,
    tasks: int,
    trials: int,
    ks: Sequence[int],
    *,
    reps: int,
    rng: np.random.Generator,
    n_boot: int = 2000,
    confidence: float = 0.95,
    names: Sequence[str] = STUDY_INTERVALS,
    block: int = 500,
) -> list[CellResult]:
    """Coverage of every interval for one population, T and n, at each k."""
    combos = [(k, metric) for k in ks for metric in METRICS if k <= trials]
    lows: dict[tuple[int, str, str], list[FloatArray]] = {}
    highs: dict[tuple[int, str, str], list[FloatArray]] = {}
    done = 0
    while done < reps:
        size = min(block, reps - done)
        p = population.sample(rng, (size, tasks))
        c = rng.binomial(trials, p).astype(np.int64)
        n = np.full_like(c, trials)
        # All (k, metric) combinations stacked: one product per interval.
        stacked = np.concatenate([metric_cells(m, n, c, k) for k, m in combos], axis=0)
        bounds = intervals_for_block(stacked, n_boot, confidence, rng, names)
        for name, (lo, hi) in bounds.items():
            for i, (k, metric) in enumerate(combos):
                key = (k, metric, name)
                lows.setdefault(key, []).append(lo[i * size : (i + 1) * size])
                highs.setdefault(key, []).append(hi[i * size : (i + 1) * size])
        done += size
    out: list[CellResult] = []
    for k, metric in combos:
        truth = population.truth(metric, k)
        for name in names:
            lo = np.concatenate(lows[(k, metric, name)])
            hi = np.concatenate(highs[(k, metric, name)])
            # A hair of float slack: a truth of exactly 1.0 against a bound of 1 - 1e-16.
            covered = (lo <= truth + 1e-12) & (truth - 1e-12 <= hi)
            out.append(
                CellResult(
                    population=population.name,
                    tasks=tasks,
                    trials=trials,
                    k=k,
                    metric=metric,
                    interval=name,
                    truth=truth,
                    coverage=float(covered.mean()),
                    above=float((lo > truth + 1e-12).mean()),
                    median_width=float(np.median(hi - lo)),
                    reps=int(lo.size),
                )
            )
    return out


def run(
    populations: Iterable[Population] = POPULATIONS,
    *,
    tasks: Sequence[int] = TASKS,
    trials: Sequence[int] = TRIALS,
    ks: Sequence[int] = KS,
    reps: int = 5000,
    seed: int = 0,
    n_boot: int = 2000,
    names: Sequence[str] = STUDY_INTERVALS,
    progress: Callable[[str], None] | None = None,
) -> list[CellResult]:
    """The grid. Each population draws from its own stream, seeded by (seed, its
    place in POPULATIONS), so a run of one population replays its rows of the
    full run exactly."""
    out: list[CellResult] = []
    for pop in populations:
        rng = np.random.default_rng([seed, POPULATIONS.index(pop)])
        for t in tasks:
            for n in trials:
                out.extend(
                    study_cell(pop, t, n, ks, reps=reps, rng=rng, n_boot=n_boot, names=names)
                )
                if progress is not None:
                    progress(f"{pop.name} T={t} n={n}")
    return out


# --- reports ---------------------------------------------------------------


def to_json_lines(results: Iterable[CellResult]) -> str:
    import msgspec  # only the report needs it

    return "".join(msgspec.json.encode(r).decode() + "\n" for r in results)


def from_json_lines(text: str) -> list[CellResult]:
    import msgspec

    return [msgspec.json.decode(line, type=CellResult) for line in text.splitlines() if line]


def _worst(cells: list[CellResult]) -> str:
    worst = min(cells, key=lambda r: r.coverage)
    width = float(np.median([r.median_width for r in cells]))
    return f"{worst.coverage:.3f} ({width:.3f})"


def summary_table(results: Sequence[CellResult]) -> str:
    """Per population and T: the worst coverage over n and k, and the median width.

    Each entry is ``worst coverage (median width)``: the lowest coverage among
    the n x k cells, and the median over those cells of each cell's median
    interval width.
    """
    names = sorted({r.interval for r in results}, key=_ORDER.index)
    head = ["population", "T"] + [f"{m} {i}" for m in METRICS for i in names]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (len(head) - 2)]
    pops = list(dict.fromkeys(r.population for r in results))
    for pop in pops:
        for t in sorted({r.tasks for r in results if r.population == pop}):
            row = [pop, str(t)]
            for metric in METRICS:
                for name in names:
                    cells = [
                        r
                        for r in results
                        if (r.population, r.tasks, r.metric, r.interval) == (pop, t, metric, name)
                    ]
                    row.append(_worst(cells))
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def headline(results: Sequence[CellResult], min_tasks: int = 20) -> str:
    """One line per interval and metric: worst and median coverage with T >= min_tasks."""
    out = []
    for name in sorted({r.interval for r in results}, key=_ORDER.index):
        for metric in METRICS:
            cells = [
                r
                for r in results
                if r.interval == name and r.metric == metric and r.tasks >= min_tasks
            ]
            if not cells:
                continue
            worst = min(cells, key=lambda r: r.coverage)
            cov = np.array([r.coverage for r in cells])
            out.append(
                f"{name:>10} {metric}: T >= {min_tasks}: worst {worst.coverage:.3f} "
                f"({worst.population}, T={worst.tasks}, n={worst.trials}, k={worst.k}), "
                f"median {float(np.median(cov)):.3f}, cells below 0.93: {int((cov < 0.93).sum())}"
                f" of {cov.size}"
            )
    return "\n".join(out)


def full_table(results: Sequence[CellResult]) -> str:
    """Every cell: coverage, share wholly above the truth, median width."""
    lines = [
        "| population | T | n | k | metric | truth | interval | coverage | above | median width |",
        "|---|---:|---:|---:|---|---:|---|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.population} | {r.tasks} | {r.trials} | {r.k} | {r.metric} | {r.truth:.4f} "
            f"| {r.interval} | {r.coverage:.3f} | {r.above:.3f} | {r.median_width:.4f} |"
        )
    return "\n".join(lines)


def main(
    *,
    reps: int = 5000,
    seed: int = 0,
    only: str = "",
    quick: bool = False,
    out: str = "",
    report: str = "",
    full: bool = False,
    compare: bool = False,
    tasks: Sequence[int] = (),
) -> int:
    """``make study-coverage``: run the grid (or read a run) and print its tables."""
    import sys
    import time
    from pathlib import Path

    if report:
        results = from_json_lines(Path(report).read_text())
    else:
        exact = [p for p in POPULATIONS if p.name == only]
        pops = exact or [p for p in POPULATIONS if only.lower() in p.name.lower()]
        if not pops:
            print(f"no population name contains {only!r}", file=sys.stderr)
            return 2
        started = time.monotonic()

        def progress(what: str) -> None:
            print(f"[{time.monotonic() - started:7.1f}s] {what}", file=sys.stderr, flush=True)

        results = run(
            pops,
            tasks=tasks or ((20, 50) if quick else TASKS),
            trials=(10,) if quick else TRIALS,
            reps=reps,
            seed=seed,
            names=(*STUDY_INTERVALS, *COMPARED) if compare else STUDY_INTERVALS,
            progress=progress,
        )
        if out:
            Path(out).write_text(to_json_lines(results))
    print(f"coverage of the superpopulation value, {results[0].reps} suites per cell, B = 2000")
    print(headline(results))
    print()
    print(summary_table(results))
    if full:
        print()
        print(full_table(results))
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m studies.coverage",
        description="How often each interval covers the superpopulation value.",
    )
    parser.add_argument("--quick", action="store_true", help="a small grid: T in {20, 50}, n = 10")
    parser.add_argument("--reps", type=int, default=5000, help="simulated suites per cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default="", help="populations whose name contains this text")
    parser.add_argument("--out", default="", help="also write every cell as JSON lines")
    parser.add_argument("--report", default="", help="print the tables of a JSON-lines file")
    parser.add_argument("--full", action="store_true", help="also print every cell")
    parser.add_argument("--tasks", default="", help="suite sizes, comma-separated (e.g. 5,10)")
    parser.add_argument(
        "--compare", action="store_true", help="also measure BCa (not in the library)"
    )
    a = parser.parse_args()
    raise SystemExit(
        main(
            reps=a.reps,
            seed=a.seed,
            only=a.only,
            quick=a.quick,
            out=a.out,
            report=a.report,
            full=a.full,
            compare=a.compare,
            tasks=tuple(int(t) for t in a.tasks.split(",")) if a.tasks else (),
        )
    )
