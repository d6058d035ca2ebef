"""A suite's state as a histogram: how many tasks sit in each (n, c) cell.

Every suite-level number (point estimates, bootstrap CIs, which cells hold
lottery cases) depends only on these counts, so a suite of a million tasks
with 20 trials each is at most 231 cells. Cells are kept sorted by (n, c) and
merged, which makes the histogram canonical: equal suites give equal arrays,
and so equal seeded bootstrap draws.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Self

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
# Below this n, n * (max n + 1) + c fits in an int64: cells sort on one integer key.
_ONE_KEY_WIDTH = 1 << 31


class Histogram:
    """Distinct (n, c) cells with the number of tasks in each."""

    __slots__ = ("c", "count", "n")

    def __init__(self, n: npt.ArrayLike, c: npt.ArrayLike, count: npt.ArrayLike) -> None:
        na = np.asarray(n, dtype=np.int64).reshape(-1)
        ca = np.asarray(c, dtype=np.int64).reshape(-1)
        wa = np.asarray(count, dtype=np.int64).reshape(-1)
        if not na.shape == ca.shape == wa.shape:
            raise ValueError("n, c and count must have the same length")
        if na.size:
            if int(na.min()) < 1:
                raise ValueError(
                    "every task needs n >= 1 counted trials (errors and skips are not trials)"
                )
            if int(ca.min()) < 0 or bool((ca > na).any()):
                raise ValueError("every cell needs 0 <= c <= n")
            least = int(wa.min())
            if least < 0:
                raise ValueError("cell counts cannot be negative")
            if least == 0:
                keep = wa > 0
                na, ca, wa = na[keep], ca[keep], wa[keep]
        # Canonical form: sorted by (n, c), duplicates merged. With 0 <= c <= n < width,
        # n * width + c orders the cells as (n, c) does: one integer sort, not two keys.
        if na.size > 1:
            width = int(na.max()) + 1
            one_key = width <= _ONE_KEY_WIDTH
            order = np.argsort(na * width + ca) if one_key else np.lexsort((ca, na))
            na, ca, wa = na[order], ca[order], wa[order]
            new = (np.diff(na) != 0) | (np.diff(ca) != 0)
            if not bool(new.all()):  # a cell given twice: merged
                starts = np.flatnonzero(np.r_[True, new])
                wa = np.add.reduceat(wa, starts)
                na, ca = na[starts], ca[starts]
        else:  # the caller's arrays are never the histogram's own
            na, ca, wa = na.copy(), ca.copy(), wa.copy()
        self.n: IntArray = na
        self.c: IntArray = ca
        self.count: IntArray = wa

    @classmethod
    def from_pairs(cls, pairs: npt.ArrayLike) -> Self:
        """Build from per-task (n, c) pairs: a sequence or a (T, 2) integer array.

        Vectorised: a million pairs take tens of milliseconds.
        """
        arr = np.asarray(pairs, dtype=np.int64)
        if arr.size == 0:
            return cls([], [], [])
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise ValueError(f"pairs must have shape (tasks, 2), got {arr.shape}")
        n, c = arr[:, 0], arr[:, 1]
        if int(n.min()) < 1 or int(c.min()) < 0 or bool((c > n).any()):
            # Let the constructor word the error.
            return cls(n, c, np.ones_like(n))
        # One integer key per cell, c in [0, n] <= nmax: sorting or counting a
        # flat int64 array is an order of magnitude faster than unique rows.
        width = int(n.max()) + 1
        keys = n * width + c
        if width * width <= 4 * arr.shape[0] + (1 << 20):
            counts = np.bincount(keys)
            cells = np.flatnonzero(counts)
            counts = counts[cells]
        else:
            cells, counts = np.unique(keys, return_counts=True)
        return cls(cells // width, cells % width, counts)

    @classmethod
    def many(
        cls, n: npt.ArrayLike, c: npt.ArrayLike, count: npt.ArrayLike, lengths: Sequence[int]
    ) -> list[Histogram]:
        """Histograms of many series from their cells laid end to end: series i's cells
        are the next ``lengths[i]`` entries of ``n``, ``c`` and ``count``.

        Each is ``Histogram(n_i, c_i, count_i)``, equal array for array; the
        batch is checked and sorted in a few vectorised calls instead of a
        dozen per series (a read of hundreds of series costs a fraction of
        building them one by one). A series whose cells do not pass the
        check, or repeat a cell, goes through the constructor on its own: it
        raises or merges exactly as it would.
        """
        na = np.asarray(n, dtype=np.int64).reshape(-1)
        ca = np.asarray(c, dtype=np.int64).reshape(-1)
        wa = np.asarray(count, dtype=np.int64).reshape(-1)
        sizes = np.asarray(lengths, dtype=np.int64).reshape(-1)
        if not na.shape == ca.shape == wa.shape or int(sizes.sum()) != na.size:
            raise ValueError("n, c and count must have the same length, the sum of lengths")
        if sizes.size and int(sizes.min()) < 0:
            raise ValueError("lengths cannot be negative")
        given = (na, ca, wa)
        ends = np.cumsum(sizes)
        starts = ends - sizes
        series = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
        own = np.zeros(sizes.size, dtype=bool)  # series built by the constructor
        if na.size:
            bad = (na < 1) | (ca < 0) | (ca > na) | (wa < 1)
            width = int(na.max()) + 1
            if width * width * sizes.size < _ONE_KEY_WIDTH * _ONE_KEY_WIDTH:
                order = np.argsort((series * width + na) * width + ca, kind="stable")
            else:
                order = np.lexsort((ca, na, series))
            na, ca, wa, bad = na[order], ca[order], wa[order], bad[order]
            repeated = np.zeros(na.size, dtype=bool)
            repeated[1:] = (np.diff(na) == 0) & (np.diff(ca) == 0) & (np.diff(series) == 0)
            flagged = bad | repeated
            if bool(flagged.any()):
                own[np.unique(series[flagged])] = True
        out: list[Histogram] = []
        for i, (begin, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
            if own[i]:
                # As given: the constructor words the error, or merges the repeats.
                out.append(cls(given[0][begin:end], given[1][begin:end], given[2][begin:end]))
                continue
            one = cls.__new__(cls)
            one.n, one.c, one.count = na[begin:end], ca[begin:end], wa[begin:end]
            out.append(one)
        return out

    @classmethod
    def from_cells(
        cls, cells: Mapping[tuple[int, int], int] | Iterable[tuple[int, int, int]]
    ) -> Self:
        """Build from {(n, c): count} or (n, c, count) triples."""
        triples = (
            [(n, c, w) for (n, c), w in cells.items()]
            if isinstance(cells, Mapping)
            else list(cells)
        )
        if not triples:
            return cls([], [], [])
        n, c, w = zip(*triples, strict=True)
        return cls(n, c, w)

    @property
    def tasks(self) -> int:
        """Number of tasks in the pool."""
        return int(self.count.sum())

    def __len__(self) -> int:
        return int(self.n.size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        return (
            np.array_equal(self.n, other.n)
            and np.array_equal(self.c, other.c)
            and np.array_equal(self.count, other.count)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable arrays: not hashable

    def __add__(self, other: Histogram) -> Histogram:
        """Histograms add: the pool of two disjoint task sets."""
        return Histogram(
            np.r_[self.n, other.n], np.r_[self.c, other.c], np.r_[self.count, other.count]
        )

    def at_least(self, k: int) -> Histogram:
        """The cells whose tasks have at least k trials."""
        keep = self.n >= k
        if bool(keep.all()):
            return self
        # A subset of canonical cells is canonical: skip the sort and merge.
        out = Histogram.__new__(Histogram)
        out.n, out.c, out.count = self.n[keep], self.c[keep], self.count[keep]
        return out

    def cells(self) -> list[tuple[int, int, int]]:
        """(n, c, count) triples in canonical order."""
        return list(zip(self.n.tolist(), self.c.tolist(), self.count.tolist(), strict=True))

    def __repr__(self) -> str:
        return f"Histogram(tasks={self.tasks}, cells={len(self)})"
