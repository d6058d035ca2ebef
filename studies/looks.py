"""The looks study: a gate re-run as trials arrive, and what that does to its false passes.

A pipeline that runs ``reliabilityd gate SUITE --at-least X`` after every
batch of trials and deploys on the first pass looks many times; a false
pass at any look counts. Each repetition draws T tasks from a population
(per-task pass rates p), then runs every task to ``n`` trials for each n of
``LOOKS_AT`` (the same tasks, their trials accumulating: the looks are as
dependent as a pipeline's), and asks the gate at each look. The threshold
is the population's true pass^k (``E[p^k]``, exact for a Beta population)
plus 1e-9, so that every pass is false.

Per cell it reports the share of repetitions that passed at the last look
alone (one look), at any of the looks with each look at the nominal
confidence (re-running the gate as it is), and at any of the looks with
each at ``look_confidence(confidence, looks)`` (``gate --looks N``). The
last must stay at or under the one-look risk, 2.5% at 95%.

    .venv/bin/python -m studies.looks --reps 400
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod, sqrt

import numpy as np

from reliabilityd.stats.estimate import estimate
from reliabilityd.stats.gate import judge_at_least, look_confidence

# Trials per task at each look: ten looks, five trials apart.
LOOKS_AT = tuple(range(5, 55, 5))
TASKS = (20, 50)
KS = (1, 5)
INTERVALS = ("gaffke", "percentile")
CONFIDENCE = 0.95
# Beta(a, b) pass rates: most tasks reliable, a tail that is not.
POPULATION = (2.0, 0.7)


def true_pass_hat_k(k: int, a: float = POPULATION[0], b: float = POPULATION[1]) -> float:
    """E[p^k] for p ~ Beta(a, b): prod_{i<k} (a + i) / (a + b + i)."""
    return prod((a + i) / (a + b + i) for i in range(k))


@dataclass(frozen=True)
class LooksResult:
    tasks: int
    k: int
    interval: str
    looks: int
    one_look: float
    any_look_nominal: float
    any_look_adjusted: float
    reps: int

    @property
    def standard_error(self) -> float:
        """Of a rate at the one-look risk, over these repetitions."""
        risk = (1.0 - CONFIDENCE) / 2.0
        return sqrt(risk * (1.0 - risk) / self.reps)


def run_cell(tasks: int, k: int, interval: str, *, reps: int, seed: int) -> LooksResult:
    rng = np.random.default_rng(seed)
    threshold = true_pass_hat_k(k) + 1e-9
    looks = len(LOOKS_AT)
    adjusted = look_confidence(CONFIDENCE, looks)
    last = any_nominal = any_adjusted = 0
    for rep in range(reps):
        p = rng.beta(*POPULATION, tasks)
        outcomes = rng.random((tasks, LOOKS_AT[-1])) < p[:, None]
        verdicts: dict[float, list[bool]] = {CONFIDENCE: [], adjusted: []}
        for n in LOOKS_AT:
            pairs = [(n, int(c)) for c in outcomes[:, :n].sum(axis=1)]
            for confidence, seen in verdicts.items():
                est = estimate(pairs, k, confidence=confidence, seed=rep, interval=interval)
                seen.append(judge_at_least(est, threshold) == "pass")
        last += verdicts[CONFIDENCE][-1]
        any_nominal += any(verdicts[CONFIDENCE])
        any_adjusted += any(verdicts[adjusted])
    return LooksResult(
        tasks, k, interval, looks, last / reps, any_nominal / reps, any_adjusted / reps, reps
    )


def table(results: Sequence[LooksResult]) -> str:
    """The markdown table docs/statistics.md carries."""
    lines = [
        "| interval | tasks | k | one look (the last) | any of 10 looks, each at 95% "
        "| any of 10 looks, `--looks 10` |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.interval} | {r.tasks} | {r.k} | {r.one_look:.1%} | {r.any_look_nominal:.1%} "
            f"| {r.any_look_adjusted:.1%} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--tasks", type=int, nargs="*", default=list(TASKS))
    args = parser.parse_args(argv)
    began = time.monotonic()
    results = [
        run_cell(tasks, k, interval, reps=args.reps, seed=args.seed + 1000 * i)
        for i, (interval, tasks, k) in enumerate(
            (interval, tasks, k) for interval in INTERVALS for tasks in args.tasks for k in KS
        )
    ]
    print(table(results))
    print(
        f"\n{args.reps} repetitions a cell, seed {args.seed}; a rate at the one-look risk "
        f"(2.5%) has a standard error of {results[0].standard_error:.1%}; "
        f"{time.monotonic() - began:.0f} s"
    )


if __name__ == "__main__":
    main()
