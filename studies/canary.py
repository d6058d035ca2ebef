"""The canary study: power of the paired interval beside the fixed-time optimum, and false pages.

**Power.** Two agent versions run the same T tasks, 20 trials a task a
side. Baseline pass rates p ~ Beta(2, 0.7) (most tasks reliable, a tail
that is not); the candidate's rate is ``q = p^g`` (``correlated``: a task
hard for one version is hard for the other) or ``q = p'^g`` with p' an
independent draw from the same population (``uncorrelated``: the same
candidate population, no pairing to gain from), g solved exactly (Beta
moments) so that ``E[q^k] - E[p^k] = -0.10``: a drop of 0.10 in pass^k
for k = 1 and 5. A canary with the default ``margin = 0.05`` fires when
the interval's upper bound is under -0.05; the study counts how often it
does, per interval (``paired_difference``, the code that ships, B = 2000),
beside the **optimum**: the fixed-time 95% normal interval with the true
standard error ``sigma / sqrt(T)``, sigma the standard deviation of one
task's difference (from two million simulated tasks), judged on the same
simulated pairs. Coverage is the share of intervals holding -0.10.

**False pages.** Identical agents (both sides run every task at the same
rate p ~ Beta(2, 0.7)), trials arriving as a Poisson stream of one a
minute per task and side, each side keeping each task's last 20 outcomes
(``window = 20``: a stationary stream of fresh evidence, the hardest case
for a rule judged forever), the canary judged every 5 s (the daemon's
``ci_interval``) by ``rules.canary.verdict``'s thresholds and the shared
state machine ``rules.state.advance`` (margin 0.05, resolve margin 0.025,
and each ``for`` in FORS), over ``--days`` simulated days per cell. It
counts ``firing`` notifications: every one is false. The ``student`` bound
is computed in batches of ticks; a sample of ticks, and every tick where
``student`` is gaffke's (fewer than ``STUDENT_MIN_MOVED`` tasks moved), go
through ``stats.paired.paired_difference`` itself.

    .venv/bin/python -m studies.canary --reps 2000 --days 28   # make study-canary
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from math import exp, lgamma, sqrt

import numpy as np
import numpy.typing as npt

from reliabilityd.rules.state import AlertState, Verdict, advance
from reliabilityd.stats.bootstrap import z_value
from reliabilityd.stats.estimators import metric_cells
from reliabilityd.stats.paired import STUDENT_MIN_MOVED, paired_difference
from reliabilityd.stats.student import SAME, student_bounds

FloatArray = npt.NDArray[np.float64]

POPULATION = (2.0, 0.7)
TRIALS = 20
DROP = 0.10
MARGIN = 0.05
RESOLVE = MARGIN / 2
CONFIDENCE = 0.95
TASKS = (20, 50, 200)
KS = (1, 5)
METHODS = ("gaffke", "percentile", "student")
SIGMA_DRAWS = 2_000_000
TICK = 5.0
RATE_PER_MINUTE = 1.0
DAY = 86_400.0
# The canary's ``for`` in the false-page cells: none, a minute, five minutes, and the
# ten minutes docs/alerts.md writes beside ``student``.
FORS = (0.0, 60.0, 300.0, 600.0)


def beta_moment(s: float, a: float = POPULATION[0], b: float = POPULATION[1]) -> float:
    """E[p^s] for p ~ Beta(a, b)."""
    return exp(lgamma(a + s) + lgamma(a + b) - lgamma(a) - lgamma(a + b + s))


@cache
def exponent(k: int, drop: float = DROP) -> float:
    """The g with E[p^(g k)] = E[p^k] - drop (bisection on the exact moment)."""
    target = beta_moment(k) - drop
    lo, hi = 1.0, 64.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if beta_moment(mid * k) > target else (lo, mid)
    return 0.5 * (lo + hi)


def draw_pairs(
    rng: np.random.Generator, k: int, correlated: bool, size: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Passes out of TRIALS per task: (baseline, candidate)."""
    p = rng.beta(*POPULATION, size)
    q = (p if correlated else rng.beta(*POPULATION, size)) ** exponent(k)
    return rng.binomial(TRIALS, p), rng.binomial(TRIALS, q)


def differences(k: int, cb: npt.NDArray[np.int64], cc: npt.NDArray[np.int64]) -> FloatArray:
    n = np.full(cb.shape, TRIALS, dtype=np.int64)
    return metric_cells("pass^k", n, cc, k) - metric_cells("pass^k", n, cb, k)


@cache
def sigma(k: int, correlated: bool) -> float:
    """The standard deviation of one task's difference, from SIGMA_DRAWS simulated tasks."""
    rng = np.random.default_rng(7919 + 10 * k + correlated)
    return float(differences(k, *draw_pairs(rng, k, correlated, SIGMA_DRAWS)).std())


