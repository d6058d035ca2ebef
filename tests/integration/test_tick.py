"""The CI tick against a real redis-server: many suites batched, pipelined, per suite exact;
its snapshots handed to the evaluator, and a newer stored one still the one judged; what it
wrote not refreshed again by the live loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from reliabilityd.alerting.registry import Settled
from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon import _claims, _recompute
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.daemon._live import LIVE_INTERVAL
from reliabilityd.events import Outcome, TrialEvent
from reliabilityd.rules import Rule
from reliabilityd.rules.registry import Watch
from reliabilityd.stats import snapshot
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Series, Store, connect
from tests.support.daemon import running, store_for
from tests.support.helpers import evaluations, stored_state, wait_until
from tests.support.servers import RedisServer

SUITES = 150


def trials(rng: np.random.Generator, suite: str, tasks: int) -> list[TrialEvent]:
    out = []
    for t in range(tasks):
        p = rng.beta(2.0, 0.8)
        for j in range(int(rng.integers(1, 12))):
            ok = rng.random() < p
            out.append(TrialEvent(suite, f"task {t}", f"r{t}-{j}", "pass" if ok else "fail"))
    return out


def tick_config(
    redis_server: RedisServer,
    prefix: str,
    *,
    k: Sequence[int] = (1, 5),
    ci_interval: float = 5.0,
    n_boot: int = 500,
) -> Config:
    """A daemon's config on this test's Redis and prefix, no MQTT."""
    return Config(
        redis=RedisConfig(url=redis_server.url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=list(k), ci_interval=ci_interval, n_boot=n_boot),
    )


async def test_a_tick_recomputes_many_suites_each_as_alone_and_sets_a_broken_one_aside(
    redis_server: RedisServer, prefix: str, rng: np.random.Generator
) -> None:
    """More suites than one batch: every snapshot is its own series' math, exactly.

    One suite's stored histogram is damaged (c > n): it gets no snapshot and
    stays marked, and every other suite still gets its own.
    """
    cfg = tick_config(redis_server, prefix)
    client = connect(redis_server.url)
    store = Store(client, prefix)
    try:
        names = [f"s{i:03d}" for i in range(SUITES)]
        batch = {name: trials(rng, name, int(rng.integers(0, 60))) for name in names}
        await store.ingest.apply(batch, windows=dict.fromkeys(names, 0), dedup_ttl=3600)
        broken = "s077"
        await client.hset(store.key(broken, "hist"), "3:7", 1)
        daemon = Daemon(cfg, store)
        tick = await daemon.recompute.ci_tick()
        assert sorted(tick.marks) == names
        assert await store.snapshots.changed() == [broken]
        assert await client.zcard(store.keys.claims) == 0
        docs = await store.snapshots.documents(names)
        # The tick hands on exactly the snapshots it wrote, as they are stored.
        assert tick.snapshots == {
            Series(name): doc for name, doc in zip(names, docs, strict=True) if name != broken
        }
        for name, snap in zip(names, docs, strict=True):
            if name == broken:
                assert snap is None
                continue
            assert isinstance(snap, Snapshot)
            state = await store.reads.read_state(name)
            want = snapshot.full_estimates(state.hist, daemon.recompute.settings(name))
            assert [*snap.pass_at_k, *snap.pass_hat_k] == [
                *(e for e in want if e.metric == "pass@k"),
                *(e for e in want if e.metric == "pass^k"),
            ]
            assert (snap.version, snap.tasks) == (state.counters.version, state.hist.tasks)
        # Nothing changed since: the next tick claims only the broken suite again.
        assert (await daemon.recompute.ci_tick()).marks == [broken]
    finally:
        await client.aclose()


async def test_the_live_loop_leaves_alone_what_the_tick_wrote_and_refreshes_what_came_after(
    redis_server: RedisServer, prefix: str, rng: np.random.Generator
) -> None:
    """The tick's snapshot carries the live values of its version: a suite due at that
    version is not read and written again by the live loop; one committed after it is."""
    cfg = tick_config(redis_server, prefix)
    client = connect(redis_server.url)
    store = Store(client, prefix)
    stop = asyncio.Event()
    loop: asyncio.Task[None] | None = None
    try:
        names = [f"s{i:03d}" for i in range(20)]
        batch = {name: trials(rng, name, 30) for name in names}
        applied = await store.ingest.apply(batch, windows=dict.fromkeys(names, 0), dedup_ttl=3600)
        daemon = Daemon(cfg, store)
        live = daemon.recompute.live
        live.committed((a.suite, a.version) for a in applied)
        tick = await daemon.recompute.ci_tick()
        assert sorted(s.suite for s in tick.snapshots) == names
        assert live.due == {}
        loop = asyncio.create_task(live.loop(stop))
        await asyncio.sleep(4 * LIVE_INTERVAL)
        for name in names:
            fields = await store.snapshots.fields(name)
            # Still the tick's write: the live loop wrote nothing over it.
            assert fields["live_updated_at"] == fields["updated_at"]
        later = TrialEvent("s007", "task 0", "later", "fail")
        (after,) = await store.ingest.apply({"s007": [later]}, windows={}, dedup_ttl=3600)
        live.committed([(after.suite, after.version)])

        async def refreshed() -> bool:
            fields = await store.snapshots.fields("s007")
            return fields["live_updated_at"] != fields["updated_at"]

        await wait_until(refreshed, 10)
        state = await store.reads.read_state("s007")
        assert (await store.snapshots.fields("s007"))["trials"] == str(state.counters.trials)
    finally:
        stop.set()
        if loop is not None:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
        await client.aclose()


async def _backlog(
    store: Store, cfg: Config, rng: np.random.Generator
) -> tuple[Daemon, list[str], list[str]]:
    """A daemon that takes only change marks (no version scan), with 600 suites committed
    and marked (``early``) and 100 committed but not marked yet (``late``: their marks
    are made when a test says)."""
    early = [f"e{i:03d}" for i in range(600)]
    late = [f"l{i:03d}" for i in range(100)]
    batch = {name: trials(rng, name, 5) for name in early + late}
    await store.ingest.apply(batch, windows=dict.fromkeys(batch, 0), dedup_ttl=3600)
    await store.client.srem(store.keys.changed, *late)
    daemon = Daemon(cfg, store)
    daemon.recompute._next_reconcile = float("inf")  # no version scan: only the marks
    return daemon, early, late


async def test_a_tick_takes_the_marks_there_at_its_start_before_those_made_during_it(
    redis_server: RedisServer, prefix: str, rng: np.random.Generator
) -> None:
    """More marks than a claim at the start, more made while it claims: every mark that was
    there at the start is claimed before any made later, and the later ones still in the
    same tick (a burst drains)."""
    cfg = tick_config(redis_server, prefix, k=[1], ci_interval=3600.0, n_boot=200)
    client = connect(redis_server.url)
    store = Store(client, prefix)
    try:
        daemon, early, late = await _backlog(store, cfg, rng)
        claims: list[list[str]] = []
        claim = store.snapshots.claim_marks

        async def then_more_commits(
            count: int, lifetime: float, members: Sequence[str] = ()
        ) -> tuple[list[str], int]:
            got = await claim(count, lifetime, members)
            if not claims:
                await store.snapshots.mark_changed(late)  # commits while the tick claims
            claims.append(got[0])
            return got

        store.snapshots.claim_marks = then_more_commits  # type: ignore[method-assign]
        tick = await daemon.recompute.ci_tick()
        assert sorted(tick.marks) == sorted(early + late)
        first_late = next(i for i, got in enumerate(claims) if set(got) & set(late))
        assert sorted(m for got in claims[:first_late] for m in got) == early
        assert await store.snapshots.changed() == []
    finally:
        await client.aclose()


async def test_marks_a_tick_found_and_did_not_reach_go_first_in_the_next_tick(
    redis_server: RedisServer,
    prefix: str,
    rng: np.random.Generator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A backlog larger than a tick computes: the marks the first tick found and left at
    its deadline are the next tick's first claims, before marks made in between."""
    monkeypatch.setattr(_recompute, "TICK_SHARE", 0.0)  # every tick ends after one claim
    cfg = tick_config(redis_server, prefix, k=[1], ci_interval=3600.0, n_boot=200)
    client = connect(redis_server.url)
    store = Store(client, prefix)
    try:
        daemon, early, late = await _backlog(store, cfg, rng)
        first = await daemon.recompute.ci_tick()
        assert len(first.marks) == _claims.CLAIM_BATCH
        await store.snapshots.mark_changed(late)  # commits between the ticks
        second = await daemon.recompute.ci_tick()
        assert set(second.marks) <= set(early) - set(first.marks)
        third = await daemon.recompute.ci_tick()
        left = set(early) - set(first.marks) - set(second.marks)
        assert left <= set(third.marks)
    finally:
        await client.aclose()


