"""rules.provable against the daemon's own judging: the share of judgements a ci-low rule
spends in breach on a steady healthy suite, drawn and simulated."""

from __future__ import annotations

import numpy as np

from reliabilityd.rules.provable import firing_share, healthy_truth, shifted_rates, unprovable
from reliabilityd.rules.simulator import steady
from reliabilityd.rules.threshold import Rule

GATE = Rule(name="gate", k=1, below=0.75, trigger="ci-low")


def test_a_small_suite_is_in_breach_most_of_the_time_and_a_large_one_rarely() -> None:
    small = firing_share(GATE, [(20, 17)] * 10, interval="gaffke")
    large = firing_share(GATE, [(20, 17)] * 200, interval="gaffke")
    assert small is not None
    assert small > 0.9
    assert large is not None
    assert large < 0.1
    # Tasks that differ widen the interval: the same size is in breach more often.
    mixed = [(20, 20)] * 30 + [(20, c) for c in range(6, 16)] * 2
    alike = [(20, 17)] * 50
    wide, narrow = (firing_share(GATE, x, interval="gaffke") for x in (mixed, alike))
    assert wide is not None
    assert narrow is not None
    assert wide > narrow


def test_the_warning_names_the_rule_the_suite_and_the_share() -> None:
    found = unprovable(GATE, "deploy-x", [(20, 17)] * 10 + [(0, 0)], interval="gaffke")
    assert found is not None
    assert (found.rule, found.suite, found.tasks, found.trials) == ("gate", "deploy-x", 10, 20)
    text = found.message(GATE)
    assert "rule 'gate' (trigger ci-low, pass^k at k=1 below 0.75)" in text
    assert "suite 'deploy-x' (10 tasks" in text
    assert "at a true pass^k of 0.85" in text
    # A detector or rate rule, a large suite or too few tasks for a verdict: nothing to say.
    for trigger in ("detector", "rate"):
        pager = Rule(name="d", k=1, below=0.75, trigger=trigger)
        assert unprovable(pager, "s", [(20, 17)] * 10, interval="gaffke") is None
    assert unprovable(GATE, "s", [(20, 17)] * 300, interval="gaffke") is None
    strict = Rule(name="g", k=5, below=0.75, trigger="ci-low", min_tasks=20)
    assert unprovable(strict, "s", [(20, 17)] * 10, interval="gaffke") is None


def test_the_same_counts_give_the_same_share() -> None:
    counts = [(20, 20)] * 20 + [(20, 12)] * 10
    first = firing_share(GATE, counts, interval="gaffke")
    assert firing_share(GATE, counts, interval="gaffke") == first


def test_the_drawn_share_matches_the_simulated_daemon() -> None:
    """The share from independent draws against the share of 5 s judgements in breach in
    a simulated day of the daemon (the real state machine, windows, trials arriving as
    Poisson streams), on a suite at the healthy truth: within 0.15 (seeded)."""
    counts = [(20, 20)] * 8 + [(20, c) for c in (8, 10, 12, 14, 15, 16, 17, 18)] * 2
    n = np.asarray([x[0] for x in counts])
    c = np.asarray([x[1] for x in counts])
    for rule in (GATE, Rule(name="gate5", k=5, below=0.6, trigger="ci-low")):
        rates = shifted_rates(rule, n, c, healthy_truth(rule))
        simulated = steady(
            [rule],
            rates,
            np.full(n.size, 200 / 86400.0),  # 200 trials a task a day
            window=20,
            k=rule.k,
            duration=86400.0,
            rng=np.random.default_rng(7),
            tick=5.0,
            interval="gaffke",
        )
        share = simulated.firing[0] / simulated.ticks
        drawn = firing_share(rule, counts, interval="gaffke")
        assert drawn is not None
        assert abs(drawn - share) < 0.15, (rule.name, drawn, share)
