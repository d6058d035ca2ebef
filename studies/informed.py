"""``python -m studies.informed``: what not knowing which tasks changed costs a detector.

The oracle of ``studies.oracle`` knows every task's rate before and after the
change, so it knows which tasks changed: an unchanged task's outcomes add
nothing to its statistic. A trigger cannot know that. This study measures a
detector that knows everything the oracle knows except that: the **informed
mixture**.

* It knows every task's true rate before (``p0``) and the trial rates.
* It knows the change's kind: the concentrated step multiplies the failure
  probability of the most reliable tasks by one factor ``m``
  (``pagerate.Shape.after``), so it knows ``m`` and which tasks could be hit,
  the **candidates**: every task at least as reliable as the least reliable
  changed one (ties included: in a suite of alike tasks, all of them).
* It does not know which candidates changed. Its prior is that each does with
  the true share (changed over candidates).

Its statistic is the rate-CUSUM prototype's local one (``studies.ratestat``)
with these truths in place of estimates: per candidate, a CUSUM of the
log-likelihood ratio of ``1 - m (1 - p0)`` against ``p0``; over candidates,
the mixture ``sum_i log(1 - share + share e^{W_i})``. Alone, its threshold is
calibrated for the oracle's budget (one false alarm in 14 days) by
``ratestat.calibrate`` on null paths at the true rates. The study also runs
it beside the prototype's global statistic (its spread alternative from the
true rates), each calibrated for twice the budget as in the prototype: that
is the prototype's form with every estimate replaced by the truth. Both are
judged each 5 s tick like the prototype.

Beside the oracle, the informed mixture's delay is a measured figure of what
the subset costs a detector of this form; it is not a lower bound over all
detectors. ``--form common`` measures another form with the same knowledge:
the mixture over a common change point (``commonpoint.common_mixture``), one change
point for all tasks in place of one per task, its threshold calibrated for
the budget by ``commonpoint.calibrate_common``.

    python -m studies.informed                 # per-task CUSUMs: 27 cells, about 40 minutes
    python -m studies.informed --form common   # a common change point: about 15 minutes
    python -m studies.informed --sizes 50      # one size: the same rows as in the whole grid
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from reliabilityd.rules.pagerate import MAKE_UPS, SHAPES
from reliabilityd.rules.simulator import RATES, Path
from reliabilityd.stats.ratecusum import llr, shifted
from studies.commonpoint import advance_common, calibrate_common
from studies.oracle import (
    BELOW,
    BUDGET_DAYS,
    LEAD,
    PER_MINUTE,
    STEP_HORIZON,
    TICK,
    Delay,
    K,
    minutes_text,
    oracle_step,
    ratio_text,
)
from studies.ratestat import (
    DAY,
    Running,
    Weights,
    advance,
    calibrate,
    increments,
)

FloatArray = npt.NDArray[np.float64]

SEED = 20261207
SIZES = (10, 20, 50)


@dataclass(frozen=True)
class Informed:
    """The informed mixture's increments and prior for one suite and step."""

    weights: Weights
    candidates: npt.NDArray[np.bool_]
    factor: float


def informed(before: FloatArray, after: FloatArray) -> Informed:
    """The informed mixture for a concentrated step ``before -> after``.

    The candidates are the tasks at least as reliable as the least reliable changed
    one; each candidate's alternative is its failure probability times the step's
    factor; the prior share is the changed tasks' number over the candidates'.
    """
    changed = after != before
    if not changed.any():
        raise ValueError("the step changes no task")
    factor = float(np.mean((1.0 - after[changed]) / (1.0 - before[changed])))
    candidates = before >= before[changed].min()
    p1 = np.where(candidates, np.clip(1.0 - factor * (1.0 - before), 0.0, 1.0), before)
    up, down = llr(before, p1)
    up, down = np.where(candidates, up, 0.0), np.where(candidates, down, 0.0)
    share = np.where(candidates, changed.sum() / candidates.sum(), 0.0)
    up_g, down_g = llr(before, shifted(before, K, BELOW))
    wt = Weights(up_g, down_g, up[:, None], down[:, None], share)
    return Informed(wt, candidates, factor)


