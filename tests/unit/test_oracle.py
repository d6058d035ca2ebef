"""The oracle yardstick of the trigger study: its CUSUM, its calibration, its delays."""

from __future__ import annotations

import numpy as np
import pytest

from reliabilityd.rules.pagerate import MAKE_UPS, SHAPES, Shape
from reliabilityd.rules.simulator import RATES
from reliabilityd.stats.ratecusum import llr
from studies.oracle import PER_MINUTE, K, cusum, first_passage, marks, oracle_step, threshold


def _loop(x: np.ndarray, start: float = 0.0) -> np.ndarray:
    s, out = start, []
    for v in x.tolist():
        s = max(0.0, s + v)
        out.append(s)
    return np.array(out)


@pytest.mark.parametrize("seed", range(5))
def test_the_closed_form_is_the_recursion(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.normal(-0.1, 1.0, size=500)
    start = float(rng.uniform(0, 3))
    assert np.allclose(cusum(x, start), _loop(x, start), atol=1e-9)
    rows = rng.normal(-0.2, 1.0, size=(4, 300))
    starts = rng.uniform(0, 2, size=4)
    got = cusum(rows, starts)
    for r in range(4):
        assert np.allclose(got[r], _loop(rows[r], float(starts[r])), atol=1e-9)


def _cell(tasks: int, make_up: str, rates: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    before = MAKE_UPS[make_up].rates(tasks, 0.9, K)
    after = SHAPES["concentrated"].after(before, K)
    return before, after, RATES[rates][1](before) * PER_MINUTE


@pytest.mark.parametrize(("tasks", "make_up"), [(10, "mix"), (20, "alike")])
def test_the_threshold_gives_at_least_the_run_length_asked(tasks: int, make_up: str) -> None:
    """Calibrated on one set of paths, checked on fresh ones: the mean run length at the
    chosen h is at least the target (within Monte Carlo error) and near the estimate."""
    before, after, rates = _cell(tasks, make_up, "uniform")
    up, down = llr(before, after)
    x, q = marks(before, rates, up, down)
    target = 3000.0
    h, estimate = threshold(x, q, target, np.random.default_rng(1))
    assert estimate >= target
    runs = first_passage(x, q, h, 600, rng=np.random.default_rng(2), cap=10**8)
    mean, se = runs.mean(), runs.std() / np.sqrt(runs.size)
    assert mean >= target - 3 * se
    assert abs(mean - estimate) <= 4 * se + 0.1 * estimate


def test_the_oracle_is_faster_for_a_bigger_change() -> None:
    """The CUSUM's drift after the change grows with the change: a step to 0.65 is found
    sooner than a step to 0.80, and within the horizon every time."""
    before, _, rates = _cell(10, "mix", "uniform")
    rng = np.random.default_rng(3)
    budget = 86400.0
    big = SHAPES["spread"].after(before, K)
    small = Shape("spread", 1.0, 0.8).after(before, K)
    _, fast = oracle_step(before, big, rates, budget=budget, reps=200, rng=rng)
    _, slow = oracle_step(before, small, rates, budget=budget, reps=200, rng=rng)
    assert fast.mean < slow.mean
    assert fast.missed == 0.0
