"""The scrape's view of Redis: the summary rows, their rules' states, the outboxes."""

from __future__ import annotations

import msgspec

from reliabilityd.daemon._rows import row_of
from reliabilityd.daemon.metrics import read_view
from reliabilityd.stats import snapshot
from reliabilityd.stats.histogram import Histogram
from reliabilityd.store import Store


def snap_of(suite: str, version: int, now: float) -> snapshot.Snapshot:
    hist = Histogram.from_pairs([(5, 4), (5, 5), (6, 2)])
    settings = snapshot.StatsSettings(ks=(1,), n_boot=100)
    return snapshot.build(
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


async def test_a_view_reads_the_rows_and_skips_an_undecodable_one(store: Store) -> None:
    suites = ["a", "b", "c"]
    await store.client.sadd(store.keys.suites, *suites, "no-snapshot-yet")
    now = 1000.0
    snaps = [snap_of(s, 1, now) for s in suites]
    await store.rows.write(
        [
            msgspec.structs.replace(row_of(s, [], None, now), rules=[("r", "firing", s.suite)])
            for s in snaps
        ]
    )
    await store.client.hset(store.keys.rows, "c", b"not a row")
    view = await read_view(store, ["mqtt"])
    # The suite without a snapshot has no row, so no gauge; the damaged row is left out.
    assert [r.suite for r in view.snapshots] == ["a", "b"]
    assert view.alerts == [("a", "r", "firing"), ("b", "r", "firing")]
    assert view.outbox == {"mqtt": 0}
