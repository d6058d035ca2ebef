"""A live suite at the daemon's cadence: trials as they arrive, every rule judged every tick.

Pure numpy, no I/O. Each task runs trials as a Poisson stream at its own
rate (``RATES``: uniform, or a few busy tasks and many slow ones); each trial
passes with the task's rate at that moment (a ``Path``: steady, a step, or a
linear drift of the true pass^k); the suite keeps each task's last W
outcomes. Every ``tick`` seconds (the daemon's ``ci_interval``) the rules
are judged by the real state machine (``rules.step``) on what the daemon
would see: the window's value and CI in the rule's own interval
(``pagerate.window_estimates``, percentile or gaffke), the detector's CUSUM
evidence and its level statistic (``detector.evidence``, ``detector.level``),
and a rate rule's last alarm (``ratecusum.Tracker`` fed each task's lifetime
counts at every tick that brought a trial, its references from a day of
counts drawn at the rates at the start, ``reference_counts``).
A tick in which no trial arrived sees the same numbers as the one before
(they are computed once) and is still judged, so ``for`` runs on the clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Required, TypedDict, Unpack

import numpy as np
import numpy.typing as npt

from reliabilityd.rules.pagerate import Shape, Window, window_estimates
from reliabilityd.rules.state import AlertState
from reliabilityd.rules.threshold import Observation, Rule, step
from reliabilityd.stats import ratecusum
from reliabilityd.stats.detector import RecentCounts, evidence, level

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

# The history a rate rule's references come from when a simulation starts.
REFERENCE_SECONDS = 86400.0

# Per-task trial rates relative to the suite's mean, from the tasks' base rates.
BUSY = 10.0
BUSY_SHARE = 0.2


def _uniform(p: FloatArray) -> FloatArray:
    return np.ones(p.size)


def _busy(chosen: IntArray, size: int) -> FloatArray:
    r = np.ones(size)
    r[chosen] = BUSY
    out: FloatArray = r / r.mean()
    return out


def _flaky_busy(p: FloatArray) -> FloatArray:
    return _busy(np.argsort(p, kind="stable")[: max(1, round(BUSY_SHARE * p.size))], p.size)


def _reliable_busy(p: FloatArray) -> FloatArray:
    return _busy(np.argsort(-p, kind="stable")[: max(1, round(BUSY_SHARE * p.size))], p.size)


RATES: dict[str, tuple[str, Callable[[FloatArray], FloatArray]]] = {
    "uniform": ("every task at the mean rate", _uniform),
    "flaky-busy": ("the least reliable fifth runs 10x as often as the rest", _flaky_busy),
    "mostly-slow": (
        "the most reliable fifth runs 10x as often; the other 80% run slowly",
        _reliable_busy,
    ),
}


@dataclass(frozen=True)
class Path:
    """The per-task rates over time: ``before`` until ``start``, then a step or a drift.

    With ``ramp`` > 0 the true pass^k moves linearly from its value at
    ``before`` to ``shape.target`` over ``ramp`` seconds (``shape`` decides
    which tasks carry it); with ``ramp`` = 0 it steps at ``start``.
    """

    before: FloatArray
    k: int
    shape: Shape | None = None
    start: float = 0.0
    ramp: float = 0.0
    grid: float = 60.0
    # The per-task rates at each grid step of the ramp (row 0: before).
    levels: FloatArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        levels = [self.before]
        if self.shape is not None:
            first = float(np.mean(self.before**self.k))
            steps = max(1, int(np.ceil(self.ramp / self.grid))) if self.ramp > 0 else 1
            for i in range(1, steps + 1):
                target = first + (self.shape.target - first) * i / steps
                levels.append(
                    Shape(self.shape.name, self.shape.share, target).after(self.before, self.k)
                )
        object.__setattr__(self, "levels", np.stack(levels))

    def crossing(self, below: float) -> float:
        """When the true pass^k first goes under ``below`` (inf if never)."""
        if self.shape is None or self.shape.target >= below:
            return float("inf")
        if self.ramp <= 0:
            return self.start
        first = float(np.mean(self.before**self.k))
        return self.start + self.ramp * max(0.0, first - below) / (first - self.shape.target)

    def rates_at(self, times: FloatArray, task: int) -> FloatArray:
        levels = self.levels
        if self.shape is None:
            return np.full(times.shape, levels[0, task])
        if self.ramp <= 0:
            stepped: FloatArray = np.where(times >= self.start, levels[1, task], levels[0, task])
            return stepped
        i = np.clip(np.ceil((times - self.start) / self.grid), 0, levels.shape[0] - 1)
        out: FloatArray = levels[i.astype(np.int64), task]
        return out


@dataclass(frozen=True)
class Judged:
    """Per rule: the ticks that sent a ``firing`` notification and whether it was firing."""

    fired: list[IntArray]
    firing: list[BoolArray]
    states: list[AlertState]
    tail: list[BoolArray]
    # Per rule: a rate rule's statistics at the end (None for the others).
    trackers: list[ratecusum.Tracker | None] = field(default_factory=list)


def _windows(
    path: Path,
    rates: FloatArray,
    *,
    window: int,
    recent: int,
    tick: float,
    ticks: int,
    offset: float,
    rng: np.random.Generator,
    prefill: Sequence[BoolArray] | None,
) -> tuple[IntArray, IntArray, list[BoolArray], IntArray, IntArray]:
    """(ticks, T) passes in each window and (ticks, T, recent) in its last outcomes; each
    window's last outcomes; and (ticks, T) trials and passes since ``offset``."""
    t = rates.size
    ends = offset + tick * np.arange(1, ticks + 1)
    c = np.empty((ticks, t), dtype=np.int64)
    rec = np.empty((ticks, t, recent), dtype=np.int64)
    since_n = np.empty((ticks, t), dtype=np.int64)
    since_c = np.empty((ticks, t), dtype=np.int64)
    tails: list[BoolArray] = []
    for j in range(t):
        m = rng.poisson(rates[j] * tick * ticks)
        times = np.sort(offset + rng.random(m) * tick * ticks)
        fresh = rng.random(m) < path.rates_at(times, j)
        first = (
            rng.random(window) < path.rates_at(np.full(window, offset), j)
            if prefill is None
            else prefill[j]
        )
        seq = np.concatenate([first, fresh])
        cs = np.concatenate([[0], np.cumsum(seq, dtype=np.int64)])
        idx = window + np.searchsorted(times, ends, side="right")
        c[:, j] = cs[idx] - cs[idx - window]
        for r in range(1, recent + 1):
            rec[:, j, r - 1] = cs[idx] - cs[idx - r]
        since_n[:, j] = idx - window
        since_c[:, j] = cs[idx] - cs[window]
        tails.append(seq[-window:].copy())
    return c, rec, tails, since_n, since_c


