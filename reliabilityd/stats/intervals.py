"""Confidence intervals for a suite's mean per-task value, by name and by method.

An interval (what is estimated: ``INTERVALS``) and a method (how it was
computed: ``METHODS``) are separate. Every interval here is a function of the
histogram of per-task values alone.

* ``percentile`` (multivon-eval's): the percentile cluster
  bootstrap over tasks, with the Wilson interval when every task has the
  same value.
* ``gaffke`` (the default): the Bayesian bootstrap with one extra pseudo-task at the worst
  value the mean could take, 0 for the lower bound and 1 for the upper
  (Gaffke 2005; Learned-Miller and Thomas 2019, "A new confidence interval
  for the mean of a bounded random variable"). Per-task values lie in [0, 1]
  and are unbiased for the suite's superpopulation value, so a bound that
  holds for any distribution on [0, 1] covers it even when most tasks sit at
  the ceiling and the rare failures that pull the truth down are missing
  from the sample: the pseudo-task stands in for them, with a weight that
  shrinks like 1 / tasks. docs/studies.md (Coverage) has its measured
  coverage and width beside the percentile interval.

Methods:

* ``exact``: ``gaffke`` where every task holds 0 or 1, or every task the
  same value. Each bound's resampled mean is then a Beta variable over two
  atoms, so the bound B -> infinity would give is a Beta quantile, computed
  to 1e-12 of itself (``stats.exact``); with s of T tasks at 1 it is the
  Clopper-Pearson interval.
* ``exact-draw``: B resamples drawn at random. Used when the draw is small,
  ``n_boot x atoms <= EXACT_DRAW_LIMIT``; the atoms are the distinct
  per-task values of one metric (cells with equal values merged).
  ``gaffke``'s drawn bounds are order statistics chosen for their own
  error (``draw_rank``): each lies outside the bound B -> infinity would
  give with probability at least ``1 - DRAW_INSIDE``, so Monte Carlo noise
  does not take coverage below nominal. With B too small for any rank to
  promise that, ``gaffke`` takes the saddlepoint.
* ``saddlepoint``: otherwise, the same resampling distribution's quantile
  from a saddlepoint approximation, O(atoms) and independent of B
  (``stats.saddlepoint``). For ``gaffke`` it is taken at
  ``saddlepoint_level``: the level whose quantile is the median of the
  corrected draw's bound, so a suite that crosses ``EXACT_DRAW_LIMIT``
  keeps its bound up to the draw's noise.
* ``wilson``: the percentile interval's fallback for identical values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Literal, NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt

from reliabilityd.stats.bootstrap import wilson_interval
from reliabilityd.stats.exact import beta_quantiles, binomial_upper_tail
from reliabilityd.stats.saddlepoint import (
    bootstrap_mean_quantiles,
    ragged_dirichlet_mean_quantiles,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

IntervalName: TypeAlias = Literal["percentile", "gaffke"]
INTERVALS: tuple[IntervalName, ...] = ("percentile", "gaffke")
METHODS = ("exact", "exact-draw", "saddlepoint", "wilson")

# The exact draw is used while n_boot x atoms stays at or under this: at the
# default B = 2000 that is 100 atoms, a few milliseconds of binomial draws.
# Past it the saddlepoint costs about a millisecond whatever the size.
EXACT_DRAW_LIMIT = 200_000

# The most a drawn gaffke bound may lie inside the bound of infinitely many
# draws, as a probability: as often as the interval itself may miss on one side.
DRAW_INSIDE = 0.025


class Interval(NamedTuple):
    low: float
    high: float
    method: str


def check_interval(name: str) -> None:
    if name not in INTERVALS:
        raise ValueError(f"interval must be one of {', '.join(INTERVALS)}; got {name!r}")


def atoms(values: FloatArray, count: IntArray) -> tuple[FloatArray, IntArray]:
    """Distinct per-task values with the number of tasks holding each, sorted."""
    uniq, inverse = np.unique(values, return_inverse=True)
    merged = np.bincount(inverse.reshape(-1), weights=count, minlength=uniq.size)
    return uniq, merged.astype(np.int64)


def exact_draw_is_small(n_boot: int, n_atoms: int) -> bool:
    """Whether B resamples over this many atoms are drawn rather than approximated."""
    return n_boot * n_atoms <= EXACT_DRAW_LIMIT


def _tails(confidence: float) -> tuple[float, float]:
    alpha = 1.0 - confidence
    return alpha / 2.0, 1.0 - alpha / 2.0


def percentile_from_replicates(replicates: FloatArray, confidence: float) -> tuple[float, float]:
    """Percentile interval, linear interpolation between order statistics."""
    lo, hi = np.quantile(replicates, _tails(confidence), method="linear")
    return float(lo), float(hi)


def percentile(
    values: FloatArray,
    count: IntArray,
    confidence: float,
    n_boot: int,
    rng: np.random.Generator,
) -> Interval:
    """The percentile bootstrap over the distinct values (cells already merged)."""
    m = int(count.sum())
    if values.size == 1 or bool((values == values[0]).all()):
        lo, hi = wilson_interval(min(1.0, max(0.0, float(values @ count) / m)), m, confidence)
        return Interval(lo, hi, "wilson")
    uniq, merged = atoms(values, count)
    if exact_draw_is_small(n_boot, uniq.size):
        reps = rng.multinomial(m, merged / m, size=n_boot) @ uniq / m
        lo, hi = percentile_from_replicates(reps, confidence)
        return Interval(lo, hi, "exact-draw")
    q = bootstrap_mean_quantiles(uniq, merged, np.array(_tails(confidence)))
    return Interval(float(q[0]), float(q[1]), "saddlepoint")


@lru_cache(maxsize=256)
def draw_rank(n_boot: int, tail: float) -> int:
    """The rank (1-based) among B sorted draws that a drawn ``tail`` quantile bound takes.

    The r-th smallest of B independent draws lies at or below the true
    ``tail`` quantile exactly when at least r draws do, and their number is
    Binomial(B, tail). The rank is the largest r with
    ``P(Binomial(B, tail) >= r) >= 1 - DRAW_INSIDE``: the 37th of 2,000 draws
    for a 2.5% bound, where the plain quantile would sit near the 51st. 0
    when even the smallest draw cannot promise that (B below about 150 for
    a 2.5% bound): gaffke then takes the saddlepoint instead. An upper bound
    at 1 - tail takes the (B + 1 - r)-th smallest, the same rule mirrored.
    """
    lo, hi = 0, n_boot  # P(Bin >= 0) = 1 holds; find the last r that holds
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if float(binomial_upper_tail(n_boot, mid, tail)[0]) >= 1.0 - DRAW_INSIDE:
            lo = mid
        else:
            hi = mid - 1
    return lo


@lru_cache(maxsize=256)
def saddlepoint_level(n_boot: int, tail: float) -> float:
    """The level at which the saddlepoint takes a gaffke ``tail`` bound.

    The r-th smallest of B draws is the distribution's quantile at the r-th
    smallest of B uniforms, a Beta(r, B + 1 - r) level: its median
    (0.0183 for a 2.5% bound at B = 2000) puts the saddlepoint where the
    corrected draw's bound falls half the time. When no draw can promise the
    bound (``draw_rank`` 0), the nominal ``tail``.
    """
    r = draw_rank(n_boot, tail)
    if r == 0:
        return tail
    return float(beta_quantiles(r, n_boot + 1 - r, 0.5)[0])


def drawn_bounds(lows: FloatArray, highs: FloatArray, tail: float) -> tuple[float, float]:
    """gaffke's lower and upper bound from B draws of each bound's resampled mean.

    The order statistics of ``draw_rank``; with rank 0 the support's ends,
    -inf and +inf (the caller clamps to its range).
    """
    b = lows.size
    r = draw_rank(b, tail)
    if r == 0:
        return -np.inf, np.inf
    lo = float(np.partition(lows, r - 1)[r - 1])
    hi = float(np.partition(highs, b - r)[b - r])
    return lo, hi


class _TwoAtoms(NamedTuple):
    """A gaffke interval whose bounds are Beta quantiles, waiting to be solved in a batch.

    The lower bound's mean is ``low + (high - low) W``, W ~ Beta(a, b), at
    level ``tail``; the upper bound is the mirror image, ``high - (high - low)
    W'`` with W' ~ Beta(b', a') at the same level.
    """

    lo_atoms: tuple[float, float]
    lo_beta: tuple[int, int]
    hi_atoms: tuple[float, float]
    hi_beta: tuple[int, int]
    tail: float


def _two_atoms(
    uniq: FloatArray, merged: IntArray, tail: float, ends: tuple[float, float] = (0.0, 1.0)
) -> _TwoAtoms | None:
    """The exact form of gaffke's bounds, when each bound's resampled mean has two atoms.

    The lower bound adds a task at ``ends[0]``, the upper one at ``ends[1]``:
    both leave two distinct values when every task is at one end or the
    other, or every task at one value.
    """
    if uniq.size > 2:
        return None
    values = uniq.tolist()
    counts = [int(c) for c in merged.tolist()]
    low_end, high_end = ends
    if len(values) == 1:
        (v,), (t,) = values, counts
        # Lower: t tasks at v and the pseudo-task at the low end; upper: at v and the high end.
        return _TwoAtoms((low_end, v), (t, 1), (v, high_end), (1, t), tail)
    if values == [low_end, high_end]:
        fail, ok = counts
        return _TwoAtoms(ends, (ok, fail + 1), ends, (ok + 1, fail), tail)
    return None


def exact_gaffke(
    uniq: FloatArray, merged: IntArray, confidence: float, ends: tuple[float, float] = (0.0, 1.0)
) -> Interval | None:
    """gaffke's exact interval over distinct values ``uniq`` held by ``merged`` tasks, if it
    has one (every task at an end of ``ends``, or every task at one value), else None."""
    exact = _two_atoms(uniq, merged, _tails(confidence)[0], ends)
    if exact is None:
        return None
    (interval,) = _solve_two_atoms([exact], ends)
    return interval


def _batch_atoms(
    jobs: Sequence[tuple[FloatArray, IntArray]],
) -> tuple[FloatArray, IntArray, IntArray, IntArray]:
    """``atoms`` of every job at once: (distinct values, tasks at each) end to end, job by
    job, with each job's first atom and its number of atoms.

    One sort of every job's cells by (job, value): the same atoms, in the same
    order, as ``atoms`` gives each job alone.
    """
    sizes = np.array([len(v) for v, _ in jobs], dtype=np.int64)
    values = np.concatenate([v for v, _ in jobs]).astype(np.float64)
    counts = np.concatenate([c for _, c in jobs]).astype(np.int64)
    starts = np.zeros(sizes.size, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    # One row a job, padded past its cells with +inf (after every value), each row sorted:
    # many small sorts, which are far quicker than one sort of every cell.
    cols = np.arange(int(sizes.max()))[None, :]
    held = cols < sizes[:, None]
    at = starts[:, None] + np.where(held, cols, 0)
    table = np.where(held, values[at], np.inf)
    order = np.argsort(table, axis=1)
    table = np.take_along_axis(table, order, axis=1)
    weight = np.take_along_axis(np.where(held, counts[at], 0), order, axis=1)
    new = np.ones(table.shape, dtype=bool)
    new[:, 1:] = table[:, 1:] != table[:, :-1]
    new &= held
    flat = table.reshape(-1)
    begins = np.flatnonzero(new.reshape(-1))
    per_job = new.sum(axis=1)
    first = np.zeros(sizes.size, dtype=np.int64)
    np.cumsum(per_job[:-1], out=first[1:])
    # Padding sorts after every cell and weighs 0: each atom's sum ends at the next atom.
    return flat[begins], np.add.reduceat(weight.reshape(-1), begins), first, per_job


def _gaffke_rows(
    uniq: FloatArray, merged: IntArray, first: IntArray, size: IntArray, level: float
) -> tuple[FloatArray, FloatArray, IntArray, IntArray, FloatArray]:
    """The saddlepoint rows of the jobs whose atoms begin at ``first`` (``size`` of them):
    two a job, its atoms with the pseudo-task at 0 (the lower bound, at ``level``) and at
    1 (the upper bound, at ``1 - level``), weight 1, end to end."""
    src = np.repeat(first, 2)
    atoms_in = np.repeat(size, 2)
    extra = np.tile([0.0, 1.0], first.size)
    lengths = atoms_in + 1
    starts = np.zeros(lengths.size, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    row = np.repeat(np.arange(lengths.size), lengths)
    offset = np.arange(int(lengths.sum())) - starts[row]
    pseudo = offset == atoms_in[row]
    at = src[row] + np.minimum(offset, atoms_in[row] - 1)
    values = np.where(pseudo, extra[row], uniq[at])
    alpha = np.where(pseudo, 1.0, merged[at].astype(np.float64))
    probs = np.tile([level, 1.0 - level], first.size)
    return values, alpha, starts, lengths, probs


def _gaffke_drawn(
    uniq: FloatArray, merged: IntArray, n_boot: int, tail: float, rng: np.random.Generator
) -> Interval:
    """gaffke's bounds from B Dirichlet draws over the atoms and the pseudo-task."""
    alpha = np.append(merged.astype(np.float64), 1.0)
    g = rng.standard_gamma(alpha, size=(n_boot, alpha.size))
    w = g / g.sum(axis=1, keepdims=True)
    lo, hi = drawn_bounds(w @ np.append(uniq, 0.0), w @ np.append(uniq, 1.0), tail)
    return Interval(max(0.0, lo), min(1.0, hi), "exact-draw")


