"""Lottery cases: exact gap ranking, ties, k = 1, and the cell ranking the daemon uses."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliabilityd import Histogram, LotteryCase, lottery_cases
from reliabilityd.stats.estimators import lottery_gap
from reliabilityd.stats.lottery import ranked_cell_groups, ranked_cell_groups_many

EXAMPLE_PASSES = [4, 2, 5, 3, 1, 2, 3, 5, 2, 1, 4, 3, 3, 2, 2, 3, 4, 2, 3, 2]


def test_seed_suite_lists_every_flaky_task() -> None:
    counts = {f"deploy service {i}": (5, c) for i, c in enumerate(EXAMPLE_PASSES)}
    rows = lottery_cases(counts, 5)
    # At k = n = 5 every task with 0 < c < 5 has gap 1: all 18 tie, by name.
    assert len(rows) == 18
    assert rows[0] == LotteryCase(task="deploy service 0", n=5, c=4)
    assert [r.task for r in rows] == sorted(r.task for r in rows)
    assert all(r.task not in {"deploy service 2", "deploy service 7"} for r in rows)


def test_k1_lists_none() -> None:
    counts = {f"t{i}": (7, c) for i, c in enumerate(range(8))}
    assert lottery_cases(counts, 1) == []


def test_rank_by_gap_then_trials_then_name() -> None:
    counts = {
        "b": (10, 5),  # gap at k=2: 1 - 10/45 - 10/45 = 25/45
        "a": (10, 5),
        "wide": (20, 10),  # gap 1 - 2*45/190 = 100/190 (smaller)
        "half": (4, 2),  # gap 1 - 2*1/6 = 4/6 (largest)
        "mirror": (10, 5),
        "never": (10, 0),
        "always": (10, 10),
        "short": (1, 1),
    }
    rows = lottery_cases(counts, 2)
    assert [r.task for r in rows] == ["half", "a", "b", "mirror", "wide"]
    assert lottery_cases(counts, 2, limit=2) == rows[:2]


def test_ties_prefer_more_trials() -> None:
    # At k = 2: (3, 1) and (3, 2) have gap 2/3; (4, 1) has 1 - 3/6 = 1/2; pick
    # two cells with equal gap and different n: (6, 3) -> 1 - 2*3/15 = 3/5 and
    # (5, 2)/(5, 3) -> 1 - 3/10 - 1/10 = 3/5.
    assert lottery_gap(6, 3, 2) == lottery_gap(5, 2, 2) == lottery_gap(5, 3, 2)
    rows = lottery_cases({"a": (5, 2), "z": (6, 3), "m": (5, 3)}, 2)
    assert [r.task for r in rows] == ["z", "a", "m"]


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=4),
        # Small n for exact ties, large n for gaps that differ past the float slack.
        st.one_of(st.integers(1, 9), st.integers(10, 200)).flatmap(
            lambda n: st.tuples(st.just(n), st.integers(0, n))
        ),
        max_size=40,
    ),
    st.integers(1, 8),
)
def test_cell_groups_reproduce_the_task_ranking(counts: dict[str, tuple[int, int]], k: int) -> None:
    """Ranking cells, then names within each tie group, equals ranking tasks."""
    hist = Histogram.from_pairs(list(counts.values()))
    by_cell: dict[tuple[int, int], list[str]] = {}
    for task, cell in counts.items():
        by_cell.setdefault(cell, []).append(task)
    via_cells: list[str] = []
    for group in ranked_cell_groups(hist, k):
        via_cells.extend(sorted(t for cell in group for t in by_cell[cell]))
    assert via_cells == [r.task for r in lottery_cases(counts, k)]


def test_invalid() -> None:
    with pytest.raises(ValueError, match="k must be at least 1"):
        lottery_cases({"a": (3, 1)}, 0)
    with pytest.raises(ValueError, match="task 'a'"):
        lottery_cases({"a": (3, 5)}, 1)


@given(
    st.lists(
        st.integers(2, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))),
        max_size=60,
    ),
    st.integers(2, 4),
    st.integers(1, 12),
)
def test_limited_groups_hold_the_first_limit_tasks(
    pairs: list[tuple[int, int]], k: int, limit: int
) -> None:
    hist = Histogram.from_pairs(pairs)
    everything = ranked_cell_groups(hist, k)
    some = ranked_cell_groups(hist, k, limit)
    assert some == everything[: len(some)]
    counts = dict(((n, c), w) for n, c, w in hist.cells())
    held = sum(counts[cell] for group in some for cell in group)
    total = sum(counts[cell] for group in everything for cell in group)
    assert held >= min(limit, total)
    # Without its last group it would not be enough: nothing extra is read.
    if some:
        assert held - sum(counts[cell] for cell in some[-1]) < limit


@given(
    st.lists(
        st.lists(
            st.one_of(st.integers(1, 9), st.integers(10, 120)).flatmap(
                lambda n: st.tuples(st.just(n), st.integers(0, n))
            ),
            max_size=30,
        ),
        max_size=6,
    ),
    st.integers(1, 6),
    st.one_of(st.none(), st.integers(0, 12)),
)
def test_many_histograms_rank_as_each_alone(
    suites: list[list[tuple[int, int]]], k: int, limit: int | None
) -> None:
    """The tick ranks a batch of series at once: each one's groups are its own."""
    hists = [Histogram.from_pairs(pairs) if pairs else Histogram([], [], []) for pairs in suites]
    together = ranked_cell_groups_many([h.at_least(k) for h in hists], k, limit)
    assert together == [ranked_cell_groups(h.at_least(k), k, limit) for h in hists]