def reference_counts(
    path: Path, rates: FloatArray, rng: np.random.Generator, *, at: float = 0.0
) -> tuple[IntArray, IntArray]:
    """Each task's trials and passes over ``REFERENCE_SECONDS`` at its rates at ``at``:
    the history a rate rule's references come from."""
    n = rng.poisson(rates * REFERENCE_SECONDS).astype(np.int64)
    p = np.array([path.rates_at(np.array([at]), j)[0] for j in range(rates.size)])
    return n, rng.binomial(n, p).astype(np.int64)


def _rate_alarms(
    rule: Rule,
    tracker: ratecusum.Tracker | None,
    path: Path,
    rates: FloatArray,
    since: tuple[IntArray, IntArray],
    *,
    tick: float,
    offset: float,
    rng: np.random.Generator,
) -> tuple[list[float | None], ratecusum.Tracker]:
    """A rate rule's last alarm at each tick, and its statistics after the last."""
    names = [str(j) for j in range(rates.size)]
    if tracker is None:
        # From a child of ``rng``: the trials every rule sees are the same draws with a
        # rate rule among them or not.
        base_n, base_c = reference_counts(path, rates, rng.spawn(1)[0], at=offset)
        tracker = ratecusum.Tracker(
            rule.knobs(), names, base_n, base_c, now=offset, started=offset - REFERENCE_SECONDS
        )
    base_n, base_c = tracker.seen_n.copy(), tracker.seen_c.copy()
    since_n, since_c = since
    out: list[float | None] = []
    before = np.zeros(rates.size, dtype=np.int64)
    for i in range(since_n.shape[0]):
        if (since_n[i] != before).any():
            tracker.tick(
                names, base_n + since_n[i], base_c + since_c[i], now=offset + (i + 1) * tick
            )
            before = since_n[i]
        out.append(tracker.alarmed_at)
    return out, tracker


