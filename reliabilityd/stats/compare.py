"""Paired comparison of two sides: candidate - baseline in pass^k and pass@k.

A side is where a set of per-task (n, c) counts comes from (``Side``: a
suite, or with ``labels`` the slices of a suite that carry those label
values, their per-task counts summed). The comparison uses only the
tasks both sides have, and pairs them: every task's exact per-task value is
computed on each side (``metric_cells``, never the plug-in), and the
difference of the two suite means is the mean over shared tasks of the
per-task differences ``d = candidate - baseline``.

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

UNKNOWN (``value is None`` with a reason) when fewer than ``min_shared``
tasks are shared or when k exceeds the trials of a shared task on either
side: nothing is extrapolated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, TypedDict

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
from reliabilityd.stats.slices import parse_filter
from reliabilityd.stats.student import student_interval

__all__ = [
    "DEFAULT_MIN_SHARED",
    "PAIRED_INTERVALS",
    "PER_TASK_LIMIT",
    "STUDENT_MIN_MOVED",
    "CompareOptions",
    "Comparison",
    "Difference",
    "MovedTask",
    "PairedInterval",
    "Side",
    "compare",
    "paired_difference",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
TaskCounts = Mapping[str, tuple[int, int]]

DEFAULT_MIN_SHARED = 10
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


class Side(msgspec.Struct, frozen=True, omit_defaults=True):
    """Where one side's per-task counts come from: a suite, or some of its slices.

    With ``labels`` (``{"agent_version": "1.5"}``), the side is the sum, task
    by task, of the counts of every slice of the suite whose label values
    include all of those (``stats.slices.matches``); an empty value selects
    the events without the label. Without, it is the suite as a whole. With
    ``run`` (an event's ``run``: an eval or experiment id), the side is that
    run's own per-task counts (docs/drill-down.md#runs); a run is counted for
    the whole suite, so it takes no ``labels``.
    """

    suite: str
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    run: str | None = None

    def __post_init__(self) -> None:
        if self.run is not None and self.labels:
            raise ValueError(
                "a run is counted for the whole suite, not per slice: "
                "give a run or a label filter, not both"
            )

    @property
    def label(self) -> str:
        """``suite``, ``suite[agent_version=1.5]`` or ``suite (run <run>)``."""
        if self.run is not None:
            return f"{self.suite} (run {self.run})"
        if not self.labels:
            return self.suite
        pairs = ",".join(f"{k}={v if v else '(none)'}" for k, v in sorted(self.labels.items()))
        return f"{self.suite}[{pairs}]"

    @classmethod
    def parse(cls, suite: str, labels: str | None = None, run: str | None = None) -> Side:
        """A side from a suite, a filter text ``key=value[,key=value]`` (or None), a run."""
        return cls(suite, parse_filter(labels) if labels else {}, run)


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


class MovedTask(msgspec.Struct, frozen=True):
    """A shared task whose value changed: its counts and values on each side."""

    task: str
    baseline_n: int
    baseline_c: int
    candidate_n: int
    candidate_c: int
    baseline: float
    candidate: float
    change: float


class Comparison(msgspec.Struct, frozen=True, omit_defaults=True):
    """The paired comparison of two sides at one k.

    ``differences`` holds one ``Difference`` per metric; ``metric`` is the one
    the ``moved`` tasks are ranked by (largest change first, either way).
    """

    baseline: str
    candidate: str
    k: int
    metric: Metric
    shared: int
    only_baseline: int
    only_candidate: int
    min_shared: int
    differences: dict[Metric, Difference]
    moved: list[MovedTask]
    unknown_reason: str | None = None

    @property
    def unknown(self) -> bool:
        return self.unknown_reason is not None

    def difference(self, metric: Metric | None = None) -> Difference:
        return self.differences[metric or self.metric]

    def worse(self, top: int | None = None) -> list[MovedTask]:
        """The moved tasks whose value fell, most first."""
        rows = sorted((m for m in self.moved if m.change < 0), key=lambda m: (m.change, m.task))
        return rows if top is None else rows[:top]


class CompareOptions(TypedDict, total=False):
    """``compare()``'s keyword options, for APIs that pass them through (``Client.compare``)."""

    confidence: float
    n_boot: int
    seed: int
    interval: str
    min_shared: int
    top: int


def _check_args(
    k: int, confidence: float, n_boot: int, interval: str, metrics: Sequence[str]
) -> None:
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
    _check_args(k, confidence, n_boot, interval, metrics)
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


def _counts(side: TaskCounts, name: str) -> dict[str, tuple[int, int]]:
    """The side's tasks with counted trials (n >= 1), checked."""
    out: dict[str, tuple[int, int]] = {}
    for task, (n, c) in side.items():
        if n < 0 or not 0 <= c <= max(n, 0):
            raise ValueError(f"{name} task {task!r}: need 0 <= c <= n, got n={n}, c={c}")
        if n > 0:
            out[task] = (int(n), int(c))
    return out


def _unknown(
    baseline: str,
    candidate: str,
    *,
    k: int,
    metric: Metric,
    metrics: Sequence[Metric],
    shared: int,
    only: tuple[int, int],
    min_shared: int,
    reason: str,
) -> Comparison:
    return Comparison(
        baseline=baseline,
        candidate=candidate,
        k=k,
        metric=metric,
        shared=shared,
        only_baseline=only[0],
        only_candidate=only[1],
        min_shared=min_shared,
        differences={
            m: Difference(
                metric=m,
                k=k,
                value=None,
                ci=None,
                baseline=None,
                candidate=None,
                tasks=shared,
                unknown_reason=reason,
            )
            for m in metrics
        },
        moved=[],
        unknown_reason=reason,
    )


def compare(
    baseline: TaskCounts,
    candidate: TaskCounts,
    k: int,
    metric: Metric = "pass^k",
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    interval: str = "gaffke",
    min_shared: int = DEFAULT_MIN_SHARED,
    top: int = 5,
    names: tuple[str, str] = ("baseline", "candidate"),
) -> Comparison:
    """candidate - baseline over the tasks both have, in both metrics, at k.

    ``baseline`` and ``candidate`` map task names to ``(n, c)``; tasks with
    no counted trials count as absent. ``metric`` ranks the ``top`` tasks
    that moved most; ``names`` label the sides in the result and its reasons.
    """
    metrics: tuple[Metric, ...] = (metric, *(m for m in METRICS if m != metric))
    _check_args(k, confidence, n_boot, interval, metrics)
    if min_shared < 1:
        raise ValueError(f"min_shared must be at least 1, got {min_shared}")
    base = _counts(baseline, names[0])
    cand = _counts(candidate, names[1])
    shared = sorted(base.keys() & cand.keys())
    only = (len(base) - len(shared), len(cand) - len(shared))
    label = metric.replace("k", str(k))
    if len(shared) < min_shared:
        reason = (
            f"UNKNOWN: {names[0]} and {names[1]} share {len(shared)} tasks with counted "
            f"trials, under the {min_shared} a paired comparison needs ({only[0]} only in "
            f"{names[0]}, {only[1]} only in {names[1]})."
        )
        return _unknown(
            *names,
            k=k,
            metric=metric,
            metrics=metrics,
            shared=len(shared),
            only=only,
            min_shared=min_shared,
            reason=reason,
        )
    nb = np.array([base[t][0] for t in shared], dtype=np.int64)
    cb = np.array([base[t][1] for t in shared], dtype=np.int64)
    nc = np.array([cand[t][0] for t in shared], dtype=np.int64)
    cc = np.array([cand[t][1] for t in shared], dtype=np.int64)
    short = (nb < k) | (nc < k)
    if bool(short.any()):
        side, n, task = min(
            [(names[0], int(nb[i]), shared[i]) for i in np.flatnonzero(nb < k)]
            + [(names[1], int(nc[i]), shared[i]) for i in np.flatnonzero(nc < k)],
            key=lambda row: (row[1], row[2]),
        )
        reason = (
            f"UNKNOWN: {label} needs at least {k} trials per shared task on both sides; "
            f"{int(short.sum())} of {len(shared)} shared tasks have fewer (the shortest, "
            f"{task!r} in {side}, has {n}). Record more trials or lower k. "
            "reliabilityd does not extrapolate."
        )
        return _unknown(
            *names,
            k=k,
            metric=metric,
            metrics=metrics,
            shared=len(shared),
            only=only,
            min_shared=min_shared,
            reason=reason,
        )
    differences = paired_difference(
        (nb, cb),
        (nc, cc),
        k,
        metrics,
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
        interval=interval,
    )
    vb = metric_cells(metric, nb, cb, k)
    vc = metric_cells(metric, nc, cc, k)
    change = vc - vb
    order = sorted(
        (i for i in range(len(shared)) if change[i] != 0.0),
        key=lambda i: (-abs(float(change[i])), shared[i]),
    )[:top]
    moved = [
        MovedTask(
            task=shared[i],
            baseline_n=int(nb[i]),
            baseline_c=int(cb[i]),
            candidate_n=int(nc[i]),
            candidate_c=int(cc[i]),
            baseline=float(vb[i]),
            candidate=float(vc[i]),
            change=float(change[i]),
        )
        for i in order
    ]
    return Comparison(
        baseline=names[0],
        candidate=names[1],
        k=k,
        metric=metric,
        shared=len(shared),
        only_baseline=only[0],
        only_candidate=only[1],
        min_shared=min_shared,
        differences=differences,
        moved=moved,
    )
