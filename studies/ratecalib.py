"""Can the rate CUSUM's thresholds be calibrated from short paths?

``ratestat.calibrate`` finds each statistic's threshold from six simulated
paths of 56 days under the suite's reference: 2-12 s of CPU per suite at
10-50 tasks, too much to run per suite in the daemon. This study compares
it, cell by cell of the oracle study's grid, with a calibration from
``--days`` (2) simulated days: the run length is estimated at every
threshold every path crossed, ``log`` of it fitted as a line in the
threshold over the upper two thirds of that range, and the line followed
out to the budget (twice 14 days, as ``calibrate`` asks). For a CUSUM of
exact log-likelihood ratios the run length grows like ``e^h`` (Wald's
identity), so the line's slope is about 1 and only its intercept needs
the short paths; the mixture of per-task CUSUMs is not such a statistic,
and the fit measures how far the line carries it.

    python -m studies.ratecalib              # 27 cells, about 4 minutes
    python -m studies.ratecalib --sizes 10   # one size
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from reliabilityd.rules.pagerate import MAKE_UPS
from reliabilityd.rules.simulator import RATES
from reliabilityd.stats.ratecusum import reference
from studies.oracle import TICK, K
from studies.ratecusum import _rates_estimate, history
from studies.ratestat import DAY, HS, Design, calibrate, first_passages, weights

SEED = 20261206
BUDGET = 14 * DAY
CHAINS = 6


def fitted(first: npt.NDArray[np.int64], total: int, target: float) -> tuple[float, float]:
    """Per statistic: the threshold where the line fitted to log run length reaches
    ``log(target)`` (nan when fewer than 5 thresholds were crossed on every path)."""
    out = []
    for j in range(2):
        seen = first[j] >= 0
        events = seen.sum(axis=0)
        exposure = np.where(seen, first[j], total).sum(axis=0) * TICK
        every = events == first.shape[1]
        if every.sum() < 5:
            out.append(float("nan"))
            continue
        x = HS[every]
        y = np.log(exposure[every] / events[every])
        upper = x >= x[len(x) // 3]
        slope, intercept = np.polyfit(x[upper], y[upper], 1)
        out.append(float((np.log(target) - intercept) / slope))
    return out[0], out[1]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m studies.ratecalib", description=__doc__)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--days", type=float, default=2.0, help="simulated days a short path")
    parser.add_argument(
        "--sizes", type=lambda s: tuple(int(x) for x in s.split(",")), default=(10, 20, 50)
    )
    a = parser.parse_args(argv)
    design = Design()
    rng = np.random.default_rng(a.seed)
    print(f"# {design}; budget 14 days; short paths {CHAINS} x {a.days:g} days; seed {a.seed}")
    print(
        "| T | make-up | rates | h global / local (nats), 6 x 56 days | CPU | "
        f"h global / local, 6 x {a.days:g} days and the fitted line | CPU | difference |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for tasks in a.sizes:
        for make_up in MAKE_UPS:
            for rates_name, (_, rates_of) in RATES.items():
                p = MAKE_UPS[make_up].rates(tasks, 0.85, K)
                n, c = history(p, rates_of(p) / 60.0, design.history, rng)
                wt = weights(n, c, design)
                p0 = reference(n, c, design.prior)
                rates = _rates_estimate(n, design.history)
                began = time.process_time()
                full = calibrate(p0, rates, wt, BUDGET, rng, share=wt.share)
                full_cpu = time.process_time() - began
                began = time.process_time()
                first, total = first_passages(
                    p0, rates, wt, rng, share=wt.share, chains=CHAINS, seconds=a.days * DAY
                )
                short = fitted(first, total, 2.0 * BUDGET)
                short_cpu = time.process_time() - began
                print(
                    f"| {tasks} | {make_up} | {rates_name} | {full[0]:.2f} / {full[1]:.2f} "
                    f"| {full_cpu:.1f} s | {short[0]:.2f} / {short[1]:.2f} | {short_cpu:.1f} s "
                    f"| {short[0] - full[0]:+.2f} / {short[1] - full[1]:+.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
