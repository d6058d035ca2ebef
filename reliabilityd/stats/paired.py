"""The paired difference of two sides over tasks already aligned, and its interval.

Index i is one task on both sides; every task's exact per-task value
(``metric_cells``, never the plug-in) is computed on each side and
``d = candidate - baseline`` per task; the difference of the two means is
the mean of ``d``. ``stats.compare`` finds the shared tasks of two sides
and calls ``paired_difference``.

The interval is a paired cluster bootstrap over the shared tasks: each
resample draws the shared tasks once (with replacement, or with Dirichlet
weights for ``gaffke``) and uses both sides' values for every drawn task, so
whatever makes a task hard on both sides cancels out instead of widening the
interval. The mean of ``d`` over a resample is exactly the candidate's mean
minus the baseline's over that resample.

* ``gaffke`` (the default): the Bayesian bootstrap over the shared tasks
  with one pseudo-task at the worst difference, -1 (the baseline always
  passes it, the candidate never) for the lower bound and +1 for the upper.
  It is Gaffke's bound for the mean of a variable on [-1, 1]: exact (a Beta
  quantile, ``stats.intervals.exact_gaffke``) when every difference is -1
  or +1 or all are equal, else drawn, with the corrected order statistics
  of ``stats.intervals.drawn_bounds``.
* ``percentile``: the percentile bootstrap of the resampled mean; when every
  shared task has the same difference, the Wilson interval of
  ``(d + 1) / 2`` over the shared tasks, mapped back.
* ``student``: the Student-t interval over the shared-task differences, its
  degrees of freedom matched to their kurtosis (``stats.student``): closed
  form, no resampling; for comparisons only (``PAIRED_INTERVALS``). With
  fewer than ``STUDENT_MIN_MOVED`` tasks whose difference is not 0, gaffke's.

Resamples are drawn task by task, in task-name order, while ``n_boot x
tasks`` stays at or under ``PER_TASK_LIMIT``: the same draw serves both
metrics, and swapping the sides negates every replicate, so the interval
mirrors exactly. Past it the distinct differences are resampled instead
(``reliabilityd.stats.intervals``, saddlepoint when they are many): the same
distribution at O(distinct values).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec
import numpy as np
import numpy.typing as npt

from reliabilityd.stats.bootstrap import check_confidence, check_n_boot, wilson_interval
from reliabilityd.stats.estimators import METRICS, Metric, metric_cells
from reliabilityd.stats.intervals import (
    INTERVALS,
    atoms,
    draw_rank,
    drawn_bounds,
    exact_gaffke,
)
from reliabilityd.stats.intervals import interval as value_interval
from reliabilityd.stats.student import student_interval

__all__ = [
    "PAIRED_INTERVALS",
    "PER_TASK_LIMIT",
    "STUDENT_MIN_MOVED",
    "Difference",
    "PairedInterval",
    "check_paired_args",
    "paired_difference",
]

FloatArray = npt.NDArray[np.float64]

# Task-by-task resampling while n_boot x (tasks + 1) stays at or under this
# (1,000 shared tasks at B = 2000: 16 MB of weights).
PER_TASK_LIMIT = 2_000_000
# A suite's intervals, and ``student``, which needs a difference per task.
PairedInterval = Literal["percentile", "gaffke", "student"]
PAIRED_INTERVALS: tuple[PairedInterval, ...] = (*INTERVALS, "student")
# ``student`` estimates the spread of the differences from the tasks that moved (a
# difference other than 0): with fewer, it is gaffke's interval, which keeps room for
# a task the sample has not seen. Where a few tasks carry the whole difference a t
# interval covers far under its level (docs/statistics.md, the compare study).
STUDENT_MIN_MOVED = 10


class Difference(msgspec.Struct, frozen=True, omit_defaults=True):
    """candidate - baseline for one metric at one k; ``value is None`` means UNKNOWN.

    ``baseline`` and ``candidate`` are each side's mean over the shared tasks
    (not the side's whole suite); ``ci`` is the paired interval of the
    difference at ``confidence``.
    """

    metric: Metric
    k: int
    value: float | None
    ci: tuple[float, float] | None
    baseline: float | None
    candidate: float | None
    tasks: int
    unknown_reason: str | None = None
    confidence: float | None = None
    interval: str | None = None
    method: str | None = None

    @property
    def label(self) -> str:
        return self.metric.replace("k", str(self.k))

    @property
    def unknown(self) -> bool:
        return self.value is None

    @property
    def ci_low(self) -> float | None:
        return None if self.ci is None else self.ci[0]

    @property
    def ci_high(self) -> float | None:
        return None if self.ci is None else self.ci[1]

    @property
    def direction(self) -> str:
        """``worse``, ``better`` or ``no detectable change`` (``unknown`` when UNKNOWN)."""
        if self.ci is None:
            return "unknown"
        if self.ci[1] < 0.0:
            return "worse"
        if self.ci[0] > 0.0:
            return "better"
        return "no detectable change"


def check_paired_args(
    k: int, confidence: float, n_boot: int, interval: str, metrics: Sequence[str]
) -> None:
    """ValueError naming the first argument a paired difference cannot take."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got k={k}")
    check_confidence(confidence)
    check_n_boot(n_boot)
    if interval not in PAIRED_INTERVALS:
        raise ValueError(f"interval must be one of {', '.join(PAIRED_INTERVALS)}; got {interval!r}")
    for metric in metrics:
        if metric not in METRICS:
            raise ValueError(f"metric must be 'pass@k' or 'pass^k', got {metric!r}")