def delays(
    path: Path,
    rates: FloatArray,
    mix: Informed,
    h_g: float,
    h_l: float,
    *,
    reps: int,
    rng: np.random.Generator,
) -> FloatArray:
    """Seconds from the change to the first alarm after it (inf: none within the hour) of
    the global statistic at ``h_g`` or the informed mixture at ``h_l`` (``inf``: that one
    off); run from 0 at time 0, ``LEAD`` before the change, as the prototype."""
    out = np.full(reps, np.inf)
    ticks = int(np.ceil((path.start + STEP_HORIZON) / TICK))
    first = int(np.ceil(path.start / TICK))
    wt = mix.weights
    for r in range(reps):
        g, loc, _, _ = increments(path, rates, wt, offset=0.0, ticks=ticks, rng=rng)
        start = Running(0.0, np.zeros(wt.up_l.shape), [])
        got = advance(start, g, loc, h_g=h_g, h_l=h_l, first=0, share=wt.share)
        alarms = [a for a in got.alarms if a + 1 >= first]
        if alarms:
            out[r] = max((alarms[0] + 1) * TICK, path.start) - path.start
    return out


def common_delays(
    path: Path,
    rates: FloatArray,
    mix: Informed,
    h: float,
    *,
    horizon: float,
    reps: int,
    rng: np.random.Generator,
) -> FloatArray:
    """Seconds from the change to the common-change-point mixture's first alarm after it
    (inf: none within ``horizon``); from 0 at time 0, an alarm before the change restarting
    it (later change points only)."""
    out = np.full(reps, np.inf)
    ticks = int(np.ceil((path.start + horizon) / TICK))
    first = int(np.ceil(path.start / TICK))
    wt = mix.weights
    for r in range(reps):
        _, loc, _, _ = increments(path, rates, wt, offset=0.0, ticks=ticks, rng=rng)
        rest = Running(0.0, np.zeros((0, loc.shape[1])), [])
        got = advance_common(rest, np.zeros(ticks), loc, h_g=np.inf, h_l=h, first=0, share=wt.share)
        alarms = [a for a in got.alarms if a + 1 >= first]
        if alarms:
            out[r] = max((alarms[0] + 1) * TICK, path.start) - path.start
    return out


HEAD = [
    "| T | make-up | rates | candidates (changed) | failure factor | oracle: mean / median min | "
    "h alone (nats) | informed mixture alone: mean / median min (x oracle) | "
    "h global / mixture | with the global statistic |",
    "|---|---|---|---|---|---|---|---|---|---|",
]


def _delay_text(d: Delay, orc: Delay) -> str:
    return (
        f"{minutes_text(d.mean)} / {minutes_text(d.median)} "
        f"({ratio_text(d.mean, orc.mean)} / {ratio_text(d.median, orc.median)})"
    )


def cell(tasks: int, mname: str, rname: str, *, reps: int, rng: np.random.Generator) -> str:
    """One row: the oracle's delays on the concentrated step, the informed mixture's alone
    (calibrated to the budget), and with the prototype's global statistic beside it (each
    calibrated to twice the budget, so together they meet it)."""
    budget = BUDGET_DAYS * DAY
    before = MAKE_UPS[mname].rates(tasks, 0.9, K)
    rates = RATES[rname][1](before) * PER_MINUTE
    after = SHAPES["concentrated"].after(before, K)
    mix = informed(before, after)
    share = mix.weights.share
    # ``calibrate`` sets each statistic to twice the budget it is given.
    _, alone = calibrate(before, rates, mix.weights, budget / 2.0, rng, share=share)
    h_g, h_l = calibrate(before, rates, mix.weights, budget, rng, share=share)
    _, orc = oracle_step(before, after, rates, budget=budget, reps=400, rng=rng)
    path = Path(before, K, SHAPES["concentrated"], start=LEAD)
    d_alone = Delay.of(delays(path, rates, mix, np.inf, alone, reps=reps, rng=rng))
    d_both = Delay.of(delays(path, rates, mix, h_g, h_l, reps=reps, rng=rng))
    changed = int(np.count_nonzero(after != before))
    return (
        f"| {tasks} | {mname} | {rname} | {int(mix.candidates.sum())} ({changed}) | "
        f"{mix.factor:.0f} | {minutes_text(orc.mean)} / {minutes_text(orc.median)} | "
        f"{alone:.1f} | {_delay_text(d_alone, orc)} | {h_g:.1f} / {h_l:.1f} | "
        f"{_delay_text(d_both, orc)} |"
    )


