"""The rate-CUSUM prototype's core statistic against a direct computation."""

from __future__ import annotations

import numpy as np
import pytest

from reliabilityd.stats.ratecusum import reference, shifted
from studies.oracle import TICK
from studies.ratecalib import fitted
from studies.ratestat import (
    DAY,
    HS,
    Design,
    Running,
    Weights,
    advance,
    combine,
    tick,
    weights,
)


def _suite(rng: np.random.Generator, tasks: int = 8) -> tuple[np.ndarray, np.ndarray]:
    p = rng.uniform(0.6, 0.999, size=tasks)
    n = rng.integers(0, 400, size=tasks)
    return n, rng.binomial(n, p)


def _bernoulli_loglik(p: np.ndarray, passes: np.ndarray, fails: np.ndarray) -> float:
    """The log-probability of the tick's outcomes, one factor per trial."""
    total = 0.0
    for pi, a, b in zip(p.tolist(), passes.tolist(), fails.tolist(), strict=True):
        total += sum(np.log(pi) for _ in range(a)) + sum(np.log(1.0 - pi) for _ in range(b))
    return total


def test_the_reference_is_the_shrunk_rate_and_never_0_or_1() -> None:
    n = np.array([0, 10, 200, 50])
    c = np.array([0, 10, 190, 0])
    pooled = (200 + 0.5) / (260 + 1.0)
    got = reference(n, c, 20.0)
    assert np.allclose(got, (c + 20.0 * pooled) / (n + 20.0))
    assert ((got > 0) & (got < 1)).all()


def test_the_spread_alternative_puts_pass_k_at_below(rng: np.random.Generator) -> None:
    p0 = rng.uniform(0.96, 0.999, size=20)
    p1 = shifted(p0, 5, 0.75)
    assert float(np.mean(p1**5)) == pytest.approx(0.75, abs=1e-9)
    lo = np.log(p0 / (1 - p0)) - np.log(p1 / (1 - p1))
    assert np.allclose(lo, lo[0])  # one common log-odds shift
    low = np.full(5, 0.8)
    assert np.array_equal(shifted(low, 5, 0.75), low)  # already under: nothing to look for


def test_a_tick_adds_the_log_likelihood_ratio_of_its_outcomes(rng: np.random.Generator) -> None:
    """The global statistic's step is log P1(outcomes) - log P0(outcomes), trial by trial,
    with P0 the shrunk references and P1 the spread alternative; each local CUSUM's is
    that task's own ratio under its alternative: a new failure mode failing 30% of its
    trials, then its failure odds times 4 and times 100."""
    n, c = _suite(rng)
    design = Design(local_kill=(0.3,), local_odds=(4.0, 100.0))
    wt = weights(n, c, design)
    p0 = reference(n, c, design.prior)
    p1 = shifted(p0, 5, 0.75)
    passes = rng.integers(0, 4, size=n.size)
    fails = rng.integers(0, 3, size=n.size)
    direct = _bernoulli_loglik(p1, passes, fails) - _bernoulli_loglik(p0, passes, fails)
    s, w = tick(0.5, np.zeros((n.size, 3)), passes, fails, wt)
    assert s == pytest.approx(max(0.0, 0.5 + direct), abs=1e-9)
    lp = np.log(p0 / (1 - p0))
    alternatives = [0.7 * p0] + [1.0 / (1.0 + np.exp(-(lp - np.log(f)))) for f in (4.0, 100.0)]
    for j, q in enumerate(alternatives):
        for i in range(n.size):
            one = _bernoulli_loglik(q[i : i + 1], passes[i : i + 1], fails[i : i + 1])
            zero = _bernoulli_loglik(p0[i : i + 1], passes[i : i + 1], fails[i : i + 1])
            assert w[i, j] == pytest.approx(max(0.0, one - zero), abs=1e-9)


