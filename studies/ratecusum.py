"""``python -m studies.ratecusum``: the rate-CUSUM trigger (``studies.ratestat``) beside the oracle.

The oracle of ``studies.oracle`` knows every task's true rates before and
after the change. The prototype knows what the daemon has: each task's
long-run counts (n, c), from ``history`` seconds of the healthy suite, and the
outcomes that arrive each tick. Per cell (the oracle study's sizes, make-ups,
rate patterns, shapes and its oracle, by import, so the ratios compare with
docs/studies.md#the-oracle):

* false pages over ``days`` simulated days at a steady true pass^5 of 0.85, in
  ``runs`` runs, each with its own history; the thresholds are calibrated on
  the first run's history (``ratestat.calibrate``, the budget one false alarm
  in 14 days) and the reference is refreshed every ``refresh`` seconds from
  the counts; a page is an alarm more than ``quiet`` seconds after the last;
* delays of ``reps`` regressions per shape (steps concentrated and spread from
  0.90 to 0.65, a 2-hour drift to 0.70), each with its own history at 0.90 and
  thresholds calibrated on a history of the cell, run from 0 at time 0 and
  the change ``LEAD`` seconds later, as the triggers are in ``studies.oracle``.

``--form common`` puts the local statistic over a common change point
(``studies.commonpoint``); ``--threshold-by ville`` sets both thresholds from
Ville's inequality instead of calibrating them (``ratestat.ville``), with change
points every ``--grid`` ticks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from reliabilityd.rules.pagerate import MAKE_UPS, SHAPES, Shape
from reliabilityd.rules.simulator import RATES, Path
from reliabilityd.stats.ratecusum import reference
from studies.commonpoint import advance_common, calibrate_common
from studies.oracle import (
    BELOW,
    BUDGET_DAYS,
    DRIFT,
    DRIFT_HORIZON,
    LEAD,
    PER_MINUTE,
    STEP_HORIZON,
    TICK,
    Delay,
    K,
    minutes_text,
    oracle_drift,
    oracle_step,
    ratio_text,
)
from studies.ratestat import (
    DAY,
    Design,
    Running,
    Weights,
    advance,
    calibrate,
    increments,
    ville,
    weights,
)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

SEED = 20261204
CHUNK = 120  # ticks a regression's statistics advance at a time: ten minutes


def history(
    p: FloatArray, rates: FloatArray, seconds: float, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    """Each task's counts after ``seconds`` at the rates ``p`` (its long-run history)."""
    n = rng.poisson(rates * seconds).astype(np.int64)
    return n, rng.binomial(n, p).astype(np.int64)


def _rates_estimate(n: IntArray, seconds: float) -> FloatArray:
    """Trial rates from the counts of a history ``seconds`` long (half a trial for none)."""
    out: FloatArray = np.maximum(n, 0.5) / seconds
    return out


def step_horizon(oracle_mean: float) -> float:
    """How long a step's delays are followed: a mean needs every delay, so the hour, or
    8x the oracle's mean where that is longer (a regression not caught by then is a
    miss); the hour where the oracle's own mean is not finite."""
    if not np.isfinite(oracle_mean):
        return STEP_HORIZON
    return max(STEP_HORIZON, 8.0 * oracle_mean)


@dataclass(frozen=True)
class Suite:
    """One simulated suite's detector: its counts, weights and thresholds."""

    n: IntArray
    c: IntArray
    wt: Weights
    h_g: float
    h_l: float


def prepare(
    p: FloatArray,
    rates: FloatArray,
    design: Design,
    rng: np.random.Generator,
    *,
    budget: float,
    thresholds: tuple[float, float] | None = None,
) -> Suite:
    """A history at the rates ``p``, the weights from it, and (unless given) thresholds
    calibrated on the reference and the trial rates the history shows."""
    n, c = history(p, rates, design.history, rng)
    wt = weights(n, c, design)
    if design.grid != 1 and (design.form, design.threshold_by) != ("common", "ville"):
        raise ValueError("a grid of change points needs the 'common' form and 'ville'")
    if thresholds is None and design.threshold_by == "ville":
        if design.form != "common" or design.share_by != "flat":
            raise ValueError("threshold_by 'ville' needs the 'common' form and flat shares")
        h = ville(2.0 * budget, TICK * design.grid)
        thresholds = (h, h)
    elif thresholds is None and design.threshold_by != "simulation":
        raise ValueError(
            f"threshold_by: {design.threshold_by!r} is neither 'simulation' nor 'ville'"
        )
    if thresholds is None:
        p0 = reference(n, c, design.prior)
        rates = _rates_estimate(n, design.history)
        if design.form == "common":
            # The global threshold alone, then the local one over a common change point,
            # each for twice the budget.
            none = np.zeros((n.size, 0))
            alone = replace(wt, up_l=none, down_l=none)
            h_g, _ = calibrate(p0, rates, alone, budget, rng, share=wt.share)
            thresholds = (h_g, calibrate_common(p0, rates, wt, 2.0 * budget, rng))
        else:
            thresholds = calibrate(p0, rates, wt, budget, rng, share=wt.share)
    return Suite(n, c, wt, *thresholds)


