"""The rate trigger's statistic: two CUSUMs over each task's outcomes since the last tick.

Why: the change detector (``detector``) and the interval compare windows with
each other, so a suite whose tasks run slowly waits for their windows to turn
over before anything moves. This statistic reads every outcome as it arrives,
against per-task reference rates from a day of counts, and is the fastest
design the oracle study found (docs/detectors.md, "The common change point on
estimated rates"): within 2x the delay of a detector that knows the true rates,
in every step cell of the study.

The statistics, in nats, both fed the outcomes each task gained since the last
tick judged (its lifetime totals, differenced):

* ``global``: one CUSUM over all tasks. Null: each task at its reference rate
  ``p0`` (``reference``: its decayed counts shrunk toward the suite's pooled
  rate by ``prior`` pseudo-trials, never 0 or 1). Alternative: every reference
  moved by one common log-odds shift until the mean of p^k is at the rule's
  ``below`` (``shifted``), the drop spread over all tasks.
* ``local``: over change points ``e`` in the last ``window`` seconds, the
  largest ``sum_i log(1 - share + share e^{L_i})``, ``L_i`` task i's
  log-likelihood ratio since ``e`` of "a new failure mode fails ``kill`` of
  its trials" (``p1 = p0 (1 - kill)``) over ``p0``: Xie and Siegmund's mixture
  over a common change point. It carries a drop made by a few tasks, which the
  global CUSUM dilutes.

Change points are every ``grid`` seconds of the clock, and either statistic
reaching ``h = log(2 budget / grid)`` is an alarm (``threshold``): under the
reference rates each change point's likelihood ratio is a martingale of mean
1, so by Ville's inequality the two together bring at most one false alarm per
``budget`` seconds in expectation, whatever the suite, with no calibration. An
alarm restarts both statistics at 0 with change points after it only.

The references are refreshed every ``refresh`` seconds from counts decayed
with a half-life of ``half_life`` seconds; between refreshes the weights are
fixed, so each tick's factor is set before its outcomes. The bound holds at the
references; an error in them is outside it. A new state starts its
references from at most ``START_TRIALS`` of each task's counts (a long-lived
suite's lifetime counts would outweigh its present for weeks), and for its
first ``warmup`` seconds refreshes them at every tick and raises no alarm
(``Tracker.warm``): a new suite's first trials would otherwise be judged
against references from a handful of trials.

Pure: ``Tracker`` is the state one (series, rule) keeps; the daemon stores it
(``encode``/``decode``) and writes it back by compare-and-set, so a replica
never feeds one tick twice, and a lost state starts again with a warm-up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

__all__ = [
    "Knobs",
    "Tracker",
    "decode",
    "encode",
    "llr",
    "reference",
    "shifted",
    "sigmoid",
    "threshold",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# A new state's references start from at most this many trials of each task, at the
# rate of its counts: a window's worth, which the warm-up's trials soon outweigh.
START_TRIALS = 20.0
_SHIFT_BOUND = 30.0
_BISECT = 60
# Rates inside [_CLIP, 1 - _CLIP]: an outcome impossible under one law moves a
# statistic by about 20 nats, as the infinite ratio would, without infinities.
_CLIP = 1e-9


class Knobs(msgspec.Struct, frozen=True, kw_only=True):
    """What a rate rule sets: its metric's k and ``below``, and the statistic's design."""

    k: int
    below: float
    # Seconds of the false-alarm budget: at most one false alarm per this many seconds
    # in expectation at the reference rates.
    budget: float = 14 * 86400.0
    grid: float = 60.0
    window: float = 3600.0
    share: float = 0.3
    kill: float = 0.3
    prior: float = 5.0
    half_life: float = 86400.0
    refresh: float = 3600.0
    warmup: float = 6 * 3600.0


def threshold(knobs: Knobs) -> float:
    """Nats each statistic needs: ``log(2 budget / grid)``, half the budget each."""
    return math.log(2.0 * knobs.budget / knobs.grid)


def reference(n: npt.NDArray[Any], c: npt.NDArray[Any], prior: float) -> FloatArray:
    """Per task, the pre-change rate: its counts shrunk toward the suite's pooled rate.

    ``(c + prior * pooled) / (n + prior)`` with ``pooled = (sum c + 1/2) / (sum n + 1)``:
    never 0 or 1.
    """
    pooled = (float(c.sum()) + 0.5) / (float(n.sum()) + 1.0)
    out: FloatArray = (c + prior * pooled) / (n + prior)
    return out


def sigmoid(x: FloatArray) -> FloatArray:
    """The logistic function, elementwise."""
    out: FloatArray = 1.0 / (1.0 + np.exp(-x))
    return out


def shifted(p0: FloatArray, k: int, target: float) -> FloatArray:
    """``p0`` moved by the one common log-odds shift that puts the mean of p^k at
    ``target``; unchanged where the mean is already at or under ``target``."""
    if p0.size == 0 or float(np.mean(p0**k)) <= target:
        return p0.copy()
    lp = np.log(p0) - np.log1p(-p0)
    lo, hi = 0.0, _SHIFT_BOUND
    for _ in range(_BISECT):
        mid = (lo + hi) / 2.0
        if float(np.mean(sigmoid(lp - mid) ** k)) > target:
            lo = mid
        else:
            hi = mid
    return sigmoid(lp - (lo + hi) / 2.0)


def llr(p0: FloatArray, p1: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per task, the log-likelihood ratio (``p1`` over ``p0``) of a pass and of a fail."""
    a = np.clip(p0, _CLIP, 1.0 - _CLIP)
    b = np.clip(p1, _CLIP, 1.0 - _CLIP)
    return np.log(b / a), np.log((1.0 - b) / (1.0 - a))


