"""The summary rows against a real redis-server: written by the tick after its verdicts,
paged and filtered by name and state, honest about a suite without a snapshot, and gone
with ``reset`` (rewritten after ``forget``)."""

from __future__ import annotations

import msgspec

from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.events import TrialEvent
from reliabilityd.rules import Rule
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Row, Series, Store, connect
from tests.support.servers import RedisServer


def _events(suite: str, tasks: int, passes: int) -> list[TrialEvent]:
    """``tasks`` tasks of 4 trials each, the first ``passes`` tasks passing every one."""
    return [
        TrialEvent(suite, f"t{t}", f"r{j}", "pass" if t < passes else "fail")
        for t in range(tasks)
        for j in range(4)
    ]


def _config(redis_url: str, prefix: str) -> Config:
    cfg = Config(
        redis=RedisConfig(url=redis_url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=[1, 3], ci_interval=5.0, n_boot=300),
    )
    # alpha-* is judged (and breaches: half its tasks always fail); the rest has no rule.
    rule = Rule(name="low", suite="alpha-*", k=1, below=0.9, trigger="ci-low")
    return msgspec.structs.replace(cfg, alerts=[rule])


async def test_rows_are_written_paged_filtered_and_dropped(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _config(redis_server.url, prefix)
    client = connect(redis_server.url)
    store = Store(client, prefix)
    try:
        names = ["alpha-1", "alpha-2", "beta-1", "beta-2", "gamma"]
        batch = {name: _events(name, 10, 5 if name.startswith("alpha") else 10) for name in names}
        await store.ingest.apply(batch, windows=dict.fromkeys(names, 0), dedup_ttl=3600)
        daemon = Daemon(cfg, store)
        await daemon.recompute._tick()

        page = await store.rows.page()
        assert page.suites == names
        assert page.total == 5
        assert page.states == ["firing", "firing", "none", "none", "none"]
        row = page.rows[0]
        assert isinstance(row, Row)
        snap = await store.snapshots.document("alpha-1")
        assert isinstance(snap, Snapshot)
        est = snap.get("pass^k", 1)
        assert est is not None
        assert (row.k, row.value, row.tasks) == (1, est.value, 10)
        assert row.rules == [("low", "firing", "alpha-1")]
        assert row.below == 0.9
        assert len(row.trend) == 1  # the tick's own history point

        assert (await store.rows.page(state="firing")).suites == ["alpha-1", "alpha-2"]
        assert (await store.rows.page(state="none", prefix="beta")).suites == ["beta-1", "beta-2"]
        assert (await store.rows.page(contains="-2")).suites == ["alpha-2", "beta-2"]
        assert (await store.rows.page(contains="a-")).total == 4
        two = await store.rows.page(offset=2, limit=2)
        assert (two.suites, two.total) == (["beta-1", "beta-2"], 5)
        limited = await store.rows.page(readable=lambda s: [x for x in s if "beta" in x])
        assert limited.suites == ["beta-1", "beta-2"]

        # A suite Redis has without a snapshot yet is listed, with no row.
        await store.ingest.apply(
            {"delta": _events("delta", 2, 2)}, windows={"delta": 0}, dedup_ttl=3600
        )
        await daemon.recompute.rows.write(cfg, await store.reads.suites(), {})
        page = await store.rows.page(prefix="delta")
        assert (page.suites, page.rows, page.states) == (["delta"], [None], ["none"])

        # forget: the row is rewritten with the suite's new counts on the next tick.
        await store.admin.forget_task("gamma", "t0")
        await daemon.recompute._tick()
        (gamma,) = (await store.rows.page(prefix="gamma")).rows
        assert isinstance(gamma, Row)
        assert gamma.tasks == 9

        # reset: the suite's row and its index entries are gone.
        await store.admin.reset_suite("alpha-1")
        assert (await store.rows.page(state="firing")).suites == ["alpha-2"]
        assert "alpha-1" not in (await store.rows.page()).suites
        assert await store.rows.read([Series("alpha-1")]) == [None]
    finally:
        await client.aclose()


async def test_a_newer_row_is_never_overwritten_by_an_older_one(
    redis_server: RedisServer, prefix: str
) -> None:
    client = connect(redis_server.url)
    store = Store(client, prefix)
    try:
        new = Row("s", None, 7, "t7", 1, 0.5, None, 3, None)
        old = Row("s", None, 6, "t6", 1, 0.9, None, 3, None)
        assert await store.rows.write([new]) == 1
        assert await store.rows.write([old]) == 0
        assert await store.rows.read([Series("s")]) == [new]
    finally:
        await client.aclose()
