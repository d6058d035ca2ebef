"""The common-change-point mixture's chunked run (``studies.commonpoint.advance_common``)
against a tick-by-tick search over every change point, and its search under a floor
against the search everywhere."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from studies.commonpoint import BLOCK, WINDOW, Tracker, advance_common, common_mixture
from studies.ratestat import Design, Running, weights


def _in_chunks(
    g: npt.NDArray[np.float64],
    local: npt.NDArray[np.float64],
    share: npt.NDArray[np.float64],
    *,
    h_g: float,
    h_l: float,
    grid: int,
    window: int = WINDOW,
) -> Running:
    """``advance_common`` over chunks of 250 ticks, which cut the window."""
    state = Running(0.0, np.zeros((0, local.shape[1])), [])
    for at in range(0, g.size, 250):
        state = advance_common(
            state,
            g[at : at + 250],
            local[at : at + 250, :, None],
            h_g=h_g,
            h_l=h_l,
            first=at,
            share=share,
            grid=grid,
            window=window,
        )
    return state


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

    state = _in_chunks(g, local, share, h_g=h_g, h_l=h_l, grid=grid)

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


@pytest.mark.parametrize("grid", [1, 3])
def test_the_tracker_is_the_chunked_run_a_tick_at_a_time(
    rng: np.random.Generator, grid: int
) -> None:
    """``Tracker``, the daemon-shaped form, alarms at the same ticks as ``advance_common``
    run in chunks, and the same when it judges only the ticks that have outcomes."""
    tasks, ticks = 12, 4 * WINDOW
    n = rng.integers(200, 2000, size=tasks)
    c = rng.binomial(n, rng.uniform(0.95, 0.999, size=tasks))  # pass^5 above 0.75: a global
    wt = weights(n, c, Design(form="common"))
    p = np.clip(c / n - 0.05, 0.5, 1.0)  # a little worse than the reference, so alarms come
    trials = rng.poisson(0.3, size=(ticks, tasks))
    trials[rng.random(ticks) < 0.3] = 0  # quiet ticks, which a daemon need not judge
    passes = rng.binomial(trials, p)
    fails = trials - passes
    h_g, h_l, window = 4.0, 5.0, 12  # a short window, so that its edge matters
    tracker = Tracker(wt, h_g=h_g, h_l=h_l, grid=grid, window=window)
    alarms = [t for t in range(ticks) if tracker.tick(t, passes[t], fails[t])]
    judged = Tracker(wt, h_g=h_g, h_l=h_l, grid=grid, window=window)
    busy = [t for t in range(ticks) if trials[t].any()]
    assert [t for t in busy if judged.tick(t, passes[t], fails[t])] == alarms
    g = passes @ wt.up_g + fails @ wt.down_g
    local = passes * wt.up_l[:, 0] + fails * wt.down_l[:, 0]
    got = _in_chunks(g, local, wt.share, h_g=h_g, h_l=h_l, grid=grid, window=window)
    assert alarms == got.alarms
    assert len(alarms) >= 3  # both statistics restart along the way
    for h in ((h_g, np.inf), (np.inf, h_l)):  # and each alarms on its own
        alone = Tracker(wt, h_g=h[0], h_l=h[1], grid=grid, window=window)
        assert any(alone.tick(t, passes[t], fails[t]) for t in range(ticks))
