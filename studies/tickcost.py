"""``python -m studies.tickcost``: the CPU a rate CUSUM costs per tick, as a daemon runs it.

``commonpoint.Tracker.tick`` (the local statistic over a common change point, on a
grid of change points, with Ville's thresholds) beside the per-task CUSUMs' tick
(``ratestat.tick`` and the mixture ``ratestat.combine`` that decides an alarm), each
fed the same ticks of a healthy suite at a pass^5 of 0.85 (the ``mix`` make-up, every
task one trial a minute), measured in the same run so that their ratio holds on a
busy machine. The common form searches its change points only at ticks with a
failure where its bound reaches the threshold; the share of ticks searched is printed
beside the cost.

    python -m studies.tickcost                 # 50 and 1,000 tasks
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

from reliabilityd.rules.pagerate import MAKE_UPS
from studies.commonpoint import Tracker
from studies.oracle import PER_MINUTE, TICK, K
from studies.ratecusum import history
from studies.ratestat import DAY, Design, combine, tick, ville, weights

SEED = 20261209


def measure(tasks: int, ticks: int, grid: int, rng: np.random.Generator) -> str:
    """One row: microseconds per tick of each form, their ratio, and the share of ticks
    the common form searched."""
    design = Design(form="common", threshold_by="ville", grid=grid)
    p = MAKE_UPS["mix"].rates(tasks, 0.85, K)
    n, c = history(p, np.full(tasks, PER_MINUTE), DAY, rng)
    wt = weights(n, c, design)
    trials = rng.poisson(PER_MINUTE * TICK, size=(ticks, tasks))
    passes = rng.binomial(trials, p)
    fails = trials - passes
    h = ville(2.0 * 14 * DAY, TICK * grid)
    tracker = Tracker(wt, h_g=h, h_l=h, grid=grid)
    started = time.process_time()
    alarms = sum(tracker.tick(t, passes[t], fails[t]) for t in range(ticks))
    common = (time.process_time() - started) / ticks
    s, w, top = 0.0, np.zeros(wt.up_l.shape), 0.0
    started = time.process_time()
    for t in range(ticks):
        s, w = tick(s, w, passes[t], fails[t], wt)
        top = max(top, float(combine(w, wt.share)))
    per_task = (time.process_time() - started) / ticks
    return (
        f"| {tasks} | {common * 1e6:.0f} | {tracker.searches / ticks:.0%} | "
        f"{per_task * 1e6:.0f} | {common / per_task:.1f}x | {alarms} |"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m studies.tickcost", description=__doc__)
    parser.add_argument("--sizes", default="50,1000")
    parser.add_argument("--ticks", type=int, default=4 * 720, help="ticks per size (5 s each)")
    parser.add_argument("--grid", type=int, default=12, help="ticks between change points")
    parser.add_argument("--seed", type=int, default=SEED)
    a = parser.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    print(f"# {a.ticks} ticks a size, grid {a.grid}, seed {a.seed}")
    print(
        "| T | common change point: µs a tick | ticks searched | per-task CUSUMs | ratio | alarms |"
    )
    print("|---|---|---|---|---|---|")
    for tasks in (int(x) for x in a.sizes.split(",")):
        print(measure(tasks, a.ticks, a.grid, rng), flush=True)


if __name__ == "__main__":
    main()