@dataclass(frozen=True)
class PowerCell:
    k: int
    correlated: bool
    tasks: int
    sigma: float
    optimum: float
    power: dict[str, float]
    coverage: dict[str, float]
    # How often the upper bound is under the true difference: the side that pages.
    under: dict[str, float]
    reps: int

    def ratio(self, method: str) -> float:
        return self.power[method] / self.optimum if self.optimum > 0 else float("nan")


def power_cell(
    k: int, correlated: bool, tasks: int, *, reps: int, seed: int, methods: Sequence[str]
) -> PowerCell:
    rng = np.random.default_rng(seed)
    sd = sigma(k, correlated)
    edge = z_value(CONFIDENCE) * sd / sqrt(tasks)
    fired = dict.fromkeys(methods, 0)
    held = dict.fromkeys(methods, 0)
    under = dict.fromkeys(methods, 0)
    optimum = 0
    n = np.full(tasks, TRIALS, dtype=np.int64)
    for rep in range(reps):
        cb, cc = draw_pairs(rng, k, correlated, tasks)
        optimum += float(differences(k, cb, cc).mean()) + edge < -MARGIN
        for method in methods:
            diff = paired_difference(
                (n, cb), (n, cc), k, ("pass^k",), interval=method, seed=seed + rep
            )["pass^k"]
            assert diff.ci is not None
            fired[method] += diff.ci[1] < -MARGIN
            held[method] += diff.ci[0] <= -DROP <= diff.ci[1]
            under[method] += diff.ci[1] < -DROP
    return PowerCell(
        k,
        correlated,
        tasks,
        sd,
        optimum / reps,
        {m: fired[m] / reps for m in methods},
        {m: held[m] / reps for m in methods},
        {m: under[m] / reps for m in methods},
        reps,
    )


