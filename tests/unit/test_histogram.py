"""The histogram is canonical, vectorised to build, and adds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from reliabilityd import Histogram
from reliabilityd.store._reads import _histogram, _histograms


def test_canonical_form_merges_and_sorts() -> None:
    h = Histogram.from_pairs([(5, 3), (2, 1), (5, 3), (5, 0)])
    assert h.cells() == [(2, 1, 1), (5, 0, 1), (5, 3, 2)]
    assert h == Histogram.from_cells({(5, 3): 2, (2, 1): 1, (5, 0): 1})
    assert h == Histogram.from_cells([(5, 3, 1), (5, 3, 1), (2, 1, 1), (5, 0, 1), (9, 9, 0)])
    assert h.tasks == 4


_N = st.integers(1, 40) | st.integers(1, 1 << 62)  # small, and past one-key sorting


@st.composite
def _cells(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    out = []
    for n in draw(st.lists(_N, max_size=30)):
        c = draw(st.integers(0, n))
        out.append((n, c, draw(st.integers(0, 3))))
    # Some cells again, so that merging is exercised.
    return out + draw(st.lists(st.sampled_from(out), max_size=5)) if out else out


@given(_cells())
@example([(3, 1, 1), (3, 1, 2), (2, 2, 0), (1, 0, 1)])
@example([(1 << 40, 5, 1), (3, 1, 1), (1 << 40, 5, 2)])
@example([(7, 7, 1)])
def test_any_cells_give_the_sorted_merged_histogram(cells: list[tuple[int, int, int]]) -> None:
    """Whatever the order, repeats and zero counts: cells sorted by (n, c), each once,
    counts summed, the empty ones dropped; the arrays are the histogram's own."""
    want: dict[tuple[int, int], int] = {}
    for cell_n, cell_c, weight in cells:
        want[(cell_n, cell_c)] = want.get((cell_n, cell_c), 0) + weight
    n, c, w = (np.array([x[i] for x in cells], dtype=np.int64) for i in range(3))
    h = Histogram(n, c, w)
    assert h.cells() == sorted((a, b, k) for (a, b), k in want.items() if k > 0)
    n[:] = 1  # changing the inputs afterwards changes nothing
    assert h.cells() == sorted((a, b, k) for (a, b), k in want.items() if k > 0)


@given(st.lists(_cells(), max_size=6))
@example([[(3, 1, 1), (3, 1, 2)], [], [(2, 2, 0), (1, 0, 1)], [(1 << 40, 5, 1), (3, 1, 1)]])
def test_a_batch_of_series_is_each_series_histogram(
    batch: list[list[tuple[int, int, int]]],
) -> None:
    """``Histogram.many`` of series laid end to end: each one the constructor's, array
    for array (repeats merged, zero counts dropped), whatever its neighbours hold."""
    flat = [cell for cells in batch for cell in cells]
    n, c, w = (np.array([x[i] for x in flat], dtype=np.int64) for i in range(3))
    got = Histogram.many(n, c, w, [len(cells) for cells in batch])
    assert len(got) == len(batch)
    for one, cells in zip(got, batch, strict=True):
        want = Histogram(*(np.array([x[i] for x in cells], dtype=np.int64) for i in range(3)))
        assert one == want
        for mine, theirs in ((one.n, want.n), (one.c, want.c), (one.count, want.count)):
            assert mine.dtype == theirs.dtype == np.int64


def test_a_bad_series_in_a_batch_is_refused_as_alone() -> None:
    with pytest.raises(ValueError, match=r"0 <= c <= n"):
        Histogram.many([5, 5, 3], [1, 9, 1], [1, 1, 1], [1, 2])
    with pytest.raises(ValueError, match=r"same length"):
        Histogram.many([5], [1], [1], [2])


def test_histograms_add() -> None:
    a = Histogram.from_pairs([(5, 3), (2, 1)])
    b = Histogram.from_pairs([(5, 3), (7, 7)])
    assert a + b == Histogram.from_pairs([(5, 3), (2, 1), (5, 3), (7, 7)])


def test_at_least_keeps_cells_with_enough_trials() -> None:
    h = Histogram.from_pairs([(5, 3), (2, 1), (3, 3)])
    assert h.at_least(3).cells() == [(3, 3, 1), (5, 3, 1)]


def test_from_numpy_pairs(rng: np.random.Generator) -> None:
    n = rng.integers(1, 30, size=10_000)
    c = rng.integers(0, n + 1)
    h = Histogram.from_pairs(np.stack([n, c], axis=1))
    assert h.tasks == 10_000
    expected: dict[tuple[int, int], int] = {}
    for ni, ci in zip(n.tolist(), c.tolist(), strict=True):
        expected[(ni, ci)] = expected.get((ni, ci), 0) + 1
    assert h == Histogram.from_cells(expected)


def test_empty() -> None:
    assert Histogram.from_pairs([]).tasks == 0
    assert len(Histogram.from_cells({})) == 0


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        ([(0, 0, 1)], "n >= 1"),
        ([(3, 4, 1)], "0 <= c <= n"),
        ([(3, 1, -1)], "negative"),
    ],
)
def test_invalid_cells(cells: list[tuple[int, int, int]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Histogram.from_cells(cells)


def test_from_pairs_with_lifetime_counters() -> None:
    """Large n takes the sorting path instead of counting into a dense table."""
    pairs = [(50_000, 49_000), (3, 1), (50_000, 49_000), (70_000, 0)]
    h = Histogram.from_pairs(pairs)
    assert h.cells() == [(3, 1, 1), (50_000, 49_000, 2), (70_000, 0, 1)]


def test_the_read_scripts_histogram_string_parses_or_is_refused() -> None:
    """The read script's `n:c count ...` string: cells back in canonical order, and a
    reply that is not such pairs (another writer's garbage) a ValueError, never a guess."""
    assert list(_histogram(b"7:1 4 5:3 2").cells()) == [(5, 3, 2), (7, 1, 4)]
    assert list(_histogram("5:3 2").cells()) == [(5, 3, 2)]
    assert list(_histogram(b"").cells()) == []
    for bad in (b"5:3 x", b"5:3", b"5:3 2 7", b"5:3 99999999999999999999", b"5:3:1 2"):
        with pytest.raises(ValueError, match=r"histogram reply|read to its end"):
            _histogram(bad)
    with pytest.raises(ValueError, match=r"0 <= c <= n"):
        _histogram(b"5:9 1")


def test_a_pipelines_histogram_strings_parse_together_as_each_alone() -> None:
    replies: list[bytes | str] = [b"7:1 4 5:3 2", b"", "5:3 2", b"1:0 1 1:1 3"]
    assert _histograms(replies) == [_histogram(r) for r in replies]
    with pytest.raises(ValueError, match=r"histogram reply|read to its end"):
        _histograms([b"7:1 4", b"5:3 x", b"1:1 1"])
