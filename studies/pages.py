"""``make study-pages``: false pages per day and detection delay, as a table.

Each cell is a simulated live suite (pagesim): T tasks, a window of W
trials, one trial per task per minute, the CI recomputed every minute, every
rule judged every minute by ``alerts.step``. False pages: ``firing``
notifications per day on a suite whose per-task rates never change, at a
true pass^5 above the rules' ``below``. Detection delay: minutes from a
regression (true pass^5 0.90 -> 0.65) to the first ``firing``, median over
replications (``>H`` when most replications had not paged H minutes after).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reliabilityd.alerting.pagesim import MAKE_UPS, SHAPES, detection_delays, false_pages
from reliabilityd.alerting.rules import Rule

K = 5
BELOW = 0.75
RESOLVE = 0.8


def rules() -> list[tuple[str, Rule]]:
    """Today's rule at three `for` values beside the detector at three evidence levels."""
    out: list[tuple[str, Rule]] = []
    for f in (0, 60, 300):
        out.append(
            (
                f"ci-low, for={f}s",
                Rule(name="r", k=K, below=BELOW, resolve_above=RESOLVE, for_seconds=f),
            )
        )
    for nats in (8.0, 12.0, 16.0):
        out.append(
            (
                f"detector, evidence={nats:g}",
                Rule(
                    name="r",
                    k=K,
                    below=BELOW,
                    resolve_above=RESOLVE,
                    trigger="detector",
                    evidence=nats,
                ),
            )
        )
    return out


@dataclass(frozen=True)
class Cell:
    """One suite size: which truths to page on (each with its simulated days), how many
    regressions per shape."""

    tasks: int
    window: int
    truths: tuple[tuple[float, float], ...]
    reps: int


FULL = (
    Cell(50, 20, ((0.8, 4.0), (0.85, 20.0), (0.9, 4.0)), reps=200),
    Cell(200, 20, ((0.8, 2.0), (0.85, 2.0)), reps=50),
    Cell(50, 50, ((0.8, 2.0), (0.85, 2.0)), reps=50),
)
QUICK = (Cell(50, 20, ((0.85, 2.0),), reps=40),)
SEED = 20261130
HORIZON = 60


def _delay(d: np.ndarray, horizon: int) -> str:
    med = float(np.median(d))
    return f">{horizon}" if not np.isfinite(med) else f"{med:g}"


def run(cells: Sequence[Cell], seed: int = SEED) -> list[str]:
    """The study's markdown table rows (also printed as they come)."""
    named = rules()
    lines: list[str] = []
    shapes = " | ".join(f"delay {s} (min)" for s in SHAPES)
    header = (
        "| tasks x window | make-up | rule | true pass^5: false pages/day (pages/days "
        f"simulated, share of time firing) | {shapes} |"
    )
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    print("\n".join(lines), flush=True)
    rng = np.random.default_rng(seed)
    for cell in cells:
        for mname, make_up in MAKE_UPS.items():
            started = time.perf_counter()
            pages = [
                false_pages(
                    [r for _, r in named],
                    make_up.rates(cell.tasks, truth, K),
                    window=cell.window,
                    days=days,
                    rng=rng,
                    k=K,
                )
                for truth, days in cell.truths
            ]
            before = make_up.rates(cell.tasks, 0.9, K)
            delays = [
                detection_delays(
                    [r for _, r in named],
                    before,
                    shape.after(before, K),
                    window=cell.window,
                    reps=cell.reps,
                    rng=rng,
                    k=K,
                    horizon=HORIZON,
                )
                for shape in SHAPES.values()
            ]
            for j, (label, _) in enumerate(named):
                fp = "; ".join(
                    f"{t:g}: **{p[j].per_day:.2f}** ({p[j].pages}/{p[j].days:g}, "
                    f"{p[j].firing_share:.0%})"
                    for (t, _), p in zip(cell.truths, pages, strict=True)
                )
                dl = " | ".join(_delay(d[j], HORIZON) for d in delays)
                size = f"{cell.tasks} x {cell.window}"
                row = f"| {size} | {mname} | {label} | {fp} | {dl} |"
                lines.append(row)
                print(row, flush=True)
            print(
                f"<!-- {cell.tasks} x {cell.window} {mname}: {cell.reps} regressions per "
                f"shape, {time.perf_counter() - started:.0f} s -->",
                flush=True,
            )
    return lines


def engine_check(days: float = 1.0, seed: int = SEED) -> tuple[float, float]:
    """Today's rule (for = 0) on the mix at 0.85, CI by both engines on the same stream."""
    rule = rules()[0][1]
    p = MAKE_UPS["mix"].rates(50, 0.85, K)
    out = []
    for engine in ("fast", "exact"):
        rng = np.random.default_rng(seed)
        out.append(false_pages([rule], p, window=20, days=days, rng=rng, engine=engine)[0].per_day)
    return out[0], out[1]


def main(
    *,
    quick: bool = False,
    days: float | None = None,
    reps: int | None = None,
    seed: int | None = None,
) -> None:
    seed = SEED if seed is None else seed
    cells: tuple[Cell, ...] = QUICK if quick else FULL
    if days is not None or reps is not None:
        cells = tuple(
            Cell(
                c.tasks,
                c.window,
                tuple((t, d if days is None else days) for t, d in c.truths),
                c.reps if reps is None else reps,
            )
            for c in cells
        )
    print(f"# below = {BELOW}, resolve_above = {RESOLVE}, k = {K}, seed {seed}")
    for name, m in MAKE_UPS.items():
        print(f"# make-up {name}: {m.describe}")
    for name, s in SHAPES.items():
        print(
            f"# shape {name}: true pass^{K} 0.90 -> {s.target}, carried by {s.share:.0%} "
            "of the tasks (most reliable first)"
        )
    started = time.perf_counter()
    run(cells, seed)
    fast, exact = engine_check(days=1.0 if quick else 2.0, seed=seed)
    print(
        f"# engine check (mix at 0.85, ci-low for=0, same stream): fast CI {fast:.2f} "
        f"pages/day, estimate_metrics every minute {exact:.2f} pages/day"
    )
    print(f"# {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m studies.pages",
        description="False pages per day and detection delay of the alert rules.",
    )
    parser.add_argument("--quick", action="store_true", help="a small grid")
    parser.add_argument("--days", type=float, help="simulated days per false-page cell")
    parser.add_argument("--reps", type=int, help="regressions per delay cell")
    parser.add_argument("--seed", type=int, help="the study's seed (default: its own)")
    a = parser.parse_args()
    main(quick=a.quick, days=a.days, reps=a.reps, seed=a.seed)
