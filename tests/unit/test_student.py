"""The ``student`` paired interval: its t quantiles against the density integrated
independently and against printed tables, its degrees of freedom, and its interval
against the textbook formula."""

from __future__ import annotations

from math import exp, lgamma, log, pi, sqrt

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliabilityd.stats import student
from reliabilityd.stats.compare import compare
from reliabilityd.stats.intervals import atoms, exact_gaffke
from reliabilityd.stats.paired import STUDENT_MIN_MOVED, paired_difference
from reliabilityd.stats.student import SKEW_LIMIT, student_df, student_interval, t_quantile


def _density_mass(x: float, df: int, steps: int = 20_000) -> float:
    """P(|T| <= x) by Simpson's rule over the t density: no closed form shared with the code."""
    log_norm = lgamma((df + 1) / 2) - lgamma(df / 2) - 0.5 * log(df * pi)
    h = x / steps
    total = 0.0
    for i in range(steps + 1):
        t = i * h
        f = exp(log_norm - (df + 1) / 2 * log(1.0 + t * t / df))
        total += f * (1 if i in (0, steps) else 4 if i % 2 else 2)
    return 2.0 * total * h / 3.0


# Two-sided 95% and 99% critical values as printed in statistical tables.
TABLE = {
    (0.975, 1): 12.7062,
    (0.975, 2): 4.3027,
    (0.975, 5): 2.5706,
    (0.975, 10): 2.2281,
    (0.975, 19): 2.0930,
    (0.975, 30): 2.0423,
    (0.975, 120): 1.9799,
    (0.995, 3): 5.8409,
    (0.995, 20): 2.8453,
    (0.995, 1000): 2.5808,
}


@pytest.mark.parametrize(("p", "df"), sorted(TABLE))
def test_quantiles_match_the_printed_tables(p: float, df: int) -> None:
    assert t_quantile(p, df) == pytest.approx(TABLE[p, df], abs=6e-5)


@given(
    df=st.integers(1, 400),
    p=st.sampled_from([0.6, 0.8, 0.9, 0.95, 0.975, 0.99, 0.995]),
)
def test_each_quantile_holds_its_mass_of_the_integrated_density(df: int, p: float) -> None:
    """Both paths (the closed form's bisection to SERIES_DF, the series past it)."""
    x = t_quantile(p, df)
    assert _density_mass(x, df) == pytest.approx(2.0 * p - 1.0, abs=2e-7)


def test_the_series_and_the_closed_form_meet_where_one_hands_over() -> None:
    df = student.SERIES_DF + 1
    for p in (0.9, 0.975, 0.995):
        assert t_quantile(p, df) < t_quantile(p, df - 1)  # still falling with df
        assert t_quantile(p, df) == pytest.approx(t_quantile(p, df - 1), abs=2e-4)


def test_quantile_arguments_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="df"):
        t_quantile(0.975, 0)
    with pytest.raises(ValueError, match=r"0\.5 <= p < 1"):
        t_quantile(0.3, 5)


def test_degrees_of_freedom_follow_the_kurtosis() -> None:
    t = 40
    flat = np.linspace(-1.0, 1.0, t)  # kurtosis 1.8 < 3: Student's own T - 1
    one_outlier = np.zeros(t)
    one_outlier[0] = 1.0  # kurtosis about T - 2: a spread that rests on one task, df 2
    for d, expected in ((flat, t - 1), (one_outlier, 2)):
        sq = (d - d.mean()) ** 2
        assert float(student_df(sq[None, :], t)[0]) == expected
    # Satterthwaite's match between the two: 2 (T - 1) / (kappa - 1), rounded down.
    d = np.array([0.0] * 30 + [0.5, -0.5] * 5)
    sq = (d - d.mean()) ** 2
    kappa = float((sq**2).mean() / sq.mean() ** 2)
    assert float(student_df(sq[None, :], t)[0]) == np.floor(2 * (t - 1) / (kappa - 1))


def _johnson(d: np.ndarray, mu: float) -> float:
    """Johnson's (1978) skewness-corrected t statistic of the sample ``d`` at ``mu``."""
    t = d.size
    s2 = d.var(ddof=1)
    m3 = float(((d - d.mean()) ** 3).sum()) * t / ((t - 1) * (t - 2))
    x = d.mean() - mu
    return float((x + m3 / (6 * s2 * t) + m3 / (3 * s2 * s2) * x * x) / sqrt(s2 / t))


def test_the_interval_is_the_textbook_t_interval_with_those_degrees_of_freedom(
    rng: np.random.Generator,
) -> None:
    """Symmetric differences (no skewness to correct): Student's interval at the
    kurtosis-matched degrees of freedom."""
    for _ in range(50):
        t = int(rng.integers(1, 150))
        centre = rng.uniform(-0.3, 0.3)
        half_sample = rng.normal(0.0, rng.uniform(0.01, 0.3), t)
        d = np.clip(centre + np.r_[half_sample, -half_sample], -1, 1)
        if abs(centre) + np.abs(half_sample).max() > 1:
            continue  # clipped: no longer symmetric
        sq = (d - d.mean()) ** 2
        df = int(student_df(sq[None, :], d.size)[0])
        half = t_quantile(0.975, df) * d.std(ddof=1) / sqrt(d.size)
        lo, hi, method = student_interval(d, 0.95)
        assert method == "student-t"
        assert lo == pytest.approx(max(-1.0, d.mean() - half), abs=1e-12)
        assert hi == pytest.approx(min(1.0, d.mean() + half), abs=1e-12)


