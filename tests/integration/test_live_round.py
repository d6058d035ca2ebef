"""The live loop's round: every due suite refreshed together, each with its own values; no
round while the CI tick recomputes, and nothing refreshed that the tick wrote."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import numpy as np
import pytest

from reliabilityd.daemon import _live
from reliabilityd.daemon._live import LIVE_INTERVAL, LiveValues
from reliabilityd.events import TrialEvent
from reliabilityd.stats import snapshot
from reliabilityd.store import Store
from reliabilityd.store._base import _text
from tests.support.helpers import make_events, wait_until


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


async def _values(store: Store, suite: str) -> dict[str, str]:
    got = await store.client.hgetall(store.key(suite, "snapshot"))
    return {_text(k): _text(v) for k, v in got.items()}


async def _committed(
    store: Store, rng: np.random.Generator, suites: Sequence[str]
) -> dict[str, int]:
    """600 random events over ``suites``, committed: each suite's new version."""
    batches: dict[str, list[TrialEvent]] = {}
    for e in make_events(rng, suites=suites, count=600):
        batches.setdefault(e.suite, []).append(e)
    applied = await store.ingest.apply(batches, windows=dict.fromkeys(suites, 0), dedup_ttl=3600)
    return {a.suite: a.version for a in applied}


async def test_no_round_begins_while_the_tick_recomputes_and_what_it_wrote_is_due_no_more(
    store: Store, rng: np.random.Generator
) -> None:
    """Commits made while the tick holds the loop wait, one entry a suite; a suite whose
    snapshot the tick wrote at its due version is not refreshed after, one due at a newer
    version than the tick's is."""
    suites = ("alpha", "beta", "gamma")
    versions = await _committed(store, rng, suites)
    assert sorted(versions) == list(suites)
    live = LiveValues(store, lambda _: snapshot.StatsSettings(ks=(1, 3)))
    stop = asyncio.Event()
    with live.yielding():
        loop = asyncio.create_task(live.loop(stop))
        # Every commit twice (a redelivery reports the same version): one entry each.
        live.committed(versions.items())
        live.committed(versions.items())
        await asyncio.sleep(4 * LIVE_INTERVAL)
        assert [await _values(store, s) for s in suites] == [{}, {}, {}]
        assert live.due == versions
        # The tick wrote alpha at its version, and beta at one older than its commit.
        live.written({"alpha": versions["alpha"], "beta": versions["beta"] - 1})
        assert live.due == {"beta": versions["beta"], "gamma": versions["gamma"]}
    try:

        async def refreshed() -> bool:
            return all(["trials" in await _values(store, s) for s in ("beta", "gamma")])

        await wait_until(refreshed, 10)
        await asyncio.sleep(3 * LIVE_INTERVAL)
        assert await _values(store, "alpha") == {}
        assert live.due == {}
    finally:
        stop.set()
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop


async def test_a_round_in_progress_stops_after_its_batch_when_the_tick_begins(
    store: Store, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tick starting mid-round: the batch in flight is written, the rest stay due
    until the tick ends, then are refreshed."""
    monkeypatch.setattr(_live, "ROUND_BATCH", 1)
    suites = ("alpha", "beta", "gamma")
    versions = await _committed(store, rng, suites)
    live = LiveValues(store, lambda _: snapshot.StatsSettings(ks=(1, 3)))
    tick = contextlib.ExitStack()
    refresh = live.refresh_many
    began: list[Sequence[str]] = []

    async def then_the_tick_begins(names: Sequence[str]) -> None:
        await refresh(names)
        if not began:
            began.append(names)
            tick.enter_context(live.yielding())

    monkeypatch.setattr(live, "refresh_many", then_the_tick_begins)
    stop = asyncio.Event()
    loop = asyncio.create_task(live.loop(stop))
    try:
        live.committed(versions.items())

        async def first_written() -> bool:
            return "trials" in await _values(store, "alpha")

        await wait_until(first_written, 10)
        assert began == [["alpha"]]
        await asyncio.sleep(3 * LIVE_INTERVAL)
        assert [await _values(store, s) for s in ("beta", "gamma")] == [{}, {}]
        assert live.due == {"beta": versions["beta"], "gamma": versions["gamma"]}
        tick.close()

        async def rest_written() -> bool:
            return all(["trials" in await _values(store, s) for s in ("beta", "gamma")])

        await wait_until(rest_written, 10)
        assert live.due == {}
    finally:
        tick.close()
        stop.set()
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop


async def test_a_suite_that_does_not_compute_is_left_and_the_loop_goes_on(
    store: Store, rng: np.random.Generator
) -> None:
    """A damaged histogram (c > n) in one suite of a round: the others are refreshed, the
    loop keeps running, and a later commit of a good suite is refreshed too."""
    suites = ("alpha", "beta", "gamma")
    versions = await _committed(store, rng, suites)
    await store.client.hset(store.key("beta", "hist"), "3:7", 1)
    live = LiveValues(store, lambda _: snapshot.StatsSettings(ks=(1, 3)))
    stop = asyncio.Event()
    loop = asyncio.create_task(live.loop(stop))
    try:
        live.committed(versions.items())

        async def refreshed(names: Sequence[str]) -> bool:
            return all(["trials" in await _values(store, s) for s in names])

        await wait_until(lambda: refreshed(["alpha", "gamma"]), 10)
        assert await _values(store, "beta") == {}
        assert not loop.done()
        more = await _committed(store, rng, ["delta"])
        live.committed(more.items())
        await wait_until(lambda: refreshed(["delta"]), 10)
        assert not loop.done()
    finally:
        stop.set()
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
