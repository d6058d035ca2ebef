"""The compare study: coverage of the paired difference interval, and false "worse" verdicts.

Two sides run the same T tasks. Each task has a baseline pass rate p drawn
from a population and a candidate pass rate q = effect(p, u) (u a per-task
uniform, so an effect can hit some tasks and spare others); each side runs
each task its own number of times, n uniform in [5, 30] drawn separately
per side. The value the comparison estimates is the superpopulation
difference ``E[f(q)] - E[f(p)]``, f the per-task pass^k (p^k) or pass@k
(1 - (1 - p)^k); the study computes it from two million (p, u) draws.

For every cell of populations x effects x T x k x interval it runs
``reps`` comparisons through ``reliabilityd.stats.paired.paired_difference``
(the code that ships, B = 2000) and reports, per metric, how often the
interval contains the truth, the share of "worse" verdicts (upper bound
below 0; with the ``identical`` effect every one is false) and the median
width. The summary table (``--markdown``) goes into docs/statistics.md.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from reliabilityd.stats.estimators import METRICS, Metric
from reliabilityd.stats.paired import paired_difference

FloatArray = npt.NDArray[np.float64]
Effect = Callable[[FloatArray, FloatArray], FloatArray]

TASKS = (20, 50, 200)
KS = (1, 5)
INTERVALS = ("gaffke", "percentile", "student")
N_RANGE = (5, 30)
TRUTH_DRAWS = 2_000_000


def _beta(a: float, b: float) -> Callable[[np.random.Generator, int], FloatArray]:
    return lambda rng, size: rng.beta(a, b, size)


def _mostly_reliable(rng: np.random.Generator, size: int) -> FloatArray:
    return np.where(rng.random(size) < 0.8, 0.98, rng.beta(2.0, 2.0, size))


POPULATIONS: dict[str, Callable[[np.random.Generator, int], FloatArray]] = {
    "Beta(2, 0.7)": _beta(2.0, 0.7),
    "Beta(1, 1)": _beta(1.0, 1.0),
    "Beta(0.5, 0.5)": _beta(0.5, 0.5),
    "80% 0.98, 20% Beta(2, 2)": _mostly_reliable,
}

EFFECTS: dict[str, Effect] = {
    "identical": lambda p, u: p,
    # A regression on a few tasks: 10% of them halve their pass rate.
    "10% of tasks halve": lambda p, u: np.where(u < 0.1, p / 2.0, p),
    # A small drop everywhere: p -> p^1.25 (0.9 -> 0.877, 0.5 -> 0.42).
    "all slightly worse": lambda p, u: p**1.25,
    # An improvement: the failure rate shrinks, 1 - p -> (1 - p)^1.5.
    "better": lambda p, u: 1.0 - (1.0 - p) ** 1.5,
}


def _per_task(metric: Metric, p: FloatArray, k: int) -> FloatArray:
    return p**k if metric == "pass^k" else 1.0 - (1.0 - p) ** k


@cache
def _truths(population: str, effect: str) -> dict[tuple[Metric, int], float]:
    rng = np.random.default_rng(12345)
    p = POPULATIONS[population](rng, TRUTH_DRAWS)
    q = np.clip(EFFECTS[effect](p, rng.random(TRUTH_DRAWS)), 0.0, 1.0)
    return {
        (m, k): float((_per_task(m, q, k) - _per_task(m, p, k)).mean()) for m in METRICS for k in KS
    }


def truth(population: str, effect: str, metric: Metric, k: int) -> float:
    """E[f(q)] - E[f(p)] from TRUTH_DRAWS draws (sd well under 1e-3)."""
    return _truths(population, effect)[metric, k]


@dataclass(frozen=True)
class CellResult:
    population: str
    effect: str
    tasks: int
    k: int
    metric: Metric
    interval: str
    truth: float
    coverage: float
    worse: float
    median_width: float
    reps: int


def run_cell(
    population: str, effect: str, tasks: int, k: int, *, interval: str, reps: int, seed: int
) -> list[CellResult]:
    rng = np.random.default_rng(seed)
    truths = {m: truth(population, effect, m, k) for m in METRICS}
    hits = {m: 0 for m in METRICS}
    worse = {m: 0 for m in METRICS}
    widths: dict[Metric, list[float]] = {m: [] for m in METRICS}
    for rep in range(reps):
        p = POPULATIONS[population](rng, tasks)
        q = np.clip(EFFECTS[effect](p, rng.random(tasks)), 0.0, 1.0)
        nb = rng.integers(N_RANGE[0], N_RANGE[1] + 1, tasks)
        nc = rng.integers(N_RANGE[0], N_RANGE[1] + 1, tasks)
        diffs = paired_difference(
            (nb, rng.binomial(nb, p)),
            (nc, rng.binomial(nc, q)),
            k,
            interval=interval,
            seed=seed + rep,
        )
        for m, d in diffs.items():
            assert d.ci is not None
            lo, hi = d.ci
            hits[m] += lo <= truths[m] <= hi
            worse[m] += hi < 0.0
            widths[m].append(hi - lo)
    return [
        CellResult(
            population,
            effect,
            tasks,
            k,
            m,
            interval,
            truths[m],
            hits[m] / reps,
            worse[m] / reps,
            float(np.median(widths[m])),
            reps,
        )
        for m in METRICS
    ]


def summary(results: Sequence[CellResult]) -> str:
    """Per interval, metric and T: the lowest coverage over every population, effect and k,
    the mean coverage, the highest false "worse" rate (identical sides) and the median width."""
    lines = [
        "| interval | metric | shared tasks | lowest coverage (cell) | mean coverage "
        '| false "worse", identical sides (highest) | median width |',
        "|---|---|---|---|---|---|---|",
    ]
    for interval in INTERVALS:
        for metric in METRICS:
            for tasks in TASKS:
                cells = [
                    r
                    for r in results
                    if (r.interval, r.metric, r.tasks) == (interval, metric, tasks)
                ]
                if not cells:
                    continue
                low = min(cells, key=lambda r: r.coverage)
                same = [r.worse for r in cells if r.effect == "identical"]
                lines.append(
                    f"| {interval} | {metric} | {tasks} | {low.coverage:.3f} "
                    f"({low.population}, {low.effect}, k={low.k}) "
                    f"| {np.mean([r.coverage for r in cells]):.3f} "
                    f"| {max(same):.3f} "
                    f"| {np.median([r.median_width for r in cells]):.3f} |"
                )
    reps = {r.reps for r in results}
    lines.append("")
    lines.append(
        f"{len(results) // len(METRICS)} cells x {', '.join(map(str, sorted(reps)))} "
        f"comparisons; populations {', '.join(POPULATIONS)}; effects {', '.join(EFFECTS)}; "
        f"k in {KS}; n uniform in [{N_RANGE[0]}, {N_RANGE[1]}] per task and side."
    )
    return "\n".join(lines)


def main(
    reps: int,
    out: Path | None,
    tasks: Sequence[int] = TASKS,
    intervals: Sequence[str] = INTERVALS,
) -> list[CellResult]:
    results: list[CellResult] = []
    started = time.monotonic()
    sink = out.open("w") if out is not None else None
    grid = [
        (interval, population, effect, t, k)
        for interval in INTERVALS
        for population in POPULATIONS
        for effect in EFFECTS
        for t in TASKS
        for k in KS
    ]
    try:
        for i, (interval, population, effect, t, k) in enumerate(grid):
            if interval not in intervals or t not in tasks:
                continue
            # A cell's seed is its place in the whole grid: a part run draws what the
            # whole run draws for the same cells.
            seed = 1_000_003 * (i + 1)
            cell = run_cell(population, effect, t, k, interval=interval, reps=reps, seed=seed)
            results.extend(cell)
            if sink is not None:
                for r in cell:
                    sink.write(json.dumps(asdict(r)) + "\n")
                sink.flush()
    finally:
        if sink is not None:
            sink.close()
    print(summary(results))
    print(f"\n({time.monotonic() - started:.0f} s)")
    return results


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=300, help="comparisons per cell")
    parser.add_argument("--out", type=Path, help="write every cell as a JSON line here")
    parser.add_argument(
        "--tasks", type=int, nargs="*", default=list(TASKS), choices=TASKS, help="a part of"
    )
    parser.add_argument("--intervals", nargs="*", default=list(INTERVALS), choices=INTERVALS)
    args = parser.parse_args()
    main(args.reps, args.out, args.tasks, args.intervals)
