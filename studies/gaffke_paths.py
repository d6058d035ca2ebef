"""The paths of the gaffke bound against the bound itself, over the coverage study's cells.

``gaffke``'s bound is the ``alpha / 2`` quantile of a Dirichlet-weighted
mean (``reliabilityd.stats.intervals``). The library computes it three
ways: exactly (a Beta quantile) where every task is at 0 or 1 or every task
at one value, by a corrected draw of B = 2000 resamples below the
exact-draw limit, and by a saddlepoint approximation past it. This study
measures the draw and the saddlepoint against the bound they approximate:

* where the exact bound exists (binary suites), against it;
* elsewhere, against a reference draw of ``reference`` resamples (its own
  noise is printed beside the errors, in the same units).

Every error is in standard deviations of the bound's resampled mean and
signed so that a positive error is a bound *inside* the true one (a lower
bound too high, an upper bound too low): the direction that costs
coverage. The saddlepoint is measured at the nominal level (its
approximation error alone) and at ``saddlepoint_level`` (what the library
ships). The suites are those of the coverage study (``studies.coverage``:
populations x T x n x k, every task with the same n), where the library
itself draws, and live-like ones (n uniform in [5, 100] per task), where it
takes the saddlepoint.

``python -m studies.gaffke_paths`` prints one row per T and kind of suite.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from reliabilityd.stats.estimators import METRICS, metric_cells
from reliabilityd.stats.intervals import (
    atoms,
    draw_rank,
    exact_gaffke,
    intervals,
    saddlepoint_level,
)
from reliabilityd.stats.saddlepoint import dirichlet_mean_quantiles
from studies.coverage import KS, POPULATIONS, TASKS, TRIALS, Population

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

CONFIDENCE = 0.95
TAIL = (1.0 - CONFIDENCE) / 2.0
N_BOOT = 2000
# MC sd of a 2.5% quantile from B draws, in sds of the distribution: sqrt(p (1 - p) / B) / phi(z).
_QUANTILE_SPREAD = np.sqrt(TAIL * (1.0 - TAIL)) / 0.05844


@dataclass(frozen=True)
class Errors:
    """Signed errors (positive: inside the true bound) of one kind of suite at one T."""

    kind: str
    tasks: int
    bounds: int
    reference: str
    # The reference's own noise, in the same units (0 for the exact bound).
    reference_sd: float
    draw: FloatArray
    raw: FloatArray
    shipped: FloatArray


def _rows(values: FloatArray) -> tuple[FloatArray, IntArray]:
    return atoms(values, np.ones(values.size, dtype=np.int64))


def _sd(v: FloatArray, a: FloatArray) -> float:
    """sd of sum_j w_j v_j, w ~ Dirichlet(a)."""
    total = float(a.sum())
    mean = float(a @ v) / total
    return float(np.sqrt(float(a @ (v - mean) ** 2) / (total * (total + 1.0))))


def measure(
    suites: Sequence[FloatArray],
    rng: np.random.Generator,
    reference: int,
) -> tuple[list[float], list[float], list[float], list[bool]]:
    """Errors of the draw, the raw and the shipped saddlepoint for each bound of each suite.

    ``suites`` share one size T. Returns per bound (lower, upper, suite by
    suite): the three errors and whether the exact bound was the reference.
    """
    t = suites[0].size
    level = saddlepoint_level(N_BOOT, TAIL)
    # The library's own intervals: exact, or the corrected draw (seed 0, as the daemon).
    jobs = [_rows(v) for v in suites]
    shipped_ci = intervals(
        jobs,
        "gaffke",
        confidence=CONFIDENCE,
        n_boot=N_BOOT,
        rngs=[np.random.default_rng(0) for _ in jobs],
    )
    values, alphas, probs = [], [], []
    for uniq, merged in jobs:
        alpha = np.append(merged.astype(np.float64), 1.0)
        for ends, p in ((0.0, TAIL), (1.0, 1.0 - TAIL)):
            values.append(np.append(uniq, ends))
            alphas.append(alpha)
            probs.append(p)
    raw = dirichlet_mean_quantiles(values, alphas, probs)
    shipped_probs = [level if p < 0.5 else 1.0 - level for p in probs]
    shipped = dirichlet_mean_quantiles(values, alphas, shipped_probs)
    # The reference: exact where it exists, else one large shared draw of task weights.
    exact = [exact_gaffke(u, m, CONFIDENCE) for u, m in jobs]
    stacked = np.stack(list(suites))
    ref_lo = np.empty(len(suites))
    ref_hi = np.empty(len(suites))
    need = [i for i, e in enumerate(exact) if e is None]
    if need:
        w = rng.standard_exponential((reference, t + 1))
        w /= w.sum(axis=1, keepdims=True)
        reps = stacked[need] @ w[:, :t].T
        ref_lo[need] = np.quantile(reps, TAIL, axis=1)
        ref_hi[need] = np.quantile(reps + w[None, :, t], 1.0 - TAIL, axis=1)
    for i, e in enumerate(exact):
        if e is not None:
            ref_lo[i], ref_hi[i] = e.low, e.high
    draw_err, raw_err, shipped_err, is_exact = [], [], [], []
    for i, ci in enumerate(shipped_ci):
        for side in (0, 1):
            row = 2 * i + side
            sd = _sd(values[row], alphas[row])
            if sd == 0.0:
                continue
            ref = ref_lo[i] if side == 0 else ref_hi[i]
            sign = 1.0 if side == 0 else -1.0
            got = ci.low if side == 0 else ci.high
            # An exact suite's shipped bound is the reference itself: no draw to measure.
            draw_err.append(np.nan if ci.method == "exact" else sign * (got - ref) / sd)
            raw_err.append(sign * (raw[row] - ref) / sd)
            shipped_err.append(sign * (shipped[row] - ref) / sd)
            is_exact.append(exact[i] is not None)
    return draw_err, raw_err, shipped_err, is_exact


def _study_suites(
    pop: Population, tasks: int, trials: int, *, count: int, rng: np.random.Generator
) -> list[FloatArray]:
    """``count`` suites of the coverage study's cell, every metric at every k of KS."""
    p = pop.sample(rng, (count, tasks))
    c = rng.binomial(trials, p).astype(np.int64)
    n = np.full_like(c, trials)
    out: list[FloatArray] = []
    for k in KS:
        if k > trials:
            continue
        for metric in METRICS:
            out.extend(metric_cells(metric, n, c, k))
    return out


