"""Lottery cases: tasks that pass sometimes but not reliably.

Ranked by their own pass@k - pass^k gap, computed exactly, so k = 1 (where
the gap is zero for every task) lists none; ties go to the task with more
trials, then to the task name.

The gap depends only on a task's (n, c) cell, so ranking the histogram's
cells tells which cells hold the top tasks without looking at every task;
the daemon uses that to keep lottery ranking off the O(tasks) path.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from itertools import groupby

import msgspec
import numpy as np

from reliabilityd.stats.estimators import lottery_gap, pass_at_k_cells, pass_hat_k_cells
from reliabilityd.stats.histogram import Histogram


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
    cells, and few of them tie).
    """
    _check_k(k)
    if k == 1:
        return []  # pass@1 = pass^1 for every task: no gap anywhere
    # is_candidate over every cell at once; for k >= 2 each such cell's gap is
    # positive (some k-subset of its trials holds a pass and a failure)
    keep = (hist.n >= k) & (hist.c > 0) & (hist.c < hist.n)
    ns, cs, counts = hist.n[keep], hist.c[keep], hist.count[keep]
    if ns.size == 0:
        return []
    approx = pass_at_k_cells(ns, cs, k) - pass_hat_k_cells(ns, cs, k)
    order = np.argsort(-approx, kind="stable")
    groups: list[list[tuple[int, int]]] = []
    covered = 0
    start = 0
    while start < len(order) and (limit is None or covered < limit):
        end = start + 1
        while end < len(order) and approx[order[end - 1]] - approx[order[end]] <= FLOAT_SLACK:
            end += 1
        if end == start + 1:  # a cell alone in its run: its float gap orders it
            i = order[start]
            groups.append([(int(ns[i]), int(cs[i]))])
            covered += int(counts[i])
            start = end
            continue
        run = []
        for i in order[start:end]:
            n, c, count = int(ns[i]), int(cs[i]), int(counts[i])
            gap = lottery_gap(n, c, k)
            if gap > 0:
                run.append((-gap, -n, c, count))
        run.sort()
        for _, rows in groupby(run, key=lambda row: (row[0], row[1])):
            if limit is not None and covered >= limit:
                break
            group = list(rows)
            groups.append([(-neg_n, c) for _, neg_n, c, _ in group])
            covered += sum(count for *_, count in group)
        start = end
    return groups
