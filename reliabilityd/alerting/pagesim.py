"""Page-rate simulation: a live suite's trial stream, its window, its CI and its alert rules.

Pure numpy, no I/O. A suite has T tasks with fixed per-trial pass rates;
every task gets one trial per round (one round per minute in the study), the
suite keeps each task's last W outcomes, and after every round the rules are
judged by the real state machine (``alerts.step``) on what the daemon would
see: the window's point estimate and cluster-bootstrap CI, and the
detector's evidence (``detector.evidence``).

The CI is the daemon's percentile cluster bootstrap. Recomputing it with
``estimate_metrics`` every simulated minute for months would take hours on a
shared machine, so the default engine draws the same bootstrap for a whole
batch of minutes at once: B resamples of T task positions (a fixed (B, T)
Multinomial count matrix, as the daemon's fixed seed fixes its draw) applied
to each minute's per-task values sorted canonically, one matrix product per
batch. It is the same estimator (a Multinomial resample over tasks, the
percentile at linear interpolation, the Wilson fallback when every task has
the same value); ``engine="exact"`` calls ``estimate_metrics`` itself (cached
per distinct histogram) and the study checks that both give the same rates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import comb

import numpy as np
import numpy.typing as npt

from reliabilityd.alerting.rules import AlertState, Observation, Rule, step
from reliabilityd.stats.bootstrap import wilson_interval
from reliabilityd.stats.detector import RecentCounts, evidence
from reliabilityd.stats.estimate import estimate_metrics
from reliabilityd.stats.histogram import Histogram

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

MINUTES_PER_DAY = 1440


# --- suites: make-ups and regressions ----------------------------------------


def pass_hat(p: FloatArray, k: int) -> float:
    """The suite's true pass^k: the mean over tasks of p^k (a property of the truth)."""
    return float(np.mean(p**k))


def scale_failures(base: FloatArray, target: float, k: int) -> FloatArray:
    """Per-task pass rates ``1 - s (1 - base)`` with s chosen so the true pass^k is ``target``.

    Scaling every task's failure rate by one factor keeps a make-up's shape
    (which tasks are reliable, which are lottery cases) at any level.
    """
    if not 0.0 < target < 1.0:
        raise ValueError(f"target must lie in (0, 1), got {target}")
    fail = 1.0 - np.asarray(base, dtype=np.float64)
    if bool((fail <= 0).any()):
        raise ValueError("every base rate must be below 1, or scaling cannot move it")
    lo, hi = 0.0, 1.0 / float(fail.min())
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if pass_hat(np.clip(1.0 - mid * fail, 0.0, 1.0), k) > target:
            lo = mid
        else:
            hi = mid
    p = np.clip(1.0 - lo * fail, 0.0, 1.0)
    if abs(pass_hat(p, k) - target) > 1e-6:
        raise ValueError(f"this make-up cannot reach pass^{k} = {target}")
    return p


def _beta22_quantiles(m: int) -> FloatArray:
    """Evenly spaced quantiles of Beta(2, 2) (CDF 3x^2 - 2x^3), by bisection."""
    u = (np.arange(m) + 0.5) / m
    lo, hi = np.zeros(m), np.ones(m)
    for _ in range(60):
        mid = (lo + hi) / 2.0
        below = 3 * mid**2 - 2 * mid**3 < u
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class MakeUp:
    """A suite's shape: per-task base pass rates, scaled to any true pass^k."""

    name: str
    describe: str
    base: Callable[[int], FloatArray]

    def rates(self, tasks: int, target: float, k: int) -> FloatArray:
        return scale_failures(self.base(tasks), target, k)


def _mix(t: int) -> FloatArray:
    flaky = t // 5
    return np.concatenate([np.full(t - flaky, 0.98), _beta22_quantiles(flaky)])


def _alike(t: int) -> FloatArray:
    return np.full(t, 0.9)