def judge(
    rules: Sequence[Rule],
    path: Path,
    rates: FloatArray,
    *,
    window: int,
    k: int,
    duration: float,
    rng: np.random.Generator,
    tick: float = 5.0,
    interval: str = "gaffke",
    n_boot: int = 2000,
    offset: float = 0.0,
    states: Sequence[AlertState] | None = None,
    prefill: Sequence[BoolArray] | None = None,
    trackers: Sequence[ratecusum.Tracker | None] | None = None,
) -> Judged:
    """Every rule judged every ``tick`` seconds for ``duration`` seconds from ``offset``.

    ``rates`` are trials per task per second; ``interval`` is the suite's
    (a rule's own ``interval`` wins). The window starts full (drawn at the
    rates at ``offset``) unless ``prefill`` carries each task's last outcomes
    on from an earlier call, as ``states`` carries the rules' states and
    ``trackers`` the rate rules' statistics.
    """
    ticks = max(1, round(duration / tick))
    recent = max([r.recent for r in rules if r.trigger == "detector"], default=1)
    c, rec, tails, since_n, since_c = _windows(
        path,
        rates,
        window=window,
        recent=recent,
        tick=tick,
        ticks=ticks,
        offset=offset,
        rng=rng,
        prefill=prefill,
    )
    # Only the ticks where a trial arrived get new numbers.
    moved = np.ones(ticks, dtype=np.bool_)
    moved[1:] = (c[1:] != c[:-1]).any(axis=1) | (rec[1:] != rec[:-1]).any(axis=(1, 2))
    which = np.cumsum(moved) - 1
    uc, urec = c[moved], rec[moved]
    wins: dict[str, Window] = {}
    stats: dict[tuple[float, int], tuple[FloatArray, FloatArray]] = {}
    out = Judged([], [], [], tails, [])
    for j, rule in enumerate(rules):
        name = rule.interval or interval
        if name not in wins:
            wins[name] = window_estimates(uc, window, k, n_boot=n_boot, interval=name)
        win = wins[name]
        ev = lv = None
        if rule.trigger == "detector":
            key = (rule.below, rule.recent)
            if key not in stats:
                counts = RecentCounts(
                    n=np.full_like(uc, window), c=uc, recent=urec[..., : rule.recent]
                )
                stats[key] = (evidence(counts, k, rule.below), level(counts, k, rule.below))
            ev, lv = stats[key]
        alarms: list[float | None] | None = None
        tracker = None
        if rule.trigger == "rate":
            alarms, tracker = _rate_alarms(
                rule,
                None if trackers is None else trackers[j],
                path,
                rates,
                (since_n, since_c),
                tick=tick,
                offset=offset,
                rng=rng,
            )
        out.trackers.append(tracker)
        current = AlertState() if states is None else states[j]
        value, low, high = win.value.tolist(), win.ci_low.tolist(), win.ci_high.tolist()
        evs = None if ev is None else ev.tolist()
        lvs = None if lv is None else lv.tolist()
        fired: list[int] = []
        firing = np.zeros(ticks, dtype=np.bool_)
        for i, u in enumerate(which.tolist()):
            obs = Observation(
                value=value[u],
                ci_low=low[u],
                ci_high=high[u],
                tasks=c.shape[1],
                runs=window,
                evidence=None if evs is None else evs[u],
                level=None if lvs is None else lvs[u],
                alarmed_at=None if alarms is None else alarms[i],
            )
            tr = step(rule, current, obs, offset + (i + 1) * tick)
            if tr.notify == "firing":
                fired.append(i)
            current = tr.new
            firing[i] = current.state == "firing"
        out.fired.append(np.asarray(fired, dtype=np.int64))
        out.firing.append(firing)
        out.states.append(current)
    return out


