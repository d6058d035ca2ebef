"""The scrape's view of Redis: only the snapshot documents that changed are read again."""

from __future__ import annotations

from reliabilityd.daemon.metrics import read_view
from reliabilityd.stats import snapshot
from reliabilityd.stats.histogram import Histogram
from reliabilityd.store import Series, SnapshotWrite, Store


def write_of(suite: str, version: int, now: float) -> SnapshotWrite:
    hist = Histogram.from_pairs([(5, 4), (5, 5), (6, 2)])
    settings = snapshot.StatsSettings(ks=(1,), n_boot=100)
    snap = snapshot.build(
        suite=suite,
        hist=hist,
        trials=16,
        errors=0,
        skips=0,
        duplicates=0,
        version=version,
        settings=settings,
        estimates=snapshot.full_estimates(hist, settings),
        lottery_k=1,
        lottery_rows=[],
        now=now,
    )
    ci, values = snapshot.redis_fields(snap)
    return SnapshotWrite(suite, version, ci, values)


async def test_a_view_reads_again_only_the_changed_documents(store: Store) -> None:
    suites = ["a", "b", "c"]
    await store.client.sadd(store.keys.suites, *suites, "no-snapshot-yet")
    await store.snapshots.write_snapshots([write_of(s, 1, 1000.0) for s in suites])
    first = await read_view(store, [], [])
    assert [s.suite for s in first.snapshots] == suites
    known = {Series(s.suite): s for s in first.snapshots}
    # b gets a new snapshot; c's document is damaged in place (its stamp unchanged).
    await store.snapshots.write_snapshots([write_of("b", 2, 1001.0)])
    await store.client.hset(store.key("c", "snapshot"), "json", "not json")
    second = await read_view(store, [], [], known)
    by_suite = {s.suite: s for s in second.snapshots}
    assert by_suite["a"] is known[Series("a")]
    assert by_suite["c"] is known[Series("c")]
    assert by_suite["b"].version == 2
    assert by_suite["b"] == await store.snapshots.document("b")
    # Without what it knew, the view reads every document (the damaged one is skipped).
    assert [s.suite for s in (await read_view(store, [], [])).snapshots] == ["a", "b"]