def _paired_interval(
    d: FloatArray, name: str, confidence: float, n_boot: int, rng: np.random.Generator
) -> tuple[float, float, str]:
    """The paired bootstrap interval of mean(d), d in [-1, 1], tasks in a fixed order."""
    t = d.size
    lo_q = (1.0 - confidence) / 2.0
    hi_q = 1.0 - lo_q
    if name == "student":
        if int(np.count_nonzero(d)) >= STUDENT_MIN_MOVED:
            return student_interval(d, confidence)
        name = "gaffke"
    if name == "percentile" and bool((d == d[0]).all()):
        lo, hi = wilson_interval(min(1.0, max(0.0, (float(d[0]) + 1.0) / 2.0)), t, confidence)
        return 2.0 * lo - 1.0, 2.0 * hi - 1.0, "wilson"
    if name == "gaffke":
        uniq, merged = atoms(d, np.ones(t, dtype=np.int64))
        exact = exact_gaffke(uniq, merged, confidence, (-1.0, 1.0))
        if exact is not None:
            return exact.low, exact.high, exact.method
    if n_boot * (t + 1) > PER_TASK_LIMIT or (name == "gaffke" and draw_rank(n_boot, lo_q) == 0):
        # The distinct differences, resampled on [0, 1] and mapped back
        # (and a draw too small for its tail left to the saddlepoint).
        v = (d + 1.0) / 2.0
        ci = value_interval(
            name, v, np.ones(t, dtype=np.int64), confidence=confidence, n_boot=n_boot, rng=rng
        )
        return 2.0 * ci.low - 1.0, 2.0 * ci.high - 1.0, ci.method
    if name == "gaffke":
        w = rng.standard_exponential((n_boot, t + 1))
        w /= w.sum(axis=1, keepdims=True)
        base = w[:, :t] @ d
        lo, hi = drawn_bounds(base - w[:, t], base + w[:, t], lo_q)
        return max(-1.0, lo), min(1.0, hi), "exact-draw"
    idx = rng.integers(0, t, (n_boot, t))
    reps = d[idx].mean(axis=1)
    lo, hi = np.quantile(reps, [lo_q, hi_q], method="linear")
    return float(lo), float(hi), "exact-draw"


def paired_difference(
    baseline: tuple[npt.ArrayLike, npt.ArrayLike],
    candidate: tuple[npt.ArrayLike, npt.ArrayLike],
    k: int,
    metrics: Sequence[Metric] = METRICS,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    interval: str = "gaffke",
) -> dict[Metric, Difference]:
    """The paired difference over tasks already aligned: ``(n, c)`` arrays per side, index i
    one task on both sides.

    Every task needs ``n >= k`` on both sides (``compare`` checks and says
    UNKNOWN instead); ``ValueError`` otherwise.
    """
    check_paired_args(k, confidence, n_boot, interval, metrics)
    nb, cb, nc, cc = (np.asarray(a, dtype=np.int64).reshape(-1) for a in (*baseline, *candidate))
    if not nb.shape == cb.shape == nc.shape == cc.shape:
        raise ValueError("both sides need one (n, c) per task, aligned")
    if nb.size == 0:
        raise ValueError("a paired difference needs at least one shared task")
    out: dict[Metric, Difference] = {}
    for metric in metrics:
        vb = metric_cells(metric, nb, cb, k)
        vc = metric_cells(metric, nc, cc, k)
        d = vc - vb
        value = float(d.mean())
        # Every metric's draw starts from the same seed: one draw of tasks serves both.
        lo, hi, method = _paired_interval(
            d, interval, confidence, n_boot, np.random.default_rng(seed)
        )
        out[metric] = Difference(
            metric=metric,
            k=k,
            value=min(max(value, lo), hi),
            ci=(lo, hi),
            baseline=float(vb.mean()),
            candidate=float(vc.mean()),
            tasks=int(nb.size),
            confidence=confidence,
            interval=interval,
            method=method,
        )
    return out
