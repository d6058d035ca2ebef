"""The change detector: parsing the committed windows, and evidence that moves when a suite does."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from reliabilityd.stats.detector import DEFAULT_RECENT, RecentCounts, evidence, level, recent_counts


def test_windows_parse_oldest_first() -> None:
    rc = recent_counts(["11101", "0", ""], recent=3)
    assert rc.n.tolist() == [5, 1, 0]
    assert rc.c.tolist() == [4, 0, 0]
    # Passes among the last 1, 2, 3 outcomes; a short window stops counting.
    assert rc.recent.tolist() == [[1, 1, 2], [0, 0, 0], [0, 0, 0]]


def test_a_window_holds_only_outcomes() -> None:
    with pytest.raises(ValueError, match="only 0 and 1"):
        recent_counts(["11x1"])


def steady(tasks: int = 50, window: int = 20) -> list[str]:
    return ["1" * window] * tasks


def test_a_suite_that_keeps_passing_shows_no_evidence() -> None:
    assert float(evidence(recent_counts(steady()), 5, 0.75)) == 0.0


def test_reliable_tasks_failing_now_is_strong_evidence() -> None:
    # 15 of 50 tasks that never failed in 18 trials fail one of their last two.
    windows = ["1" * 18 + "01"] * 15 + ["1" * 20] * 35
    assert float(evidence(recent_counts(windows), 5, 0.75)) >= 12.0


def test_failures_spread_through_the_old_window_are_not_a_change() -> None:
    # The same number of failures, but long ago and in the baseline: no change now.
    old = ["01" + "1" * 18] * 15 + ["1" * 20] * 35
    new = ["1" * 18 + "01"] * 15 + ["1" * 20] * 35
    ev_old = float(evidence(recent_counts(old), 5, 0.75))
    ev_new = float(evidence(recent_counts(new), 5, 0.75))
    assert ev_old < 1.0
    assert ev_new >= 12.0


def test_more_recent_failures_more_evidence() -> None:
    def ev(failing: int) -> float:
        windows = ["1" * 17 + "001"] * failing + ["1" * 20] * (50 - failing)
        return float(evidence(recent_counts(windows), 5, 0.75))

    values = [ev(f) for f in (0, 2, 5, 10, 20)]
    assert values == sorted(values)
    assert values[0] == 0.0
    assert values[-1] > values[1]


def test_a_threshold_far_below_needs_a_bigger_drop() -> None:
    windows = ["1" * 18 + "01"] * 5 + ["1" * 20] * 45
    near = float(evidence(recent_counts(windows), 5, 0.85))
    far = float(evidence(recent_counts(windows), 5, 0.5))
    assert near > far


def test_tasks_without_a_baseline_are_left_out() -> None:
    # Windows shorter than recent + k carry no baseline: no evidence either way.
    assert float(evidence(recent_counts(["0000"] * 30), 5, 0.75)) == 0.0


windows_strategy = st.lists(
    st.text(alphabet="01", min_size=0, max_size=30), min_size=1, max_size=25
)


@settings(max_examples=60, deadline=None)
@given(windows_strategy, st.floats(0.05, 0.95), st.integers(1, 3), st.randoms())
def test_evidence_is_finite_and_ignores_task_order(
    windows: list[str], below: float, k: int, rnd: object
) -> None:
    ev = float(evidence(recent_counts(windows), k, below))
    assert np.isfinite(ev)
    shuffled = list(windows)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    # Replicas list tasks in any order; they must agree.
    assert float(evidence(recent_counts(shuffled), k, below)) == ev


@st.composite
def same_sized_suites(draw: st.DrawFn) -> list[list[str]]:
    tasks = draw(st.integers(1, 20))
    window = st.text(alphabet="01", min_size=0, max_size=30)
    suite = st.lists(window, min_size=tasks, max_size=tasks)
    return draw(st.lists(suite, min_size=2, max_size=4))


@settings(max_examples=30, deadline=None)
@given(same_sized_suites())
def test_a_batch_judges_each_suite_as_alone(suites: list[list[str]]) -> None:
    parts = [recent_counts(w) for w in suites]
    batch = RecentCounts(
        n=np.stack([p.n for p in parts]),
        c=np.stack([p.c for p in parts]),
        recent=np.stack([p.recent for p in parts]),
    )
    together = evidence(batch, 3, 0.7)
    alone = [float(evidence(p, 3, 0.7)) for p in parts]
    assert together.tolist() == pytest.approx(alone, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(windows_strategy, st.floats(0.05, 0.95), st.integers(1, 3))
# A baseline whose pass^3 sits at the threshold: the two hypotheses coincide up to
# the bisection's last step, and the evidence must still be exactly none.
@example(["01", "01"], 0.5, 3)
def test_recent_passes_are_no_evidence_of_a_drop(windows: list[str], below: float, k: int) -> None:
    """The alternative always has the lower pass rates, so passes can only favour the null."""
    passing = [w + "1" * DEFAULT_RECENT for w in windows]
    assert float(evidence(recent_counts(passing), k, below)) == 0.0


@settings(max_examples=60, deadline=None)
@given(st.integers(20, 40), st.integers(30, 60), st.integers(1, 3))
def test_recent_failures_after_a_clean_baseline_are_evidence(tasks: int, base: int, k: int) -> None:
    """Every task passed its baseline and failed its last outcomes: a drop, seen."""
    windows = ["1" * base + "0" * DEFAULT_RECENT] * tasks
    assert float(evidence(recent_counts(windows), k, 0.5)) > 1.0


def _batch(p: np.ndarray, reps: int, window: int, rng: np.random.Generator) -> RecentCounts:
    c = rng.binomial(window, p, size=(reps, p.size)).astype(np.int64)
    return RecentCounts(n=np.full_like(c, window), c=c, recent=np.zeros((*c.shape, 1), np.int64))


def test_a_window_at_or_above_the_threshold_has_no_level() -> None:
    assert float(level(recent_counts(steady()), 5, 0.75)) == 0.0
    # pass^5 of 40 perfect tasks and 10 at 15/20 is 0.8 + 0.2 * 0.19: above 0.75.
    windows = ["1" * 20] * 40 + ["1" * 15 + "0" * 5] * 10
    assert float(level(recent_counts(windows), 5, 0.75)) == 0.0


def test_the_level_grows_with_the_distance_under_the_threshold() -> None:
    def lvl(failing: int) -> float:
        windows = ["1" * 14 + "0" * 6] * failing + ["1" * 20] * (50 - failing)
        return float(level(recent_counts(windows), 5, 0.75))

    values = [lvl(f) for f in (14, 18, 22, 30)]
    assert values == sorted(values)
    assert values[-1] > 12.0


@pytest.mark.parametrize("tasks", [10, 50])
def test_the_level_is_calibrated_whatever_the_suite_size(tasks: int) -> None:
    """One free parameter on each side: at the threshold 2 x level is about chi-square(1)/2.

    So P(level >= 2) is near P(Z >= 2) = 2.3% and P(level >= 1) (the default
    threshold) near P(Z >= sqrt 2) = 7.9%, at 10 tasks as at 50; far under
    the threshold it is near 1 at both.
    """
    rng = np.random.default_rng(tasks)
    at = np.full(tasks, 0.75 ** (1 / 5))  # every task at the rate that puts pass^5 at 0.75
    levels = level(_batch(at, 2000, 20, rng), 5, 0.75)
    share = float((levels >= 2.0).mean())
    assert 0.005 <= share <= 0.06, share
    share = float((levels >= 1.0).mean())
    assert 0.03 <= share <= 0.14, share
    under = np.full(tasks, 0.4 ** (1 / 5))
    assert float((level(_batch(under, 200, 20, rng), 5, 0.75) >= 2.0).mean()) > 0.9


@settings(max_examples=40, deadline=None)
@given(windows_strategy, st.floats(0.05, 0.95), st.integers(1, 3), st.randoms())
def test_the_level_is_finite_nonnegative_and_ignores_task_order(
    windows: list[str], below: float, k: int, rnd: object
) -> None:
    got = float(level(recent_counts(windows), k, below))
    assert np.isfinite(got)
    assert got >= 0.0
    shuffled = list(windows)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert float(level(recent_counts(shuffled), k, below)) == pytest.approx(got, abs=1e-9)
