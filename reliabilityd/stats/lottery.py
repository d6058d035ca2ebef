"""Lottery cases: tasks that pass sometimes but not reliably.

Ranked by their own pass@k - pass^k gap, computed exactly, so k = 1 (where
the gap is zero for every task) lists none; ties go to the task with more
trials, then to the task name.

The gap depends only on a task's (n, c) cell, so ranking the histogram's
cells tells which cells hold the top tasks without looking at every task;
the daemon uses that to keep lottery ranking off the O(tasks) path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from itertools import groupby

import msgspec
import numpy as np
import numpy.typing as npt

from reliabilityd.stats.estimators import lottery_gap, pass_at_k_cells, pass_hat_k_cells
from reliabilityd.stats.histogram import Histogram

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class LotteryCase(msgspec.Struct, frozen=True):
    """One row: the task's name, its trials n and its passes c."""

    task: str
    n: int
    c: int


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got k={k}")


def is_candidate(n: int, c: int, k: int) -> bool:
    """Whether a task can have a positive gap at k (it passes sometimes, fails sometimes)."""
    return n >= k and 0 < c < n


def lottery_cases(
    task_counts: Mapping[str, tuple[int, int]], k: int, limit: int | None = None
) -> list[LotteryCase]:
    """Tasks with n >= k and a positive pass@k - pass^k gap, best debugging target first."""
    _check_k(k)
    gaps: dict[tuple[int, int], Fraction] = {}
    rows: list[tuple[Fraction, int, str, int]] = []
    for task, (n, c) in task_counts.items():
        if not is_candidate(n, c, k):
            if n < 1 or not 0 <= c <= n:
                raise ValueError(f"task {task!r}: need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
            continue
        gap = gaps.get((n, c))
        if gap is None:
            gap = gaps[(n, c)] = lottery_gap(n, c, k)
        if gap > 0:
            rows.append((-gap, -n, task, c))
    rows.sort()
    ranked = [LotteryCase(task=task, n=-neg_n, c=c) for _, neg_n, task, c in rows]
    return ranked if limit is None else ranked[:limit]


# Float gaps put the cells in order; exact rationals settle every order the
# floats cannot: runs of cells whose float gaps lie within this of each other
# (float error here is below 1e-15).
FLOAT_SLACK = 1e-9


def ranked_cell_groups(
    hist: Histogram, k: int, limit: int | None = None
) -> list[list[tuple[int, int]]]:
    """The histogram's lottery cells in rank order, grouped by equal (gap, n).

    Within a group the order of tasks is by name across all its cells (the
    gap is symmetric in c and n - c, so two cells can tie). With ``limit``,
    only the groups that hold the first ``limit`` tasks: the cell counts say
    where to stop, so the caller reads no names it will not show.

    The order is exact: cells are sorted by their float gap, and each run of
    two or more cells whose float gaps are within ``FLOAT_SLACK`` of one
    another is ordered by exact rationals, so only the near ties up to
    ``limit`` cost any rational arithmetic (a live suite has hundreds of
    cells, and few of them tie). The one tie that needs no rationals is a
    cell and its mirror, (n, c) and (n, n - c): their gaps are equal.
    """
    return ranked_cell_groups_many([hist], k, limit)[0]


def ranked_cell_groups_many(
    hists: Sequence[Histogram], k: int, limit: int | None = None
) -> list[list[list[tuple[int, int]]]]:
    """``ranked_cell_groups`` of many histograms: every float gap in one vectorised call."""
    _check_k(k)
    if k == 1 or not hists:
        return [[] for _ in hists]  # pass@1 = pass^1 for every task: no gap anywhere
    n_all = np.concatenate([h.n for h in hists])
    c_all = np.concatenate([h.c for h in hists])
    w_all = np.concatenate([h.count for h in hists])
    # is_candidate over every cell at once; for k >= 2 each such cell's gap is
    # positive (some k-subset of its trials holds a pass and a failure)
    keep = (n_all >= k) & (c_all > 0) & (c_all < n_all)
    owner = np.repeat(np.arange(len(hists)), [h.n.size for h in hists])[keep]
    n_all, c_all, w_all = n_all[keep], c_all[keep], w_all[keep]
    approx_all = pass_at_k_cells(n_all, c_all, k) - pass_hat_k_cells(n_all, c_all, k)
    ends = np.searchsorted(owner, np.arange(len(hists) + 1))
    out: list[list[list[tuple[int, int]]]] = []
    for i in range(len(hists)):
        begin, end = int(ends[i]), int(ends[i + 1])
        out.append(
            _ranked(
                n_all[begin:end],
                c_all[begin:end],
                w_all[begin:end],
                approx_all[begin:end],
                k=k,
                limit=limit,
            )
        )
    return out


def _ranked(
    ns: IntArray,
    cs: IntArray,
    counts: IntArray,
    approx: FloatArray,
    *,
    k: int,
    limit: int | None,
) -> list[list[tuple[int, int]]]:
    """One histogram's groups from its candidate cells and their float gaps."""
    if ns.size == 0:
        return []
    order = np.argsort(-approx, kind="stable")
    gaps = approx[order]
    # Run starts: where the float gap falls by more than FLOAT_SLACK from the cell before.
    breaks = np.ones(gaps.size, dtype=bool)
    breaks[1:] = gaps[:-1] - gaps[1:] > FLOAT_SLACK
    starts = np.flatnonzero(breaks)
    run_ends = np.append(starts[1:], order.size)
    if limit is not None:
        # The runs that hold the first `limit` tasks: up to the first whose end covers it.
        through = np.cumsum(counts[order])[run_ends - 1]
        runs = int(np.searchsorted(through, limit)) + 1
        starts, run_ends = starts[:runs], run_ends[:runs]
    cells = order[: int(run_ends[-1])]
    n_list, c_list, w_list = ns[cells].tolist(), cs[cells].tolist(), counts[cells].tolist()
    groups: list[list[tuple[int, int]]] = []
    covered = 0
    for start, end in zip(starts.tolist(), run_ends.tolist(), strict=True):
        if limit is not None and covered >= limit:
            break
        if end == start + 1:  # a cell alone in its run: its float gap orders it
            groups.append([(n_list[start], c_list[start])])
            covered += w_list[start]
            continue
        if (
            end == start + 2
            and n_list[start] == n_list[start + 1]
            and c_list[start] + c_list[start + 1] == n_list[start]
        ):
            # A cell and its mirror: one gap, one group, by c.
            a, b = sorted((c_list[start], c_list[start + 1]))
            groups.append([(n_list[start], a), (n_list[start], b)])
            covered += w_list[start] + w_list[start + 1]
            continue
        run: list[tuple[Fraction | int, int, int, int]] = []
        for j in range(start, end):
            n, c, count = n_list[j], c_list[j], w_list[j]
            # Fewer than k passes and fewer than k failures: no k-subset is all
            # one or the other, so the gap is exactly 1 (and so is its float).
            gap = 1 if c < k and n - c < k else lottery_gap(n, c, k)
            if gap > 0:
                run.append((-gap, -n, c, count))
        run.sort()
        for _, rows in groupby(run, key=lambda row: (row[0], row[1])):
            if limit is not None and covered >= limit:
                break
            group = list(rows)
            groups.append([(-neg_n, c) for _, neg_n, c, _ in group])
            covered += sum(count for *_, count in group)
    return groups
