"""Decisions from intervals: pass, fail or undecided, and an assertion for test suites.

A gate never decides on a point estimate. ``judge_at_least`` passes when the
interval's lower bound reaches the threshold, fails when its upper bound is
below it, and is undecided otherwise (more trials or tasks may decide it);
``judge_not_worse`` does the same for a paired difference against ``-margin``.
UNKNOWN is undecided, never a pass.

A verdict is valid at its confidence for one look. A gate re-run as trials
arrive until it passes looks many times, and a false pass at any look
counts: with its 95% interval, each look risks a false pass of up to 2.5%,
and N looks up to N times that. ``look_confidence`` spreads the error over
a planned number of looks (Bonferroni's bound: whatever the dependence
between the looks, the chance that any of them passes falsely stays within
the one-look risk), so a pipeline that re-runs a gate at most N times runs
each look at ``look_confidence(confidence, N)``. ``studies/looks.py``
measures both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, TypeAlias, cast

from reliabilityd.stats.estimate import Estimate, Tasks, estimate
from reliabilityd.stats.estimators import metric_cells
from reliabilityd.stats.paired import Difference

__all__ = [
    "Verdict",
    "assert_pass_hat_k",
    "judge_at_least",
    "judge_not_worse",
    "look_confidence",
]

Verdict: TypeAlias = Literal["pass", "fail", "undecided"]


def look_confidence(confidence: float, looks: int) -> float:
    """The confidence of each of ``looks`` planned looks, so that all of them together
    keep the error of one look at ``confidence``: ``1 - (1 - confidence) / looks``."""
    if looks < 1:
        raise ValueError(f"looks must be at least 1, got {looks}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return 1.0 - (1.0 - confidence) / looks


def judge_at_least(est: Estimate, threshold: float) -> Verdict:
    """Whether the suite's value is at least ``threshold`` at the interval's confidence."""
    if est.ci is None:
        return "undecided"
    if est.ci[0] >= threshold:
        return "pass"
    if est.ci[1] < threshold:
        return "fail"
    return "undecided"


def judge_not_worse(diff: Difference, margin: float) -> Verdict:
    """Whether candidate - baseline is at least ``-margin`` at the interval's confidence."""
    if margin < 0:
        raise ValueError(f"margin must be at least 0, got {margin}")
    if diff.ci is None:
        return "undecided"
    if diff.ci[0] >= -margin:
        return "pass"
    if diff.ci[1] < -margin:
        return "fail"
    return "undecided"


def _describe(est: Estimate, label: str) -> str:
    if est.value is None or est.ci is None:
        return f"{label} is {est.unknown_reason}"
    return (
        f"{label} = {est.value:.4f}, {est.confidence:.0%} interval "
        f"[{est.ci[0]:.4f}, {est.ci[1]:.4f}] ({est.interval}) over {est.tasks} tasks"
    )


def assert_pass_hat_k(
    tasks: Tasks | Mapping[str, tuple[int, int]],
    k: int,
    at_least: float = 1.0,
    *,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 0,
    interval: str = "gaffke",
    worst: int = 5,
    looks: int = 1,
) -> Estimate:
    """Assert that pass^k is at least ``at_least``: its interval's lower bound reaches it.

    ``tasks`` is a Histogram, per-task ``(n, c)`` pairs, or ``{task: (n, c)}``
    (``Client.tasks``); with names, the message lists the ``worst`` least
    reliable tasks. Raises ``AssertionError`` with the numbers when the lower
    bound is under the threshold (failing, or not decided yet), returns the
    estimate otherwise. A test re-run as trials arrive, at most ``looks``
    times, passes ``looks`` so that its error over all of them stays that
    of one look at ``confidence`` (``look_confidence``).
    """
    named = dict(tasks) if isinstance(tasks, Mapping) else None
    pairs: Tasks = list(named.values()) if named is not None else cast(Tasks, tasks)
    est = estimate(
        pairs,
        k,
        "pass^k",
        confidence=look_confidence(confidence, looks),
        n_boot=n_boot,
        seed=seed,
        interval=interval,
    )
    verdict = judge_at_least(est, at_least)
    if verdict == "pass":
        return est
    label = f"pass^{k}"
    if verdict == "fail":
        why = f"its upper bound is under {at_least}"
    elif est.ci is None:
        why = "it cannot be computed"
    else:
        why = f"its lower bound is under {at_least}; more trials or tasks may decide it"
    message = f"{_describe(est, label)}: {why}"
    if named:
        usable = sorted((t for t, (n, _) in named.items() if n >= k), key=str)
        if usable:
            values = metric_cells(
                "pass^k", [named[t][0] for t in usable], [named[t][1] for t in usable], k
            )
            ranked = sorted(zip(values.tolist(), usable, strict=True))[:worst]
            rows = ", ".join(
                f"{t!r} {named[t][1]}/{named[t][0]} ({v:.3f})" for v, t in ranked if v < 1.0
            )
            if rows:
                message += f". Least reliable: {rows}"
    raise AssertionError(message)
