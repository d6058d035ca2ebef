"""The local mixture over a common change point: one change point for all tasks.

Where ``studies.ratestat``'s local statistic is a mixture of per-task CUSUMs (each
task its own change point), this one is Xie and Siegmund's form: at each tick, the
largest over change points ``e`` in the last hour of
``sum_i log(1 - share_i + share_i e^{L_i})``, ``L_i`` task i's log-likelihood ratio
since ``e``. A task that keeps passing after ``e`` pulls it down, so the rare failures
of unchanged tasks do not pile up. ``studies.informed --form common`` measures it with
every rate known; ``studies.ratecusum --form common`` on estimated rates.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from reliabilityd.rules.simulator import Path
from studies.oracle import TICK, K, cusum
from studies.ratestat import DAY, HS, Mixture, Running, Weights, increments, least_threshold

FloatArray = npt.NDArray[np.float64]

WINDOW = int(3600 / TICK)
BLOCK = 16  # change points bounded together before any is searched


def common_mixture(
    loc: FloatArray,
    share: FloatArray,
    *,
    window: int = WINDOW,
    since: int = 0,
    floor: float = -np.inf,
    running: bool = False,
    grid: int = 1,
    origin: int = 0,
) -> tuple[npt.NDArray[np.int64], FloatArray]:
    """The mixture over a common change point, at every tick from ``since`` on where it
    can reach a new high: (those ticks, its values there).

    ``loc`` (ticks, T) is each task's log-likelihood ratio per tick. For a change point
    ``e`` the statistic is ``sum_i log(1 - share_i + share_i e^{L_i})``, with ``L_i`` task
    i's ratio summed over ticks ``e .. t``: the likelihood ratio of "each task changed with
    probability share_i at e" against "none changed". A pass lowers every ``L_i`` it
    touches, so the statistic can rise only at a tick where some task's ratio is
    positive (a failure), and for a fixed ``t`` its best ``e`` is such a tick: only those
    are searched, over the last ``window`` ticks. With ``grid`` > 1 the change points
    are the ticks whose number (``origin`` for the first row) is a multiple of ``grid``
    instead: fewer to keep and to search, and a lower threshold (``ratestat.ville``).

    The search is exact, and pruned by upper bounds that put a task's largest ``L_i``
    over several change points in place of its ``L_i`` at one:

    * A value under ``floor`` is not searched for: it is reported as its bound with
      each task at its own best change point (its CUSUM since the first row), which is
      itself under ``floor``. With ``running`` the floor rises to each value found,
      which is all a running maximum needs.
    * Change points are bounded ``BLOCK`` at a time, and a block is searched only where
      its bound reaches the floor or the best value found so far.
    """
    cum = np.vstack([np.zeros(loc.shape[1]), np.cumsum(loc, axis=0)])
    events = np.flatnonzero((loc > 0).any(axis=1))
    mixture = Mixture(share)
    at = events[events >= since]
    values = mixture(cusum(loc.T)[:, at].T)  # each task at its own best change point
    points = events if grid == 1 else np.flatnonzero((origin + np.arange(loc.shape[0])) % grid == 0)
    starts = cum[points]  # each change point's cumulative ratios, (points, T)
    blocks = points.size // BLOCK
    lows = np.minimum.reduceat(starts[: blocks * BLOCK], np.arange(0, blocks * BLOCK, BLOCK))
    for j, t in enumerate(at.tolist()):
        if values[j] < floor:
            continue
        now = cum[t + 1]
        lo = int(np.searchsorted(points, t - window, side="left"))
        hi = int(np.searchsorted(points, t, side="right"))
        b0, b1 = -(-lo // BLOCK), hi // BLOCK  # the whole blocks inside lo .. hi
        if b0 >= b1:
            values[j] = float(mixture(now - starts[lo:hi]).max()) if hi > lo else -np.inf
        else:
            edges = np.r_[lo : b0 * BLOCK, b1 * BLOCK : hi]
            best = float(mixture(now - starts[edges]).max()) if edges.size else -np.inf
            bounds = mixture(now - lows[b0:b1])  # a block's change points, each task at its best
            promising = bounds >= max(floor, best)
            if promising.any():
                rows = (b0 + np.flatnonzero(promising))[:, None] * BLOCK + np.arange(BLOCK)
                best = max(best, float(mixture(now - starts[rows.ravel()]).max()))
            skipped = bounds[~promising]
            values[j] = best if best >= floor or skipped.size == 0 else max(best, skipped.max())
        if running:
            floor = max(floor, float(values[j]))
    return at, values


def grid_cusum(x: FloatArray, start: float, *, grid: int, origin: int) -> FloatArray:
    """``oracle.cusum`` with its change points every ``grid`` ticks: ``S_t = S_{t-1} +
    x_t``, where at a tick whose number (``origin`` for ``x[0]``) is a multiple of
    ``grid`` ``S_{t-1}`` is first raised to 0. Between change points it can be negative."""
    if grid == 1:
        return cusum(x, start)
    w = start + np.cumsum(x)
    before = np.concatenate([[start], w[:-1]])  # the sum just before each tick
    base = np.where((origin + np.arange(x.size)) % grid == 0, before, np.inf)
    out: FloatArray = w - np.minimum(np.minimum.accumulate(base), 0.0)
    return out


def calibrate_common(
    p0: FloatArray,
    rates: FloatArray,
    wt: Weights,
    budget: float,
    rng: np.random.Generator,
    *,
    chains: int = 6,
    days: int = 56,
) -> float:
    """The least threshold on ``ratestat.HS`` whose mean run length from the start under
    ``p0`` is at least ``budget`` seconds, from ``chains`` null paths of ``days`` days
    (``ratestat.least_threshold``)."""
    span = int(DAY / TICK)
    total = days * span
    hs = HS
    first = np.full((chains, hs.size), -1, dtype=np.int64)
    path = Path(p0, K)
    for ch in range(chains):
        top, tail = 0.0, np.zeros((0, p0.size))
        for d in range(days):
            _, loc, _, _ = increments(path, rates, wt, offset=0.0, ticks=span, rng=rng)
            both = np.vstack([tail, loc[:, :, 0]])
            at, values = common_mixture(
                both, wt.share, since=tail.shape[0], floor=top, running=True
            )
            tail = both[-WINDOW:]
            if values.size == 0:
                continue
            run = np.maximum.accumulate(np.maximum(values, top))
            fresh = (hs > top) & (hs <= run[-1])
            hit = at[np.searchsorted(run, hs[fresh], side="left")] - (both.shape[0] - span)
            first[ch, fresh] = d * span + hit + 1
            top = float(run[-1])
    return least_threshold(first, total, budget)


def advance_common(
    state: Running,
    g: FloatArray,
    loc: FloatArray,
    *,
    h_g: float,
    h_l: float,
    first: int,
    share: FloatArray,
    grid: int = 1,
    window: int = WINDOW,
) -> Running:
    """``ratestat.advance`` with the local statistic over a common change point: the
    global CUSUM at ``h_g`` or the mixture at ``h_l``, both restarted after an alarm (the
    mixture's change points after it only), both with change points every ``grid``
    ticks. ``state.w`` holds the last ``window`` ticks of per-task ratios since the last
    alarm, (ticks, T); ``loc`` is (ticks, T, 1); ``first`` is the number of its first tick."""
    s, tail, at = state.s, state.w, 0
    alarms = list(state.alarms)
    local = loc[:, :, 0]
    while at < g.size:
        sg = grid_cusum(g[at:], s, grid=grid, origin=first + at)
        both = np.vstack([tail, local[at:]])
        ev, values = common_mixture(
            both,
            share,
            since=tail.shape[0],
            floor=h_l,
            grid=grid,
            origin=first + at - tail.shape[0],
            window=window,
        )
        hits = [int(x) for x in np.flatnonzero(sg >= h_g)[:1]]
        hits += [int(x) - tail.shape[0] for x in ev[values >= h_l][:1]]
        if not hits:
            s, tail = float(sg[-1]), both[-window:]
            break
        alarm = min(hits)
        alarms.append(first + at + alarm)
        s, tail, at = 0.0, np.zeros((0, local.shape[1])), at + alarm + 1
    return Running(s, tail, alarms)


class Tracker:
    """Both statistics of ``advance_common`` one tick at a time, as a daemon would keep
    them: the global CUSUM, each task's cumulative local ratio since the last alarm,
    and that ratio at each change point of the last ``window`` ticks (one every ``grid``
    ticks), so ``window / grid`` rows of T floats. A tick's cost is O(T) plus, only where
    the bound (each task at its own CUSUM) reaches ``h_l``, a search of those rows."""

    def __init__(
        self, wt: Weights, *, h_g: float, h_l: float, grid: int, window: int = WINDOW
    ) -> None:
        self.wt, self.h_g, self.h_l, self.grid, self.window = wt, h_g, h_l, grid, window
        tasks = wt.share.size
        self._mixture = Mixture(wt.share)
        self.s = 0.0
        self.last = -1  # the last tick judged
        self.searches = 0  # ticks whose bound reached h_l, so that the rows were searched
        self.cum = np.zeros(tasks)
        self.own = np.zeros(tasks)
        self.points: list[int] = []
        self.starts = np.zeros((0, tasks))

    def tick(
        self, number: int, passes: npt.NDArray[np.int64], fails: npt.NDArray[np.int64]
    ) -> bool:
        """Tick ``number`` with each task's passes and fails in it: is it an alarm?

        Ticks with no outcome may be skipped: the ratios since a change point on a
        skipped tick are those since the next tick judged, so it is kept there, under
        its own number for the window.
        """
        crossed = self.last < 0 or number // self.grid > self.last // self.grid
        self.last = number
        if crossed:  # the latest change point at or before this tick
            point = number - number % self.grid
            self.s = max(self.s, 0.0)
            keep = len(self.points) - int(np.searchsorted(self.points, number - self.window))
            self.points = [*self.points[len(self.points) - keep :], point]
            self.starts = np.vstack([self.starts[self.starts.shape[0] - keep :], self.cum])
        x = passes * self.wt.up_l[:, 0] + fails * self.wt.down_l[:, 0]
        self.s += float(passes @ self.wt.up_g + fails @ self.wt.down_g)
        self.cum = self.cum + x
        self.own = np.maximum(0.0, self.own + x)
        alarm = self.s >= self.h_g
        if not alarm and (x > 0).any() and float(self._mixture(self.own)) >= self.h_l:
            self.searches += 1
            live = int(np.searchsorted(self.points, number - self.window))
            rows = self.starts[live:]
            alarm = rows.shape[0] > 0 and float(self._mixture(self.cum - rows).max()) >= self.h_l
        if alarm:
            self.s, self.points = 0.0, []
            self.cum, self.own = np.zeros_like(self.cum), np.zeros_like(self.own)
            self.starts = np.zeros((0, self.cum.size))
        return bool(alarm)