class Judging(TypedDict, total=False):
    """How a simulated suite is judged: ``judge``'s keywords that every run shares."""

    window: Required[int]
    k: Required[int]
    rng: Required[np.random.Generator]
    tick: float
    interval: str
    n_boot: int


@dataclass(frozen=True)
class Steady:
    """What each rule did on a suite whose rates never change: pages, ticks firing, ticks."""

    pages: list[int]
    firing: list[int]
    ticks: int


def steady(
    rules: Sequence[Rule],
    p: FloatArray,
    rates: FloatArray,
    *,
    duration: float,
    chunk: float = 21600.0,
    enough: int | None = None,
    **judging: Unpack[Judging],
) -> Steady:
    """Every rule judged for ``duration`` seconds on a suite at the fixed rates ``p``.

    Judged ``chunk`` seconds at a time (the rules' states and the windows carry
    on from one chunk to the next), so memory stays flat in ``duration``. With
    ``enough``, stops after the first chunk by which the first rule has paged
    that many times (``ticks`` says how long was simulated): a rate from a
    count of ``enough`` is known to within about ``2 / sqrt(enough)``.
    """
    path = Path(p, judging["k"])
    pages = [0] * len(rules)
    firing = [0] * len(rules)
    ticks = 0
    states: Sequence[AlertState] | None = None
    prefill: Sequence[BoolArray] | None = None
    trackers: Sequence[ratecusum.Tracker | None] | None = None
    at = 0.0
    while at < duration - 1e-9:
        span = min(chunk, duration - at)
        got = judge(
            rules,
            path,
            rates,
            duration=span,
            offset=at,
            states=states,
            prefill=prefill,
            trackers=trackers,
            **judging,
        )
        states, prefill, trackers = got.states, got.tail, got.trackers
        for j, f in enumerate(got.fired):
            pages[j] += f.size
            firing[j] += int(got.firing[j].sum())
        ticks += got.firing[0].size
        at += span
        if enough is not None and pages[0] >= enough:
            break
    return Steady(pages, firing, ticks)


def false_pages_per_day(
    rules: Sequence[Rule],
    p: FloatArray,
    rates: FloatArray,
    *,
    days: float,
    **judging: Unpack[Judging],
) -> tuple[list[float], list[float]]:
    """``firing`` notifications per day of each rule on a suite whose rates never change,
    and the share of ticks each spent firing."""
    got = steady(rules, p, rates, duration=days * 86400.0, **judging)
    return [n / days for n in got.pages], [f / max(got.ticks, 1) for f in got.firing]


@dataclass(frozen=True)
class Regressions:
    """Per rule and regression: the delay, and whether the rule was firing when it began."""

    delay: FloatArray
    on_at_start: BoolArray


def regressions(
    rules: Sequence[Rule],
    path: Path,
    rates: FloatArray,
    *,
    reps: int,
    horizon: float,
    crossing: float | None = None,
    **judging: Unpack[Judging],
) -> Regressions:
    """Seconds from the truth crossing each rule's ``below`` to its first firing tick.

    With ``crossing`` (seconds) every rule is timed from that moment instead.

    ``delay`` has shape (rules, reps); inf when a rule is not firing by
    ``horizon`` seconds after ``path.start``, negative when it fires before
    the crossing (on a drift). The suite is judged from 0 (at
    ``path.before``), so each rule starts the regression in the state the
    old suite left it in; a rule already firing at ``path.start`` counts from
    there, and ``on_at_start`` says so: its delay is that of an alert that
    was on before anything changed.
    """
    tick = judging.get("tick", 5.0)
    delay = np.full((len(rules), reps), np.inf)
    on_at_start = np.zeros((len(rules), reps), dtype=np.bool_)
    first = max(0, int(np.ceil(path.start / tick)) - 1)
    for r in range(reps):
        got = judge(rules, path, rates, duration=path.start + horizon, **judging)
        for j, rule in enumerate(rules):
            on = np.flatnonzero(got.firing[j][first:])
            if on.size:
                at = (first + on[0] + 1) * tick
                since = path.crossing(rule.below) if crossing is None else crossing
                delay[j, r] = max(at, path.start) - since
                on_at_start[j, r] = first > 0 and bool(got.firing[j][first - 1])
    return Regressions(delay, on_at_start)
