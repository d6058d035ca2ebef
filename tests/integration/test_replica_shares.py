"""Two replicas' CI ticks against one real redis-server: every changed series is computed
once, by one of them, even with a reconcile on every tick and a replica that died holding
claims."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import numpy as np
import pytest

from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon import _recompute
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.events import TrialEvent
from reliabilityd.store import Store, connect
from tests.support.helpers import wait_until
from tests.support.servers import RedisServer

SUITES = 600  # more than two claims' worth (CLAIM_BATCH), so the ticks interleave
DEAD = 40  # marks a replica claims and never releases
DEAD_LIFETIME = 1.0


def trials(rng: np.random.Generator, suite: str) -> list[TrialEvent]:
    return [
        TrialEvent(suite, f"task {t}", f"r{t}-{j}", "pass" if rng.random() < 0.7 else "fail")
        for t in range(int(rng.integers(3, 12)))
        for j in range(int(rng.integers(1, 6)))
    ]


async def test_two_replicas_shares_sum_to_the_changed_series_and_a_dead_claim_comes_back(
    redis_server: RedisServer,
    prefix: str,
    rng: np.random.Generator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each tick reconciles (a version scan of every suite) while the other replica computes
    its claims; no series is computed by both, and the marks a dead replica held are
    computed once after its claims expire."""
    monkeypatch.setattr(_recompute, "RECONCILE_EVERY", 0.0)
    cfg = Config(
        redis=RedisConfig(url=redis_server.url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=[1, 5], ci_interval=5.0, n_boot=200),
    )
    clients = [connect(redis_server.url) for _ in range(3)]
    stores = [Store(c, prefix) for c in clients]
    try:
        names = [f"s{i:03d}" for i in range(SUITES)]
        batch = {name: trials(rng, name) for name in names}
        await stores[0].ingest.apply(batch, windows=dict.fromkeys(names, 0), dedup_ttl=3600)
        dead = await stores[2].snapshots.claim_changed(DEAD, lifetime=DEAD_LIFETIME)
        died_at = time.monotonic()
        assert len(dead) == DEAD
        replicas = [Daemon(cfg, stores[0]), Daemon(cfg, stores[1])]
        shares: list[Counter[str]] = [Counter(), Counter()]

        async def tick(i: int) -> None:
            shares[i].update((await replicas[i].recompute.ci_tick()).marks)

        async def pending() -> bool:
            return bool(
                await clients[0].scard(stores[0].keys.changed)
                or await clients[0].zcard(stores[0].keys.claims)
            )

        end = time.monotonic() + 60
        while await pending():
            assert time.monotonic() < end, "marks left after a minute"
            # The second replica starts (and reconciles) while the first computes its claims.
            first = asyncio.create_task(tick(0))

            async def claimed(first: asyncio.Task[None] = first) -> bool:
                return first.done() or bool(await clients[0].zcard(stores[0].keys.claims))

            await wait_until(claimed, within=10, interval=0.001)
            await asyncio.gather(first, tick(1))
            await asyncio.sleep(0.02)
        assert time.monotonic() - died_at >= DEAD_LIFETIME - 0.01
        both = shares[0] + shares[1]
        # Every changed series exactly once, between the two.
        assert sorted(both) == names
        assert set(both.values()) == {1}
        assert sum(shares[0].values()) + sum(shares[1].values()) == SUITES
        # The dead replica's marks were reclaimed and computed, not lost.
        assert set(dead) <= set(both)
        versions = await stores[0].snapshots.versions(names)
        assert all(snap == data for data, snap, _ in versions)
    finally:
        for c in clients:
            await c.aclose()


async def test_a_mark_of_a_series_another_replica_computes_waits_for_its_release(
    store: Store,
) -> None:
    """New data while one replica holds the series: the mark stays, no second claim, until
    the holder releases; then the next claim takes it."""
    await store.snapshots.mark_changed(["a", "b"])
    taken, held = await store.snapshots.claim_marks(1, lifetime=30)
    (mine,) = taken
    assert held == 0
    await store.snapshots.mark_changed([mine])  # a commit while it is being computed
    other, held = await store.snapshots.claim_marks(10, lifetime=30)
    assert (other, held) == ([next(s for s in ("a", "b") if s != mine)], 1)
    assert await store.snapshots.changed() == [mine]
    # The reconcile does not mark it either, while claimed or just released.
    since, _ = await store.snapshots._mark_unclaimed(-1, [])
    assert (await store.snapshots._mark_unclaimed(since, [mine]))[1] == []
    await store.snapshots.release_claims([mine, *other])
    assert (await store.snapshots._mark_unclaimed(since, [mine]))[1] == []
    later, _ = await store.snapshots._mark_unclaimed(-1, [])
    assert (await store.snapshots._mark_unclaimed(later + 1, [mine]))[1] == [mine]
    assert await store.snapshots.claim_marks(10, lifetime=30) == ([mine], 0)


async def test_named_marks_are_claimed_where_still_marked_and_not_under_another_claim(
    store: Store,
) -> None:
    """A claim of named marks takes those still marked and unclaimed, holds back one whose
    series another replica is computing, and passes over one no longer marked."""
    await store.snapshots.mark_changed(["a", "b", "c", "d"])
    (busy,), _ = await store.snapshots.claim_marks(1, lifetime=30, members=["c"])
    await store.snapshots.mark_changed(["c"])  # new data while "c" is being computed
    got, held = await store.snapshots.claim_marks(10, lifetime=30, members=["b", "c", "gone"])
    assert (busy, got, held) == ("c", ["b"], 1)
    assert await store.snapshots.changed() == ["a", "c", "d"]
    # Only the named ones, however many are asked for.
    assert await store.snapshots.claim_marks(10, lifetime=30, members=["d"]) == (["d"], 0)
    assert await store.snapshots.changed() == ["a", "c"]


async def test_a_ticks_first_read_of_the_marks_is_bounded_and_takes_nothing(store: Store) -> None:
    """``some_changed``: at most ``limit`` distinct marks, every one when fewer; the marks
    stay (the claim takes them)."""
    names = [f"s{i:02d}" for i in range(50)]
    await store.snapshots.mark_changed(names)
    some = await store.snapshots.some_changed(10)
    assert len(some) == len(set(some)) == 10
    assert set(some) <= set(names)
    assert sorted(await store.snapshots.some_changed(100)) == names
    assert await store.snapshots.changed() == names