def _gaffke_batch(
    jobs: Sequence[tuple[FloatArray, IntArray]],
    confidence: float,
    n_boot: int,
    rng_of: Callable[[int], np.random.Generator],
) -> list[Interval]:
    """gaffke's interval of every job: the Beta quantiles of every two-atom job in one
    vectorised inversion, the saddlepoint rows of every large one in one pass, the draws
    job by job."""
    out: list[Interval | None] = [None] * len(jobs)
    if not jobs:
        return []
    if any(len(v) == 0 for v, _ in jobs):
        raise ValueError("every job needs at least one cell")
    uniq, merged, first, per_job = _batch_atoms(jobs)
    lo_q = _tails(confidence)[0]
    drawn = draw_rank(n_boot, lo_q) > 0
    exact: list[tuple[int, _TwoAtoms]] = []
    saddle: list[int] = []
    for i, (begin, size) in enumerate(zip(first.tolist(), per_job.tolist(), strict=True)):
        if size <= 2:
            two = _two_atoms(uniq[begin : begin + size], merged[begin : begin + size], lo_q)
            if two is not None:
                exact.append((i, two))
                continue
        if drawn and exact_draw_is_small(n_boot, size + 1):
            end = begin + size
            out[i] = _gaffke_drawn(uniq[begin:end], merged[begin:end], n_boot, lo_q, rng_of(i))
        else:
            saddle.append(i)
    for (i, _), solved in zip(exact, _solve_two_atoms([p for _, p in exact]), strict=True):
        out[i] = solved
    if saddle:
        chosen = np.array(saddle, dtype=np.int64)
        level = saddlepoint_level(n_boot, lo_q)
        q = ragged_dirichlet_mean_quantiles(
            *_gaffke_rows(uniq, merged, first[chosen], per_job[chosen], level)
        ).tolist()
        for j, i in enumerate(saddle):
            out[i] = Interval(max(0.0, q[2 * j]), min(1.0, q[2 * j + 1]), "saddlepoint")
    return [x for x in out if x is not None]


