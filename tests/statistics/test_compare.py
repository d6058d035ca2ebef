"""The paired comparison: exact point differences, the interval against a brute-force paired
resampler, UNKNOWN, and the symmetries any paired difference must have."""

from __future__ import annotations

from fractions import Fraction

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reliabilityd import Comparison, compare
from reliabilityd.stats.estimators import (
    METRICS,
    Metric,
    metric_cells,
    pass_at_k_exact,
    pass_hat_k_exact,
)
from reliabilityd.stats.intervals import saddlepoint_level
from reliabilityd.stats.paired import PER_TASK_LIMIT, paired_difference
from tests.support.paired import (
    Counts,
    aligned,
    brute_force_paired,
    cdf_level,
    live_like_pair,
)

EXACT = {"pass@k": pass_at_k_exact, "pass^k": pass_hat_k_exact}


def test_point_difference_is_exact_rational_arithmetic(rng: np.random.Generator) -> None:
    for _ in range(20):
        base, cand = live_like_pair(rng, int(rng.integers(10, 60)), rng.uniform(-0.3, 0.3), 5)
        k = int(rng.integers(1, 6))
        result = compare(base, cand, k, n_boot=50)
        shared = sorted(base.keys() & cand.keys())
        for metric in METRICS:
            f = EXACT[metric]
            exact = sum((f(*cand[t], k) - f(*base[t], k) for t in shared), Fraction(0)) / len(
                shared
            )
            diff = result.difference(metric)
            assert diff.value == pytest.approx(float(exact), abs=1e-12)
            mean_b = sum((f(*base[t], k) for t in shared), Fraction(0)) / len(shared)
            assert diff.baseline == pytest.approx(float(mean_b), abs=1e-12)
        assert (result.shared, result.only_baseline, result.only_candidate) == (
            len(shared),
            0,
            5,
        )


def test_never_the_plug_in() -> None:
    """One task, 5 trials, 3 passes, against a perfect one: pass^2 0.3 - 1, not 0.36 - 1."""
    base = {f"t{i}": (5, 5) for i in range(10)}
    cand = {**base, "t0": (5, 3)}
    diff = compare(base, cand, 2, min_shared=10).difference("pass^k")
    assert diff.value == pytest.approx((0.3 - 1.0) / 10, abs=1e-15)


@pytest.mark.parametrize("interval", ["percentile", "gaffke"])
def test_interval_matches_a_brute_force_paired_resampler(
    rng: np.random.Generator, interval: str
) -> None:
    """Each bound sits at its level of the brute-force replicates, within MC error.

    The percentile interval's levels are nominal; gaffke's drawn bounds are
    order statistics chosen to lie outside the bound with 97.5% probability,
    whose median level is ``saddlepoint_level``.
    """
    n_boot, brute_boot = 2000, 40_000
    tail = saddlepoint_level(n_boot, 0.025) if interval == "gaffke" else 0.025
    levels: list[float] = []
    expected: list[float] = []
    for _ in range(8):
        base, cand = live_like_pair(rng, int(rng.integers(20, 300)), rng.uniform(-0.2, 0.2), 7)
        k = int(rng.integers(1, 6))
        seed = int(rng.integers(0, 2**31))
        result = compare(base, cand, k, interval=interval, n_boot=n_boot, seed=seed)
        nb, cb, nc, cc = aligned(base, cand)
        for metric in METRICS:
            diff = result.difference(metric)
            assert diff.ci is not None
            assert diff.method == "exact-draw"
            vb, vc = metric_cells(metric, nb, cb, k), metric_cells(metric, nc, cc, k)
            low_reps, high_reps = brute_force_paired(vb, vc, interval, brute_boot, rng)
            levels += [cdf_level(low_reps, diff.ci[0]), cdf_level(high_reps, diff.ci[1])]
            expected += [tail, 1.0 - tail]
    err = np.array(levels) - np.array(expected)
    # A quantile of B = 2000 draws sits at its level +- sqrt(q(1-q)/B) = 0.0035,
    # the brute force's estimate of that level +- 0.0008: five combined sds.
    bound = 5.0 * np.sqrt(0.025 * 0.975 * (1 / n_boot + 1 / brute_boot))
    assert np.abs(err).max() < bound, err
    assert abs(err.mean()) < 4.0 * bound / np.sqrt(err.size)