def _live_suites(tasks: int, count: int, rng: np.random.Generator) -> list[FloatArray]:
    """``count`` live-like suites (n uniform in [5, 100]), both metrics at k = 1 and 5."""
    out: list[FloatArray] = []
    for _ in range(count):
        n = rng.integers(5, 101, tasks)
        a, b = [(2.0, 0.7), (5.0, 1.0), (1.0, 1.0), (0.5, 0.5)][int(rng.integers(4))]
        c = rng.binomial(n, rng.beta(a, b, tasks))
        for k in (1, 5):
            for metric in METRICS:
                out.append(metric_cells(metric, n, c, k))
    return out


def run(
    *,
    populations: Iterable[Population] = POPULATIONS,
    tasks: Sequence[int] = TASKS,
    trials: Sequence[int] = TRIALS,
    per_cell: int = 20,
    live: int = 20,
    live_tasks: Sequence[int] = (200, 1000),
    reference: int = 50_000,
    seed: int = 0,
) -> list[Errors]:
    """Errors per T: the coverage study's suites (exact and drawn apart), then live-like ones."""
    out: list[Errors] = []
    ref_sd = float(_QUANTILE_SPREAD / np.sqrt(reference))
    for t in tasks:
        got: dict[bool, tuple[list[float], list[float], list[float]]] = {
            True: ([], [], []),
            False: ([], [], []),
        }
        for pop in populations:
            rng = np.random.default_rng([seed, POPULATIONS.index(pop), t])
            for n in trials:
                suites = _study_suites(pop, t, n, count=per_cell, rng=rng)
                for d, r, s, e in zip(*measure(suites, rng, reference), strict=True):
                    for dest, x in zip(got[e], (d, r, s), strict=True):
                        dest.append(x)
        for is_exact, (draws, raws, shipped) in got.items():
            if raws:
                out.append(
                    Errors(
                        "study, binary" if is_exact else "study",
                        t,
                        len(raws),
                        "exact" if is_exact else f"draw of {reference:,}",
                        0.0 if is_exact else ref_sd,
                        np.array(draws),
                        np.array(raws),
                        np.array(shipped),
                    )
                )
    for t in live_tasks:
        rng = np.random.default_rng([seed, 99, t])
        draws, raws, shipped, _ = measure(_live_suites(t, live, rng), rng, reference)
        out.append(
            Errors(
                "live-like",
                t,
                len(raws),
                f"draw of {reference:,}",
                ref_sd,
                np.array(draws),
                np.array(raws),
                np.array(shipped),
            )
        )
    return out


def _share(x: FloatArray, above: float) -> str:
    x = x[np.isfinite(x)]
    return "-" if x.size == 0 else f"{float((x > above).mean()):.3f}"


def _most(x: FloatArray) -> str:
    x = x[np.isfinite(x)]
    return "-" if x.size == 0 else f"{float(x.max()):+.3f}"


def table(results: Sequence[Errors]) -> str:
    """One row per kind and T: the largest inward error of each path, and how often it is inside."""
    head = (
        "| suites | T | bounds | reference (its sd) | draw: most inside | draw: share inside "
        "| saddlepoint at 2.5%: most inside | share inside | shipped saddlepoint: most inside "
        "| share inside |"
    )
    lines = [head, "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for e in results:
        # Inside by more than three of the reference's own sds (or 0.001 sd: rounding).
        noise = max(3.0 * e.reference_sd, 1e-3)
        lines.append(
            f"| {e.kind} | {e.tasks} | {e.bounds} | {e.reference} ({e.reference_sd:.3f}) "
            f"| {_most(e.draw)} | {_share(e.draw, noise)} "
            f"| {_most(e.raw)} | {_share(e.raw, noise)} "
            f"| {_most(e.shipped)} | {_share(e.shipped, noise)} |"
        )
    return "\n".join(lines)


def main(per_cell: int = 20, live: int = 20, reference: int = 50_000, seed: int = 0) -> int:
    import sys
    import time

    started = time.monotonic()
    results = run(per_cell=per_cell, live=live, reference=reference, seed=seed)
    r = draw_rank(N_BOOT, TAIL)
    print(
        f"gaffke at {CONFIDENCE:.0%}, B = {N_BOOT}: drawn bounds are the {r}th of {N_BOOT} "
        f"draws from either end; the saddlepoint is taken at "
        f"{saddlepoint_level(N_BOOT, TAIL):.4f} and 1 minus it. Errors in sds of the "
        "bound's resampled mean, positive = inside the true bound."
    )
    print(table(results))
    print(f"[{time.monotonic() - started:.0f} s]", file=sys.stderr)
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m studies.gaffke_paths",
        description="The draw and the saddlepoint against gaffke's bound itself.",
    )
    parser.add_argument("--per-cell", type=int, default=20, help="suites per study cell")
    parser.add_argument("--live", type=int, default=20, help="live-like suites per size")
    parser.add_argument("--reference", type=int, default=50_000, help="draws of the reference")
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args()
    raise SystemExit(main(a.per_cell, a.live, a.reference, a.seed))