def _start(design: Design, wt: Weights) -> Running:
    """Both statistics at rest: per-task CUSUMs at 0, or no ticks since a change point."""
    if design.form == "common":
        if wt.up_l.shape[1] != 1:
            raise ValueError("a common change point takes one local alternative")
        return Running(0.0, np.zeros((0, wt.up_l.shape[0])), [])
    return Running(0.0, np.zeros(wt.up_l.shape), [])


def _advance(
    design: Design,
    state: Running,
    g: FloatArray,
    loc: FloatArray,
    *,
    suite: Suite,
    share: FloatArray,
    first: int,
) -> Running:
    if design.form == "common":
        return advance_common(
            state, g, loc, h_g=suite.h_g, h_l=suite.h_l, first=first, share=share, grid=design.grid
        )
    return advance(state, g, loc, h_g=suite.h_g, h_l=suite.h_l, first=first, share=share)


def false_pages(
    p: FloatArray,
    rates: FloatArray,
    suite: Suite,
    design: Design,
    *,
    days: float,
    rng: np.random.Generator,
) -> int:
    """Pages over ``days`` on a suite steady at ``p``: alarms more than ``quiet`` after the
    one before. The reference is refreshed every ``refresh`` seconds from the counts."""
    path = Path(p, K)
    n, c, wt = suite.n.copy(), suite.c.copy(), suite.wt
    state = _start(design, wt)
    per = int(design.refresh / TICK)
    for chunk in range(int(np.ceil(days * DAY / design.refresh))):
        g, loc, dn, dc = increments(path, rates, wt, offset=0.0, ticks=per, rng=rng)
        state = _advance(design, state, g, loc, suite=suite, share=wt.share, first=chunk * per)
        n, c = n + dn, c + dc
        wt = weights(n, c, design)
    gaps = np.diff(np.asarray([-(10**12), *state.alarms], dtype=np.float64)) * TICK
    return int(np.count_nonzero(gaps > design.quiet))


def delays(
    path: Path,
    rates: FloatArray,
    design: Design,
    thresholds: tuple[float, float],
    *,
    reps: int,
    horizon: float,
    since: float,
    rng: np.random.Generator,
) -> FloatArray:
    """Seconds from ``since`` to the first alarm after ``path.start`` (inf: none within
    ``horizon``), each regression with its own history at ``path.before``. The statistics
    run from 0 at time 0, ``path.start`` before the change, as the triggers do in
    ``studies.oracle``; an alarm before the change restarts them."""
    out = np.full(reps, np.inf)
    ticks = int(np.ceil((path.start + horizon) / TICK))
    first = int(np.ceil(path.start / TICK))
    for r in range(reps):
        suite = prepare(path.before, rates, design, rng, budget=0.0, thresholds=thresholds)
        g, loc, _, _ = increments(path, rates, suite.wt, offset=0.0, ticks=ticks, rng=rng)
        state = _start(design, suite.wt)
        for at in range(0, ticks, CHUNK):  # run until the first alarm after the change
            state = _advance(
                design,
                state,
                g[at : at + CHUNK],
                loc[at : at + CHUNK],
                suite=suite,
                share=suite.wt.share,
                first=at,
            )
            alarms = [a for a in state.alarms if a + 1 >= first]
            if alarms:
                out[r] = max((alarms[0] + 1) * TICK, path.start) - since
                break
    return out


@dataclass(frozen=True)
class Grid:
    sizes: tuple[int, ...]
    make_ups: tuple[str, ...]
    rates: tuple[str, ...]
    reps: int
    runs: int
    days: float


FULL = Grid((10, 20, 50), tuple(MAKE_UPS), tuple(RATES), reps=50, runs=2, days=14.0)
QUICK = Grid((10, 50), ("mix", "lottery"), ("uniform", "mostly-slow"), reps=40, runs=1, days=14.0)

HEAD = [
    "| T | make-up | rates | false pages per 2 weeks at 0.85 (runs) | h global / local (nats) | "
    "step concentrated: mean / median min (x oracle) | step spread | "
    "drift 2 h: median / p90 min from the crossing (oracle) | met |",
    "|---|---|---|---|---|---|---|---|---|",
]


