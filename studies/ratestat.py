"""The rate-CUSUM trigger's statistic: what a daemon would run each tick, pure numpy.

Two statistics over the trials, in nats, each updated once a tick from the
tick's passes and fails per task (``tick``; ``advance`` runs a whole chunk of
ticks in closed form):

* ``global``: one CUSUM over the merged trial stream. Null: every task at its
  reference rate ``p0``, its own long-run counts shrunk toward the suite's
  pooled rate by ``prior`` pseudo-trials (``reference``: never 0 or 1, so no
  outcome has an infinite log-likelihood ratio). Alternative: every reference
  moved by one common log-odds shift until the suite's pass^k is at the
  rule's ``below`` (``shifted``): the drop spread over all tasks.
* ``local``: a CUSUM per task and alternative (by default one: a new failure
  mode that fails 30% of the task's trials, ``p1 = 0.7 p0``; also the failure
  odds times a factor), the best alternative per task, read as the mixture
  ``sum_i log(1 - share_i + share_i e^{w_i})`` over tasks (``combine``; Xie and
  Siegmund's mixture with per-task CUSUMs, Mei's SUM at ``share = 0``). A task
  that did not change stays at 0 instead of dragging the statistic down, which
  a drop carried by a few tasks needs and the global CUSUM lacks.

Either reaching its threshold is an alarm, and an alarm restarts both at 0.
``calibrate`` sets both thresholds from the suite's own reference and trial
rates, each to twice the false-alarm budget, so together they meet it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from reliabilityd.rules.simulator import Path
from reliabilityd.stats.ratecusum import llr, reference, shifted, sigmoid
from studies.oracle import BELOW, TICK, K, cusum

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DAY = 86400.0
# The thresholds (nats) a calibration considers.
HS = np.arange(0.5, 60.0, 0.05)


@dataclass(frozen=True)
class Design:
    """The prototype's settings; no local alternative drops the local statistic, and
    ``spread = False`` the global one."""

    prior: float = 5.0
    history: float = DAY
    # The local alternatives: a new failure mode that fails this share of the task's
    # trials, ``p1 = p0 (1 - q)``, and the task's failure odds times each factor.
    local_kill: tuple[float, ...] = (0.3,)
    local_odds: tuple[float, ...] = ()
    # The share of tasks the local mixture expects to change (0: the plain sum).
    share: float = 0.3
    # "flat": every task ``share``; "passk": each task's share in proportion to the
    # pass^k it can lose (its reference's p^k), ``share`` on average (``shares``).
    share_by: str = "flat"
    spread: bool = True
    # The local statistic: a mixture of per-task CUSUMs ("cusums") or over a common
    # change point ("common", ``studies.commonpoint``; one local alternative).
    form: str = "cusums"
    # How the thresholds are set: "simulation" (calibrated per suite on simulated null
    # paths) or "ville" (``ville``: no simulation; the "common" form only).
    threshold_by: str = "simulation"
    # Ticks between the change points the "common" form considers (with "ville").
    grid: int = 1
    quiet: float = 900.0
    refresh: float = 3600.0


# --- the statistic: what a daemon would run ------------------------------------


@dataclass(frozen=True)
class Weights:
    """Nats a pass (``up``) and a fail (``down``) of each task add, per statistic."""

    up_g: FloatArray
    down_g: FloatArray
    up_l: FloatArray
    down_l: FloatArray
    # Per task, the local mixture's prior share (0: the plain sum).
    share: FloatArray


def weights(
    n: IntArray, c: IntArray, design: Design, *, k: int = K, below: float = BELOW
) -> Weights:
    """The increments both statistics use, from each task's long-run counts."""
    p0 = reference(n, c, design.prior)
    up_g, down_g = llr(p0, shifted(p0, k, below))
    if not design.spread:
        up_g, down_g = np.zeros_like(p0), np.zeros_like(p0)
    lp = np.log(p0) - np.log1p(-p0)
    pairs = [llr(p0, p0 * (1.0 - q)) for q in design.local_kill]
    pairs += [llr(p0, sigmoid(lp - np.log(f))) for f in design.local_odds]
    if pairs:
        up_l = np.stack([u for u, _ in pairs], axis=-1)
        down_l = np.stack([d for _, d in pairs], axis=-1)
    else:
        up_l, down_l = np.zeros((p0.size, 0)), np.zeros((p0.size, 0))
    return Weights(up_g, down_g, up_l, down_l, shares(p0, design, k))


def shares(p0: FloatArray, design: Design, k: int = K) -> FloatArray:
    """Per task, the local mixture's prior share of being among the changed tasks:
    ``share`` each (``flat``), or in proportion to each task's ``p0^k`` with ``share`` the
    mean before each is held inside [1e-4, 0.95] (``passk``)."""
    if design.share_by not in ("flat", "passk"):
        raise ValueError(f"share_by: {design.share_by!r} is neither 'flat' nor 'passk'")
    if design.share_by == "flat" or design.share <= 0:
        return np.full(p0.shape, design.share)
    lose = p0**k
    out: FloatArray = np.clip(design.share * lose * lose.size / lose.sum(), 1e-4, 0.95)
    return out