class Tracker:
    """One (series, rule)'s statistics between ticks.

    Per task (in ``tasks`` order): its lifetime totals at the last tick, its
    decayed reference counts, the reference rates the weights come from, its
    cumulative local ratio since the last alarm and its own CUSUM (the bound
    that decides whether the change points are searched); the global CUSUM; and
    the cumulative local ratios at each change point of the last ``window``
    seconds (``window / grid`` rows of T floats).
    """

    def __init__(
        self,
        knobs: Knobs,
        tasks: Sequence[str],
        n: IntArray,
        c: IntArray,
        *,
        now: float,
        version: int = 0,
        started: float | None = None,
    ) -> None:
        """A fresh state at ``now``: the totals are its baseline (nothing is judged on
        them), and its references start from at most ``START_TRIALS`` of each task's
        counts. ``started`` (default ``now``) is when its references began: a
        simulation of a suite with that much history (the counts being it) passes it,
        and its references start from the counts whole."""
        self.knobs = knobs
        self.version = version
        self.started = now if started is None else started
        self.last = now
        self.refreshed = now
        self.tasks = list(tasks)
        size = len(self.tasks)
        self.seen_n = np.asarray(n, dtype=np.int64).copy()
        self.seen_c = np.asarray(c, dtype=np.int64).copy()
        self.ref_n = self.seen_n.astype(np.float64)
        self.ref_c = self.seen_c.astype(np.float64)
        if started is None:
            scale = np.minimum(1.0, START_TRIALS / np.maximum(self.ref_n, 1.0))
            self.ref_n, self.ref_c = self.ref_n * scale, self.ref_c * scale
        self.p0 = reference(self.ref_n, self.ref_c, knobs.prior)
        self._weights: tuple[FloatArray, ...] | None = None
        self.s = 0.0
        self.cum = np.zeros(size)
        self.own = np.zeros(size)
        self.points: list[float] = [self._point(now)]
        self.starts = np.zeros((1, size))
        # The time of the last alarm that counted (None before the first).
        self.alarmed_at: float | None = None
        self.alarms = 0

    def weights(self) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """Nats a pass and a fail of each task add to the global and the local statistic,
        from the reference rates (computed once per refresh)."""
        if self._weights is None or self._weights[0].size != self.p0.size:
            knobs = self.knobs
            up_g, down_g = llr(self.p0, shifted(self.p0, knobs.k, knobs.below))
            up_l, down_l = llr(self.p0, self.p0 * (1.0 - knobs.kill))
            self._weights = (up_g, down_g, up_l, down_l)
        up_g, down_g, up_l, down_l = self._weights
        return up_g, down_g, up_l, down_l

    def warm(self, now: float) -> bool:
        """Whether the references have ``warmup`` seconds behind them: alarms count."""
        return now - self.started >= self.knobs.warmup

    def _point(self, now: float) -> float:
        g = self.knobs.grid
        return math.floor(now / g) * g

    def align(self, tasks: Sequence[str], n: IntArray, c: IntArray) -> tuple[IntArray, IntArray]:
        """The state re-indexed to ``tasks``, and each task's passes and fails since the
        last tick. A task seen for the first time, or whose totals went down (it was
        forgotten and came back), starts from its totals now: nothing of it is judged."""
        n = np.asarray(n, dtype=np.int64)
        c = np.asarray(c, dtype=np.int64)
        if list(tasks) != self.tasks:
            where = {t: i for i, t in enumerate(self.tasks)}
            old = np.array([where.get(t, -1) for t in tasks], dtype=np.int64)
            have = old >= 0
            pick = np.where(have, old, 0)

            def take(a: npt.NDArray[np.generic], fill: float, axis: int = 0) -> FloatArray:
                got = np.take(a, pick, axis=axis)
                mask = have if axis == 0 else have[None, :]
                out: FloatArray = np.where(mask, got, fill)
                return out

            self.seen_n = np.where(have, np.take(self.seen_n, pick), n).astype(np.int64)
            self.seen_c = np.where(have, np.take(self.seen_c, pick), c).astype(np.int64)
            self.ref_n = take(self.ref_n, 0.0)
            self.ref_c = take(self.ref_c, 0.0)
            pooled = (float(self.ref_c.sum()) + 0.5) / (float(self.ref_n.sum()) + 1.0)
            self.p0 = take(self.p0, pooled)
            self._weights = None
            self.cum = take(self.cum, 0.0)
            self.own = take(self.own, 0.0)
            self.starts = take(self.starts, 0.0, axis=1)
            self.tasks = list(tasks)
        back = (n < self.seen_n) | (c < self.seen_c)
        passes = np.where(back, 0, c - self.seen_c)
        fails = np.where(back, 0, np.maximum(0, (n - self.seen_n) - passes))
        self.seen_n, self.seen_c = n.copy(), c.copy()
        return passes, fails

    def tick(
        self, tasks: Sequence[str], n: IntArray, c: IntArray, *, now: float, version: int = 0
    ) -> bool:
        """Feed the lifetime totals at ``now``: is this tick an alarm?

        Ticks may come at any pace; one with no new outcome changes nothing but
        the clock. A change point on a tick never judged is kept at the next tick
        judged: the ratios since then are the same.
        """
        knobs = self.knobs
        passes, fails = self.align(tasks, n, c)
        self.version = max(self.version, version)
        now = max(now, self.last)  # a clock that went back judges at the last tick's time
        decay = 0.5 ** ((now - self.last) / knobs.half_life)
        self.ref_n = self.ref_n * decay + (passes + fails)
        self.ref_c = self.ref_c * decay + passes
        if self._point(now) > self._point(self.last):  # a change point at or before now
            self.s = max(self.s, 0.0)
            keep = [i for i, p in enumerate(self.points) if p >= now - knobs.window]
            self.points = [self.points[i] for i in keep] + [self._point(now)]
            self.starts = np.vstack([self.starts[keep], self.cum])
        self.last = now
        alarm = False
        if passes.any() or fails.any():
            alarm = self._judge(passes, fails, now)
        if now - self.refreshed >= knobs.refresh or not self.warm(now):
            self.p0 = reference(self.ref_n, self.ref_c, knobs.prior)
            self._weights = None
            self.refreshed = now
        return alarm

    def _judge(self, passes: IntArray, fails: IntArray, now: float) -> bool:
        knobs = self.knobs
        h = threshold(knobs)
        up_g, down_g, up_l, down_l = self.weights()
        x = passes * up_l + fails * down_l
        self.s += float(passes @ up_g + fails @ down_g)
        self.cum = self.cum + x
        self.own = np.maximum(0.0, self.own + x)
        alarm = self.s >= h
        if not alarm and (x > 0).any() and _mixture(self.own, knobs.share) >= h:
            live = [i for i, p in enumerate(self.points) if p >= now - knobs.window]
            rows = self.starts[live]
            alarm = rows.shape[0] > 0 and float(_mixture(self.cum - rows, knobs.share).max()) >= h
        if alarm:
            self.s = 0.0
            self.cum = np.zeros_like(self.cum)
            self.own = np.zeros_like(self.own)
            # Change points after the alarm only: the next is the grid's next.
            self.points = []
            self.starts = np.zeros((0, self.cum.size))
            if not self.warm(now):
                return False
            self.alarmed_at = now
            self.alarms += 1
        return bool(alarm)

    def local(self) -> float:
        """The local statistic's bound now (each task at its own CUSUM), in nats."""
        return float(_mixture(self.own, self.knobs.share)) if self.own.size else 0.0


