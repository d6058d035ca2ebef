"""``make study-pages``: false pages per day and detection delay at the daemon's cadence.

Each cell is a simulated live suite (``reliabilityd.rules.simulator``): T
tasks, a window of W trials, trials arriving as Poisson streams (a mean of
one per task per minute, spread by a rate pattern), every rule judged every
``ci_interval`` (5 s) by ``rules.step`` on the rule's own interval and
trigger. False pages: ``firing`` notifications per day on a suite whose
per-task rates never change, at a true pass^5 of 0.85 (the rules page under
0.75). Delay: minutes from the moment the true pass^5 crosses 0.75 to the
rule's first firing tick (every rule, the one with ``below = 0.80``
included, is timed from the crossing of 0.75), median and p90 over regressions (``inf``: not
firing within the horizon), for a step 0.90 -> 0.65 carried by 30% of the
tasks (concentrated) or by all of them (spread), and a drift 0.90 -> 0.70
over 2 h (spread; it crosses 0.75 after 90 min; a negative delay pages
before the crossing). The detector's target: at most a tenth of the false
pages of the CI-lower-bound rule (``ci-low``, percentile, for = 0) and no longer
median or p90 delay in every shape; the ``target`` column says where it
holds, and stars a shape where the comparison is degenerate (the
lower-bound rule was already firing when the change began, or paged before
the truth crossed 0.75). Last, the forecast's error: ``reliabilityd
forecast`` (from one window's counts and a day of history) against a long
simulation at the truth.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from reliabilityd.rules import Rule
from reliabilityd.rules.forecast import STAYS_ON, expected_false_pages, window_level
from reliabilityd.rules.pagerate import MAKE_UPS, SHAPES, Pages, Shape
from reliabilityd.rules.simulator import (
    RATES,
    Path,
    Regressions,
    false_pages_per_day,
    regressions,
    steady,
)
from reliabilityd.stats.histogram import Histogram

K = 5
BELOW = 0.75
RESOLVE = 0.8
WINDOW = 20
TICK = 5.0
PER_MINUTE = 1.0 / 60.0
SEED = 20261130
LEAD = 1200.0
STEP_HORIZON = 3600.0
DRIFT = 7200.0
DRIFT_HORIZON = 4 * 3600.0
# The hourly points of a day's history the forecast's level averages.
HISTORY_POINTS = 24


def _rule(**extra: Any) -> Rule:
    return Rule(**{"name": "r", "k": K, "below": BELOW, "resolve_above": RESOLVE, **extra})


def rules() -> list[tuple[str, Rule]]:
    """The CI-lower-bound rule beside the detector: its level threshold moved either way,
    the CUSUM alone, and an early-warning rule at 0.80. The rate trigger's page rate and
    delays are the oracle study's (``studies.oracle``); the forecast's table holds it."""
    return [
        ("ci-low gaffke", _rule(trigger="ci-low")),
        ("ci-low percentile", _rule(trigger="ci-low", interval="percentile")),
        ("ci-low gaffke for=300s", _rule(trigger="ci-low", for_seconds=300.0)),
        ("detector", _rule(trigger="detector")),
        ("detector, level 0.5", _rule(trigger="detector", level_evidence=0.5)),
        ("detector, level 2", _rule(trigger="detector", level_evidence=2.0)),
        ("detector, CUSUM only", _rule(trigger="detector", level_evidence=0.0)),
        ("detector, below=0.80", _rule(trigger="detector", below=0.8, resolve_above=0.85)),
    ]


# The row the detector is held against: the lower-bound rule that pages. The
# gaffke lower-bound rule (row 0) is firing most of the time at 0.85 (its
# bound sits under resolve_above), so few "pages" there mean no quiet.
REFERENCE = 1
DETECTOR = 3
# The default trigger, in the forecast's table.
RATE = ("rate", _rule(trigger="rate"))


@dataclass(frozen=True)
class Grid:
    sizes: tuple[int, ...]
    make_ups: tuple[str, ...]
    rates: tuple[str, ...]
    days: float
    reps: int


FULL = Grid((10, 20, 50), tuple(MAKE_UPS), tuple(RATES), days=2.0, reps=20)
QUICK = Grid((10, 50), ("mix",), ("uniform", "flaky-busy"), days=0.25, reps=4)


def shapes(before: np.ndarray) -> list[tuple[str, Path]]:
    return [
        ("step concentrated", Path(before, K, SHAPES["concentrated"], start=LEAD)),
        ("step spread", Path(before, K, SHAPES["spread"], start=LEAD)),
        ("drift 2 h", Path(before, K, Shape("drift", 1.0, 0.7), start=LEAD, ramp=DRIFT)),
    ]


def _minutes(d: np.ndarray) -> tuple[float, float]:
    return float(np.median(d)) / 60.0, float(np.quantile(d, 0.9, method="higher")) / 60.0


def _fmt(x: float) -> str:
    return "inf" if not np.isfinite(x) else f"{x:.0f}" if abs(x) >= 10 else f"{x:.1f}"


def run(grid: Grid, seed: int = SEED) -> list[str]:
    """The study's markdown table rows (also printed as they come)."""
    named = rules()
    lines = [
        "| T | make-up | rates | rule | false pages/day at 0.85 (time firing) | "
        "step concentrated: median / p90 min | step spread | drift 2 h | "
        "firing when the change began | target |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    rng = np.random.default_rng(seed)
    rs = [r for _, r in named]
    for tasks in grid.sizes:
        for mname in grid.make_ups:
            make_up = MAKE_UPS[mname]
            for rname in grid.rates:
                started = time.perf_counter()
                pattern = RATES[rname][1]
                p = make_up.rates(tasks, 0.85, K)
                fp, share = false_pages_per_day(
                    rs,
                    p,
                    pattern(p) * PER_MINUTE,
                    window=WINDOW,
                    k=K,
                    days=grid.days,
                    rng=rng,
                    tick=TICK,
                )
                before = make_up.rates(tasks, 0.9, K)
                horizon = {"drift 2 h": DRIFT_HORIZON}
                ds: list[Regressions] = [
                    regressions(
                        rs,
                        path,
                        pattern(before) * PER_MINUTE,
                        window=WINDOW,
                        k=K,
                        reps=grid.reps,
                        horizon=horizon.get(name, STEP_HORIZON),
                        rng=rng,
                        tick=TICK,
                        crossing=path.crossing(BELOW),
                    )
                    for name, path in shapes(before)
                ]
                for j, (label, _) in enumerate(named):
                    cells = [_minutes(d.delay[j]) for d in ds]
                    target = ""
                    if label.startswith("detector") and "below" not in label:
                        target = _target(fp, j, cells, ds)
                    delay = " | ".join(f"{_fmt(m)} / {_fmt(q)}" for m, q in cells)
                    on = float(np.mean([d.on_at_start[j].mean() for d in ds]))
                    row = (
                        f"| {tasks} | {mname} | {rname} | {label} | **{fp[j]:.1f}** "
                        f"({share[j]:.0%}) | {delay} | {on:.0%} | {target} |"
                    )
                    lines.append(row)
                    print(row, flush=True)
                print(
                    f"<!-- T={tasks} {mname} {rname}: {grid.days:g} days, {grid.reps} regressions "
                    f"per shape, {time.perf_counter() - started:.0f} s -->",
                    flush=True,
                )
    return lines


def _target(
    fp: Sequence[float], j: int, det: Sequence[tuple[float, float]], ds: Sequence[Regressions]
) -> str:
    """``yes``, or what misses: the pages, or the shapes where the detector is slower.

    A shape is starred where the comparison is degenerate: the lower-bound
    rule was already firing when the change began in at least half of the
    regressions, or its median pages before the truth crossed ``below``; its
    delay there is that of an alert that was on at a healthy level.
    """
    misses = []
    if fp[j] * 10 > fp[REFERENCE] and fp[j] > 0:
        misses.append("pages")
    for (name, _), (m, q), d in zip(shapes(np.full(1, 0.9)), det, ds, strict=True):
        rm, rq = _minutes(d.delay[REFERENCE])
        if m > rm or q > rq:
            short = name.split()[0] + (" " + name.split()[1] if name.startswith("step") else "")
            degenerate = d.on_at_start[REFERENCE].mean() >= 0.5 or rm < 0
            misses.append(short + ("*" if degenerate else ""))
    return "yes" if not misses else "no: " + ", ".join(misses)


def _parse(row: str) -> tuple[int, str, float, int, list[tuple[float, float]], int, str]:
    """(T, rule, pages/day, % firing, [(median, p90)] per shape, % on at the change, target)."""
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    pages, share = cells[4].replace("*", "").rstrip("%)").split(" (")
    delays = [tuple(float(x) for x in c.split(" / ")) for c in cells[5:8]]
    return (
        int(cells[0]),
        cells[3],
        float(pages),
        int(share),
        [(d[0], d[1]) for d in delays],
        int(cells[8].rstrip("%")),
        cells[9],
    )


def _span(values: Sequence[float], unit: str = "") -> str:
    lo, hi = min(values), max(values)
    show = (lambda x: f"{x:.0f}") if unit == "%" else _fmt
    return f"{show(lo)}{unit}" if lo == hi else f"{show(lo)} to {show(hi)}{unit}"


def _met(targets: Sequence[str]) -> str:
    """How many cells meet the target: whole, on the steps, and missing only where starred."""
    whole = sum(t == "yes" for t in targets)
    misses = [[] if t == "yes" else t.removeprefix("no: ").split(", ") for t in targets]
    steps = sum(all(m in {"drift", "drift*"} for m in ms) for ms in misses)
    starred = sum(all(m.endswith("*") for m in ms) for ms in misses)
    n = len(targets)
    return f"{whole} of {n} (steps: {steps}; met or missed only where starred: {starred})"


def summary(lines: Sequence[str]) -> list[str]:
    """Per size and rule, ranges over the make-up x rate cells of the study's rows."""
    rows = [_parse(r) for r in lines if r.startswith("| ") and r[2].isdigit()]
    out = [
        "| T | rule | false pages/day at 0.85 | time firing | median delay, steps (min) | "
        "median delay, drift (min) | firing when the change began | "
        "target met, cells |",
        "|---|---|---|---|---|---|---|---|",
    ]
    shown = (
        "ci-low percentile",
        "ci-low gaffke",
        "detector",
        "detector, level 0.5",
        "detector, level 2",
        "detector, below=0.80",
    )
    for tasks in sorted({r[0] for r in rows}):
        for label in shown:
            cells = [r for r in rows if r[0] == tasks and r[1] == label]
            if not cells:
                continue
            met = _met([c[6] for c in cells]) if cells[0][6] else ""
            out.append(
                f"| {tasks} | {label} | {_span([c[2] for c in cells])} | "
                f"{_span([c[3] for c in cells], '%')} | "
                f"{_span([d[0] for c in cells for d in c[4][:2]])} | "
                f"{_span([c[4][2][0] for c in cells])} | {_span([c[5] for c in cells], '%')} | "
                f"{met} |"
            )
    return out


def forecasts(
    rule: Rule,
    p: npt.NDArray[np.float64],
    *,
    rng: np.random.Generator,
    reps: int,
    hours: float,
    seed: int,
    history: int = HISTORY_POINTS,
) -> list[Pages]:
    """``reps`` forecasts of ``rule`` on a suite at the true rates ``p`` (one trial per task
    per minute), each from what the CLI reads: one window drawn from the truth, and the
    level of a day of history, the mean of ``history`` hourly points (the window's and
    ``history - 1`` more windows; a window spans 20 minutes at this pace, so an hour's
    last snapshot is a window of its own; 0: the window's estimate alone)."""

    def window() -> Histogram:
        return Histogram.from_pairs(np.c_[np.full(p.size, WINDOW), rng.binomial(WINDOW, p)])

    got = []
    for r in range(reps):
        hist = window()
        points = [window_level(rule, hist)] + [
            window_level(rule, window()) for _ in range(history - 1)
        ]
        got.append(
            expected_false_pages(
                rule,
                hist,
                window=WINDOW,
                rounds_per_day=1440.0,
                hours=hours,
                seed=seed + r,
                tick=TICK,
                level=float(np.mean(points)) if history else None,
            )
        )
    return got


def forecast_error(
    sizes: tuple[int, ...] = (10, 20, 50),
    reps: int = 5,
    hours: float = 48.0,
    days: float = 14.0,
    seed: int = SEED,
    *,
    history: int = HISTORY_POINTS,
) -> list[str]:
    """The forecast from one window and a day of history against a long simulation at
    the truth, per cell.

    For each size, make-up and rule (the two lower-bound rules, the detector
    and the rate trigger) at a steady truth 0.85, uniform rates: ``days`` simulated at
    the true rates, and the forecast the CLI prints from ``reps`` windows
    drawn from the same truth (``forecasts``: at most ``hours`` simulated
    each, fewer once it has counted ``forecast.ENOUGH`` pages, as the CLI
    does, each at the level of a day of ``history``). A cell
    meets the goal when the median forecast is within 2x of the truth where
    the truth is at least one page a day, and elsewhere when no window's
    upper bound (90%) is under the truth. Each cell draws from a generator
    of its own, seeded by ``seed`` and its size, make-up and rule, so a part
    of the grid gives the whole grid's rows for it.
    """
    named = rules()
    chosen = [named[0], named[REFERENCE], named[DETECTOR], RATE]
    rates_of = RATES["uniform"][1]
    out = [
        "| tasks | make-up | rule | simulated /day | forecasts /day (median) | upper (90%) | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for tasks in sizes:
        for m, make_up in enumerate(MAKE_UPS):
            p = MAKE_UPS[make_up].rates(tasks, 0.85, K)
            rates = rates_of(p) * PER_MINUTE
            for r, (label, rule) in enumerate(chosen):
                rng = np.random.default_rng([seed, tasks, m, r])
                long = steady(
                    [rule],
                    p,
                    rates,
                    window=WINDOW,
                    k=K,
                    duration=days * 86400.0,
                    rng=rng,
                    tick=TICK,
                )
                truth = long.pages[0] / days
                firing = long.firing[0] / max(long.ticks, 1)
                got = forecasts(
                    rule, p, rng=rng, reps=reps, hours=hours, seed=seed, history=history
                )
                median = float(np.median([g.per_day for g in got]))
                on = float(np.median([g.firing_share for g in got]))
                if on >= STAYS_ON and firing >= STAYS_ON:
                    # An alert that stays on in both: the forecast says so (`firing x%`).
                    met = True
                    shown = f"firing {100 * firing:.0f}% | firing {100 * on:.0f}% (median) | -"
                else:
                    met = (
                        truth / 2.0 <= median <= 2.0 * truth
                        if truth >= 1.0
                        else all(g.upper >= truth for g in got)
                    )
                    shown = (
                        f"{truth:.2f} | "
                        + ", ".join(f"{g.per_day:.1f}" for g in got)
                        + f" ({median:.1f}) | "
                        + f"{min(g.upper for g in got):.1f} to {max(g.upper for g in got):.1f}"
                    )
                out.append(
                    f"| {tasks} | {make_up} | {label} | {shown} | "
                    + ("yes" if met else "no")
                    + " |"
                )
    return out


def main(
    *,
    quick: bool = False,
    seed: int | None = None,
    sizes: tuple[int, ...] | None = None,
    forecast_only: bool = False,
) -> None:
    seed = SEED if seed is None else seed
    grid = QUICK if quick else FULL
    if forecast_only:
        started = time.perf_counter()
        print(f"# the forecast against a long simulation at a steady 0.85, seed {seed}")
        print("\n".join(forecast_error(sizes=sizes or grid.sizes, seed=seed)), flush=True)
        print(f"# {time.perf_counter() - started:.0f} s")
        return
    if sizes is not None:
        # The cells draw from one generator in order, so a run of the first
        # sizes of the full grid gives exactly the full run's rows for them.
        grid = Grid(sizes, grid.make_ups, grid.rates, days=grid.days, reps=grid.reps)
    print(
        f"# below = {BELOW}, resolve_above = {RESOLVE}, k = {K}, window = {WINDOW}, judged every "
        f"{TICK:g} s, a mean of 1 trial per task per minute, seed {seed}"
    )
    for name, m in MAKE_UPS.items():
        print(f"# make-up {name}: {m.describe}")
    for name, (describe, _) in RATES.items():
        print(f"# rates {name}: {describe}")
    started = time.perf_counter()
    lines = run(grid, seed)
    print("\n".join(["", "# summary over the make-up x rate cells of each size", *summary(lines)]))
    print("\n# the forecast against a long simulation at a steady 0.85 (uniform rates)")
    print(
        "\n".join(
            forecast_error(
                sizes=grid.sizes,
                reps=3 if quick else 5,
                hours=6.0 if quick else 48.0,
                days=1.0 if quick else 14.0,
                seed=seed,
            )
        ),
        flush=True,
    )
    print(f"# {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m studies.pages",
        description="False pages per day and detection delay of the alert rules.",
    )
    parser.add_argument("--quick", action="store_true", help="a small grid")
    parser.add_argument("--seed", type=int, help="the study's seed (default: its own)")
    parser.add_argument(
        "--sizes",
        type=lambda text: tuple(int(x) for x in text.split(",")),
        help="suite sizes, comma-separated (default: the grid's)",
    )
    parser.add_argument(
        "--forecast",
        action="store_true",
        help="only the forecast's error table (14 simulated days a cell, 5 forecasts)",
    )
    a = parser.parse_args()
    main(quick=a.quick, seed=a.seed, sizes=a.sizes, forecast_only=a.forecast)