def _lottery(t: int) -> FloatArray:
    lot = min(10, t // 2)
    return np.concatenate([np.full(t - lot, 0.995), np.full(lot, 0.6)])


MAKE_UPS: dict[str, MakeUp] = {
    m.name: m
    for m in (
        MakeUp("mix", "80% of tasks at 0.98, 20% at Beta(2, 2) quantiles", _mix),
        MakeUp("alike", "every task at the same rate", _alike),
        MakeUp("lottery", "reliable tasks at 0.995 with 10 lottery tasks at 0.6", _lottery),
    )
}


@dataclass(frozen=True)
class Shape:
    """A regression: a share of the tasks (the most reliable first) fail more, to ``target``."""

    name: str
    share: float
    target: float

    def after(self, p: FloatArray, k: int) -> FloatArray:
        t = p.size
        hit = np.argsort(-p, kind="stable")[: max(1, round(self.share * t))]
        fail = 1.0 - p[hit]
        lo, hi = 0.0, 1.0 / max(float(fail.min()), 1e-12)
        out = p.copy()
        for _ in range(200):
            mid = (lo + hi) / 2.0
            out[hit] = np.clip(1.0 - mid * fail, 0.0, 1.0)
            if pass_hat(out, k) > self.target:
                lo = mid
            else:
                hi = mid
        out[hit] = np.clip(1.0 - lo * fail, 0.0, 1.0)
        if abs(pass_hat(out, k) - self.target) > 1e-6:
            raise ValueError(
                f"{self.name}: {self.share:.0%} of the tasks cannot carry pass^{k} "
                f"down to {self.target}"
            )
        return out


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        # A fifth of the tasks holds at most 0.20 of the suite's pass^k, so the
        # concentrated shape needs 30% of the tasks to reach 0.65.
        Shape("concentrated", 0.3, 0.65),
        Shape("spread", 1.0, 0.65),
    )
}


# --- the stream and the window -------------------------------------------------


def outcomes(
    before: FloatArray,
    after: FloatArray | None,
    *,
    change_at: int,
    rounds: int,
    window: int,
    rng: np.random.Generator,
    reps: int = 1,
) -> BoolArray:
    """(reps, window + rounds, T) outcomes; rounds from ``change_at`` on use ``after``.

    The first ``window`` rounds fill the window before round 0 is judged.
    """
    t = before.size
    p = np.broadcast_to(before, (window + rounds, t)).copy()
    if after is not None:
        p[window + change_at :] = after
    return np.asarray(rng.random((reps, window + rounds, t)) < p[None], dtype=np.bool_)


def trailing_counts(out: BoolArray, length: int, window: int) -> IntArray:
    """Passes among each task's last ``length`` outcomes after every judged round.

    Shape (reps, rounds, T); ``length`` at most ``window``.
    """
    if not 1 <= length <= window:
        raise ValueError(f"length must lie in [1, window={window}], got {length}")
    cs = np.cumsum(out, axis=1, dtype=np.int64)
    cs = np.concatenate([np.zeros_like(cs[:, :1]), cs], axis=1)
    end = np.arange(window + 1, out.shape[1] + 1)
    return np.asarray(cs[:, end] - cs[:, end - length], dtype=np.int64)


def pass_hat_table(n: int, k: int) -> FloatArray:
    """pass^k of a task with n trials and c passes, for c = 0..n (exact, then rounded)."""
    return np.array([comb(c, k) / comb(n, k) for c in range(n + 1)], dtype=np.float64)


# --- the CI the daemon computes, for many minutes at once ---------------------


@dataclass(frozen=True)
class Window:
    """The daemon's view of a windowed suite after each round: value and 95% CI."""

    value: FloatArray
    ci_low: FloatArray
    ci_high: FloatArray


