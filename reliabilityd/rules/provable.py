"""Can a ``ci-low`` rule prove its ``below`` on a suite of this size at a healthy truth?

A ``trigger = "ci-low"`` rule breaches when the CI's lower bound is under
``below``. On a small suite, or one whose tasks differ a lot, the interval
is wide, so even a suite well above ``below`` keeps its lower bound under
it: the rule is firing most of the day, whatever the agent does.
``firing_share`` measures that before anyone is paged. It takes the suite's
own make-up (each task's trials in the window and its pass rate, from its
counts with half a pass or fail added so no task is certain), moves every
task by one shift on the log-odds scale until the suite's metric is at a
healthy truth (``healthy_truth``: 0.10 above ``below``, at most half-way to
1), draws each task's passes from that, and returns the share of draws
whose lower bound, in the rule's interval, is under ``below``: the share of
judgements in breach on a steady healthy suite (each judgement sees one
such draw; consecutive ones are correlated, which moves when the breaches
come, not how many there are). ``reliabilityd check`` and the daemon's
start-up warn, naming the rule and the suite, when that share is over one
half.

Pure: the callers read the suites' counts and say what they found.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np
import numpy.typing as npt

from reliabilityd.rules.threshold import Rule
from reliabilityd.stats.estimate import estimate
from reliabilityd.stats.histogram import Histogram

__all__ = [
    "DRAWS",
    "Unprovable",
    "firing_share",
    "healthy_truth",
    "shifted_rates",
    "unprovable",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Draws per suite shape: the share's standard error is at most 0.5 / sqrt(DRAWS).
DRAWS = 101
# "Most of the day": the share of judgements in breach past which the warning is given.
MOST = 0.5
HEALTHY_MARGIN = 0.10


class Unprovable(msgspec.Struct, frozen=True):
    """A ``ci-low`` rule that would be firing most of the day on a suite at a healthy truth."""

    rule: str
    suite: str
    tasks: int
    trials: int  # the median of the tasks' trials in the window
    truth: float
    share: float

    def message(self, rule: Rule) -> str:
        return (
            f"rule {self.rule!r} (trigger ci-low, {rule.metric} at k={rule.k} below "
            f"{rule.below:g}) cannot prove its threshold on suite {self.suite!r} "
            f"({self.tasks} tasks, {self.trials} trials each in the median): at a true "
            f"{rule.metric} of {self.truth:.2f} its lower bound is under {rule.below:g} in "
            f"{self.share:.0%} of judgements, firing most of the day; the detector trigger "
            "(the default), more tasks, more trials per task or a lower `below` fit this "
            "suite (docs/alerts.md#ci-low-on-a-small-suite)"
        )


def healthy_truth(rule: Rule) -> float:
    """The truth a suite watched by ``rule`` is called healthy at: 0.10 above ``below``,
    at most half-way from ``below`` to 1."""
    return min(rule.below + HEALTHY_MARGIN, (1.0 + rule.below) / 2.0)


def _metric(rule: Rule, rates: FloatArray) -> float:
    """The suite's metric at the rule's k when each task passes a trial at its rate."""
    if rule.metric == "pass^k":
        return float(np.mean(rates**rule.k))
    return float(np.mean(1.0 - (1.0 - rates) ** rule.k))


def shifted_rates(rule: Rule, n: IntArray, c: IntArray, truth: float) -> FloatArray:
    """Each task's pass rate from its counts (half a pass and half a fail added), all moved
    by one log-odds shift so that the suite's metric at the rule's k is ``truth``."""
    return shift_logits(rule, np.log((c + 0.5) / (n - c + 0.5)), truth)


def shift_logits(rule: Rule, logit: FloatArray, truth: float) -> FloatArray:
    """The pass rates of tasks at log-odds ``logit``, all moved by one shift so that the
    suite's metric at the rule's k is ``truth`` (bisection on the shift)."""
    lo, hi = -40.0, 40.0
    for _ in range(100):  # bisection: the metric grows with the shift
        mid = (lo + hi) / 2.0
        if _metric(rule, 1.0 / (1.0 + np.exp(-(logit + mid)))) < truth:
            lo = mid
        else:
            hi = mid
    out: FloatArray = 1.0 / (1.0 + np.exp(-(logit + (lo + hi) / 2.0)))
    return out


def firing_share(
    rule: Rule,
    counts: Sequence[tuple[int, int]],
    *,
    interval: str,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    draws: int = DRAWS,
) -> float | None:
    """The share of draws at ``healthy_truth(rule)`` in which the rule's lower bound is
    under ``below``, for a suite whose tasks hold ``counts`` (each task's trials and
    passes in its window).

    None when fewer than ``rule.min_tasks`` tasks have k trials (the rule gives no
    verdict) or every draw is UNKNOWN. Seeded: the same counts give the same share.
    """
    kept = [(n, c) for n, c in counts if n >= rule.k]
    if len(kept) < max(rule.min_tasks, 1):
        return None
    n = np.asarray([x[0] for x in kept], dtype=np.int64)
    c = np.asarray([x[1] for x in kept], dtype=np.int64)
    rates = shifted_rates(rule, n, c, healthy_truth(rule))
    rng = np.random.default_rng(seed)
    under = judged = 0
    for _ in range(draws):
        drawn = rng.binomial(n, rates)
        got = estimate(
            Histogram(n, drawn, np.ones_like(n)),
            rule.k,
            rule.metric,
            confidence=confidence,
            n_boot=n_boot,
            seed=seed,
            interval=rule.interval or interval,
        )
        if got.ci_low is None:
            continue
        judged += 1
        under += got.ci_low < rule.below
    return under / judged if judged else None


def unprovable(
    rule: Rule,
    suite: str,
    counts: Sequence[tuple[int, int]],
    *,
    interval: str,
    confidence: float = 0.95,
    n_boot: int = 2000,
) -> Unprovable | None:
    """The warning for ``rule`` on ``suite`` (its tasks' counts in the window), or None
    when the rule is not ``ci-low`` or its lower bound clears ``below`` at a healthy truth
    in at least half of the judgements."""
    if rule.trigger != "ci-low":
        return None
    share = firing_share(rule, counts, interval=interval, confidence=confidence, n_boot=n_boot)
    if share is None or share <= MOST:
        return None
    kept = sorted(n for n, _ in counts if n >= rule.k)
    return Unprovable(rule.name, suite, len(kept), kept[len(kept) // 2], healthy_truth(rule), share)
