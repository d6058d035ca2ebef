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
  shrinks like 1 / tasks. See the README's Coverage section for its measured
  coverage and width beside the percentile interval.

Methods:

* ``exact-draw``: B resamples drawn at random. Used when the draw is small,
  ``n_boot x atoms <= EXACT_DRAW_LIMIT``; the atoms are the distinct
  per-task values of one metric (cells with equal values merged).
* ``saddlepoint``: otherwise, the B -> infinity limit of the same draw from
  a saddlepoint approximation, O(atoms) and independent of B
  (``reliabilityd.saddlepoint``).
* ``wilson``: the percentile interval's fallback for identical values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt

from reliabilityd.stats.bootstrap import wilson_interval
from reliabilityd.stats.saddlepoint import bootstrap_mean_quantiles, dirichlet_mean_quantiles

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

IntervalName: TypeAlias = Literal["percentile", "gaffke"]
INTERVALS: tuple[IntervalName, ...] = ("percentile", "gaffke")
METHODS = ("exact-draw", "saddlepoint", "wilson")

# The exact draw is used while n_boot x atoms stays at or under this: at the
# default B = 2000 that is 100 atoms, a few milliseconds of binomial draws.
# Past it the saddlepoint costs about a millisecond whatever the size.
EXACT_DRAW_LIMIT = 200_000


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


class _GaffkeRows(NamedTuple):
    """A gaffke interval's two saddlepoint quantiles, waiting to be solved in a batch."""

    low_values: FloatArray
    high_values: FloatArray
    alpha: FloatArray
    lo_q: float
    hi_q: float


def _gaffke_draw_or_rows(
    values: FloatArray,
    count: IntArray,
    confidence: float,
    n_boot: int,
    rng: np.random.Generator,
) -> Interval | _GaffkeRows:
    """The exact draw's interval, or the saddlepoint rows that give it."""
    uniq, merged = atoms(values, count)
    alpha = np.append(merged.astype(np.float64), 1.0)
    lo_q, hi_q = _tails(confidence)
    low_values = np.append(uniq, 0.0)
    high_values = np.append(uniq, 1.0)
    if exact_draw_is_small(n_boot, alpha.size):
        g = rng.standard_gamma(alpha, size=(n_boot, alpha.size))
        w = g / g.sum(axis=1, keepdims=True)
        lo = float(np.quantile(w @ low_values, lo_q, method="linear"))
        hi = float(np.quantile(w @ high_values, hi_q, method="linear"))
        return Interval(max(0.0, lo), min(1.0, hi), "exact-draw")
    return _GaffkeRows(low_values, high_values, alpha, lo_q, hi_q)


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


def intervals(
    jobs: Sequence[tuple[FloatArray, IntArray]],
    name: str,
    *,
    confidence: float,
    n_boot: int,
    rngs: Sequence[np.random.Generator],
) -> list[Interval]:
    """The named interval of each (per-task values, count) job, ``rngs[i]`` drawing for job i.

    ``gaffke``'s saddlepoint quantiles of every job are solved in one
    vectorised pass (``dirichlet_mean_quantiles``), each bit-identical to
    the job computed alone; draws and ``percentile`` are computed job by job.
    """
    check_interval(name)
    if name == "percentile":
        return [
            percentile(values, count, confidence, n_boot, rng)
            for (values, count), rng in zip(jobs, rngs, strict=True)
        ]
    planned = [
        _gaffke_draw_or_rows(values, count, confidence, n_boot, rng)
        for (values, count), rng in zip(jobs, rngs, strict=True)
    ]
    pending = [p for p in planned if isinstance(p, _GaffkeRows)]
    quantiles = iter(
        dirichlet_mean_quantiles(
            [v for p in pending for v in (p.low_values, p.high_values)],
            [p.alpha for p in pending for _ in range(2)],
            [q for p in pending for q in (p.lo_q, p.hi_q)],
        ).tolist()
    )
    out: list[Interval] = []
    for p in planned:
        if isinstance(p, Interval):
            out.append(p)
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
