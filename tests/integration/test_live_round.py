"""The live loop's round: every due suite refreshed together, each with its own values."""

from __future__ import annotations

import numpy as np

from reliabilityd.daemon._live import LiveValues
from reliabilityd.events import TrialEvent
from reliabilityd.stats import snapshot
from reliabilityd.store import Store
from reliabilityd.store._base import _text
from tests.support.helpers import make_events


async def test_a_round_writes_each_suites_own_point_estimates(
    store: Store, rng: np.random.Generator
) -> None:
    events = make_events(rng, count=3_000)
    batches: dict[str, list[TrialEvent]] = {}
    for e in events:
        batches.setdefault(e.suite, []).append(e)
    await store.ingest.apply(batches, windows=dict.fromkeys(batches, 0), dedup_ttl=3600)
    suites = await store.reads.suites()
    assert len(suites) >= 2
    settings = snapshot.StatsSettings(ks=(1, 3))
    live = LiveValues(store, lambda _: settings)
    await live.refresh_many(suites)
    for suite in suites:
        state = await store.reads.read_state(suite)
        want = snapshot.value_fields(snapshot.point_estimates(state.hist, settings))
        got = await store.client.hgetall(store.key(suite, "snapshot"))
        fields = {_text(k): _text(v) for k, v in got.items()}
        assert {k: fields[k] for k in want} == want
        assert int(fields["trials"]) == state.counters.trials
