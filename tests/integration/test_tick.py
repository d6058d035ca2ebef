"""The CI tick over many suites against a real redis-server: batched, pipelined, per suite exact."""

from __future__ import annotations

import numpy as np

from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.events import TrialEvent
from reliabilityd.stats import snapshot
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Store, connect
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


async def test_a_tick_recomputes_many_suites_each_as_alone_and_sets_a_broken_one_aside(
    redis_server: RedisServer, prefix: str, rng: np.random.Generator
) -> None:
    """More suites than one batch: every snapshot is its own series' math, exactly.

    One suite's stored histogram is damaged (c > n): it gets no snapshot and
    stays marked, and every other suite still gets its own.
    """
    cfg = Config(
        redis=RedisConfig(url=redis_server.url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=[1, 5], ci_interval=5.0, n_boot=500),
    )
    client = connect(redis_server.url)
    store = Store(client, prefix)
    try:
        names = [f"s{i:03d}" for i in range(SUITES)]
        batch = {name: trials(rng, name, int(rng.integers(0, 60))) for name in names}
        await store.ingest.apply(batch, windows=dict.fromkeys(names, 0), dedup_ttl=3600)
        broken = "s077"
        await client.hset(store.key(broken, "hist"), "3:7", 1)
        daemon = Daemon(cfg, store)
        done = await daemon.recompute.ci_tick()
        assert sorted(done) == names
        assert await store.snapshots.changed() == [broken]
        assert await client.zcard(store.keys.claims) == 0
        docs = await store.snapshots.documents(names)
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
        assert await daemon.recompute.ci_tick() == [broken]
    finally:
        await client.aclose()