# A verdict on either kind of data: ten tasks all passing (the CI lower bound stays
# above 0.3) or all failing (it falls to 0).
HANDED = Rule(name="handed", suite="h", k=1, below=0.3, trigger="ci-low")


def rounds(outcome: Outcome, tasks: range) -> list[TrialEvent]:
    return [
        TrialEvent("h", f"task {t}", f"{outcome}-{t}-{j}", outcome) for t in tasks for j in (0, 1)
    ]


def handoff_config(redis_server: RedisServer, prefix: str) -> Config:
    return Config(
        redis=RedisConfig(url=redis_server.url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        # One tick at start, on the empty store; the test runs the others.
        stats=StatsConfig(k=[1], ci_interval=3600.0, n_boot=500),
        alerts=[HANDED],
    )


async def test_the_evaluator_judges_the_ticks_own_snapshots_without_reading_them_back(
    redis_server: RedisServer, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tick hands its snapshots to the evaluator, which takes each as it is.

    The stored document is damaged in place after the write, its version and
    ``updated_at`` untouched: a verdict that read it back would find it
    undecodable and judge nothing.
    """
    cfg = handoff_config(redis_server, prefix)
    async with running(cfg) as daemon, store_for(cfg) as store:
        await wait_until(lambda: _evaluated(daemon))
        handed: list[Mapping[Series, Snapshot] | None] = []
        evaluate = daemon.evaluator.evaluate

        async def spy(
            suites: Sequence[str],
            fresh: Mapping[Series, Snapshot] | None = None,
            watches: Sequence[Watch] | None = None,
        ) -> Settled:
            handed.append(fresh)
            return await evaluate(suites, fresh, watches)

        monkeypatch.setattr(daemon.evaluator, "evaluate", spy)
        await store.ingest.apply({"h": rounds("fail", range(10))}, windows={}, dedup_ttl=3600)
        async with daemon.recompute.tick:
            tick = await daemon.recompute.ci_tick()
            (snap,) = tick.snapshots.values()
            assert await store.snapshots.document("h") == snap
            await store.client.hset(store.key("h", "snapshot"), "json", b"{damaged in place")
            await daemon.evaluator.evaluate(await store.reads.suites(), tick.snapshots)
        state = await stored_state(store, "h", HANDED.name)
        assert (state.state, state.snapshot_version) == ("firing", snap.version)
        assert await store.snapshots.changed() == []  # nothing undecodable was met
        # The loop's own tick hands over what it wrote in the same way.
        await store.ingest.apply({"h": rounds("fail", range(10, 12))}, windows={}, dedup_ttl=3600)
        async with daemon.recompute.tick:
            await daemon.recompute._tick()
        fresh = handed[-1]
        assert fresh is not None
        assert list(fresh) == [Series("h")]
        assert fresh[Series("h")] == await store.snapshots.document("h")
        assert fresh[Series("h")].version > snap.version


async def test_a_newer_snapshot_another_replica_wrote_wins_over_the_ticks_own(
    redis_server: RedisServer, prefix: str
) -> None:
    """Verdict on the newest snapshot in Redis: a snapshot of newer data written after
    this tick's (by another replica) is the one judged, not the record the tick holds."""
    cfg = handoff_config(redis_server, prefix)
    async with running(cfg) as daemon, store_for(cfg) as store:
        await wait_until(lambda: _evaluated(daemon))
        await store.ingest.apply({"h": rounds("pass", range(10))}, windows={}, dedup_ttl=3600)
        async with daemon.recompute.tick:
            tick = await daemon.recompute.ci_tick()
            (ours,) = tick.snapshots.values()
            # New data, all failing, and its snapshot, as another replica's tick writes it.
            await store.ingest.apply(
                {"h": rounds("fail", range(10, 40))}, windows={}, dedup_ttl=3600
            )
            newer = await daemon.recompute.refresh_snapshot("h")
            assert newer is not None
            assert newer.version > ours.version
            await daemon.evaluator.evaluate(await store.reads.suites(), tick.snapshots)
        state = await stored_state(store, "h", HANDED.name)
        assert (state.state, state.snapshot_version) == ("firing", newer.version)


async def _evaluated(daemon: Daemon) -> bool:
    return evaluations(daemon) >= 1
