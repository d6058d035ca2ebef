"""The common-change-point mixture's chunked run (``studies.commonpoint.advance_common``)
against a tick-by-tick search over every change point, and its search under a floor
against the search everywhere."""

from __future__ import annotations

import numpy as np
import pytest

from studies.commonpoint import BLOCK, WINDOW, advance_common, common_mixture
from studies.ratestat import Running


@pytest.mark.parametrize("grid", [1, 3])
def test_chunks_with_restarts_are_the_tick_by_tick_search(
    rng: np.random.Generator, grid: int
) -> None:
    """Change points at every tick, or at every third (ticks numbered from 0)."""
    ticks, tasks = 3 * WINDOW, 5
    fails = rng.random((ticks, tasks)) < 0.02
    passes = rng.poisson(0.5, size=(ticks, tasks))
    local = passes * np.log(0.8) + fails * 2.0
    g = rng.normal(-0.05, 0.5, size=ticks)
    share = np.array([0.3, 0.0, 0.5, 0.3, 0.9])
    h_g, h_l = 4.0, 3.0

    state = Running(0.0, np.zeros((0, tasks)), [])
    for at in range(0, ticks, 250):  # chunks that cut the window
        state = advance_common(
            state,
            g[at : at + 250],
            local[at : at + 250, :, None],
            h_g=h_g,
            h_l=h_l,
            first=at,
            share=share,
            grid=grid,
        )

    s, last, alarms = 0.0, -1, []
    for t in range(ticks):
        s = max(0.0, s + g[t]) if grid == 1 else (max(0.0, s) if t % grid == 0 else s) + g[t]
        best = -np.inf
        for e in range(max(last + 1, t - WINDOW), t + 1):
            if e % grid:
                continue
            ratios = local[e : t + 1].sum(axis=0)
            best = max(best, float(np.log(1 - share + share * np.exp(ratios)).sum()))
        if s >= h_g or best >= h_l:
            alarms.append(t)
            s, last = 0.0, t
    assert state.alarms == alarms
    assert len(alarms) >= 2  # the test means something: both restarts and chunk edges
    assert abs(state.s - s) < 1e-9


def test_a_floor_skips_only_values_under_it(rng: np.random.Generator) -> None:
    """Under a floor every value at or above it is the full search's and every other is
    under it; with ``running`` the running maximum is the full search's."""
    ticks, tasks = 2 * WINDOW, 8
    fails = rng.random((ticks, tasks)) < 0.05
    passes = rng.poisson(0.6, size=(ticks, tasks))
    local = passes * np.log(0.7) + fails * 2.4
    share = np.full(tasks, 0.3)
    at, exact = common_mixture(local, share)
    assert at.size > 4 * BLOCK  # whole blocks of change points in a window
    floor = float(np.quantile(exact, 0.9))
    _, values = common_mixture(local, share, floor=floor)
    high = exact >= floor
    assert np.allclose(values[high], exact[high], atol=1e-9)
    assert (values[~high] < floor).all()
    assert (values >= exact - 1e-9).all()  # an upper bound where it is not the value
    start = float(np.quantile(exact, 0.5))
    _, rising = common_mixture(local, share, floor=start, running=True)
    assert np.allclose(
        np.maximum.accumulate(np.maximum(rising, start)),
        np.maximum.accumulate(np.maximum(exact, start)),
        atol=1e-9,
    )
