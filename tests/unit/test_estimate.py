"""Suite-level estimates: the README's example suite, the bootstrap against brute force, UNKNOWN."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliabilityd import Estimate, Histogram, estimate, estimate_metrics
from reliabilityd.stats import intervals, saddlepoint
from reliabilityd.stats.bootstrap import (
    percentile_interval,
    replicate_means,
    resampled_cell_counts,
    wilson_interval,
)
from reliabilityd.stats.estimators import metric_cells

EXAMPLE_PASSES = [4, 2, 5, 3, 1, 2, 3, 5, 2, 1, 4, 3, 3, 2, 2, 3, 4, 2, 3, 2]
EXAMPLE_TASKS = [(5, c) for c in EXAMPLE_PASSES]


def test_the_readme_example_pass_at_5_is_one_with_wilson_ci() -> None:
    """multivon-eval's numbers, to the digit, with its interval."""
    est = estimate(EXAMPLE_TASKS, 5, "pass@k", interval="percentile")
    assert est.value == 1.0
    assert est.ci is not None
    assert est.ci[0] == pytest.approx(0.8389, abs=5e-5)
    assert est.ci[1] == 1.0
    assert (est.runs, est.tasks, est.left_out) == (5, 20, 0)
    assert est.estimator == "combinatorial-unbiased"


def test_the_readme_example_pass_hat_5_is_ten_percent() -> None:
    est = estimate(EXAMPLE_TASKS, 5, "pass^k", interval="percentile")
    assert est.value == pytest.approx(0.10)
    assert est.ci_low is not None
    assert est.ci_high is not None
    assert est.ci_low == pytest.approx(0.0, abs=0.02)
    assert est.ci_high == pytest.approx(0.25, abs=0.03)
    assert est.ci == pytest.approx((0.0, 0.25))
    assert est.method == "exact-draw"
    assert est.estimator == "hypergeometric-exact"
    assert est.metric == "pass^k"


def test_the_readme_example_by_default_gets_the_interval_that_covers() -> None:
    """gaffke by default: wider than the percentile interval, and never the point alone."""
    at5 = estimate(EXAMPLE_TASKS, 5, "pass@k")
    hat5 = estimate(EXAMPLE_TASKS, 5, "pass^k")
    assert (at5.interval, hat5.interval) == ("gaffke", "gaffke")
    assert at5.value == 1.0
    # One trial in five per task at k = 5 leaves 0 or 1 per task: the exact
    # bound, Clopper-Pearson. 20 of 20 at 1: 0.025 ** (1 / 20).
    assert at5.ci == pytest.approx((0.025 ** (1 / 20), 1.0), rel=1e-12)
    assert (at5.method, hat5.method) == ("exact", "exact")
    assert hat5.value == pytest.approx(0.10)
    # 2 of 20 at 1: the Clopper-Pearson interval, (0.0123485, 0.3169827).
    assert hat5.ci == pytest.approx((0.012348527, 0.316982714), abs=1e-9)
    percentile = estimate(EXAMPLE_TASKS, 5, "pass^k", interval="percentile")
    assert percentile.ci is not None
    assert hat5.ci is not None
    assert hat5.ci[0] >= percentile.ci[0]
    assert hat5.ci[1] > percentile.ci[1]


def exact_suite_value(tasks: list[tuple[int, int]], k: int, metric: str) -> Fraction:
    total = Fraction(0)
    for n, c in tasks:
        if metric == "pass^k":
            total += Fraction(comb(c, k), comb(n, k))
        else:
            total += 1 - Fraction(comb(n - c, k), comb(n, k))
    return total / len(tasks)


suites = st.lists(
    st.integers(1, 12).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))),
    min_size=1,
    max_size=40,
)