def window_estimates(
    counts: IntArray,
    window: int,
    k: int,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    engine: str = "fast",
    chunk: int = 2048,
) -> Window:
    """pass^k and its percentile cluster-bootstrap CI for every row of (rows, T) counts.

    Every task has n = window trials (the window is full). ``engine="exact"``
    calls ``estimate_metrics`` per distinct histogram; ``"fast"`` applies one
    fixed Multinomial resample matrix to all rows (see the module docstring).
    """
    rows, t = counts.shape
    if engine == "exact":
        return _exact_estimates(counts, window, k, n_boot=n_boot, seed=seed)
    if engine != "fast":
        raise ValueError(f"engine must be 'fast' or 'exact', got {engine!r}")
    table = pass_hat_table(window, k)
    resample = np.random.default_rng(seed).multinomial(t, np.full(t, 1.0 / t), size=n_boot)
    weights = resample.astype(np.float64).T / t  # (T, B)
    # np.quantile's "linear" method: position (B - 1) q between order statistics.
    positions = [(n_boot - 1) * 0.025, (n_boot - 1) * 0.975]
    low = np.empty(rows)
    high = np.empty(rows)
    value = np.empty(rows)
    for start in range(0, rows, chunk):
        v = np.sort(table[counts[start : start + chunk]], axis=1)
        value[start : start + chunk] = v.mean(axis=1)
        reps = v @ weights  # (chunk, B)
        for pos, dest in zip(positions, (low, high), strict=True):
            lo_i = int(np.floor(pos))
            hi_i = min(lo_i + 1, n_boot - 1)
            part = np.partition(reps, (lo_i, hi_i), axis=1)
            frac = pos - lo_i
            dest[start : start + chunk] = part[:, lo_i] + (part[:, hi_i] - part[:, lo_i]) * frac
        same = np.flatnonzero((v == v[:, :1]).all(axis=1))
        for i in same:
            lo_w, hi_w = wilson_interval(float(v[i, 0]), t)
            low[start + i], high[start + i] = lo_w, hi_w
    value = np.clip(value, 0.0, 1.0)
    return Window(value=np.clip(value, low, high), ci_low=low, ci_high=high)


def _exact_estimates(counts: IntArray, window: int, k: int, *, n_boot: int, seed: int) -> Window:
    cache: dict[bytes, tuple[float, float, float]] = {}
    out = np.empty((counts.shape[0], 3))
    for i, row in enumerate(counts):
        hist = np.bincount(row, minlength=window + 1)
        key = hist.tobytes()
        if key not in cache:
            h = Histogram(np.full(window + 1, window), np.arange(window + 1), hist)
            est = estimate_metrics(
                h, k, ("pass^k",), n_boot=n_boot, seed=seed, interval="percentile"
            )["pass^k"]
            assert est.value is not None
            assert est.ci is not None
            cache[key] = (est.value, est.ci[0], est.ci[1])
        out[i] = cache[key]
    return Window(value=out[:, 0], ci_low=out[:, 1], ci_high=out[:, 2])


# --- rules over a simulated series ---------------------------------------------


def detector_series(out: BoolArray, window: int, k: int, below: float, recent: int) -> FloatArray:
    """``detector.evidence`` after every judged round: shape (reps, rounds)."""
    c = trailing_counts(out, window, window)
    rec = np.stack([trailing_counts(out, m, window) for m in range(1, recent + 1)], axis=-1)
    counts = RecentCounts(n=np.full_like(c, window), c=c, recent=rec)
    return evidence(counts, k, below)


def run_rule(
    rule: Rule,
    win: Window,
    tasks: int,
    window: int,
    *,
    evidence: FloatArray | None = None,
    state: AlertState | None = None,
    start: int = 0,
    round_seconds: float = 60.0,
) -> tuple[IntArray, AlertState, int]:
    """Judge every round with ``alerts.step``.

    Returns the rounds (counted from ``start``) that sent a ``firing``
    notification, the final state, and how many rounds ended in ``firing``.
    """
    current = AlertState() if state is None else state
    fired: list[int] = []
    firing = 0
    value, low, high = win.value.tolist(), win.ci_low.tolist(), win.ci_high.tolist()
    ev: Sequence[float | None] = [None] * len(value) if evidence is None else evidence.tolist()
    for i in range(len(value)):
        obs = Observation(
            value=value[i],
            ci_low=low[i],
            ci_high=high[i],
            tasks=tasks,
            runs=window,
            evidence=ev[i],
        )
        tr = step(rule, current, obs, (start + i) * round_seconds)
        if tr.notify == "firing":
            fired.append(start + i)
        current = tr.new
        firing += current.state == "firing"
    return np.asarray(fired, dtype=np.int64), current, firing


