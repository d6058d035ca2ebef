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

from collections.abc import Sequence
from functools import lru_cache
from typing import Literal, NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt

from reliabilityd.stats.bootstrap import wilson_interval
from reliabilityd.stats.exact import beta_quantiles, binomial_upper_tail
from reliabilityd.stats.saddlepoint import bootstrap_mean_quantiles, dirichlet_mean_quantiles

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


class _GaffkeRows(NamedTuple):
    """A gaffke interval's two saddlepoint quantiles, waiting to be solved in a batch."""

    low_values: FloatArray
    high_values: FloatArray
    alpha: FloatArray
    lo_q: float
    hi_q: float


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


def _gaffke_plan(
    values: FloatArray,
    count: IntArray,
    confidence: float,
    n_boot: int,
    rng: np.random.Generator,
) -> Interval | _GaffkeRows | _TwoAtoms:
    """The drawn interval, or what the batch solves: Beta quantiles or saddlepoint rows."""
    uniq, merged = atoms(values, count)
    lo_q = _tails(confidence)[0]
    exact = _two_atoms(uniq, merged, lo_q)
    if exact is not None:
        return exact
    alpha = np.append(merged.astype(np.float64), 1.0)
    low_values = np.append(uniq, 0.0)
    high_values = np.append(uniq, 1.0)
    if exact_draw_is_small(n_boot, alpha.size) and draw_rank(n_boot, lo_q) > 0:
        g = rng.standard_gamma(alpha, size=(n_boot, alpha.size))
        w = g / g.sum(axis=1, keepdims=True)
        lo, hi = drawn_bounds(w @ low_values, w @ high_values, lo_q)
        return Interval(max(0.0, lo), min(1.0, hi), "exact-draw")
    level = saddlepoint_level(n_boot, lo_q)
    return _GaffkeRows(low_values, high_values, alpha, level, 1.0 - level)


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
    rngs: Sequence[np.random.Generator],
) -> list[Interval]:
    """The named interval of each (per-task values, count) job, ``rngs[i]`` drawing for job i.

    ``gaffke``'s Beta quantiles (``exact``) of every job are solved in one
    vectorised pass (``stats.exact``), and its saddlepoint quantiles in
    another (``dirichlet_mean_quantiles``), each bit-identical to the job
    computed alone; draws and ``percentile`` are computed job by job.
    """
    check_interval(name)
    if name == "percentile":
        return [
            percentile(values, count, confidence, n_boot, rng)
            for (values, count), rng in zip(jobs, rngs, strict=True)
        ]
    planned = [
        _gaffke_plan(values, count, confidence, n_boot, rng)
        for (values, count), rng in zip(jobs, rngs, strict=True)
    ]
    rows = [p for p in planned if isinstance(p, _GaffkeRows)]
    quantiles = iter(
        dirichlet_mean_quantiles(
            [v for p in rows for v in (p.low_values, p.high_values)],
            [p.alpha for p in rows for _ in range(2)],
            [q for p in rows for q in (p.lo_q, p.hi_q)],
        ).tolist()
    )
    exact = iter(_solve_two_atoms([p for p in planned if isinstance(p, _TwoAtoms)]))
    out: list[Interval] = []
    for p in planned:
        if isinstance(p, Interval):
            out.append(p)
        elif isinstance(p, _TwoAtoms):
            out.append(next(exact))
        else:
            lo, hi = next(quantiles), next(quantiles)
            out.append(Interval(max(0.0, lo), min(1.0, hi), "saddlepoint"))
    return out


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