@given(suites, st.integers(1, 4), st.sampled_from(["pass@k", "pass^k"]))
def test_point_value_is_the_exact_mean(tasks: list[tuple[int, int]], k: int, metric: str) -> None:
    est = estimate(tasks, k, metric, min_coverage=1e-9, n_boot=50)  # type: ignore[arg-type]
    used = [(n, c) for n, c in tasks if n >= k]
    if not used:
        assert est.value is None
        return
    assert est.left_out == len(tasks) - len(used)
    assert est.tasks == len(used)
    assert est.runs == min(n for n, _ in used)
    assert est.ci is not None
    exact = float(exact_suite_value(used, k, metric))
    lo, hi = est.ci
    # The point estimate is clamped into its CI; unclamped it is the exact mean.
    assert est.value == pytest.approx(min(max(exact, lo), hi), abs=1e-12)
    assert est.value is not None
    assert 0.0 <= lo <= est.value <= hi <= 1.0


def brute_force_ci(
    tasks: list[tuple[int, int]], k: int, metric: str, n_boot: int, rng: np.random.Generator
) -> tuple[float, float]:
    """The textbook resampler: draw T task indices with replacement, B times."""
    values = np.array([float(exact_suite_value([t], k, metric)) for t in tasks])
    idx = rng.integers(0, len(tasks), size=(n_boot, len(tasks)))
    return percentile_interval(values[idx].mean(axis=1), 0.95)


@settings(max_examples=25)
@given(
    st.lists(
        st.integers(2, 10).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))),
        min_size=25,
        max_size=60,
    ),
    st.sampled_from(["pass@k", "pass^k"]),
)
def test_histogram_bootstrap_matches_brute_force(tasks: list[tuple[int, int]], metric: str) -> None:
    """Both resamplers draw from the same distribution: averaged over seeds, the bounds agree."""
    k = 2
    values = {float(exact_suite_value([t], k, metric)) for t in tasks}
    if len(values) == 1:
        return  # the Wilson fallback, tested separately
    seeds = range(12)
    ours = np.array(
        [  # the percentile interval: the plain resampler's quantiles
            estimate(tasks, k, metric, n_boot=1000, seed=s, interval="percentile").ci  # type: ignore[arg-type]
            for s in seeds
        ],
        dtype=np.float64,
    )
    rng = np.random.default_rng(12345)
    brute = np.array([brute_force_ci(tasks, k, metric, 1000, rng) for _ in seeds])
    # Monte Carlo error of a mean of 12 percentile bounds with 1000 draws over
    # >= 25 tasks is a few thousandths; 0.03 is a wide, never-flaky margin that
    # still catches a wrong resampling unit (trials instead of tasks) or a
    # biased draw.
    assert np.abs(ours.mean(axis=0) - brute.mean(axis=0)).max() < 0.03


@settings(max_examples=30)
@given(suites)
def test_replicates_have_the_exact_bootstrap_variance(tasks: list[tuple[int, int]]) -> None:
    """Var of the resampled mean is the population variance of per-task values / T."""
    hist = Histogram.from_pairs(tasks).at_least(1)
    values = metric_cells("pass@k", hist.n, hist.c, 1)
    m = hist.tasks
    mean = float(values @ hist.count) / m
    var = float(((values - mean) ** 2) @ hist.count) / m / m
    reps = replicate_means(
        resampled_cell_counts(hist.count, 20000, np.random.default_rng(3)), values
    )
    assert reps.mean() == pytest.approx(mean, abs=4 * np.sqrt(var / 20000) + 1e-12)
    assert reps.var() == pytest.approx(var, rel=0.1, abs=1e-12)


def test_same_histogram_and_seed_give_the_same_ci() -> None:
    tasks = [(10, c) for c in [3, 7, 9, 10, 10, 2, 5, 8]]
    shuffled = list(reversed(tasks))
    a = estimate(tasks, 3, seed=11)
    b = estimate(Histogram.from_pairs(shuffled), 3, seed=11)
    assert a == b
    assert estimate(tasks, 3, seed=12).ci != a.ci


