"""The informed mixture (``studies.informed``): its candidates, alternative and prior."""

from __future__ import annotations

import numpy as np
import pytest

from reliabilityd.rules.pagerate import MAKE_UPS, SHAPES
from reliabilityd.stats.ratecusum import llr, shifted
from studies.commonpoint import common_mixture
from studies.informed import informed
from studies.oracle import BELOW, K

# Candidates per make-up: the 80% of a `mix` suite at 0.98 before the fit to 0.90, every
# task of an `alike` one, the reliable half of a `lottery` one at 10 tasks and 80% at 50.
CANDIDATES = {"mix": (8, 40), "alike": (10, 50), "lottery": (5, 40)}


@pytest.mark.parametrize("make_up", list(MAKE_UPS))
@pytest.mark.parametrize("tasks", [10, 50])
def test_the_mixture_knows_the_step_but_not_its_tasks(make_up: str, tasks: int) -> None:
    before = MAKE_UPS[make_up].rates(tasks, 0.9, K)
    after = SHAPES["concentrated"].after(before, K)
    changed = after != before
    mix = informed(before, after)
    wt = mix.weights
    # 30% of the tasks change; the candidates are every task as reliable as they were.
    assert changed.sum() == round(0.3 * tasks)
    assert mix.candidates.sum() == CANDIDATES[make_up][tasks == 50]
    assert mix.candidates[changed].all()
    assert before[mix.candidates].min() >= before[changed].min()
    assert before[~mix.candidates].max(initial=0.0) < before[changed].min()
    # The changed tasks' alternative is their true post-change rate.
    up, down = llr(before[changed], after[changed])
    assert np.allclose(wt.up_l[changed, 0], up)
    assert np.allclose(wt.down_l[changed, 0], down)
    # The prior expects as many changed tasks as there are, among the candidates only.
    assert float(wt.share.sum()) == pytest.approx(float(changed.sum()))
    assert (wt.share[~mix.candidates] == 0).all()
    assert (wt.up_l[~mix.candidates] == 0).all()
    assert (wt.down_l[~mix.candidates] == 0).all()
    # The global statistic's alternative is the prototype's, from the true rates.
    up_g, down_g = llr(before, shifted(before, K, BELOW))
    assert np.allclose(wt.up_g, up_g)
    assert np.allclose(wt.down_g, down_g)


def test_a_step_that_changes_nothing_is_refused() -> None:
    p = np.full(5, 0.9)
    with pytest.raises(ValueError, match="changes no task"):
        informed(p, p.copy())


def _brute(loc: np.ndarray, share: np.ndarray, t: int, window: int) -> float:
    """The common-change-point mixture at tick ``t``, every change point in the window."""
    best = -np.inf
    for e in range(max(0, t - window), t + 1):
        ratios = loc[e : t + 1].sum(axis=0)
        best = max(best, float(np.log(1 - share + share * np.exp(ratios)).sum()))
    return best


@pytest.mark.parametrize(
    ("window", "fail"),
    [(40, 0.03), (200, 0.1)],  # the second has several whole blocks of change points a window
)
def test_the_common_change_point_searches_only_where_the_maximum_can_be(
    rng: np.random.Generator, window: int, fail: float
) -> None:
    """At each tick with a failure it equals the maximum over every change point in the
    window; at every other tick that maximum is no higher than at the last failure's."""
    ticks, tasks = 300, 6
    fails = rng.random((ticks, tasks)) < fail
    passes = rng.poisson(0.4, size=(ticks, tasks))
    loc = passes * np.log(0.7) + fails * 2.5
    share = np.array([0.3, 0.3, 0.6, 0.1, 0.3, 0.0])
    at, values = common_mixture(loc, share, window=window)
    assert np.array_equal(at, np.flatnonzero((loc > 0).any(axis=1)))
    assert at.size > 5  # the test means something
    for t, v in zip(at.tolist(), values.tolist(), strict=True):
        assert v == pytest.approx(_brute(loc, share, t, window), abs=1e-9)
    # Between failures it only falls (or is at most the 0 of a change point at t), so
    # searching the failure ticks misses no alarm.
    events = set(at.tolist())
    for t in range(int(at[0]), ticks):
        if t not in events:
            last = _brute(loc, share, int(at[at < t][-1]), window)
            assert _brute(loc, share, t, window) <= max(last, 0.0) + 1e-9
