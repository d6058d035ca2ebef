"""Suite-level pass@k / pass^k with a cluster-bootstrap CI and honest UNKNOWN.

The value is the mean over tasks of the exact per-task estimator. It is
UNKNOWN (``value is None`` plus a reason) whenever it would need more trials
than a task has: strictly, any task with n < k; with ``min_coverage`` below 1,
only when the share of tasks with n >= k falls under it, and then the tasks
left out are counted in the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, TypeAlias, TypedDict

import msgspec
import numpy as np
import numpy.typing as npt

from reliabilityd.stats.bootstrap import (
    check_confidence,
    check_n_boot,
)
from reliabilityd.stats.estimators import ESTIMATOR_NAME, METRICS, Metric, metric_cells
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.intervals import Interval, check_interval
from reliabilityd.stats.intervals import intervals as compute_intervals

Tasks: TypeAlias = Histogram | Sequence[tuple[int, int]] | npt.NDArray[np.int64]

_METRIC_OF = {name: metric for metric, name in ESTIMATOR_NAME.items()}
_NO_CELLS: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
_INT64_MAX = int(np.iinfo(np.int64).max)


class Estimate(msgspec.Struct, frozen=True, omit_defaults=True):
    """One suite-level estimate; ``value is None`` means UNKNOWN.

    Serialises (``msgspec.json.encode``) to the wire shape used in snapshots,
    alerts and the CLI: ``k``, ``value``, ``ci`` (``[low, high]`` or null),
    ``estimator``, ``runs`` (the shortest n among the tasks used), ``tasks``
    (tasks used), ``left_out`` (tasks with fewer than k trials) and
    ``unknown_reason`` when UNKNOWN.

    ``ci`` is the interval at whatever ``confidence`` was asked for.
    Whenever there is a CI, the document also carries ``confidence``,
    ``interval`` (its name, one of ``reliabilityd.INTERVALS``) and ``method``
    (how it was computed: one of ``reliabilityd.stats.intervals.METHODS``,
    ``exact``, ``exact-draw``, ``saddlepoint`` or ``wilson``).
    """

    k: int
    value: float | None
    ci: tuple[float, float] | None
    estimator: str
    runs: int
    tasks: int
    left_out: int
    unknown_reason: str | None = None
    confidence: float | None = None
    interval: str | None = None
    method: str | None = None

    @property
    def metric(self) -> Metric:
        return _METRIC_OF[self.estimator]

    @property
    def ci_low(self) -> float | None:
        return None if self.ci is None else self.ci[0]

    @property
    def ci_high(self) -> float | None:
        return None if self.ci is None else self.ci[1]

    @property
    def unknown(self) -> bool:
        return self.value is None


def as_histogram(tasks: Tasks) -> Histogram:
    """Accept a Histogram or per-task (n, c) pairs."""
    if isinstance(tasks, Histogram):
        return tasks
    return Histogram.from_pairs(tasks)


def _check_args(
    k: int, min_coverage: float, confidence: float, n_boot: int, interval_name: str
) -> None:
    check_interval(interval_name)
    if k < 1:
        raise ValueError(f"k must be at least 1, got k={k}")
    if not 0.0 < min_coverage <= 1.0:
        raise ValueError(f"min_coverage must lie in (0, 1], got {min_coverage}")
    check_confidence(confidence)
    check_n_boot(n_boot)


def _metric_label(metric: Metric, k: int) -> str:
    return metric.replace("k", str(k))


def _unknown_reason(
    hist: Histogram, used: Histogram, k: int, metric: Metric, min_coverage: float
) -> str:
    label = _metric_label(metric, k)
    total = hist.tasks
    if total == 0:
        return (
            f"UNKNOWN: {label} has no tasks with counted trials yet. "
            "reliabilityd does not extrapolate."
        )
    short = total - used.tasks
    shortest = int(hist.n.min())
    if min_coverage >= 1.0:
        return (
            f"UNKNOWN: {label} needs at least {k} trials per task; the shortest task has "
            f"{shortest} and {short} of {total} tasks have fewer than {k}. "
            f"Record more trials or lower k. reliabilityd does not extrapolate."
        )
    return (
        f"UNKNOWN: only {used.tasks} of {total} tasks ({used.tasks / total:.0%}) have at least "
        f"{k} trials, under min_coverage {min_coverage:.0%}; the shortest task has {shortest}. "
        f"Record more trials or lower k. reliabilityd does not extrapolate."
    )


def estimate_metrics(
    tasks: Tasks,
    k: int,
    metrics: Sequence[Metric] = METRICS,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    min_coverage: float = 1.0,
    with_ci: bool = True,
    interval: str = "gaffke",
) -> dict[Metric, Estimate]:
    """Several metrics at one k, each with the named interval.

    With ``with_ci=False`` only the point estimates are computed (the live
    path after every commit); ``ci`` is then None.
    """
    (row,) = estimate_many(
        [tasks],
        [k],
        metrics,
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
        min_coverage=min_coverage,
        with_ci=with_ci,
        interval=interval,
    )
    return dict(zip(metrics, row, strict=True))


class _Pending(NamedTuple):
    """A known estimate waiting for its interval."""

    series: int
    slot: int
    metric: Metric
    k: int
    value: float
    job: int
    runs: int
    tasks: int
    left_out: int


class _Table:
    """The cells of many histograms laid end to end, with each cell's series."""

    def __init__(self, hists: Sequence[Histogram]) -> None:
        sizes = np.array([len(h) for h in hists], dtype=np.int64)
        self.size = len(hists)
        self.n = np.concatenate([h.n for h in hists]) if hists else _NO_CELLS
        self.c = np.concatenate([h.c for h in hists]) if hists else _NO_CELLS
        self.count = np.concatenate([h.count for h in hists]) if hists else _NO_CELLS
        self.series = np.repeat(np.arange(self.size, dtype=np.int64), sizes)
        self._nonempty = sizes > 0
        self._starts = (np.cumsum(sizes) - sizes)[self._nonempty]
        self.tasks = self.tasks_of(np.ones(self.n.size, dtype=bool))

    def tasks_of(self, keep: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
        """Each series' tasks in the kept cells (exact integers)."""
        out = np.zeros(self.size, dtype=np.int64)
        if self._starts.size:
            out[self._nonempty] = np.add.reduceat(np.where(keep, self.count, 0), self._starts)
        return out

    def shortest(self, keep: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
        """Each series' least n among the kept cells (0 where it keeps none)."""
        out = np.zeros(self.size, dtype=np.int64)
        if self._starts.size:
            least = np.minimum.reduceat(np.where(keep, self.n, _INT64_MAX), self._starts)
            out[self._nonempty] = np.where(least == _INT64_MAX, 0, least)
        return out


def estimate_many(
    series: Sequence[Tasks],
    ks: Sequence[int],
    metrics: Sequence[Metric] = METRICS,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    min_coverage: float = 1.0,
    with_ci: bool = True,
    interval: str = "gaffke",
) -> list[list[Estimate]]:
    """Every metric at every k of many series, their intervals in one vectorised pass.

    ``result[i]`` holds series i's estimates k by k, and within a k in the
    order of ``metrics``: each one exactly what ``estimate_metrics`` gives
    for that series, k and metric alone (it is this function with one series),
    because every interval is computed from its own series and seed and the
    batched saddlepoint solves each row as it would alone. pass@1 and pass^1
    are the same number (both c / n per task) and share one interval.
    """
    for k in ks:
        _check_args(k, min_coverage, confidence, n_boot, interval)
    for metric in metrics:
        if metric not in METRICS:
            raise ValueError(f"metric must be 'pass@k' or 'pass^k', got {metric!r}")
    out: list[list[Estimate | None]] = []
    jobs: list[tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]] = []
    pending: list[_Pending] = []
    hists = [as_histogram(tasks) for tasks in series]
    table = _Table(hists)
    totals = table.tasks.tolist()
    shortest = table.shortest(table.n >= 1).tolist()
    # Each k's cells with enough trials, over every series at once; then each
    # (metric, k)'s per-cell values and their per-series sums in one vectorised
    # call each (elementwise, and summed in each series' own cell order, so each
    # series' numbers are what it would get alone).
    at_k: list[tuple[list[int], list[int], dict[str, list[float]]]] = []
    cells: dict[tuple[str, int], list[npt.NDArray[np.float64]]] = {}
    counts: dict[int, list[npt.NDArray[np.int64]]] = {}
    for k in ks:
        keep = table.n >= k
        used = table.tasks_of(keep).tolist()
        runs = table.shortest(keep).tolist()
        n_k, c_k, w_k, series_k = (
            table.n[keep],
            table.c[keep],
            table.count[keep],
            table.series[keep],
        )
        sums: dict[str, list[float]] = {}
        ends = np.cumsum(np.bincount(series_k, minlength=len(hists)))[:-1]
        for metric in metrics:
            key = "k=1" if k == 1 else metric
            if key not in sums:
                per_cell = metric_cells(metric, n_k, c_k, k)
                sums[key] = np.bincount(
                    series_k, weights=per_cell * w_k, minlength=len(hists)
                ).tolist()
                if with_ci:
                    cells[(key, k)] = np.split(per_cell, ends)
        if with_ci:
            counts[k] = np.split(w_k, ends)
        at_k.append((used, runs, sums))
    for i, hist in enumerate(hists):
        row: list[Estimate | None] = []
        out.append(row)
        total = totals[i]
        for k, (used_at, runs_at, sums) in zip(ks, at_k, strict=True):
            m = used_at[i]
            if not (m > 0 and m / total >= min_coverage):
                row.extend(
                    Estimate(
                        k=k,
                        value=None,
                        ci=None,
                        estimator=ESTIMATOR_NAME[metric],
                        runs=shortest[i] if total else 0,
                        tasks=m,
                        left_out=total - m,
                        unknown_reason=_unknown_reason(
                            hist, hist.at_least(k), k, metric, min_coverage
                        ),
                    )
                    for metric in metrics
                )
                continue
            # At k = 1 both metrics are c / n per task: one value, one interval.
            computed: dict[str, tuple[float, int]] = {}
            for metric in metrics:
                key = "k=1" if k == 1 else metric
                if key not in computed:
                    # Float sums can leave 1 + 1e-16; the estimand lives in [0, 1].
                    value = min(1.0, max(0.0, sums[key][i] / m))
                    computed[key] = (value, len(jobs))
                    if with_ci:
                        jobs.append((cells[(key, k)][i], counts[k][i]))
                value, job = computed[key]
                pending.append(
                    _Pending(i, len(row), metric, k, value, job, runs_at[i], m, total - m)
                )
                row.append(None)
    cis: list[Interval] = []
    if with_ci:
        cis = compute_intervals(
            jobs,
            interval,
            confidence=confidence,
            n_boot=n_boot,
            # A generator only for the jobs that draw (most take the saddlepoint).
            rngs=lambda: np.random.default_rng(seed),
        )
    for p in pending:
        value = p.value
        ci = cis[p.job] if with_ci else None
        if ci is not None:
            value = min(max(value, ci.low), ci.high)
        out[p.series][p.slot] = Estimate(
            k=p.k,
            value=value,
            ci=None if ci is None else (ci.low, ci.high),
            estimator=ESTIMATOR_NAME[p.metric],
            runs=p.runs,
            tasks=p.tasks,
            left_out=p.left_out,
            confidence=None if ci is None else confidence,
            interval=None if ci is None else interval,
            method=None if ci is None else ci.method,
        )
    return [[e for e in row if e is not None] for row in out]


def estimate(
    tasks: Tasks,
    k: int,
    metric: Metric = "pass^k",
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    min_coverage: float = 1.0,
    interval: str = "gaffke",
) -> Estimate:
    """pass@k or pass^k over a suite with its CI.

    ``tasks`` is a Histogram or a sequence of per-task ``(n, c)`` pairs. The
    same data and seed always give the same CI. ``interval`` names the CI
    (``reliabilityd.INTERVALS``): the default ``"gaffke"`` covers at its
    nominal level even when failures are rare (docs/statistics.md);
    ``"percentile"`` is the plain cluster bootstrap over tasks, multivon-eval's
    interval to the digit.
    """
    return estimate_metrics(
        tasks,
        k,
        (metric,),
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
        min_coverage=min_coverage,
        interval=interval,
    )[metric]


class EstimateOptions(TypedDict, total=False):
    """``estimate()``'s keyword options, for APIs that pass them through (``Client.estimate``).

    tests/unit/test_estimate.py checks that these are exactly ``estimate()``'s
    keyword-only parameters, so the two cannot drift apart.
    """

    confidence: float
    n_boot: int
    seed: int
    min_coverage: float
    interval: str
