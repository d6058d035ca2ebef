"""The batched estimates of many series against each series computed alone.

``estimate_many`` and ``full_estimates_many`` compute every metric at every
k of many series in one pass (the CI tick's path); each estimate must be the
very float the per-series ``estimate`` gives, interval included.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reliabilityd import Histogram, estimate
from reliabilityd.stats import snapshot
from reliabilityd.stats.estimate import estimate_many
from reliabilityd.stats.estimators import METRICS, pass_at_k_cells, pass_hat_k_cells
from reliabilityd.stats.intervals import _batch_atoms, atoms
from reliabilityd.stats.saddlepoint import dirichlet_mean_quantile, dirichlet_mean_quantiles


def live_like(rng: np.random.Generator, tasks: int, top: int = 100) -> Histogram:
    """Tasks at their own pace (n uniform in [1, top]), mostly passing, some flaky."""
    if tasks == 0:
        return Histogram([], [], [])
    n = rng.integers(1, top + 1, size=tasks)
    p = rng.beta(2.0, 0.8, size=tasks)
    return Histogram.from_pairs(np.column_stack([n, rng.binomial(n, p)]))


def alone(hist: Histogram, k: int, **options: object) -> list[object]:
    return [estimate(hist, k, metric, **options) for metric in METRICS]  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    sizes=st.lists(st.sampled_from([0, 1, 2, 3, 8, 30, 120, 200, 400]), min_size=1, max_size=8),
    ks=st.lists(st.sampled_from([1, 2, 5, 10, 40]), min_size=1, max_size=3, unique=True),
    interval=st.sampled_from(["gaffke", "percentile"]),
    min_coverage=st.sampled_from([1.0, 0.8]),
    top=st.sampled_from([6, 100]),
)
def test_batched_estimates_are_the_per_series_ones_exactly(
    *, seed: int, sizes: list[int], ks: list[int], interval: str, min_coverage: float, top: int
) -> None:
    rng = np.random.default_rng(seed)
    hists = [live_like(rng, size, top) for size in sizes]
    options = {"interval": interval, "min_coverage": min_coverage, "seed": seed % 1000}
    batched = estimate_many(hists, ks, **options)  # type: ignore[arg-type]
    for hist, row in zip(hists, batched, strict=True):
        want = [e for k in ks for e in alone(hist, k, **options)]
        # Struct equality compares every float bit for bit (and every reason).
        assert row == want


def test_batched_saddlepoint_series_are_exact_whatever_shares_the_batch() -> None:
    """Live-like 200-task suites take the saddlepoint; mixed with small and empty ones."""
    rng = np.random.default_rng(20261201)
    hists = [live_like(rng, size) for size in [200] * 40 + [0, 3, 1000, 50, 200, 7]]
    stats = snapshot.StatsSettings(ks=(1, 5, 200))
    batched = snapshot.full_estimates_many([(h, stats) for h in hists])
    methods = {e.method for row in batched for e in row}
    assert "saddlepoint" in methods
    assert "exact-draw" in methods
    assert any(e.unknown for row in batched for e in row)
    for hist, row in zip(hists, batched, strict=True):
        assert row == snapshot.full_estimates(hist, stats)
    # The batch order does not matter either.
    backwards = snapshot.full_estimates_many([(h, stats) for h in reversed(hists)])
    assert backwards == batched[::-1]


def test_series_with_different_settings_each_get_their_own() -> None:
    rng = np.random.default_rng(7)
    hists = [live_like(rng, 200) for _ in range(6)]
    kinds = [
        snapshot.StatsSettings(ks=(1, 5)),
        snapshot.StatsSettings(ks=(3,), interval="percentile"),
        snapshot.StatsSettings(ks=(5,), min_coverage=0.5, seed=3),
    ]
    series = [(h, kinds[i % 3]) for i, h in enumerate(hists)]
    batched = snapshot.full_estimates_many(series)
    assert batched == [snapshot.full_estimates(h, s) for h, s in series]


def test_pass_at_1_and_pass_hat_1_are_one_number_with_one_interval() -> None:
    rng = np.random.default_rng(11)
    for hist in (live_like(rng, 200), live_like(rng, 5)):
        at1, hat1 = estimate_many([hist], [1])[0]
        assert (at1.value, at1.ci, at1.method) == (hat1.value, hat1.ci, hat1.method)
        assert at1.estimator != hat1.estimator


def test_pass_at_1_per_cell_is_c_over_n_rounded_once() -> None:
    n = np.arange(1, 400)
    c = n // 3
    at1 = pass_at_k_cells(n, c, 1)
    assert (at1 == pass_hat_k_cells(n, c, 1)).all()
    assert [float(Fraction(int(ci), int(ni))) for ni, ci in zip(n, c, strict=True)] == at1.tolist()


def test_dirichlet_quantile_rows_are_the_rows_solved_alone() -> None:
    rng = np.random.default_rng(3)
    values = [np.append(np.sort(rng.random(size)), 0.0) for size in (3, 7, 8, 9, 130, 300)]
    alpha = [np.append(rng.integers(1, 20, size=v.size - 1).astype(float), 1.0) for v in values]
    probs = [0.025, 0.975, 0.5, 0.1, 0.025, 0.975]
    together = dirichlet_mean_quantiles(values, alpha, probs)
    assert together.tolist() == [
        dirichlet_mean_quantile(v, a, p) for v, a, p in zip(values, alpha, probs, strict=True)
    ]
    assert all(0.0 <= q <= 1.0 for q in together)


@settings(max_examples=40, deadline=None)
@given(
    cells=st.lists(
        st.lists(st.tuples(st.integers(0, 6), st.integers(1, 5)), min_size=1, max_size=40),
        min_size=1,
        max_size=6,
    )
)
def test_batched_atoms_are_each_jobs_own(cells: list[list[tuple[int, int]]]) -> None:
    """The tick's one sort of every job's cells gives each job the atoms it has alone."""
    jobs = [
        (np.array([v / 6 for v, _ in job]), np.array([w for _, w in job], dtype=np.int64))
        for job in cells
    ]
    uniq, merged, first, size = _batch_atoms(jobs)
    for (values, count), begin, atoms_in in zip(jobs, first, size, strict=True):
        want_values, want_counts = atoms(values, count)
        assert uniq[begin : begin + atoms_in].tolist() == want_values.tolist()
        assert merged[begin : begin + atoms_in].tolist() == want_counts.tolist()


def test_live_point_estimates_of_many_series_are_each_ones_own() -> None:
    """The live loop's round computes every due suite's point estimates in one pass."""
    rng = np.random.default_rng(13)
    hists = [live_like(rng, size, top) for size in (0, 3, 200, 50) for top in (6, 100)]
    kinds = [
        snapshot.StatsSettings(ks=(1, 5)),
        snapshot.StatsSettings(ks=(3,), min_coverage=0.5),
    ]
    series = [(h, kinds[i % 2]) for i, h in enumerate(hists)]
    assert snapshot.point_estimates_many(series) == [
        snapshot.point_estimates(h, s) for h, s in series
    ]
