"""``python -m studies.levels``: the detector's level threshold on a reduced page-rate grid.

The page-rate study's cells (``studies.pages``: its suites, rates, shapes and
judging) for a few sizes, make-ups and rate patterns, with fewer simulated
days and regressions, so that thresholds of ``level_evidence`` can be set
side by side in minutes: the lower-bound rule (``ci-low``, percentile), and
the detector at ``level_evidence`` 2, 1 (the default) and 0.5.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from reliabilityd.rules.pagerate import MAKE_UPS
from reliabilityd.rules.simulator import RATES, Judging, false_pages_per_day, regressions
from studies.pages import (
    BELOW,
    DRIFT_HORIZON,
    PER_MINUTE,
    STEP_HORIZON,
    TICK,
    WINDOW,
    K,
    _fmt,
    _minutes,
    _rule,
    shapes,
)

RULES = [
    ("ci-low percentile", _rule(trigger="ci-low", interval="percentile")),
    ("detector, level 2", _rule(level_evidence=2.0)),
    ("detector, level 1", _rule(level_evidence=1.0)),
    ("detector, level 0.5", _rule(level_evidence=0.5)),
]


def main(
    sizes: list[int], make_ups: list[str], rates: list[str], *, days: float, reps: int, seed: int
) -> None:
    print(
        "| T | make-up | rates | rule | false pages/day at 0.85 (time firing) | "
        "step concentrated: median / p90 min | step spread | drift 2 h |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(seed)
    rs = [r for _, r in RULES]
    started = time.perf_counter()
    for tasks in sizes:
        for mname in make_ups:
            for rname in rates:
                pattern = RATES[rname][1]
                p = MAKE_UPS[mname].rates(tasks, 0.85, K)
                judging: Judging = {"window": WINDOW, "k": K, "rng": rng, "tick": TICK}
                fp, share = false_pages_per_day(
                    rs, p, pattern(p) * PER_MINUTE, days=days, **judging
                )
                before = MAKE_UPS[mname].rates(tasks, 0.9, K)
                ds = [
                    regressions(
                        rs,
                        path,
                        pattern(before) * PER_MINUTE,
                        reps=reps,
                        horizon=DRIFT_HORIZON if name.startswith("drift") else STEP_HORIZON,
                        crossing=path.crossing(BELOW),
                        **judging,
                    ).delay
                    for name, path in shapes(before)
                ]
                for j, (label, _) in enumerate(RULES):
                    cells = " | ".join(
                        f"{_fmt(m)} / {_fmt(q)}" for m, q in (_minutes(d[j]) for d in ds)
                    )
                    print(
                        f"| {tasks} | {mname} | {rname} | {label} | {fp[j]:.1f} "
                        f"({share[j]:.0%}) | {cells} |",
                        flush=True,
                    )
    print(
        f"# {days:g} days, {reps} regressions per shape, seed {seed}, "
        f"{time.perf_counter() - started:.0f} s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m studies.levels", description=__doc__)
    parser.add_argument("--sizes", default="50,20", help="comma-separated suite sizes")
    parser.add_argument("--make-ups", default="mix,alike")
    parser.add_argument("--rates", default="uniform,mostly-slow")
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    a = parser.parse_args()
    main(
        [int(x) for x in a.sizes.split(",")],
        a.make_ups.split(","),
        a.rates.split(","),
        days=a.days,
        reps=a.reps,
        seed=a.seed,
    )