def _judge(
    rules: Sequence[Rule],
    out: BoolArray,
    *,
    window: int,
    k: int,
    engine: str,
    states: list[AlertState] | None,
    start: int,
    round_seconds: float = 60.0,
    n_boot: int = 2000,
) -> list[tuple[IntArray, AlertState, int]]:
    """Every rule over one chunk of one stream (out has one rep)."""
    t = out.shape[-1]
    counts = trailing_counts(out, window, window)[0]
    win = window_estimates(counts, window, k, engine=engine, n_boot=n_boot)
    cache: dict[tuple[float, int], FloatArray] = {}
    results = []
    for j, rule in enumerate(rules):
        ev = None
        if rule.trigger == "detector":
            key = (rule.below, rule.recent)
            if key not in cache:
                cache[key] = detector_series(out, window, k, rule.below, rule.recent)[0]
            ev = cache[key]
        state = None if states is None else states[j]
        results.append(
            run_rule(
                rule,
                win,
                t,
                window,
                evidence=ev,
                state=state,
                start=start,
                round_seconds=round_seconds,
            )
        )
    return results


@dataclass(frozen=True)
class Pages:
    """False pages of one rule on a stationary suite."""

    per_day: float
    pages: int
    days: float
    firing_share: float


def false_pages(
    rules: Sequence[Rule],
    p: FloatArray,
    *,
    window: int,
    days: float,
    rng: np.random.Generator,
    k: int = 5,
    engine: str = "fast",
    rounds_per_day: float = MINUTES_PER_DAY,
    n_boot: int = 2000,
) -> list[Pages]:
    """Pages per day of each rule on a suite whose per-task rates never change.

    One round gives every task one trial; ``rounds_per_day`` sets how long a
    round lasts (which matters to ``for``).
    """
    total = max(1, round(days * rounds_per_day))
    chunk = MINUTES_PER_DAY
    round_seconds = 86400.0 / rounds_per_day
    states: list[AlertState] | None = None
    fired = [0] * len(rules)
    firing = [0] * len(rules)
    prev: BoolArray | None = None
    for start in range(0, total, chunk):
        rounds = min(chunk, total - start)
        fresh = outcomes(p, None, change_at=0, rounds=rounds, window=window, rng=rng)
        if prev is not None:
            fresh[:, :window] = prev  # the window carries over between chunks
        prev = fresh[:, -window:].copy()
        res = _judge(
            rules,
            fresh,
            window=window,
            k=k,
            engine=engine,
            states=states,
            start=start,
            round_seconds=round_seconds,
            n_boot=n_boot,
        )
        states = [r[1] for r in res]
        for j, (f, _, on) in enumerate(res):
            fired[j] += f.size
            firing[j] += on
    span = total / rounds_per_day
    return [
        Pages(per_day=fired[j] / span, pages=fired[j], days=span, firing_share=firing[j] / total)
        for j in range(len(rules))
    ]


def detection_delays(
    rules: Sequence[Rule],
    before: FloatArray,
    after: FloatArray,
    *,
    window: int,
    reps: int,
    rng: np.random.Generator,
    k: int = 5,
    lead_in: int = 20,
    horizon: int = 60,
    engine: str = "fast",
) -> FloatArray:
    """Rounds from a regression to each rule's first page: (rules, reps), inf if none.

    Every replication judges ``lead_in`` rounds before the change (so a
    rule starts from the state the old suite leaves it in); a page before
    the change counts as no detection of it.
    """
    out = np.full((len(rules), reps), np.inf)
    for r in range(reps):
        stream = outcomes(
            before, after, change_at=lead_in, rounds=lead_in + horizon, window=window, rng=rng
        )
        judged = _judge(rules, stream, window=window, k=k, engine=engine, states=None, start=0)
        for j, (fired, _, _) in enumerate(judged):
            late = fired[fired >= lead_in]
            if late.size:
                out[j, r] = late[0] - lead_in + 1
    return out
