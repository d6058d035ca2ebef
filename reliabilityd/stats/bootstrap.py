"""Cluster bootstrap over tasks, computed from the histogram.

Resampling T tasks with replacement and averaging their per-task values only
depends on how many draws land in each (n, c) cell, and those counts are one
Multinomial(T, count / T) draw over the D cells. B replicates therefore cost
O(B x D) whatever T is; the task-by-task resampler costs O(B x T). Cells
with equal per-task values merge further (``stats.intervals`` draws over
those), and past ``stats.intervals.EXACT_DRAW_LIMIT`` the same
distribution's quantiles come from ``stats.saddlepoint`` (``gaffke``'s
exact bounds, where they exist, from ``stats.exact``).

Trials inside a task are correlated (same prompt, same failure modes), so the
task, not the trial, is the unit that gets resampled.
"""

from __future__ import annotations

from math import sqrt
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")


def check_n_boot(n_boot: int) -> None:
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")


def z_value(confidence: float) -> float:
    """Two-sided normal quantile for a confidence level (1.959964 at 95%)."""
    check_confidence(confidence)
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(p: float, m: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a proportion p observed over m units.

    p may be fractional (a mean of per-task probabilities); this is the
    fallback when every task has the same value and the bootstrap would
    collapse to a zero-width interval.
    """
    if m < 1:
        raise ValueError(f"the Wilson interval needs m >= 1 units, got m={m}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p}")
    z = z_value(confidence)
    z2 = z * z
    denom = 1.0 + z2 / m
    centre = (p + z2 / (2.0 * m)) / denom
    half = (z / denom) * sqrt(p * (1.0 - p) / m + z2 / (4.0 * m * m))
    return max(0.0, centre - half), min(1.0, centre + half)


def resampled_cell_counts(
    count: npt.NDArray[np.int64], n_boot: int, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """B cluster-bootstrap resamples of a pool, as (B, D) per-cell task counts."""
    check_n_boot(n_boot)
    m = int(count.sum())
    if m < 1:
        raise ValueError("cannot resample an empty pool")
    return rng.multinomial(m, count / m, size=n_boot).astype(np.int64)


def replicate_means(resampled: npt.NDArray[np.int64], values: FloatArray) -> FloatArray:
    """Mean per-task value of each resample."""
    m = int(resampled[0].sum())
    return (resampled @ values) / m


def percentile_interval(replicates: FloatArray, confidence: float) -> tuple[float, float]:
    """Percentile interval, linear interpolation between order statistics."""
    check_confidence(confidence)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(replicates, [alpha / 2.0, 1.0 - alpha / 2.0], method="linear")
    return float(lo), float(hi)