@pytest.mark.parametrize("interval", ["percentile", "gaffke"])
def test_large_suites_resample_the_distinct_differences(
    rng: np.random.Generator, interval: str
) -> None:
    """Past the per-task limit: the same distribution, still within MC error of brute force."""
    n_boot = 2000
    tasks = PER_TASK_LIMIT // n_boot + 200
    base, cand = live_like_pair(rng, tasks, -0.05)
    result = compare(base, cand, 3, interval=interval, n_boot=n_boot)
    nb, cb, nc, cc = aligned(base, cand)
    for metric in METRICS:
        diff = result.difference(metric)
        assert diff.ci is not None
        assert diff.method in ("exact-draw", "saddlepoint")
        vb, vc = metric_cells(metric, nb, cb, 3), metric_cells(metric, nc, cc, 3)
        low_reps, high_reps = brute_force_paired(vb, vc, interval, 20_000, rng)
        tol = 5.0 * np.sqrt(0.025 * 0.975 * (1 / n_boot + 1 / 20_000))
        tail = saddlepoint_level(n_boot, 0.025) if interval == "gaffke" else 0.025
        assert abs(cdf_level(low_reps, diff.ci[0]) - tail) < tol
        assert abs(cdf_level(high_reps, diff.ci[1]) - (1.0 - tail)) < tol


def test_pairing_cancels_what_both_sides_share(rng: np.random.Generator) -> None:
    """Task difficulty common to both sides does not widen the paired interval."""
    p = rng.beta(0.5, 0.5, 200)
    base = {f"t{i}": (20, int(rng.binomial(20, p[i]))) for i in range(200)}
    cand = {t: (n, max(0, c - 1)) for t, (n, c) in base.items()}  # one pass fewer each
    result = compare(base, cand, 1, "pass@k", interval="percentile")
    diff = result.difference()
    assert diff.ci is not None
    assert diff.ci[1] < 0
    assert diff.direction == "worse"
    # Unpaired, the spread of p alone would give an interval tens of times wider.
    assert diff.ci[1] - diff.ci[0] < 0.02


def test_moved_tasks_name_counts_on_both_sides() -> None:
    base = {f"t{i:02d}": (10, 8) for i in range(12)}
    cand = {**base, "t03": (10, 2), "t07": (12, 12), "t11": (10, 7)}
    result = compare(base, cand, 1, "pass@k", top=2)
    assert [
        (m.task, m.baseline_n, m.baseline_c, m.candidate_n, m.candidate_c) for m in result.moved
    ] == [
        ("t03", 10, 8, 10, 2),
        ("t07", 10, 8, 12, 12),
    ]
    assert result.moved[0].change == pytest.approx(-0.6)
    assert [m.task for m in result.worse()] == ["t03"]


def test_unknown_when_too_few_tasks_are_shared() -> None:
    base = {f"t{i}": (5, 3) for i in range(8)}
    cand = {f"t{i}": (5, 4) for i in range(4, 20)}
    result = compare(base, cand, 1, names=("v1.4", "v1.5"))
    assert result.unknown
    assert (result.shared, result.only_baseline, result.only_candidate) == (4, 4, 12)
    assert result.unknown_reason is not None
    assert "share 4 tasks" in result.unknown_reason
    assert "under the 10" in result.unknown_reason
    assert "4 only in v1.4, 12 only in v1.5" in result.unknown_reason
    for metric in METRICS:
        assert result.difference(metric).value is None
        assert result.difference(metric).direction == "unknown"
    assert not compare(base, cand, 1, min_shared=4).unknown


def test_unknown_when_k_exceeds_a_side() -> None:
    base = {f"t{i}": (6, 3) for i in range(12)}
    cand = {**{f"t{i}": (6, 4) for i in range(12)}, "t5": (4, 4)}
    result = compare(base, cand, 5, names=("old", "new"))
    assert result.unknown_reason is not None
    assert "1 of 12 shared tasks have fewer" in result.unknown_reason
    assert "'t5' in new, has 4" in result.unknown_reason
    assert "does not extrapolate" in result.unknown_reason
    assert not compare(base, cand, 4).unknown