def test_metrics_computed_together_equal_each_computed_alone() -> None:
    tasks = [(10, c) for c in [3, 7, 9, 10, 10, 2, 5, 8]]
    both = estimate_metrics(tasks, 3, seed=5)
    assert both["pass@k"] == estimate(tasks, 3, "pass@k", seed=5)
    assert both["pass^k"] == estimate(tasks, 3, "pass^k", seed=5)


def test_cost_is_flat_in_task_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """A million tasks in 21 cells: the draw is B x at most 21 values, not B x 10^6 tasks."""
    sizes: list[int] = []
    real = intervals.atoms

    def spy(values: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = real(values, count)
        sizes.append(out[0].size)
        return out

    monkeypatch.setattr(intervals, "atoms", spy)
    rng = np.random.default_rng(0)
    for tasks in (1_000, 1_000_000):
        pairs = np.stack([np.full(tasks, 20), rng.binomial(20, rng.beta(2, 1, tasks))], axis=1)
        hist = Histogram.from_pairs(pairs)
        both = estimate_metrics(hist, 5, n_boot=200, interval="percentile")
        assert {e.method for e in both.values()} == {"exact-draw"}
        # One draw per metric, over at most 21 distinct values, at either size.
        assert len(sizes) == 2
        assert max(sizes) <= len(hist) <= 21
        sizes.clear()


def test_saddlepoint_cost_does_not_grow_with_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the exact-draw limit no draw happens; the work is O(distinct values)."""
    widths: list[int] = []
    real = saddlepoint._cgf

    def spy(t: float, v: np.ndarray, vv: np.ndarray, logp: np.ndarray) -> object:
        widths.append(v.size)
        return real(t, v, vv, logp)

    monkeypatch.setattr(saddlepoint, "_cgf", spy)
    rng = np.random.default_rng(1)
    per_size = []
    for tasks in (10_000, 1_000_000):
        n = rng.integers(5, 101, tasks)
        hist = Histogram.from_pairs(np.stack([n, rng.binomial(n, rng.beta(2, 0.7, tasks))], 1))
        est = estimate(hist, 5, interval="percentile")
        assert est.method == "saddlepoint"
        per_size.append((len(widths), max(widths)))
        widths.clear()
    (calls_small, width_small), (calls_large, width_large) = per_size
    # A handful of O(D) evaluations per bound, D bounded by the (n, c) grid, not by tasks.
    assert calls_small <= 30
    assert calls_large <= 30
    assert width_large <= 101 * 102 // 2
    assert width_large < 2 * width_small


@pytest.mark.parametrize(("value", "m"), [(1.0, 20), (0.0, 20), (0.3, 7), (1.0, 1)])
def test_wilson_fallback_when_every_task_is_identical(value: float, m: int) -> None:
    # All tasks in one cell: every per-task value identical.
    c = round(value * 10)
    est = estimate([(10, c)] * m, 1, "pass@k", interval="percentile")
    expected = wilson_interval(c / 10, m)
    assert est.ci == pytest.approx(expected)
    # A perfect score still admits doubt.
    if value == 1.0:
        assert est.ci is not None
        assert est.ci[0] < 1.0


def test_wilson_values() -> None:
    # 20/20 at 95%: m / (m + z^2).
    lo, hi = wilson_interval(1.0, 20)
    z = 1.959963984540054
    assert lo == pytest.approx(20 / (20 + z * z))
    assert hi == 1.0
    lo, hi = wilson_interval(0.5, 100)
    assert (lo, hi) == pytest.approx((0.4038, 0.5962), abs=1e-4)
    with pytest.raises(ValueError, match="m >= 1"):
        wilson_interval(0.5, 0)
    with pytest.raises(ValueError, match="p must lie"):
        wilson_interval(1.5, 3)


def test_strict_unknown_names_k_shortest_n_and_shortfall() -> None:
    tasks = [(5, 3)] * 18 + [(3, 1), (4, 4)]
    est = estimate(tasks, 5)
    assert est.value is None
    assert est.ci is None
    assert est.unknown_reason is not None
    assert "5" in est.unknown_reason
    assert "shortest task has 3" in est.unknown_reason
    assert "2 of 20 tasks" in est.unknown_reason
    assert (est.tasks, est.left_out, est.runs) == (18, 2, 3)


def test_k_beyond_every_task_is_unknown_like_the_seed() -> None:
    est = estimate(EXAMPLE_TASKS, 10, "pass@k")
    assert est.value is None
    assert est.unknown_reason is not None
    assert est.unknown_reason.startswith("UNKNOWN")
    assert "does not extrapolate" in est.unknown_reason


def test_empty_suite_is_unknown_not_an_error() -> None:
    est = estimate([], 1)
    assert est.value is None
    assert (est.tasks, est.left_out, est.runs) == (0, 0, 0)
    assert est.unknown_reason is not None


def test_min_coverage_allows_estimate_over_covered_tasks() -> None:
    tasks = [(5, 5)] * 8 + [(5, 0)] * 1 + [(2, 2)]
    strict = estimate(tasks, 5)
    assert strict.value is None
    loose = estimate(tasks, 5, min_coverage=0.9)
    assert loose.value == pytest.approx(8 / 9)
    assert (loose.tasks, loose.left_out) == (9, 1)
    too_loose = estimate(tasks, 5, min_coverage=0.95)
    assert too_loose.value is None
    assert too_loose.unknown_reason is not None
    assert "9 of 10 tasks (90%)" in too_loose.unknown_reason


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, "k must be at least 1"),
        ({"k": -1}, "k must be at least 1"),
        ({"k": 2, "min_coverage": 0.0}, "min_coverage"),
        ({"k": 2, "min_coverage": 1.5}, "min_coverage"),
        ({"k": 2, "confidence": 1.0}, "confidence"),
        ({"k": 2, "n_boot": 0}, "n_boot"),
        ({"k": 2, "metric": "pass*k"}, "metric must be"),
    ],
)
def test_invalid_arguments(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        estimate([(5, 3)], **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tasks", "message"),
    [
        ([(0, 0)], "n >= 1"),
        ([(5, 6)], "0 <= c <= n"),
        ([(5, -1)], "0 <= c <= n"),
        ([(5, 1, 2)], "shape"),
    ],
)
def test_invalid_tasks(tasks: list[tuple[int, ...]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        estimate(tasks, 1)  # type: ignore[arg-type]


def test_serialised_shape() -> None:
    known = msgspec.json.decode(msgspec.json.encode(estimate(EXAMPLE_TASKS, 5)))
    assert set(known) == {
        "k",
        "value",
        "ci",
        "estimator",
        "runs",
        "tasks",
        "left_out",
        "confidence",
        "interval",
        "method",
    }
    assert known["ci"] == [pytest.approx(0.0123485, abs=5e-7), pytest.approx(0.3169827, abs=5e-7)]
    assert (known["confidence"], known["interval"], known["method"]) == (0.95, "gaffke", "exact")
    unknown = msgspec.json.decode(msgspec.json.encode(estimate(EXAMPLE_TASKS, 10)))
    assert unknown["value"] is None
    assert unknown["ci"] is None
    assert unknown["unknown_reason"].startswith("UNKNOWN")
    back = msgspec.json.decode(msgspec.json.encode(estimate(EXAMPLE_TASKS, 5)), type=Estimate)
    assert back == estimate(EXAMPLE_TASKS, 5)


def test_estimate_options_are_exactly_estimates_keywords() -> None:
    """Client.estimate passes EstimateOptions through: they must stay estimate()'s keywords."""
    import inspect
    import typing

    from reliabilityd.stats.estimate import EstimateOptions

    params = inspect.signature(estimate).parameters.values()
    keywords = {p.name: p.annotation for p in params if p.kind is p.KEYWORD_ONLY}
    hints = typing.get_type_hints(EstimateOptions)
    assert set(hints) == set(keywords)
