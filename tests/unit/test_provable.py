"""rules.provable: when a ci-low rule cannot prove its threshold on a suite of this size."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reliabilityd.rules.provable import healthy_truth, shifted_rates
from reliabilityd.rules.threshold import Rule

GATE = Rule(name="gate", k=1, below=0.75, trigger="ci-low")


def test_the_healthy_truth_is_a_tenth_above_below_at_most_half_way_to_one() -> None:
    assert healthy_truth(GATE) == 0.85
    assert healthy_truth(Rule(name="r", k=1, below=0.9, trigger="ci-low")) == 0.95


@settings(max_examples=60, derandomize=True, deadline=None)
@given(
    counts=st.lists(st.tuples(st.integers(1, 30), st.floats(0, 1)), min_size=1, max_size=40),
    k=st.integers(1, 5),
    metric=st.sampled_from(["pass^k", "pass@k"]),
    truth=st.floats(0.05, 0.95),
)
def test_the_shift_puts_the_suites_metric_at_the_truth(
    counts: list[tuple[int, float]], k: int, metric: str, truth: float
) -> None:
    n = np.asarray([x[0] for x in counts])
    c = np.asarray([round(x[0] * x[1]) for x in counts])
    rule = Rule(name="r", k=k, below=0.5, metric=metric, trigger="ci-low")  # type: ignore[arg-type]
    rates = shifted_rates(rule, n, c, truth)
    got = np.mean(rates**k) if metric == "pass^k" else np.mean(1 - (1 - rates) ** k)
    assert abs(got - truth) < 1e-9
    # One shift for all: the tasks keep their order.
    order = np.argsort((c + 0.5) / (n + 1.0), kind="stable")
    assert np.all(np.diff(rates[order]) >= -1e-12)