def test_the_mixture_is_its_formula(rng: np.random.Generator) -> None:
    w = rng.exponential(2.0, size=(6, 2))
    best = w.max(axis=1)
    assert combine(w, 0.0) == pytest.approx(best.sum())
    direct = sum(np.log(1 - 0.3 + 0.3 * np.exp(b)) for b in best.tolist())
    assert combine(w, 0.3) == pytest.approx(direct)
    shares = rng.uniform(0.0, 0.9, size=6)
    shares[0] = 0.0  # a task the mixture does not expect to change adds nothing
    direct = sum(
        np.log(1 - a + a * np.exp(b)) for a, b in zip(shares.tolist(), best.tolist(), strict=True)
    )
    assert combine(w, shares) == pytest.approx(direct)


def test_shares_by_pass_k_follow_what_each_task_can_lose(rng: np.random.Generator) -> None:
    n, c = _suite(rng, tasks=12)
    p0 = reference(n, c, Design().prior)
    assert np.allclose(weights(n, c, Design(share=0.3)).share, 0.3)
    got = weights(n, c, Design(share=0.3, share_by="passk")).share
    # 0.3 on average, each task in proportion to its p0^k, inside [1e-4, 0.95].
    assert np.allclose(got, np.clip(0.3 * p0**5 / np.mean(p0**5), 1e-4, 0.95))


@pytest.mark.parametrize(
    "share", [0.0, 0.3, np.array([0.0, 0.2, 0.5, 0.0, 0.9])], ids=["sum", "0.3", "per-task"]
)
def test_the_closed_form_chunk_is_the_tick_recursion(
    rng: np.random.Generator, share: float | np.ndarray
) -> None:
    """``advance`` (closed form, restarting at 0 after an alarm) against ``tick`` in a loop;
    with one share for all tasks, none (the plain sum), or one per task, some 0."""
    n, c = _suite(rng, tasks=5)
    design = Design(local_kill=(0.5,))
    wt = weights(n, c, design)
    ticks = 600
    passes = rng.poisson(0.5, size=(ticks, n.size))
    fails = rng.poisson(0.3, size=(ticks, n.size))
    g = passes @ wt.up_g + fails @ wt.down_g
    loc = (passes[..., None] * wt.up_l + fails[..., None] * wt.down_l).reshape(ticks, n.size, 1)
    h_g, h_l = 6.0, 8.0
    got = advance(
        Running(0.0, np.zeros((n.size, 1)), []), g, loc, h_g=h_g, h_l=h_l, first=100, share=share
    )
    s, w, alarms = 0.0, np.zeros((n.size, 1)), []
    for i in range(ticks):
        s, w = tick(s, w, passes[i], fails[i], wt)
        if s >= h_g or combine(w, share) >= h_l:
            alarms.append(100 + i)
            s, w = 0.0, np.zeros_like(w)
    assert got.alarms == alarms
    assert alarms  # the test means something: the fail rate here is well above the references
    assert got.s == pytest.approx(s, abs=1e-9)
    assert np.allclose(got.w, w, atol=1e-9)


def test_no_local_alternative_leaves_the_local_statistic_at_0() -> None:
    wt = weights(np.array([100, 100]), np.array([99, 90]), Design(local_kill=(), local_odds=()))
    assert isinstance(wt, Weights)
    assert wt.up_l.shape == (2, 0)
    assert combine(np.zeros((3, 2, 0)), 0.3).shape == (3,)


def test_the_short_path_calibration_follows_the_fitted_line_to_the_budget() -> None:
    """First passages whose mean grows exactly as 40 e^h ticks: the fitted line is that
    law, and the threshold it gives is where 40 e^h ticks reach the target."""
    chains = 3
    mean = 40.0 * np.exp(HS)
    ticks = np.where(mean < 10_000_000, np.rint(np.minimum(mean, 1e7)), -1).astype(np.int64)
    first = ticks[None, None, :].repeat(chains, axis=1).repeat(2, axis=0)
    target = 14 * DAY
    h_g, h_l = fitted(first, 10_000_000, target)
    expected = float(np.log(target / TICK / 40.0))
    assert h_g == pytest.approx(expected, abs=0.01)
    assert h_l == pytest.approx(expected, abs=0.01)
    # Too few thresholds crossed on every path: no line.
    assert np.isnan(fitted(np.full_like(first, -1), 10, target)[0])
