"""The Redis store against a real redis-server: exact counts, window, lottery, guards."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from reliabilityd.events import TrialEvent
from reliabilityd.rejections import Rejected
from reliabilityd.rules import AlertState
from reliabilityd.stats.lottery import lottery_cases, ranked_cell_groups
from reliabilityd.store import Baseline, SnapshotWrite, Store
from reliabilityd.store._alerts import Cas
from tests.support.helpers import make_events, stored_state, truth_of, wait_until


def by_suite(events: list[TrialEvent]) -> dict[str, list[TrialEvent]]:
    out: dict[str, list[TrialEvent]] = {}
    for e in events:
        out.setdefault(e.suite, []).append(e)
    return out


async def apply_in_batches(
    store: Store, events: list[TrialEvent], size: int, window: int = 0
) -> None:
    for i in range(0, len(events), size):
        batch = by_suite(events[i : i + size])
        await store.ingest.apply(batch, windows=dict.fromkeys(batch, window), dedup_ttl=3600)


async def test_exact_counts_with_duplicates_errors_and_skips(
    store: Store, rng: np.random.Generator
) -> None:
    events = make_events(rng, count=10_000)
    await apply_in_batches(store, events, 97)
    truth = truth_of(events)
    assert await store.reads.suites() == ["alpha", "beta"]
    for suite in ("alpha", "beta"):
        assert await store.reads.task_counts(suite) == truth.counts(suite)
        state = await store.reads.read_state(suite)
        assert state.hist == truth.hist(suite)
        c = state.counters
        assert c.trials == truth.trials(suite)
        assert c.errors == truth.errors.get(suite, 0)
        assert c.skips == truth.skips.get(suite, 0)
        assert c.duplicates == truth.duplicates.get(suite, 0)
    total_dups = sum(truth.duplicates.values())
    assert total_dups == 1000


async def test_replaying_everything_changes_nothing_but_duplicates(
    store: Store, rng: np.random.Generator
) -> None:
    events = make_events(rng, count=2000)
    await apply_in_batches(store, events, 100)
    before = await store.reads.read_state("alpha")
    await apply_in_batches(store, events, 333)
    after = await store.reads.read_state("alpha")
    assert after.hist == before.hist
    assert after.counters.trials == before.counters.trials
    assert after.counters.duplicates == before.counters.duplicates + sum(
        1 for e in events if e.suite == "alpha"
    )


@pytest.mark.parametrize("window", [5, 12])
async def test_window_keeps_the_last_w_outcomes(
    store: Store, rng: np.random.Generator, window: int
) -> None:
    events = make_events(rng, count=3000, tasks=20)
    await apply_in_batches(store, events, 50, window=window)
    truth = truth_of(events, window=window)
    for suite in ("alpha", "beta"):
        assert await store.reads.task_counts(suite) == truth.counts(suite)
        assert (await store.reads.read_state(suite)).hist == truth.hist(suite)


async def test_window_shows_a_regression_within_w_trials(store: Store) -> None:
    good = [TrialEvent("s", "t", f"g{i}", "pass") for i in range(100)]
    bad = [TrialEvent("s", "t", f"b{i}", "fail") for i in range(10)]
    await store.ingest.apply({"s": good + bad}, windows={"s": 10}, dedup_ttl=60)
    assert await store.reads.task_counts("s") == {"t": (10, 0)}


async def test_errors_and_skips_never_enter_the_pool(store: Store) -> None:
    events = [
        TrialEvent("s", "judge-down", "1", "error"),
        TrialEvent("s", "judge-down", "2", "skip"),
        TrialEvent("s", "ok", "1", "pass"),
    ]
    applied = await store.ingest.apply({"s": events}, windows={}, dedup_ttl=60)
    assert (applied[0].counted, applied[0].errors, applied[0].skips) == (1, 1, 1)
    assert await store.reads.task_counts("s") == {"ok": (1, 1)}
    assert (await store.reads.read_state("s")).hist.tasks == 1


async def test_lottery_rows_match_the_exact_ranking(store: Store, rng: np.random.Generator) -> None:
    events = make_events(rng, count=4000, tasks=60, suites=("s",))
    await apply_in_batches(store, events, 200)
    counts = await store.reads.task_counts("s")
    hist = (await store.reads.read_state("s")).hist
    for k in (1, 2, 5):
        want = lottery_cases(counts, k, limit=10)
        for limit in (None, 10):  # all groups, or only those the first 10 tasks need
            groups = ranked_cell_groups(hist.at_least(k), k, limit)
            assert await store.reads.lottery_rows("s", groups, 10) == want


async def test_snapshot_never_overwrites_newer_with_older(store: Store) -> None:
    assert await store.snapshots.write_snapshot("s", 5, {"json": "v5"}, {"pass^1": "0.5"}) == (
        True,
        True,
    )
    assert await store.snapshots.write_snapshot("s", 3, {"json": "v3"}, {"pass^1": "0.3"}) == (
        False,
        False,
    )
    assert await store.snapshots.write_snapshot("s", 7, {}, {"pass^1": "0.7"}) == (False, True)
    # A CI computed for version 6 lands, but the live value of version 7 stays.
    assert await store.snapshots.write_snapshot("s", 6, {"json": "v6"}, {"pass^1": "0.6"}) == (
        True,
        False,
    )
    snap = await store.snapshots.fields("s")
    assert (snap["json"], snap["version"], snap["pass^1"], snap["live_version"]) == (
        "v6",
        "6",
        "0.7",
        "7",
    )


async def test_dedup_records_expire(store: Store) -> None:
    """After dedup_ttl (plus the rest of its bucket) a re-sent trial counts again."""
    trial = TrialEvent("s", "t", "1", "pass")
    await store.ingest.apply({"s": [trial]}, windows={}, dedup_ttl=1)
    (again,) = await store.ingest.apply({"s": [trial]}, windows={}, dedup_ttl=1)
    assert (again.counted, again.duplicates) == (0, 1)
    assert await store.ingest.dedup_width(1) == 1
    # A record lives its TTL, the rest of its bucket and the second the
    # script keeps to spare (store.dedup.plan), read off the bucket itself.
    buckets = [k async for k in store.client.scan_iter(match=store.keys.suite("s", "dedup:*"))]
    assert buckets
    for bucket in buckets:
        assert 0 < await store.client.pttl(bucket) <= (1 + 1 + 1) * 1000

    async def gone() -> bool:
        return not await store.ingest.is_recorded("s", "t", "1", dedup_ttl=1)

    await wait_until(gone, 10)
    (late,) = await store.ingest.apply({"s": [trial]}, windows={}, dedup_ttl=1)
    assert (late.counted, late.duplicates) == (1, 0)
    assert await store.reads.task_counts("s") == {"t": (2, 2)}


async def test_deadletter_stream_is_capped_and_counted(store: Store) -> None:
    items = [Rejected(b"x" * 5000, "too long", "too_large")]
    items += [Rejected(b"y", f"r{i}", "other") for i in range(300)]
    await store.ingest.deadletter([(items[0], "test")], maxlen=100)
    (first,) = await store.reads.deadletters()
    assert first.truncated
    assert len(first.payload) == 2048
    assert first.reason == "too long"
    items = items[1:]
    await store.ingest.deadletter([(item, "test") for item in items], maxlen=100)
    kept = await store.reads.deadletters(count=1000)
    assert 100 <= len(kept) < 301  # capped (approximately, as XADD MAXLEN ~ trims)
    assert await store.reads.deadletter_count() == 301
    assert kept[-1].reason == "r299"
    assert kept[-1].source == "test"


async def test_a_batch_larger_than_one_chunk(store: Store) -> None:
    from reliabilityd.store import _ingest as store_module

    n = store_module.CHUNK * 2 + 7
    events = [TrialEvent("s", f"t{i % 10}", str(i), "pass" if i % 3 else "fail") for i in range(n)]
    (applied,) = await store.ingest.apply({"s": events + events[:5]}, windows={}, dedup_ttl=60)
    assert (applied.counted, applied.duplicates) == (n, 5)
    counts = await store.reads.task_counts("s")
    assert sum(c[0] for c in counts.values()) == n
    assert sum(c[1] for c in counts.values()) == sum(1 for i in range(n) if i % 3)


async def test_alert_cas_refuses_a_verdict_on_an_older_snapshot(store: Store) -> None:
    """The replica that judged by snapshot 3 cannot undo a decision taken on snapshot 7."""
    firing = AlertState(state="firing", started_at=1.0, reason="below", snapshot_version=7)
    won = await store.alerts.alert_cas(
        "s", "r", expected_seq=0, new=firing, notification=None, sinks=[]
    )
    assert won == Cas(won=True)
    stored = await stored_state(store, "s", "r")
    assert (stored.state, stored.seq, stored.snapshot_version) == ("firing", 1, 7)
    resolved = AlertState(state="resolved", started_at=1.0, ended_at=2.0, snapshot_version=3)
    refused = await store.alerts.alert_cas(
        "s", "r", expected_seq=1, new=resolved, notification=b"note", sinks=["webhook"]
    )
    assert refused == Cas(won=False, stale_snapshot=True)
    assert await store.alerts.outbox_lengths([("s", "r", "webhook")]) == [0]  # nothing queued
    newer = msgspec.structs.replace(resolved, snapshot_version=7)
    queued = await store.alerts.alert_cas(
        "s", "r", expected_seq=1, new=newer, notification=b"note", sinks=["webhook"]
    )
    assert queued == Cas(won=True)
    assert await store.alerts.outbox_lengths([("s", "r", "webhook")]) == [1]
    # A stale seq is refused as before, whatever the snapshot.
    later = msgspec.structs.replace(firing, snapshot_version=9)
    stale = await store.alerts.alert_cas(
        "s", "r", expected_seq=1, new=later, notification=None, sinks=[]
    )
    assert stale == Cas(won=False)


async def test_a_breach_start_copies_every_tasks_counts_into_the_baseline(store: Store) -> None:
    """The transition that starts a breach keeps the counts; later transitions leave them."""
    first = [TrialEvent("s", "a", "1", "pass"), TrialEvent("s", "b", "1", "fail")]
    await store.ingest.apply({"s": first}, windows={}, dedup_ttl=60)
    assert await store.alerts.baseline("s", "r") is None
    pending = AlertState(state="pending", started_at=50.0, reason="below", snapshot_version=1)
    won = await store.alerts.alert_cas(
        "s", "r", expected_seq=0, new=pending, notification=None, sinks=[], breach_started=50.0
    )
    assert won == Cas(won=True)
    await store.ingest.apply({"s": [TrialEvent("s", "a", "2", "fail")]}, windows={}, dedup_ttl=60)
    firing = msgspec.structs.replace(pending, state="firing", snapshot_version=2)
    await store.alerts.alert_cas("s", "r", expected_seq=1, new=firing, notification=None, sinks=[])
    assert await store.alerts.baseline("s", "r") == Baseline(
        at=50.0, tasks={"a": (1, 1), "b": (1, 0)}
    )
    # A refused compare-and-set copies nothing.
    again = msgspec.structs.replace(pending, started_at=99.0, snapshot_version=3)
    refused = await store.alerts.alert_cas(
        "s", "r", expected_seq=0, new=again, notification=None, sinks=[], breach_started=99.0
    )
    assert refused == Cas(won=False)
    baseline = await store.alerts.baseline("s", "r")
    assert baseline is not None
    assert baseline.at == 50.0


async def test_pipelined_reads_and_writes_are_each_suites_own(
    store: Store, rng: np.random.Generator
) -> None:
    """One round trip for many suites gives what one call per suite gives."""
    events = make_events(rng, count=3000, tasks=40, suites=("a", "b", "c"))
    await apply_in_batches(store, events, 150, window=5)
    suites = ["a", "b", "missing", "c"]
    windows = [True, False, False, True]
    states = await store.reads.read_states(suites, windows=windows)
    for suite, with_windows, state in zip(suites, windows, states, strict=True):
        assert state == await store.reads.read_state(suite, windows=with_windows)
    assert states[2].hist.tasks == 0
    assert states[0].windows is not None
    assert states[1].windows is None
    groups = [ranked_cell_groups(s.hist.at_least(2), 2, 5) for s in states]
    rows = await store.reads.lottery_rows_many(list(zip(suites, groups, strict=True)), 5)
    for suite, group, got in zip(suites, groups, rows, strict=True):
        assert got == await store.reads.lottery_rows(suite, group, 5)
    assert any(rows)
    await store.snapshots.write_snapshot("b", 4, {"json": "b4"}, {"pass^1": "0.4"})
    wrote = await store.snapshots.write_snapshots(
        [
            SnapshotWrite("a", 2, {"json": "a2"}, {"pass^1": "0.2"}, settings="f"),
            SnapshotWrite("b", 3, {"json": "b3"}, {"pass^1": "0.3"}),
            SnapshotWrite("c", 9, {}, {"pass^1": "0.9"}),
        ]
    )
    assert wrote == [(True, True), (False, False), (False, True)]
    a = await store.snapshots.fields("a")
    assert (a["json"], a["settings"], a["version"]) == ("a2", "f", "2")
    assert (await store.snapshots.fields("b"))["json"] == "b4"
    assert "json" not in await store.snapshots.fields("c")