def _mixture(x: FloatArray, share: float) -> FloatArray:
    """``sum_i log(1 - share + share e^{x_i})`` over the last axis."""
    out: FloatArray = np.logaddexp(math.log1p(-share), math.log(share) + x).sum(axis=-1)
    return out


class _Wire(msgspec.Struct, frozen=True, array_like=True):
    knobs: Knobs
    version: int
    started: float
    last: float
    refreshed: float
    tasks: list[str]
    seen_n: list[int]
    seen_c: list[int]
    ref_n: bytes
    ref_c: bytes
    p0: bytes
    s: float
    cum: bytes
    own: bytes
    points: list[float]
    starts: bytes
    alarmed_at: float | None
    alarms: int


def _f64(raw: bytes, size: int) -> FloatArray:
    out = np.frombuffer(raw, dtype="<f8")
    if out.size != size:
        raise ValueError(f"an array of {out.size} floats where {size} were expected")
    return out.copy()


def encode(t: Tracker) -> bytes:
    """The state as the store keeps it (msgpack, arrays as little-endian float64)."""

    def raw(a: FloatArray) -> bytes:
        return np.ascontiguousarray(a, dtype="<f8").tobytes()

    return msgspec.msgpack.encode(
        _Wire(
            t.knobs,
            t.version,
            t.started,
            t.last,
            t.refreshed,
            t.tasks,
            t.seen_n.tolist(),
            t.seen_c.tolist(),
            raw(t.ref_n),
            raw(t.ref_c),
            raw(t.p0),
            t.s,
            raw(t.cum),
            raw(t.own),
            t.points,
            raw(t.starts),
            t.alarmed_at,
            t.alarms,
        )
    )