def power_table(cells: Sequence[PowerCell], methods: Sequence[str]) -> str:
    head = " | ".join(f"{m} | ratio" for m in methods)
    cover = " | ".join(f"coverage {m} (upper under)" for m in methods)
    lines = [
        f"| metric | versions | shared tasks | sigma | optimum | {head} | {cover} |",
        "|---|---|---|---|---|" + "---|" * (3 * len(methods)),
    ]
    for c in cells:
        cols = " | ".join(f"{c.power[m]:.1%} | {c.ratio(m):.2f}" for m in methods)
        covs = " | ".join(f"{c.coverage[m]:.3f} ({c.under[m]:.3f})" for m in methods)
        lines.append(
            f"| pass^{c.k} | {'correlated' if c.correlated else 'uncorrelated'} | {c.tasks} "
            f"| {c.sigma:.3f} | {c.optimum:.1%} | {cols} | {covs} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class PageCell:
    k: int
    tasks: int
    days: float
    judgements: int
    breaching: int
    # False pages per ``for`` (seconds), and the share of the time spent firing.
    pages: dict[float, int]
    firing_share: dict[float, float]
    highest_bound: float
    lowest_bound: float


def _window_counts(
    rng: np.random.Generator, p: FloatArray, seconds: float
) -> tuple[list[FloatArray], list[npt.NDArray[np.int64]]]:
    """Per task: arrival times and the passes among its last TRIALS outcomes after each."""
    times: list[FloatArray] = []
    counts: list[npt.NDArray[np.int64]] = []
    for rate in p:
        m = int(rng.poisson(RATE_PER_MINUTE * seconds / 60.0))
        at = np.sort(rng.uniform(0.0, seconds, m))
        # TRIALS outcomes before the start: every window is full from the first tick.
        won = np.concatenate([[0], np.cumsum(rng.random(m + TRIALS) < rate)])
        times.append(at)
        counts.append(won[TRIALS:] - won[: m + 1])
    return times, counts


def upper_bounds(k: int, tasks: int, *, days: float, seed: int, chunk: int = 8640) -> FloatArray:
    """The ``student`` upper bound of pass^k(candidate) - pass^k(baseline) at every 5 s tick
    of ``days`` simulated days of two identical agents (the t bound computed in batches
    of ticks; a sample of ticks, and every tick where ``student`` is gaffke's, through
    ``stats.paired.paired_difference`` itself)."""
    rng = np.random.default_rng(seed)
    p = rng.beta(*POPULATION, tasks)
    seconds = days * DAY
    sides = [_window_counts(rng, p, seconds) for _ in range(2)]
    n = np.full(TRIALS + 1, TRIALS, dtype=np.int64)
    value = metric_cells("pass^k", n, np.arange(TRIALS + 1), k)
    ticks = np.arange(TICK, seconds + TICK / 2, TICK)
    out = np.empty(ticks.size)
    for start in range(0, ticks.size, chunk):
        at = ticks[start : start + chunk]
        passes = [
            np.stack(
                [c[np.searchsorted(t, at, side="right")] for t, c in zip(*side, strict=True)],
                axis=1,
            )
            for side in sides
        ]
        d = value[passes[1]] - value[passes[0]]
        _, hi = student_bounds(d, CONFIDENCE)
        # Identical differences, or too few tasks moved for a t interval: what ships,
        # through the shipped function (its gaffke draw at the daemon's seed, 0).
        odd = (np.ptp(d, axis=1) <= SAME) | (np.count_nonzero(d, axis=1) < STUDENT_MIN_MOVED)
        for i in np.flatnonzero(odd).tolist():
            hi[i] = _shipped_upper(passes[0][i], passes[1][i], k)
        for i in (0, d.shape[0] // 2):  # the batch is the shipped interval
            assert abs(hi[i] - _shipped_upper(passes[0][i], passes[1][i], k)) < 1e-9
        out[start : start + at.size] = hi
    return out


def _shipped_upper(
    baseline: npt.NDArray[np.int64], candidate: npt.NDArray[np.int64], k: int
) -> float:
    """The upper bound ``paired_difference`` gives ``student`` for these passes out of
    TRIALS a task, at the daemon's defaults (B = 2000, seed 0)."""
    n = np.full(baseline.shape, TRIALS, dtype=np.int64)
    diff = paired_difference((n, baseline), (n, candidate), k, ("pass^k",), interval="student")
    assert diff["pass^k"].ci is not None
    return diff["pass^k"].ci[1]


def false_pages(upper: FloatArray, for_seconds: float) -> tuple[int, float]:
    """Pages and the share of ticks firing when a canary judges ``upper`` every TICK with
    ``rules.canary``'s thresholds (margin 0.05, resolve margin 0.025) and ``for``, through
    the shared state machine ``rules.state.advance``."""
    verdicts = np.where(upper < -MARGIN, 2, np.where(upper >= -RESOLVE, 0, 1))
    names: dict[int, Verdict] = {0: "clear", 1: "between", 2: "breach"}
    # A verdict repeated changes nothing but a pending alert's clock: judge each change
    # and every breaching tick (where ``for`` may ripen).
    judged = np.flatnonzero((np.diff(verdicts, prepend=0) != 0) | (verdicts == 2))
    state = AlertState()
    pages = firing = 0
    fired_at: int | None = None
    for i in judged:
        step = advance(
            state,
            names[int(verdicts[i])],
            "worse",
            TICK * (int(i) + 1),
            for_seconds=for_seconds,
            repeat=0.0,
        )
        if step.notify == "firing":
            pages += 1
            fired_at = int(i)
        elif step.notify == "resolved" and fired_at is not None:
            firing += int(i) - fired_at
            fired_at = None
        state = step.new
    if fired_at is not None:
        firing += upper.size - fired_at
    return pages, firing / upper.size


def page_cell(k: int, tasks: int, *, days: float, seed: int) -> PageCell:
    upper = upper_bounds(k, tasks, days=days, seed=seed)
    judged = {f: false_pages(upper, f) for f in FORS}
    return PageCell(
        k,
        tasks,
        days,
        int(upper.size),
        int((upper < -MARGIN).sum()),
        {f: pages for f, (pages, _) in judged.items()},
        {f: share for f, (_, share) in judged.items()},
        float(upper.max()),
        float(upper.min()),
    )


def page_table(cells: Sequence[PageCell]) -> str:
    fors = " | ".join(f"false pages, for = {f:g} s" for f in FORS)
    lines = [
        f"| metric | shared tasks | simulated days | judgements | judgements breaching | {fors} "
        "| highest / lowest upper bound |",
        "|---|---|---|---|---|" + "---|" * len(FORS) + "---|",
    ]
    for c in cells:
        pages = " | ".join(str(c.pages[f]) for f in FORS)
        lines.append(
            f"| pass^{c.k} | {c.tasks} | {c.days:g} | {c.judgements:,} | {c.breaching} "
            f"| {pages} | {c.highest_bound:+.3f} / {c.lowest_bound:+.3f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000, help="comparisons per power cell")
    parser.add_argument("--days", type=float, default=14.0, help="simulated days per page cell")
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--sizes", type=int, nargs="*", default=list(TASKS))
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    parser.add_argument("--skip-power", action="store_true")
    parser.add_argument("--skip-pages", action="store_true")
    args = parser.parse_args(argv)
    began = time.monotonic()
    if not args.skip_power:
        cells = [
            power_cell(k, corr, t, reps=args.reps, seed=args.seed + 1000 * i, methods=args.methods)
            for i, (k, corr, t) in enumerate(
                (k, corr, t) for k in KS for corr in (True, False) for t in args.sizes
            )
        ]
        print(power_table(cells, args.methods))
        print(
            f"\n{args.reps} comparisons a cell, seed {args.seed}; a power near 0.5 has a "
            f"standard error of {0.5 / sqrt(args.reps):.1%}; {time.monotonic() - began:.0f} s\n"
        )
    if not args.skip_pages:
        pages = [
            page_cell(k, t, days=args.days, seed=args.seed + 7 + 1000 * i)
            for i, (k, t) in enumerate((k, t) for k in KS for t in args.sizes)
        ]
        print(page_table(pages))
        print(f"\nstudent, seed {args.seed}; {time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