class Mixture:
    """``sum_i log(1 - share_i + share_i e^{x_i})`` over the last axis: the likelihood
    ratio of "each task changed with probability share_i" against "none changed", given
    each task's log-likelihood ratio ``x_i``. A task whose share is 0 adds log 1 = 0."""

    def __init__(self, share: FloatArray | float) -> None:
        with np.errstate(divide="ignore"):
            self.stay = np.log1p(-np.asarray(share, dtype=np.float64))
            self.move = np.log(np.asarray(share, dtype=np.float64))

    def __call__(self, x: FloatArray) -> FloatArray:
        out: FloatArray = np.logaddexp(self.stay, self.move + x).sum(axis=-1)
        return out


def combine(w: FloatArray, share: FloatArray | float) -> FloatArray:
    """The local statistic from per-task, per-alternative CUSUMs ``w`` (..., T, A): each
    task's best alternative, then the plain sum over tasks (every share 0: Mei's SUM) or
    the mixture ``sum_i log(1 - share_i + share_i e^{w_i})`` (Xie and Siegmund's, with
    per-task CUSUMs), in which a task whose own share is 0 adds nothing."""
    if w.shape[-1] == 0:
        return np.zeros(w.shape[:-2])
    best = w.max(axis=-1)
    pi = np.broadcast_to(np.asarray(share, dtype=np.float64), best.shape[-1:])
    if not np.any(pi > 0):
        out: FloatArray = best.sum(axis=-1)
    else:
        out = Mixture(pi)(best)
    return out


def tick(
    s: float, w: FloatArray, passes: IntArray, fails: IntArray, wt: Weights
) -> tuple[float, FloatArray]:
    """One tick of both statistics from the tick's passes and fails per task.

    ``global``: ``max(0, s + sum_i passes_i up_i + fails_i down_i)``; ``local``: per task
    and alternative ``max(0, w_ia + passes_i up_ia + fails_i down_ia)``, read by ``combine``.
    """
    s_new = max(0.0, s + float(passes @ wt.up_g + fails @ wt.down_g))
    w_new: FloatArray = np.maximum(0.0, w + passes[:, None] * wt.up_l + fails[:, None] * wt.down_l)
    return s_new, w_new


# --- null paths, for the calibration and the study ---------------------------


def _rates_at(path: Path, task: IntArray, times: FloatArray) -> FloatArray:
    """``Path.rates_at`` for many tasks at once."""
    levels = path.levels
    if path.shape is None:
        out: FloatArray = levels[0, task]
    elif path.ramp <= 0:
        out = np.where(times >= path.start, levels[1, task], levels[0, task])
    else:
        i = np.clip(np.ceil((times - path.start) / path.grid), 0, levels.shape[0] - 1)
        out = levels[i.astype(np.int64), task]
    return out


def increments(
    path: Path,
    rates: FloatArray,
    wt: Weights,
    *,
    offset: float,
    ticks: int,
    rng: np.random.Generator,
) -> tuple[FloatArray, FloatArray, IntArray, IntArray]:
    """Ticks ``offset .. offset + ticks * TICK`` of a suite: (global (ticks,), local
    (ticks, T, A)) increments, and each task's trials and passes in the span."""
    t = rates.size
    m = rng.poisson(rates * ticks * TICK)
    task = np.repeat(np.arange(t), m)
    at = rng.integers(0, ticks, size=task.size)
    times = offset + (at + rng.random(task.size)) * TICK
    passed = rng.random(task.size) < _rates_at(path, task, times)
    g = np.bincount(at, np.where(passed, wt.up_g[task], wt.down_g[task]), minlength=ticks)
    a = wt.up_l.shape[1]
    x = np.where(passed[:, None], wt.up_l[task], wt.down_l[task])
    cols = [np.bincount(at * t + task, x[:, j], minlength=ticks * t) for j in range(a)]
    loc = np.stack(cols, axis=-1).reshape(ticks, t, a) if a else np.zeros((ticks, t, 0))
    passes = np.bincount(task, passed, minlength=t).astype(np.int64)
    return g.astype(np.float64), loc.astype(np.float64), m.astype(np.int64), passes


@dataclass
class Running:
    """Both statistics between chunks, and the alarms so far (tick numbers)."""

    s: float
    w: FloatArray
    alarms: list[int]


def _local(loc: FloatArray, w: FloatArray) -> FloatArray:
    """Per-task, per-alternative CUSUMs over a chunk (ticks, T, A) from ``w`` (T, A)."""
    out: FloatArray = np.moveaxis(cusum(np.moveaxis(loc, 0, -1), w), -1, 0)
    return out


def advance(
    state: Running,
    g: FloatArray,
    loc: FloatArray,
    *,
    h_g: float,
    h_l: float,
    first: int,
    share: FloatArray | float,
) -> Running:
    """Run both statistics over a chunk (closed form), restarting at 0 after each alarm.

    ``first`` is the chunk's first tick number, so alarms are numbered across chunks.
    """
    s, w, at = state.s, state.w, 0
    alarms = list(state.alarms)
    while at < g.size:
        sg = cusum(g[at:], s)
        sl = _local(loc[at:], w)
        hit = (sg >= h_g) | (combine(sl, share) >= h_l)
        on = np.flatnonzero(hit)
        if on.size == 0:
            s, w = float(sg[-1]), sl[-1].copy()
            break
        alarms.append(first + at + int(on[0]))
        s, w, at = 0.0, np.zeros_like(w), at + int(on[0]) + 1
    return Running(s, w, alarms)