def cell(
    tasks: int,
    mname: str,
    rname: str,
    *,
    design: Design,
    grid: Grid,
    rng: np.random.Generator,
) -> str:
    """One row: the prototype's false pages at a steady 0.85, its delays beside the oracle's."""
    budget = BUDGET_DAYS * DAY
    make_up, pattern = MAKE_UPS[mname], RATES[rname][1]
    p = make_up.rates(tasks, 0.85, K)
    rates = pattern(p) * PER_MINUTE
    # Calibrated on the first run's history; later runs (new histories) reuse it.
    first = prepare(p, rates, design, rng, budget=budget)
    pages = [false_pages(p, rates, first, design, days=grid.days, rng=rng)]
    for _ in range(1, grid.runs):
        suite = prepare(p, rates, design, rng, budget=budget, thresholds=(first.h_g, first.h_l))
        pages.append(false_pages(p, rates, suite, design, days=grid.days, rng=rng))
    shown = f"{first.h_g:.1f} / {first.h_l:.1f}"
    per_two_weeks = float(np.sum(pages)) * 14.0 / (grid.days * grid.runs)
    before = make_up.rates(tasks, 0.9, K)
    rates = pattern(before) * PER_MINUTE
    cal = prepare(before, rates, design, rng, budget=budget)
    thresholds = (cal.h_g, cal.h_l)
    parts, met = [], per_two_weeks <= 1.0
    for sname in ("concentrated", "spread"):
        after = SHAPES[sname].after(before, K)
        _, orc = oracle_step(before, after, rates, budget=budget, reps=400, rng=rng)
        path = Path(before, K, SHAPES[sname], start=LEAD)
        d = Delay.of(
            delays(
                path,
                rates,
                design,
                thresholds,
                reps=grid.reps,
                horizon=step_horizon(orc.mean),
                since=LEAD,
                rng=rng,
            )
        )
        met = met and np.isfinite(d.mean) and d.mean <= 2.0 * orc.mean
        parts.append(
            f"{minutes_text(d.mean)} / {minutes_text(d.median)} ({ratio_text(d.mean, orc.mean)} / "
            f"{ratio_text(d.median, orc.median)})"
        )
    drift = Path(before, K, Shape("drift", 1.0, 0.7), start=LEAD, ramp=DRIFT)
    crossing = drift.crossing(BELOW)
    _, orc = oracle_drift(drift, rates, crossing, budget=budget, reps=100, rng=rng)
    d = Delay.of(
        delays(
            drift,
            rates,
            design,
            thresholds,
            reps=grid.reps,
            horizon=DRIFT_HORIZON,
            since=crossing,
            rng=rng,
        )
    )
    return (
        f"| {tasks} | {mname} | {rname} | {per_two_weeks:.1f} ({'+'.join(map(str, pages))}) | "
        f"{shown} | {parts[0]} | {parts[1]} | {minutes_text(d.median)} / {minutes_text(d.p90)} "
        f"({minutes_text(orc.median)}) | {'yes' if met else 'no'} |"
    )


def run(grid: Grid, design: Design, seed: int = SEED) -> list[str]:
    """The table's rows, printed as they come. Each cell draws from a generator of its
    own, seeded by (seed, tasks, make-up, rates), so a part of the grid gives the same
    rows as the whole."""
    lines = list(HEAD)
    print("\n".join(HEAD), flush=True)
    for tasks in grid.sizes:
        for mname in grid.make_ups:
            for rname in grid.rates:
                started = time.perf_counter()
                key = [seed, tasks, list(MAKE_UPS).index(mname), list(RATES).index(rname)]
                rng = np.random.default_rng(key)
                row = cell(tasks, mname, rname, design=design, grid=grid, rng=rng)
                lines.append(row)
                print(row, f"<!-- {time.perf_counter() - started:.0f} s -->", flush=True)
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    def floats(text: str) -> tuple[float, ...]:
        return tuple(float(x) for x in text.split(",") if x)

    parser = argparse.ArgumentParser(
        prog="python -m studies.ratecusum",
        description="A CUSUM trigger from each task's long-run counts, beside the oracle.",
    )
    parser.add_argument("--quick", action="store_true", help="a small grid")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--sizes", type=lambda s: tuple(int(x) for x in s.split(",")))
    parser.add_argument("--make-ups", type=lambda s: tuple(s.split(",")))
    parser.add_argument("--rates", type=lambda s: tuple(s.split(",")))
    parser.add_argument("--reps", type=int, help="regressions per shape")
    parser.add_argument("--runs", type=int, help="14-day steady runs per cell")
    parser.add_argument("--prior", type=float, help="pseudo-trials toward the suite")
    parser.add_argument("--history", type=float, help="seconds of history before")
    parser.add_argument("--share", type=float, help="the local mixture's share (0: sum)")
    parser.add_argument("--local-kill", type=floats, help="new failure modes' shares ('': none)")
    parser.add_argument("--local-odds", type=floats, help="failure-odds factors")
    parser.add_argument("--share-by", choices=("flat", "passk"), help="the shares' make-up")
    parser.add_argument("--form", choices=("cusums", "common"), help="the local statistic")
    parser.add_argument(
        "--threshold-by", choices=("simulation", "ville"), help="calibrated, or log(budget/tick)"
    )
    parser.add_argument("--grid", type=int, help="ticks between change points (with ville)")
    parser.add_argument("--spread", type=lambda s: s == "yes", help="yes / no: the global")
    a = vars(parser.parse_args(argv))
    given = {k: v for k, v in a.items() if v is not None}
    grid = QUICK if a["quick"] else FULL
    grid = replace(grid, **{k: v for k, v in given.items() if k in Grid.__dataclass_fields__})
    design = replace(
        Design(), **{k: v for k, v in given.items() if k in Design.__dataclass_fields__}
    )
    print(f"# {design}; {grid}; seed {a['seed']}", flush=True)
    started = time.perf_counter()
    run(grid, design, a["seed"])
    print(f"# {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
