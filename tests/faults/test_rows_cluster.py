"""The summary rows on a three-node Redis Cluster: written by the tick, paged by name,
state and substring, read by /metrics and dropped by reset, every key on the slot of
``{/rows}`` (the scripts name each key they touch)."""

from __future__ import annotations

import msgspec

from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.daemon.metrics import read_view
from reliabilityd.events import TrialEvent
from reliabilityd.rules import Rule
from reliabilityd.store import Row, Store, connect
from tests.support.servers import ClusterNode


def _events(suite: str, passes: int) -> list[TrialEvent]:
    return [
        TrialEvent(suite, f"t{t}", f"r{j}", "pass" if t < passes else "fail")
        for t in range(6)
        for j in range(3)
    ]


async def test_the_rows_on_a_redis_cluster(redis_cluster: list[ClusterNode], prefix: str) -> None:
    cfg = Config(
        redis=RedisConfig(url=redis_cluster[0].url, prefix=prefix, cluster=True),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=[1], ci_interval=3600.0, n_boot=200),
    )
    rule = Rule(name="low", suite="bad-*", k=1, below=0.9, trigger="ci-low")
    cfg = msgspec.structs.replace(cfg, alerts=[rule])
    client = connect(redis_cluster[0].url, cluster=True, timeout=10.0)
    store = Store(client, prefix)
    try:
        # Suites whose tags hash to every node of the cluster.
        names = [f"bad-{i:02d}" for i in range(10)] + [f"good-{i:02d}" for i in range(30)]
        batch = {n: _events(n, 3 if n.startswith("bad") else 6) for n in names}
        await store.ingest.apply(batch, windows=dict.fromkeys(names, 0), dedup_ttl=3600)
        daemon = Daemon(cfg, store)
        await daemon.recompute._tick()

        page = await store.rows.page(limit=100)
        assert page.suites == names
        assert all(isinstance(r, Row) for r in page.rows)
        assert (await store.rows.page(state="firing")).suites == names[:10]
        assert (await store.rows.page(prefix="good-1")).total == 10
        assert (await store.rows.page(contains="-0")).total == 20
        view = await read_view(store, [])
        assert [r.suite for r in view.snapshots] == names
        assert len(view.alerts) == 10

        await store.admin.reset_suite("bad-00")
        assert (await store.rows.page(state="firing")).suites == names[1:10]
        assert "bad-00" not in (await store.rows.page(limit=100)).suites
    finally:
        await client.aclose()