def first_passages(
    p0: FloatArray,
    rates: FloatArray,
    wt: Weights,
    rng: np.random.Generator,
    *,
    share: FloatArray | float,
    chains: int,
    seconds: float,
) -> tuple[npt.NDArray[np.int64], int]:
    """Per statistic (global, local), chain and threshold in ``HS``: the tick at which a
    path under the reference ``p0`` first reached it (-1: not within ``seconds``), each
    statistic run alone from 0 without restarts; and the ticks each path ran."""
    span = int(DAY / TICK)
    total = int(np.ceil(seconds / TICK))
    path = Path(p0, K)
    hs = HS
    first = np.full((2, chains, hs.size), -1, dtype=np.int64)
    for ch in range(chains):
        s, w = 0.0, np.zeros(wt.up_l.shape)
        top = np.zeros(2)
        done = 0
        while done < total:
            n = min(span, total - done)
            g, loc, _, _ = increments(path, rates, wt, offset=0.0, ticks=n, rng=rng)
            sg = cusum(g, s)
            sl = _local(loc, w)
            for j, stat in enumerate((sg, combine(sl, share))):
                run = np.maximum.accumulate(np.maximum(stat, top[j]))
                fresh = (hs > top[j]) & (hs <= run[-1])
                first[j, ch, fresh] = done + np.searchsorted(run, hs[fresh], side="left") + 1
                top[j] = run[-1]
            s, w, done = float(sg[-1]), sl[-1].copy(), done + n
    return first, total


def calibrate(
    p0: FloatArray,
    rates: FloatArray,
    wt: Weights,
    budget: float,
    rng: np.random.Generator,
    *,
    share: FloatArray | float = 0.0,
    chains: int = 6,
) -> tuple[float, float]:
    """(h_g, h_l): the least thresholds on a 0.05-nat grid whose mean run length from 0,
    each statistic alone, under the reference ``p0`` is at least twice ``budget`` seconds.

    ``chains`` paths of four budgets each (``first_passages``); the run length at each
    h is an exponential's with censoring (as ``oracle.threshold``), one standard error
    under its estimate.
    """
    first, total = first_passages(
        p0, rates, wt, rng, share=share, chains=chains, seconds=4.0 * budget
    )
    return least_threshold(first[0], total, 2.0 * budget), least_threshold(
        first[1], total, 2.0 * budget
    )


def ville(budget: float, spacing: float = TICK) -> float:
    """The threshold that keeps a statistic's false alarms at one per ``budget`` seconds
    or fewer in expectation, without a simulation: ``log(budget / spacing)`` nats, with
    ``spacing`` the seconds between the change points it considers (a tick, or a grid).

    It holds for a statistic that alarms when, for some change point ``e``, a likelihood
    ratio ``M_e(t)`` of the outcomes since ``e`` (alternative over null) reaches
    ``e^h``, and restarts after the alarm with change points after it only. Under the
    null each ``M_e`` is a nonnegative martingale of mean 1, so by Ville's inequality it
    ever reaches ``e^h`` with probability at most ``e^-h``. Each alarm needs a change
    point of its own whose ratio got there (a restart adds one), so ``N`` change points
    bring at most ``N e^-h`` alarms in expectation. The global CUSUM is such a statistic
    (Lorden's bound), and so is the mixture over a common change point: the product over
    tasks of ``1 - share_i + share_i e^{L_i}`` has mean 1 under the null when the
    outcomes are independent, across tasks and within one. Weights set before each tick
    (the hourly refresh) keep that; shares that change after a change point
    (``share_by = "passk"``) do not, nor is a mixture of per-task CUSUMs such a
    statistic. The null is the reference rates: an error in them is outside the bound.
    """
    return float(np.log(budget / spacing))


def least_threshold(first: npt.NDArray[np.int64], total: int, target: float) -> float:
    """The least threshold in ``HS`` whose mean run length is at least ``target`` seconds,
    from each chain's first passage (ticks; -1: none in ``total`` ticks) at each threshold
    (chains, len(HS)): an exponential's with censoring (as ``oracle.threshold``), one
    standard error under its estimate. The last threshold if none reaches it."""
    seen = first >= 0
    events = seen.sum(axis=0)
    exposure = np.where(seen, first, total).sum(axis=0) * TICK
    low = np.where(events > 1, exposure / np.maximum(events, 1), 0.0) * (
        1.0 - 1.0 / np.sqrt(np.maximum(events, 1))
    )
    # Never crossed in any chain: the run length is longer than all the paths.
    low = np.where(events == 0, np.inf, low)
    ok = np.flatnonzero(low >= target)
    return float(HS[ok[0]]) if ok.size else float(HS[-1])