def test_skewed_differences_get_johnsons_corrected_interval(rng: np.random.Generator) -> None:
    """Within SKEW_LIMIT each bound is where Johnson's statistic is at -+t(df); past it,
    or where its quadratic has no root for a bound, Student's interval. Skewed one way,
    the interval moves that way."""
    corrected = plain = 0
    for i in range(200):
        t = int(rng.integers(8, 200))
        shape = rng.uniform(0.1, 1.0) if i % 2 else rng.uniform(10.0, 60.0)  # skew 2-6; 0.3-0.6
        d = np.clip(rng.gamma(shape, 0.01, t) * rng.choice([-1, 1]), -1, 1)
        sq = (d - d.mean()) ** 2
        q = t_quantile(0.975, int(student_df(sq[None, :], t)[0]))
        lo, hi, _ = student_interval(d, 0.95)
        assert lo <= d.mean() <= hi
        assert lo < hi
        s2 = d.var(ddof=1)
        m3 = float(((d - d.mean()) ** 3).sum()) * t / ((t - 1) * (t - 2))
        skew = m3 / s2**1.5
        half = q * sqrt(s2 / t)
        # The quadratic in (mean - bound) at either bound has a real root.
        rooted = all(
            1 - 4 * m3 / (3 * s2 * s2) * (m3 / (6 * s2 * t) + side * half) >= 0 for side in (-1, 1)
        )
        if abs(skew) <= SKEW_LIMIT and rooted:
            corrected += 1
            assert hi == 1.0 or _johnson(d, hi) == pytest.approx(-q, abs=1e-9)
            assert lo == -1.0 or _johnson(d, lo) == pytest.approx(q, abs=1e-9)
            # It leans the way the differences do, by about the correction's shift: the
            # root on the branch through the plain t bound, not the far one.
            centre = (lo + hi) / 2 - d.mean()
            assert centre * skew >= 0
            shift = m3 / (6 * s2 * t)
            assert abs(centre) <= abs(shift) + abs(skew) * half
        else:
            plain += 1
            expected = (max(-1.0, d.mean() - half), min(1.0, d.mean() + half))
            assert (lo, hi) == pytest.approx(expected, abs=1e-12)
    assert corrected > 40
    assert plain > 40


def test_identical_differences_get_gaffkes_exact_interval_never_a_point() -> None:
    for value, t in ((0.0, 20), (-1.0, 12), (0.25, 50), (0.5, 1)):
        d = np.full(t, value)
        uniq, merged = atoms(d, np.ones(t, dtype=np.int64))
        exact = exact_gaffke(uniq, merged, 0.95, (-1.0, 1.0))
        assert exact is not None
        assert student_interval(d, 0.95) == (exact.low, exact.high, exact.method)
        lo, hi, _ = student_interval(d, 0.95)
        assert lo < hi


def test_compare_and_the_paired_difference_take_student_and_mirror_it() -> None:
    base = {f"t{i}": (10, 10 - i % 4) for i in range(30)}
    cand = {f"t{i}": (10, 10 - i % 7) for i in range(30)}
    ahead = compare(base, cand, 1, interval="student")
    behind = compare(cand, base, 1, interval="student")
    for m in ("pass^k", "pass@k"):
        one, other = ahead.differences[m], behind.differences[m]
        assert one.ci is not None
        assert other.ci is not None
        assert one.ci == pytest.approx((-other.ci[1], -other.ci[0]), abs=1e-12)
    assert ahead.differences["pass^k"].interval == "student"
    n = np.full(30, 10)
    direct = paired_difference(
        (n, np.array([base[f"t{i}"][1] for i in range(30)])),
        (n, np.array([cand[f"t{i}"][1] for i in range(30)])),
        1,
        interval="student",
    )
    assert direct["pass^k"].ci == ahead.differences["pass^k"].ci
    with pytest.raises(ValueError, match="interval must be one of"):
        compare(base, cand, 1, interval="studentized")


def test_with_fewer_tasks_moved_than_student_min_moved_it_is_gaffkes_interval() -> None:
    """A t interval's spread from a handful of moved tasks says little about the tasks
    that did not move: below STUDENT_MIN_MOVED moved tasks, gaffke's (same seed)."""
    n = np.full(40, 10)
    base = np.full(40, 10)
    for moved in (STUDENT_MIN_MOVED - 1, STUDENT_MIN_MOVED):
        cand = base.copy()
        cand[:moved] = 7
        got = paired_difference((n, base), (n, cand), 1, ("pass^k",), interval="student")
        gaffke = paired_difference((n, base), (n, cand), 1, ("pass^k",), interval="gaffke")
        diff, other = got["pass^k"], gaffke["pass^k"]
        assert diff.interval == "student"
        if moved < STUDENT_MIN_MOVED:
            assert (diff.ci, diff.method) == (other.ci, other.method)
        else:
            assert diff.method == "student-t"
            assert diff.ci is not None
            assert other.ci is not None
            assert diff.ci[1] < other.ci[1]  # narrower where it has the tasks to say so


def test_differences_equal_but_for_rounding_are_one_value_never_a_point() -> None:
    """pass@1 of (10, c + 2) - (10, c) is 0.2 for every c, in exact arithmetic; in floats
    the last bit differs between tasks. The interval is gaffke's for one value."""
    base = {f"t{i}": (10, i % 8) for i in range(20)}
    cand = {t: (10, c + 2) for t, (_, c) in base.items()}
    d = compare(base, cand, 1, "pass@k", interval="student").differences["pass@k"]
    same = np.full(20, 0.2)
    exact = exact_gaffke(*atoms(same, np.ones(20, dtype=np.int64)), 0.95, (-1.0, 1.0))
    assert exact is not None
    assert d.ci == pytest.approx((exact.low, exact.high), abs=1e-12)
    assert d.ci is not None
    assert d.ci[1] - d.ci[0] > 0.1