def gaffke(
    values: FloatArray,
    count: IntArray,
    confidence: float,
    n_boot: int,
    rng: np.random.Generator,
) -> Interval:
    """Bayesian bootstrap with a pseudo-task at 0 (lower bound) and at 1 (upper)."""
    return intervals([(values, count)], "gaffke", confidence=confidence, n_boot=n_boot, rngs=[rng])[
        0
    ]


def _solve_two_atoms(
    pending: Sequence[_TwoAtoms], ends: tuple[float, float] = (0.0, 1.0)
) -> list[Interval]:
    """Every pending exact interval from one vectorised Beta inversion, clamped to ``ends``."""
    a = [x for p in pending for x in (p.lo_beta[0], p.hi_beta[1])]
    b = [x for p in pending for x in (p.lo_beta[1], p.hi_beta[0])]
    level = [p.tail for p in pending for _ in range(2)]
    q = iter(beta_quantiles(np.array(a), np.array(b), np.array(level)).tolist())
    out = []
    for p in pending:
        (lo0, lo1), (hi0, hi1) = p.lo_atoms, p.hi_atoms
        # The upper bound as the lower one's mirror image, so that negating
        # every value negates the interval to the last bit.
        low = lo0 + (lo1 - lo0) * next(q)
        high = hi1 - (hi1 - hi0) * next(q)
        out.append(Interval(max(ends[0], low), min(ends[1], high), "exact"))
    return out


