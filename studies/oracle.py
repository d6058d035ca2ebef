"""``make study-oracle``: how far each trigger is from the fastest detector there can be.

The yardstick is an oracle: a CUSUM that knows every task's true pass rate
before the change (``p0``) and after it (``p1``) and the tasks' trial rates.
Each trial is a mark (task, outcome), and under either law the marks of the
merged trial stream are independent and identically distributed (task i with
probability ``rate_i / total``, a pass with its rate), so the CUSUM of the
marks' log-likelihood ratios ``log p1/p0`` (a pass) and ``log (1-p1)/(1-p0)``
(a fail) is, by Lorden's theorem (Moustakides' for the exact optimality), the
detector with the least worst-case expected delay among all detectors with
the same mean time between false alarms. Its worst case is a change that
finds the statistic at 0, which is where the study starts it. Arrivals do not
depend on the change, so its mean delay in seconds is its mean delay in
trials over the total trial rate (Wald's identity).

Its threshold ``h`` makes the mean time between false alarms under the
pre-change law equal to the false-page budget (one page per suite in two
weeks unless told otherwise), computed by the Brook-Evans Markov chain (the
statistic on a grid of ``h / cells``, each increment rounded to it), checked
against a direct simulation by a test. Delays are simulated from 0 after the
change.

A drift has no single post-change law. Its oracle knows the rates before the
drift and the rates at the moment the truth crosses ``below`` (a CUSUM for
"the suite is at the crossing level"), is calibrated the same way, and is
timed from the crossing: negative when it pages before, which the best
detector of the crossing level does as the truth approaches it.

Beside the oracle each cell runs the default detector on the same cell
(``rules.simulator``, as ``make study-pages`` does, the same shapes and
seeds' scheme) and gives its mean and median delay and their ratio to the
oracle's, and its false pages over ``days`` simulated days at a steady 0.85
and at 0.80 (0.05 above ``below``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from reliabilityd.rules import Rule
from reliabilityd.rules.pagerate import MAKE_UPS, SHAPES, Shape
from reliabilityd.rules.simulator import (
    RATES,
    Path,
    Regressions,
    false_pages_per_day,
    regressions,
)
from reliabilityd.stats.ratecusum import llr

FloatArray = npt.NDArray[np.float64]

K = 5
BELOW = 0.75
RESOLVE = 0.8
WINDOW = 20
TICK = 5.0
PER_MINUTE = 1.0 / 60.0
SEED = 20261203
LEAD = 1200.0
STEP_HORIZON = 3600.0
DRIFT = 7200.0
DRIFT_HORIZON = 4 * 3600.0
BUDGET_DAYS = 14.0
CHAINS = 100


def marks(
    p: FloatArray, rates: FloatArray, up: FloatArray, down: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """The increments a trial adds to the CUSUM, and their probabilities, under rates ``p``."""
    share = rates / rates.sum()
    x = np.concatenate([up, down])
    q = np.concatenate([share * p, share * (1.0 - p)])
    keep = q > 0
    return x[keep], q[keep]


def cusum(increments: FloatArray, start: FloatArray | float = 0.0) -> FloatArray:
    """The CUSUM ``S_n = max(0, S_{n-1} + x_n)`` along the last axis from ``start``.

    In closed form: with ``W`` the running sum from ``start``,
    ``S_n = W_n - min(0, min_{m <= n} W_m)``, so a whole chunk is three array
    passes instead of a Python loop.
    """
    w = np.asarray(start, dtype=np.float64)[..., None] + np.cumsum(increments, axis=-1)
    out: FloatArray = w - np.minimum(np.minimum.accumulate(w, axis=-1), 0.0)
    return out


def threshold(
    x: FloatArray,
    q: FloatArray,
    trials: float,
    rng: np.random.Generator,
    *,
    chains: int = CHAINS,
) -> tuple[float, float]:
    """(h, its mean run length): the least ``h`` whose mean run length from 0 under
    these increments is at least ``trials``.

    Simulated: ``chains`` independent CUSUM paths of ``2 * trials`` marks each,
    and for every ``h`` on a grid of 0.02 nats each path's first passage. For
    large ``h`` the run length is close to exponential (the chain renews at 0),
    so the mean is estimated with censoring as the exponential's maximum
    likelihood (the passages' and the censored paths' lengths over the number
    of passages), and the least grid ``h`` whose mean, less one standard error,
    reaches ``trials`` wins.
    Grid methods (the Brook-Evans chain, the run-length integral equation)
    are badly biased here: a small pre-change drift from many unchanged tasks
    and a few large jumps from the changed ones.
    """
    hs = np.arange(0.5, 40.0, 0.02)
    length = int(np.ceil(2.0 * trials))
    first = np.full((chains, hs.size), -1, dtype=np.int64)
    cdf = np.cumsum(q)
    cdf /= cdf[-1]
    s = np.zeros(chains)
    top = np.zeros(chains)
    chunk = 8192
    done = 0
    while done < length:
        n = min(chunk, length - done)
        u = np.searchsorted(cdf, rng.random((chains, n)), side="right").clip(max=x.size - 1)
        path = cusum(x[u], s)
        running = np.maximum.accumulate(np.maximum(path, top[:, None]), axis=1)
        new_top = running[:, -1]
        for c in np.flatnonzero(new_top > top).tolist():
            fresh = (hs > top[c]) & (hs <= new_top[c])
            first[c, fresh] = done + np.searchsorted(running[c], hs[fresh], side="left") + 1
        s, top, done = path[:, -1].copy(), new_top, done + n
    seen = first >= 0
    events = seen.sum(axis=0)
    exposure = np.where(seen, first, length).sum(axis=0)
    with np.errstate(divide="ignore"):
        mean = np.where(events > 0, exposure / np.maximum(events, 1), np.inf)
    # One standard error under the estimate (the exponential's, 1 / sqrt(passages)) must
    # reach the target, so the grid point chosen by a noisy estimate is not one whose
    # true run length falls short of it.
    low = np.where(events > 1, exposure / np.maximum(events, 1), 0.0) * (
        1.0 - 1.0 / np.sqrt(np.maximum(events, 1))
    )
    above = np.flatnonzero(low >= trials)
    if above.size == 0:
        raise ValueError("no h on the grid reaches the run length asked")
    # The grid point itself, not an interpolation: with a few large jumps the run
    # length steps up between grid points, so this is the least h on the grid
    # whose run length is at least the budget.
    i = int(above[0])
    return float(hs[i]), float(mean[i])


def first_passage(
    x: FloatArray, q: FloatArray, h: float, reps: int, *, rng: np.random.Generator, cap: int
) -> npt.NDArray[np.int64]:
    """Trials until the CUSUM reaches ``h`` from 0, ``reps`` times (``cap`` + 1: not by cap)."""
    out = np.full(reps, cap + 1, dtype=np.int64)
    cdf = np.cumsum(q)
    cdf /= cdf[-1]
    for r in range(reps):
        s, done, chunk = 0.0, 0, 256
        while done < cap:
            n = min(chunk, cap - done)
            inc = x[np.searchsorted(cdf, rng.random(n), side="right").clip(max=x.size - 1)]
            path = cusum(inc, s)
            hit = np.flatnonzero(path >= h)
            if hit.size:
                out[r] = done + int(hit[0]) + 1
                break
            s, done, chunk = float(path[-1]), done + n, min(chunk * 2, 1 << 16)
    return out


@dataclass(frozen=True)
class Delay:
    """Seconds from the change (or the crossing) to the alarm: mean, median, p90, misses."""

    mean: float
    median: float
    p90: float
    missed: float

    @staticmethod
    def of(seconds: FloatArray) -> Delay:
        finite = np.isfinite(seconds)
        return Delay(
            float(seconds.mean()) if finite.all() else float("inf"),
            float(np.median(seconds)),
            float(np.quantile(seconds, 0.9, method="higher")),
            float(1.0 - finite.mean()),
        )


def oracle_step(
    p0: FloatArray,
    p1: FloatArray,
    rates: FloatArray,
    *,
    budget: float,
    reps: int,
    rng: np.random.Generator,
    horizon: float = STEP_HORIZON,
) -> tuple[float, Delay]:
    """(seconds between false alarms, delay) of the oracle CUSUM for a step ``p0`` -> ``p1``:
    at least ``budget`` seconds between false alarms (the least threshold that gives it)."""
    total = float(rates.sum())
    up, down = llr(p0, p1)
    changed = p0 != p1
    up, down = np.where(changed, up, 0.0), np.where(changed, down, 0.0)
    h, run = threshold(*marks(p0, rates, up, down), budget * total, rng)
    # Not censored at the triggers' horizon: the yardstick is the oracle's true mean
    # (a trigger not firing within the horizon has no finite mean to compare anyway).
    cap = int(horizon * total * 50)
    n = first_passage(*marks(p1, rates, up, down), h, reps, rng=rng, cap=cap)
    seconds = rng.gamma(n.astype(np.float64), 1.0) / total
    seconds[n > cap] = np.inf
    return run / total, Delay.of(seconds)


def oracle_drift(
    path: Path,
    rates: FloatArray,
    crossing: float,
    *,
    budget: float,
    reps: int,
    rng: np.random.Generator,
    horizon: float = DRIFT_HORIZON,
) -> tuple[float, Delay]:
    """(seconds between false alarms, delay from the crossing) of the oracle CUSUM for the
    crossing level on a drift."""
    p0 = path.levels[0]
    # The rates at the moment the truth crosses `below`.
    grid_at = int(np.clip(np.ceil((crossing - path.start) / path.grid), 0, len(path.levels) - 1))
    pc = path.levels[grid_at]
    up, down = llr(p0, pc)
    total = float(rates.sum())
    h, run = threshold(*marks(p0, rates, up, down), budget * total, rng)
    out = np.full(reps, np.inf)
    t = rates.size
    for r in range(reps):
        m = rng.poisson(rates * horizon)
        task = np.repeat(np.arange(t), m)
        times = path.start + rng.random(task.size) * horizon
        order = np.argsort(times, kind="stable")
        task, times = task[order], times[order]
        p_now = np.empty(times.size)
        for j in range(t):
            sel = task == j
            p_now[sel] = path.rates_at(times[sel], j)
        passed = rng.random(times.size) < p_now
        inc = np.where(passed, up[task], down[task])
        hit = np.flatnonzero(cusum(inc) >= h)
        if hit.size:
            out[r] = times[hit[0]] - crossing
    return run / total, Delay.of(out)


def triggers() -> list[tuple[str, Rule]]:
    """The triggers held against the oracle: the rate trigger, the detector, its faster
    level threshold, the two lower-bound rules of the page-rate study, and the early
    warning."""

    def rule(**extra: Any) -> Rule:
        return Rule(**{"name": "r", "k": K, "below": BELOW, "resolve_above": RESOLVE, **extra})

    return [
        ("rate", rule(trigger="rate")),
        ("detector", rule(trigger="detector")),
        ("detector, level 0.5", rule(trigger="detector", level_evidence=0.5)),
        ("detector, below=0.80", rule(trigger="detector", below=0.8, resolve_above=0.85)),
        ("ci-low gaffke", rule(trigger="ci-low")),
        ("ci-low percentile", rule(trigger="ci-low", interval="percentile")),
    ]


def minutes_text(seconds: float) -> str:
    """Seconds as minutes for a table: whole past 10, one decimal under, inf kept."""
    if not np.isfinite(seconds):
        return "inf"
    m = seconds / 60.0
    return f"{m:.0f}" if abs(m) >= 10 else f"{m:.1f}"


def ratio_text(a: float, b: float) -> str:
    """a / b as "1.2x" for a table; inf when a is, "-" when b is not a positive finite."""
    if not np.isfinite(a):
        return "inf"
    return f"{a / b:.1f}x" if 0 < b < np.inf else "-"


@dataclass(frozen=True)
class Grid:
    sizes: tuple[int, ...]
    make_ups: tuple[str, ...]
    rates: tuple[str, ...]
    reps: int
    days: float
    # Seconds after a step that a trigger (and the oracle) is given to page.
    horizon: float = STEP_HORIZON


FULL = Grid((10, 20, 50), tuple(MAKE_UPS), tuple(RATES), reps=20, days=14.0)
QUICK = Grid((10,), ("mix",), ("uniform", "mostly-slow"), reps=4, days=0.5)

HEAD = [
    "| T | make-up | rates | trigger | false pages per 2 weeks (time firing) at 0.85 / 0.80 | "
    "step concentrated: mean / median min (x oracle) | step spread | "
    "drift 2 h: median / p90 min from the crossing | firing when the change began | "
    "met: within 2x of the oracle's mean, at most 1 false page in 2 weeks |",
    "|---|---|---|---|---|---|---|---|---|---|",
]


def _step_cell(d: Delay, orc: Delay) -> str:
    return (
        f"{minutes_text(d.mean)} / {minutes_text(d.median)} ({ratio_text(d.mean, orc.mean)} / "
        f"{ratio_text(d.median, orc.median)})"
    )


def run(
    grid: Grid,
    seed: int = SEED,
    budget_days: float = BUDGET_DAYS,
    only: Sequence[str] | None = None,
) -> list[str]:
    """The study's markdown rows (printed as they come): per cell the oracle's row (its
    delays, and in the pages column the days between its false alarms, which the least
    threshold on the grid makes at least the budget), then one row per trigger (those
    named in ``only``, or all)."""
    rng = np.random.default_rng(seed)
    budget = budget_days * 86400.0
    named = [(label, r) for label, r in triggers() if only is None or label in only]
    if not named:
        raise ValueError(f"no trigger is named {', '.join(only or [])}")
    rules = [r for _, r in named]
    print("\n".join(HEAD), flush=True)
    lines = list(HEAD)
    for tasks in grid.sizes:
        for mname in grid.make_ups:
            make_up = MAKE_UPS[mname]
            for rname in grid.rates:
                started = time.perf_counter()
                pattern = RATES[rname][1]
                pages = []
                shares = []
                for level, days in ((0.85, grid.days), (0.80, grid.days / 2.0)):
                    p = make_up.rates(tasks, level, K)
                    fp, share = false_pages_per_day(
                        rules,
                        p,
                        pattern(p) * PER_MINUTE,
                        days=days,
                        rng=rng,
                        window=WINDOW,
                        k=K,
                        tick=TICK,
                    )
                    pages.append([f * 14.0 for f in fp])
                    shares.append(share)
                before = make_up.rates(tasks, 0.9, K)
                rates = pattern(before) * PER_MINUTE
                oracle: list[Delay] = []
                quiet: list[float] = []
                found: list[Regressions] = []
                for sname in ("concentrated", "spread"):
                    shape = SHAPES[sname]
                    between, orc = oracle_step(
                        before,
                        shape.after(before, K),
                        rates,
                        budget=budget,
                        reps=400,
                        rng=rng,
                        horizon=grid.horizon,
                    )
                    oracle.append(orc)
                    quiet.append(between / 86400.0)
                    path = Path(before, K, shape, start=LEAD)
                    found.append(
                        regressions(
                            rules,
                            path,
                            rates,
                            reps=grid.reps,
                            horizon=grid.horizon,
                            crossing=path.crossing(BELOW),
                            rng=rng,
                            window=WINDOW,
                            k=K,
                            tick=TICK,
                        )
                    )
                drift = Path(before, K, Shape("drift", 1.0, 0.7), start=LEAD, ramp=DRIFT)
                crossing = drift.crossing(BELOW)
                between, orc = oracle_drift(
                    drift, rates, crossing, budget=budget, reps=100, rng=rng
                )
                oracle.append(orc)
                quiet.append(between / 86400.0)
                found.append(
                    regressions(
                        rules,
                        drift,
                        rates,
                        reps=grid.reps,
                        horizon=DRIFT_HORIZON,
                        crossing=crossing,
                        rng=rng,
                        window=WINDOW,
                        k=K,
                        tick=TICK,
                    )
                )
                cell = f"| {tasks} | {mname} | {rname} |"
                rows = [
                    f"{cell} oracle | one in {' / '.join(f'{d:.0f}' for d in quiet)} days | "
                    f"{minutes_text(oracle[0].mean)} / {minutes_text(oracle[0].median)} | "
                    f"{minutes_text(oracle[1].mean)} / {minutes_text(oracle[1].median)} | "
                    f"{minutes_text(oracle[2].median)} / {minutes_text(oracle[2].p90)} | | |"
                ]
                for j, (label, _) in enumerate(named):
                    ds = [Delay.of(f.delay[j]) for f in found]
                    on = float(np.mean([f.on_at_start[j].mean() for f in found]))
                    # A rule firing most of a healthy day pages rarely because it rarely
                    # resolves, and "catches" a change it was already firing at.
                    misses = [] if pages[0][j] <= 1.0 else ["pages"]
                    if shares[0][j] >= 0.5 or on >= 0.5:
                        misses.append("on at a healthy 0.85")
                    misses += [
                        name
                        for name, d, o in zip(("concentrated", "spread"), ds, oracle, strict=False)
                        if not (np.isfinite(d.mean) and d.mean <= 2.0 * o.mean)
                    ]
                    verdict = "yes" if not misses else "no: " + ", ".join(misses)
                    rows.append(
                        f"{cell} {label} | {round(pages[0][j], 2):g} ({shares[0][j]:.0%}) / "
                        f"{round(pages[1][j], 2):g} ({shares[1][j]:.0%}) | "
                        f"{_step_cell(ds[0], oracle[0])} | {_step_cell(ds[1], oracle[1])} | "
                        f"{minutes_text(ds[2].median)} / {minutes_text(ds[2].p90)} | "
                        f"{on:.0%} | {verdict} |"
                    )
                lines.extend(rows)
                print("\n".join(rows), flush=True)
                print(
                    f"<!-- T={tasks} {mname} {rname}: {grid.days:g} + {grid.days / 2:g} days, "
                    f"{grid.reps} regressions per shape, {time.perf_counter() - started:.0f} s -->",
                    flush=True,
                )
    return lines


def main(
    *,
    quick: bool = False,
    seed: int | None = None,
    sizes: Sequence[int] | None = None,
    days: float | None = None,
    make_ups: Sequence[str] | None = None,
    rates: Sequence[str] | None = None,
    reps: int | None = None,
    only: Sequence[str] | None = None,
    horizon: float | None = None,
) -> None:
    grid = QUICK if quick else FULL
    grid = Grid(
        grid.sizes if sizes is None else tuple(sizes),
        grid.make_ups if make_ups is None else tuple(make_ups),
        grid.rates if rates is None else tuple(rates),
        grid.reps if reps is None else reps,
        grid.days if days is None else days,
        grid.horizon if horizon is None else horizon,
    )
    seed = SEED if seed is None else seed
    print(
        f"# below = {BELOW}, resolve_above = {RESOLVE}, k = {K}, window = {WINDOW}, judged every "
        f"{TICK:g} s, a mean of 1 trial per task per minute; the oracle calibrated to one false "
        f"alarm in {BUDGET_DAYS:g} days; false pages over {grid.days:g} simulated days at "
        f"0.85 and {grid.days / 2:g} at 0.80, {grid.reps} regressions per shape, steps "
        f"followed {grid.horizon / 60:g} min; seed {seed}"
    )
    started = time.perf_counter()
    run(grid, seed, only=only)
    print(f"# {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m studies.oracle",
        description="Each trigger's delay beside the optimal detector's at the same false-alarm "
        "rate.",
    )
    parser.add_argument("--quick", action="store_true", help="a small grid")
    parser.add_argument("--seed", type=int, help="the study's seed (default: its own)")
    parser.add_argument(
        "--sizes",
        type=lambda text: tuple(int(x) for x in text.split(",")),
        help="suite sizes, comma-separated (default: 10,20,50)",
    )
    parser.add_argument("--days", type=float, help="simulated days of false pages per level")
    listed = lambda text: tuple(text.split(","))  # noqa: E731
    parser.add_argument("--make-ups", type=listed, help=f"of {', '.join(MAKE_UPS)}")
    parser.add_argument("--rates", type=listed, help=f"of {', '.join(RATES)}")
    parser.add_argument("--reps", type=int, help="regressions per shape (default: 20)")
    parser.add_argument(
        "--step-horizon",
        type=float,
        help=f"seconds after a step a trigger is given to page (default: {STEP_HORIZON:g})",
    )
    parser.add_argument(
        "--triggers",
        type=listed,
        help=f"the triggers to run, comma-separated labels (default: all of "
        f"{', '.join(label for label, _ in triggers())})",
    )
    a = parser.parse_args()
    main(
        quick=a.quick,
        seed=a.seed,
        sizes=a.sizes,
        days=a.days,
        make_ups=a.make_ups,
        rates=a.rates,
        reps=a.reps,
        only=a.triggers,
        horizon=a.step_horizon,
    )
