"""The suite gauges' exposition text: what prometheus parses from it, and its per-suite cache."""

from __future__ import annotations

import time

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from reliabilityd.alerting.notify import parse_time
from reliabilityd.daemon._metrics_text import SuiteText, SuiteView, Summary
from reliabilityd.daemon._rows import row_of
from reliabilityd.daemon.metrics import ALERT_STATES
from reliabilityd.rules import AlertState
from reliabilityd.stats import snapshot
from reliabilityd.stats.histogram import Histogram
from reliabilityd.stats.snapshot import Snapshot

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parsed(body: bytes) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out
            out[key] = s.value
    return out


def snap_of(suite: str, pairs: list[tuple[int, int]], now: float, ks: tuple[int, ...]) -> Snapshot:
    hist = Histogram.from_pairs(pairs)
    settings = snapshot.StatsSettings(ks=ks, n_boot=200)
    return snapshot.build(
        suite=suite,
        hist=hist,
        trials=int((hist.n * hist.count).sum()),
        errors=0,
        skips=0,
        duplicates=0,
        version=3,
        settings=settings,
        estimates=snapshot.full_estimates(hist, settings),
        lottery_k=max(ks),
        lottery_rows=[],
        now=now,
        last_trial_at=now - 30.0,
    )


def expected(view: SuiteView) -> Samples:
    """The samples straight from the snapshots, as the gauges are documented."""
    out: Samples = {("reliabilityd_redis_up", ()): 1.0}
    for snap in view.snapshots:
        assert isinstance(snap, Snapshot)
        for metric, ests in (("pass_at_k", snap.pass_at_k), ("pass_hat_k", snap.pass_hat_k)):
            for e in ests:
                labels: tuple[tuple[str, str], ...] = (("k", str(e.k)), ("suite", snap.suite))
                out[(f"reliabilityd_{metric}_unknown", labels)] = float(e.value is None)
                if e.value is not None:
                    out[(f"reliabilityd_{metric}_ratio", labels)] = e.value
                if e.ci is not None:
                    out[(f"reliabilityd_{metric}_ci_lower_ratio", labels)] = e.ci[0]
                    out[(f"reliabilityd_{metric}_ci_upper_ratio", labels)] = e.ci[1]
        out[("reliabilityd_tasks", (("suite", snap.suite),))] = float(snap.tasks)
        last = parse_time(snap.last_trial_at)
        assert last is not None
        out[("reliabilityd_last_trial_age_seconds", (("suite", snap.suite),))] = view.read_at - last
    for suite, rule, state in view.alerts:
        for s in ALERT_STATES:
            out[("reliabilityd_alert_state", (("rule", rule), ("state", s), ("suite", suite)))] = (
                float((state if isinstance(state, str) else state.state) == s)
            )
    for sink, depth in view.outbox.items():
        out[("reliabilityd_outbox_depth", (("sink", sink),))] = float(depth)
    return out


def test_suite_text_is_the_snapshots_and_is_formatted_once_per_change() -> None:
    rng = np.random.default_rng(5)
    now = float(int(time.time()))  # whole seconds: the snapshot keeps milliseconds
    names = ["plain", 'quote " and \\ back', "short"]
    snaps: list[Summary] = [
        snap_of(
            name,
            [(int(n), int(rng.integers(0, n + 1))) for n in rng.integers(1, 20, 30)],
            now,
            (1, 5),
        )
        for name in names
    ]
    firing = AlertState(state="firing")
    view = SuiteView(snaps, [(names[1], "r", firing)], {"mqtt": 2}, redis_up=True, read_at=now)
    text = SuiteText()
    text.view = view
    body = text.render()
    assert parsed(body) == expected(view)
    assert any(e.unknown for s in snaps if isinstance(s, Snapshot) for e in s.pass_hat_k)
    # Nothing new: the very bytes served before.
    assert text.render() is body
    # One suite has a new snapshot, one is gone: only what changed is new.
    changed = snap_of("plain", [(10, 9)] * 12, now + 1.0, (1, 5))
    later = SuiteView([changed, snaps[1]], [], {}, redis_up=True, read_at=now + 1.0)
    text.view = later
    again = parsed(text.render())
    assert again == expected(later)
    assert ("reliabilityd_tasks", (("suite", "short"),)) not in again


def test_without_a_view_only_redis_up() -> None:
    text = SuiteText()
    assert parsed(text.render()) == {("reliabilityd_redis_up", ()): 0.0}
    text.view = SuiteView([], [], {}, redis_up=False, read_at=0.0)
    assert parsed(text.render()) == {("reliabilityd_redis_up", ()): 0.0}


def test_a_view_of_rows_is_the_text_of_their_snapshots(rng: np.random.Generator) -> None:
    """/metrics reads the summary rows: each row exposes what its snapshot would."""
    now = float(int(time.time()))
    snaps = [
        snap_of(
            name,
            [(int(n), int(rng.integers(0, n + 1))) for n in rng.integers(1, 20, 30)],
            now,
            (1, 5),
        )
        for name in ("a", "b")
    ]
    rows: list[Summary] = [row_of(s, [], None, now) for s in snaps]
    alerts: list[tuple[str, str, AlertState | str]] = [("a", "r", "pending")]
    of_snaps = SuiteView(list[Summary](snaps), alerts, {}, redis_up=True, read_at=now)
    of_rows = SuiteView(rows, alerts, {}, redis_up=True, read_at=now)
    text = SuiteText()
    text.view = of_rows
    assert parsed(text.render()) == expected(of_snaps)