def intervals(
    jobs: Sequence[tuple[FloatArray, IntArray]],
    name: str,
    *,
    confidence: float,
    n_boot: int,
    rngs: Sequence[np.random.Generator] | Callable[[], np.random.Generator],
) -> list[Interval]:
    """The named interval of each (per-task values, count) job, ``rngs[i]`` drawing for job i.

    ``rngs`` may instead make a generator: each job that draws then calls it
    once (``lambda: np.random.default_rng(seed)``, so a job's draw depends on
    no other job and the many jobs that draw nothing cost no generator).
    ``gaffke``'s atoms of every job come from one sort, its Beta quantiles
    (``exact``) from one vectorised pass (``stats.exact``), and its
    saddlepoint quantiles from another (``ragged_dirichlet_mean_quantiles``),
    each bit-identical to the job computed alone; draws and ``percentile``
    are computed job by job.
    """
    check_interval(name)
    rng_of: Callable[[int], np.random.Generator]
    if callable(rngs):
        make = rngs
        rng_of = lambda _: make()  # noqa: E731
    else:
        given = list(rngs)
        if len(given) != len(jobs):
            raise ValueError(f"{len(jobs)} jobs but {len(given)} generators")
        rng_of = given.__getitem__

    if name == "percentile":
        return [
            percentile(values, count, confidence, n_boot, rng_of(i))
            for i, (values, count) in enumerate(jobs)
        ]
    return _gaffke_batch(jobs, confidence, n_boot, rng_of)


def interval(
    name: str,
    values: FloatArray,
    count: IntArray,
    *,
    confidence: float,
    n_boot: int,
    rng: np.random.Generator,
) -> Interval:
    """The named interval for the mean of per-task ``values`` held by ``count`` tasks."""
    check_interval(name)
    if name == "gaffke":
        return gaffke(values, count, confidence, n_boot, rng)
    return percentile(values, count, confidence, n_boot, rng)