COMMON_HEAD = [
    "| T | make-up | rates | candidates (changed) | oracle: mean / median min | h (nats) | "
    "common change point: mean / median min (x oracle) |",
    "|---|---|---|---|---|---|---|",
]


def common_cell(tasks: int, mname: str, rname: str, *, reps: int, rng: np.random.Generator) -> str:
    """One row: the oracle's delays on the concentrated step beside the informed mixture's
    over a common change point, calibrated to the budget."""
    budget = BUDGET_DAYS * DAY
    before = MAKE_UPS[mname].rates(tasks, 0.9, K)
    rates = RATES[rname][1](before) * PER_MINUTE
    after = SHAPES["concentrated"].after(before, K)
    mix = informed(before, after)
    h = calibrate_common(before, rates, mix.weights, budget, rng)
    _, orc = oracle_step(before, after, rates, budget=budget, reps=400, rng=rng)
    path = Path(before, K, SHAPES["concentrated"], start=LEAD)
    horizon = max(STEP_HORIZON, 8.0 * orc.mean)
    d = Delay.of(common_delays(path, rates, mix, h, horizon=horizon, reps=reps, rng=rng))
    changed = int(np.count_nonzero(after != before))
    return (
        f"| {tasks} | {mname} | {rname} | {int(mix.candidates.sum())} ({changed}) | "
        f"{minutes_text(orc.mean)} / {minutes_text(orc.median)} | {h:.1f} | "
        f"{_delay_text(d, orc)} |"
    )


def run(
    sizes: Sequence[int],
    make_ups: Sequence[str],
    rates: Sequence[str],
    *,
    reps: int,
    seed: int = SEED,
    form: str = "cusums",
) -> list[str]:
    """The table's rows, printed as they come: per-task CUSUMs (``cusums``) or a common
    change point (``common``). Each cell draws from a generator of its own, seeded by
    (seed, tasks, make-up, rates), so a part of the grid gives the same rows as the whole."""
    head, one = (HEAD, cell) if form == "cusums" else (COMMON_HEAD, common_cell)
    lines = list(head)
    print("\n".join(head), flush=True)
    for tasks in sizes:
        for mname in make_ups:
            for rname in rates:
                key = [seed, tasks, list(MAKE_UPS).index(mname), list(RATES).index(rname)]
                started = time.perf_counter()
                row = one(tasks, mname, rname, reps=reps, rng=np.random.default_rng(key))
                lines.append(row)
                print(row, f"<!-- {time.perf_counter() - started:.0f} s -->", flush=True)
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    def names(text: str) -> tuple[str, ...]:
        return tuple(text.split(","))

    parser = argparse.ArgumentParser(
        prog="python -m studies.informed",
        description="The concentrated step: the oracle beside a detector that knows all but "
        "which tasks changed.",
    )
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--sizes", type=lambda s: tuple(int(x) for x in s.split(",")))
    parser.add_argument("--make-ups", type=names, default=tuple(MAKE_UPS))
    parser.add_argument("--rates", type=names, default=tuple(RATES))
    parser.add_argument("--reps", type=int, default=100, help="regressions per cell")
    parser.add_argument(
        "--form",
        choices=("cusums", "common"),
        default="cusums",
        help="the mixture of per-task CUSUMs, or over a common change point",
    )
    a = parser.parse_args(argv)
    print(f"# concentrated step 0.90 -> 0.65; {a.form}; {a.reps} regressions a cell; seed {a.seed}")
    started = time.perf_counter()
    run(a.sizes or SIZES, a.make_ups, a.rates, reps=a.reps, seed=a.seed, form=a.form)
    print(f"# {time.perf_counter() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
