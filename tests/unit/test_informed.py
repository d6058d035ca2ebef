"""The informed mixture (``studies.informed``): its candidates, alternative and prior."""

from __future__ import annotations

import numpy as np
import pytest

from reliabilityd.rules.pagerate import MAKE_UPS, SHAPES
from studies.informed import informed
from studies.oracle import BELOW, K, llr
from studies.ratestat import shifted


@pytest.mark.parametrize("make_up", list(MAKE_UPS))
@pytest.mark.parametrize("tasks", [10, 50])
def test_the_mixture_knows_the_step_but_not_its_tasks(make_up: str, tasks: int) -> None:
    before = MAKE_UPS[make_up].rates(tasks, 0.9, K)
    after = SHAPES["concentrated"].after(before, K)
    changed = after != before
    mix = informed(before, after)
    wt = mix.weights
    # Every changed task is a candidate, and so is every task as reliable.
    assert np.array_equal(mix.candidates, before >= before[changed].min())
    assert mix.candidates[changed].all()
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
