"""Verdicts from intervals, and assert_pass_hat_k for test suites."""

from __future__ import annotations

import pytest

from reliabilityd import Histogram, assert_pass_hat_k, compare, estimate
from reliabilityd.stats.gate import judge_at_least, judge_not_worse, look_confidence

PERFECT = [(10, 10)] * 400
MIXED = [(10, c) for c in (10, 9, 10, 8, 10, 10, 7, 10, 9, 10) * 4]


def test_at_least_decides_on_the_bounds_never_the_point() -> None:
    est = estimate(MIXED, 5)
    assert est.ci is not None
    assert est.value is not None
    assert judge_at_least(est, est.ci[0]) == "pass"
    assert judge_at_least(est, est.value) == "undecided"
    assert judge_at_least(est, est.ci[1]) == "undecided"
    assert judge_at_least(est, est.ci[1] + 1e-9) == "fail"
    assert judge_at_least(estimate([(3, 3)], 5), 0.0) == "undecided"  # UNKNOWN


def test_not_worse_against_a_margin() -> None:
    base = {f"t{i}": (10, 10) for i in range(50)}
    worse = {t: (10, 5) for t in base}
    diff = compare(base, worse, 1, "pass@k").difference("pass^k")
    assert diff.ci is not None
    assert judge_not_worse(diff, 0.1) == "fail"
    assert judge_not_worse(diff, -diff.ci[0]) == "pass"
    assert judge_not_worse(diff, -diff.ci[1]) == "undecided"
    unknown = compare(base, {"t0": (10, 10)}, 1).difference()
    assert judge_not_worse(unknown, 1.0) == "undecided"
    with pytest.raises(ValueError, match="margin"):
        judge_not_worse(diff, -0.1)


def test_assert_pass_hat_k_returns_the_estimate_when_the_bound_reaches() -> None:
    est = assert_pass_hat_k(PERFECT, 5, 0.9)
    assert est.ci is not None
    assert est.ci[0] >= 0.9
    assert assert_pass_hat_k(Histogram.from_pairs(PERFECT), 5, 0.9) == est


def test_assert_pass_hat_k_names_the_numbers_and_the_least_reliable_tasks() -> None:
    tasks = {f"deploy {i}": nc for i, nc in enumerate(MIXED)}
    with pytest.raises(AssertionError) as failed:
        assert_pass_hat_k(tasks, 5, 0.99)
    message = str(failed.value)
    est = estimate(MIXED, 5)
    assert est.ci is not None
    assert f"pass^5 = {est.value:.4f}" in message
    assert f"[{est.ci[0]:.4f}, {est.ci[1]:.4f}]" in message
    assert "upper bound is under 0.99" in message
    assert "Least reliable: 'deploy 16' 7/10 (0.083), 'deploy 26' 7/10" in message
    with pytest.raises(AssertionError, match="more trials or tasks may decide it"):
        assert_pass_hat_k(MIXED, 5, est.value)  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="UNKNOWN"):
        assert_pass_hat_k([(3, 3)] * 10, 5, 0.5)


def test_looks_spread_the_one_look_error_over_each() -> None:
    assert look_confidence(0.95, 1) == 0.95
    assert look_confidence(0.95, 10) == pytest.approx(0.995)
    with pytest.raises(ValueError, match="looks must be at least 1"):
        look_confidence(0.95, 0)
    tasks = [(10, 10)] * 30 + [(10, 7)] * 10
    one = assert_pass_hat_k(tasks, 5, 0.3)
    ten = assert_pass_hat_k(tasks, 5, 0.3, looks=10)
    assert ten.confidence == pytest.approx(0.995)
    assert one.ci is not None
    assert ten.ci is not None
    assert ten.ci[0] < one.ci[0]
