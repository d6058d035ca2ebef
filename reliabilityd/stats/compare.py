"""Paired comparison of two sides: candidate - baseline in pass^k and pass@k.

A side is where a set of per-task (n, c) counts comes from (``Side``: a
suite, or with ``labels`` the slices of a suite that carry those label
values, their per-task counts summed). The comparison uses only the
tasks both sides have, and pairs them: every task's exact per-task value is
computed on each side (``metric_cells``, never the plug-in), and the
difference of the two suite means is the mean over shared tasks of the
per-task differences ``d = candidate - baseline``.

The difference and its interval are ``stats.paired``'s (``gaffke``,
``percentile`` or ``student``).

UNKNOWN (``value is None`` with a reason) when fewer than ``min_shared``
tasks are shared or when k exceeds the trials of a shared task on either
side: nothing is extrapolated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

import msgspec
import numpy as np
import numpy.typing as npt

from reliabilityd.stats.estimators import METRICS, Metric, metric_cells
from reliabilityd.stats.paired import Difference, check_paired_args, paired_difference
from reliabilityd.stats.slices import parse_filter

__all__ = [
    "DEFAULT_MIN_SHARED",
    "CompareOptions",
    "Comparison",
    "MovedTask",
    "Side",
    "compare",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
TaskCounts = Mapping[str, tuple[int, int]]

DEFAULT_MIN_SHARED = 10


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
    check_paired_args(k, confidence, n_boot, interval, metrics)
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