_decoder = msgspec.msgpack.Decoder(_Wire)


def decode(raw: bytes) -> Tracker:
    """A stored state; raises ``ValueError`` (msgspec's errors are ones) when it does not
    decode or is not one ``Tracker`` could have made."""
    try:
        return _decode(raw)
    except (OverflowError, TypeError) as exc:
        raise ValueError(f"a state out of range: {exc}") from exc


def _decode(raw: bytes) -> Tracker:
    w = _decoder.decode(raw)
    size = len(w.tasks)
    if len(w.seen_n) != size or len(w.seen_c) != size:
        raise ValueError("totals and tasks disagree in size")
    t = Tracker.__new__(Tracker)
    t.knobs, t.version, t.started = w.knobs, w.version, w.started
    t.last, t.refreshed = w.last, w.refreshed
    t.tasks = list(w.tasks)
    t.seen_n = np.asarray(w.seen_n, dtype=np.int64).reshape(size)
    t.seen_c = np.asarray(w.seen_c, dtype=np.int64).reshape(size)
    t.ref_n, t.ref_c, t.p0 = (_f64(x, size) for x in (w.ref_n, w.ref_c, w.p0))
    t.s = w.s
    t.cum, t.own = _f64(w.cum, size), _f64(w.own, size)
    t.points = list(w.points)
    t.starts = _f64(w.starts, size * len(w.points)).reshape(len(w.points), size)
    t.alarmed_at, t.alarms = w.alarmed_at, w.alarms
    t._weights = None
    _check(t)
    return t


def _check(t: Tracker) -> None:
    """Raise ``ValueError`` unless a decoded state is one ``Tracker`` could have made."""
    floats = [t.started, t.last, t.refreshed, t.s, *t.points]
    arrays = (t.ref_n, t.ref_c, t.p0, t.cum, t.own, t.starts)
    if not all(math.isfinite(x) for x in floats) or not all(np.isfinite(a).all() for a in arrays):
        raise ValueError("a state holds a number that is not finite")
    if (t.seen_c < 0).any() or (t.seen_c > t.seen_n).any() or (t.ref_c < 0).any():
        raise ValueError("a state holds counts out of order")
    if (t.ref_c > t.ref_n).any() or (t.p0 <= 0).any() or (t.p0 >= 1).any() or (t.own < 0).any():
        raise ValueError("a state holds rates or counts out of range")
    if t.points != sorted(t.points):
        raise ValueError("a state holds change points out of order")
    if t.alarmed_at is not None and not math.isfinite(t.alarmed_at):
        raise ValueError("a state holds an alarm time that is not finite")
    if t.started > t.last or t.refreshed > t.last or t.alarms < 0:
        raise ValueError("a state holds times or counts out of order")