def test_tasks_without_counted_trials_are_absent() -> None:
    base = {f"t{i}": (5, 3) for i in range(10)}
    cand = {**base, "t0": (0, 0)}
    result = compare(base, cand, 1)
    assert (result.shared, result.only_baseline) == (9, 1)
    with pytest.raises(ValueError, match="need 0 <= c <= n"):
        compare(base, {**base, "t1": (3, 4)}, 1)


def test_bad_arguments_are_refused() -> None:
    base = {f"t{i}": (5, 3) for i in range(10)}
    with pytest.raises(ValueError, match="interval must be one of"):
        compare(base, base, 1, interval="bca")
    with pytest.raises(ValueError, match="k must be at least 1"):
        compare(base, base, 0)
    with pytest.raises(ValueError, match="min_shared"):
        compare(base, base, 1, min_shared=0)
    with pytest.raises(ValueError, match="aligned"):
        paired_difference(([5], [3]), ([5, 5], [3, 3]), 1)


def test_serialises_and_round_trips() -> None:
    base = {f"t{i}": (5, i % 6) for i in range(12)}
    cand = {f"t{i}": (5, (i + 1) % 6) for i in range(12)}
    result = compare(base, cand, 2)
    doc = msgspec.json.encode(result)
    assert msgspec.json.decode(doc, type=Comparison) == result
    assert b"unknown_reason" not in doc


sides = st.lists(
    st.tuples(st.integers(1, 12), st.integers(0, 12), st.integers(1, 12), st.integers(0, 12)),
    min_size=10,
    max_size=40,
)


def _sides(rows: list[tuple[int, int, int, int]]) -> tuple[Counts, Counts]:
    base = {f"t{i}": (nb, min(cb, nb)) for i, (nb, cb, _, _) in enumerate(rows)}
    cand = {f"t{i}": (nc, min(cc, nc)) for i, (_, _, nc, cc) in enumerate(rows)}
    return base, cand


@settings(max_examples=60)
@given(rows=sides, k=st.integers(1, 3), interval=st.sampled_from(["percentile", "gaffke"]))
def test_swapping_sides_negates_the_difference_and_mirrors_the_interval(
    rows: list[tuple[int, int, int, int]], k: int, interval: str
) -> None:
    base, cand = _sides(rows)
    ab = compare(base, cand, k, interval=interval, n_boot=300, seed=7)
    ba = compare(cand, base, k, interval=interval, n_boot=300, seed=7)
    assert (ab.unknown_reason is None) == (ba.unknown_reason is None)
    for metric in METRICS:
        x, y = ab.difference(metric), ba.difference(metric)
        if x.value is None:
            assert y.value is None
            continue
        assert x.ci is not None
        assert y.ci is not None
        assert y.value is not None
        assert y.value == pytest.approx(-x.value, abs=1e-12)
        assert y.ci[0] == pytest.approx(-x.ci[1], abs=1e-12)
        assert y.ci[1] == pytest.approx(-x.ci[0], abs=1e-12)
        assert x.ci[0] <= x.value <= x.ci[1]
        assert -1.0 <= x.ci[0] <= x.ci[1] <= 1.0


@settings(max_examples=60)
@given(rows=sides, k=st.integers(1, 3), interval=st.sampled_from(["percentile", "gaffke"]))
def test_identical_sides_differ_by_zero(
    rows: list[tuple[int, int, int, int]], k: int, interval: str
) -> None:
    base, _ = _sides(rows)
    result = compare(base, dict(base), k, interval=interval, n_boot=300)
    assert result.moved == []
    for metric in METRICS:
        diff = result.difference(metric)
        if diff.value is None:
            continue
        assert diff.value == 0.0
        assert diff.ci is not None
        assert diff.ci[0] < 0.0 < diff.ci[1]
        assert diff.direction == "no detectable change"


@pytest.mark.parametrize("metric", METRICS)
def test_one_draw_of_tasks_serves_both_metrics(metric: Metric) -> None:
    """Same data and seed: the same interval, whichever metric ranks the moved tasks."""
    base = {f"t{i}": (8, i % 9) for i in range(25)}
    cand = {f"t{i}": (8, (i * 5) % 9) for i in range(25)}
    first = compare(base, cand, 3, metric, seed=3)
    again = compare(base, cand, 3, "pass^k" if metric == "pass@k" else "pass@k", seed=3)
    assert first.difference(metric) == again.difference(metric)
