"""The detector trigger and the expected page rate, judged by a real daemon on real Redis."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from reliabilityd import estimate
from reliabilityd.cli.forecast import forecast
from reliabilityd.cli.status import status
from reliabilityd.client._client import AsyncClient
from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.events import TrialEvent
from reliabilityd.rules import Rule, views
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Store
from reliabilityd.testing import TestingSource
from tests.support.daemon import running
from tests.support.helpers import judged, stored_snapshot, stored_state, stored_states, wait_until
from tests.support.servers import RedisServer

RULE = Rule(
    name="deploy-detector",
    suite="deploy-*",
    k=5,
    below=0.75,
    resolve_above=0.8,
    trigger="detector",
    evidence=12.0,
    recent=5,
)
TASKS = 40


def config(redis_server: RedisServer, prefix: str) -> Config:
    return Config(
        redis=RedisConfig(url=redis_server.url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=[1, 5], ci_interval=0.2, n_boot=200, window=20),
        alerts=[RULE],
    )


def round_of(suite: str, r: int, failing: int) -> list[TrialEvent]:
    """One trial per task; the first `failing` tasks fail it."""
    return [
        TrialEvent(suite, f"task {t}", f"r{r}", "fail" if t < failing else "pass")
        for t in range(TASKS)
    ]


async def snapshot_of(store: Store, suite: str) -> Snapshot | None:
    return await stored_snapshot(store, suite)


async def test_detector_fires_on_a_drop_resolves_and_reports_its_page_rate(
    redis_server: RedisServer, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pace from snapshots a second apart, so the test needs no minutes.
    monkeypatch.setattr(views, "PACE_MIN_SECONDS", 0.5)
    cfg = config(redis_server, prefix)
    suite = "deploy-bot"
    async with running(cfg) as daemon:
        store = daemon.store

        async def commit(events: list[TrialEvent]) -> None:
            await TestingSource([events]).run(daemon.commit)  # one payload: one Lua call

        async def version_judged(v: int) -> bool:
            snap = await snapshot_of(store, suite)
            return snap is not None and snap.version >= v

        # A healthy suite: 20 rounds, every task passes.
        for r in range(20):
            await commit(round_of(suite, r, failing=0))
        await wait_until(lambda: version_judged(20), 20)
        await judged(store, suite, daemon)  # the rule's verdict on it is taken
        snap = await snapshot_of(store, suite)
        assert snap is not None
        view = snap.rule(RULE.name)
        assert view is not None
        assert view.evidence == 0.0  # nothing moved: no evidence of a drop
        assert view.level == 0.0  # and the windows sit above the threshold
        assert (await stored_state(store, suite, RULE.name)).state == "inactive"

        # More healthy rounds a moment later (past PACE_MIN_SECONDS: a lower bound
        # a busy machine only lengthens): the suite has a pace, and the forecast
        # simulates the rule at it.
        await asyncio.sleep(0.6)
        for r in range(20, 25):
            await commit(round_of(suite, r, failing=0))

        async def paced() -> bool:
            snap = await snapshot_of(store, suite)
            return snap is not None and snap.pace is not None and snap.pace > 0

        await wait_until(paced, 30)
        lines: list[str] = []
        assert await forecast(store, cfg, suite, hours=1.0, out=lines.append) == 0
        row = next(line for line in lines if RULE.name in line)
        # Every task passed all it ran: at that level the rule does not page in what is
        # simulated, and the upper bound says what so short a quiet stretch can prove.
        assert row.startswith(f"{suite}  {RULE.name}: 0 expected false pages/day, at most "), row
        assert "(90%)" in row
        # At the level its history shows (every point so far at 1.0), beside the window's.
        assert f"at {RULE.metric} 1.000 (the mean of " in row, row
        assert "h of history; the window now: 1.000)" in row, row
        assert "assumes" in lines[-1]
        # --level-hours 0: the window's estimate alone.
        alone: list[str] = []
        assert await forecast(store, cfg, suite, hours=1.0, level_hours=0, out=alone.append) == 0
        assert "(the window's estimate)" in alone[0], alone
        assert (await stored_state(store, suite, RULE.name)).state == "inactive"
        # And `reliabilityd status` shows the rule's state.
        status_lines: list[str] = []
        async with AsyncClient(redis_server.url, prefix=prefix) as client:
            await status(client, suite, ks=[], rules=[RULE], as_json=False, out=status_lines.append)
        printed = "\n".join(status_lines).splitlines()
        row_cells = next(line.split() for line in printed if RULE.name in line)
        assert row_cells == [suite, RULE.name, "inactive", "detector", "pass^5"]
        snap = await snapshot_of(store, suite)
        assert snap is not None
        assert snap.pace is not None
        assert snap.pace > 0

        # A fifth of the tasks start failing every trial: within recent=5
        # rounds the evidence passes 12 nats and the rule fires.
        for r in range(25, 30):
            await commit(round_of(suite, r, failing=TASKS // 5))

        async def firing() -> bool:
            return (await stored_state(store, suite, RULE.name)).state == "firing"

        await wait_until(firing, 20)
        snap = await snapshot_of(store, suite)
        assert snap is not None
        view = snap.rule(RULE.name)
        assert view is not None
        assert view.evidence is not None
        assert view.evidence >= RULE.evidence

        # They recover: once the point estimate is back at resolve_above, it resolves.
        for r in range(30, 60):
            await commit(round_of(suite, r, failing=0))

        async def resolved() -> bool:
            return (await stored_state(store, suite, RULE.name)).state == "resolved"

        await wait_until(resolved, 30)

        # The state changes with its notification queued; the outbox drainer
        # delivers it to the history stream a moment later.
        async def delivered() -> bool:
            return len(await store.alerts.alert_history(cfg.alerts_key)) >= 2

        await wait_until(delivered, 10)
        history = await store.alerts.alert_history(cfg.alerts_key)
        notes = [msgspec.json.decode(h) for h in history]
        assert [(n["state"], n["rule"]) for n in notes] == [
            ("firing", RULE.name),
            ("resolved", RULE.name),
        ]


async def test_a_rule_judges_with_its_own_interval(redis_server: RedisServer, prefix: str) -> None:
    # Near the ceiling the percentile bound says 0.96 and gaffke's 0.81: a rule
    # that names gaffke fires on it, one on the suite's percentile does not.
    strict = Rule(name="strict", suite="*", k=5, below=0.9, interval="gaffke", trigger="ci-low")
    lenient = Rule(name="lenient", suite="*", k=5, below=0.9, trigger="ci-low")
    cfg = msgspec.structs.replace(config(redis_server, prefix), alerts=[strict, lenient])
    cfg = msgspec.structs.replace(
        cfg, stats=msgspec.structs.replace(cfg.stats, window=0, interval="percentile")
    )
    suite = "near-ceiling"
    events = [
        TrialEvent(suite, f"task {t}", f"r{r}", "fail" if (t, r) == (0, 0) else "pass")
        for t in range(20)
        for r in range(20)
    ]
    async with running(cfg) as daemon:
        store = daemon.store
        await TestingSource(events).run(daemon.commit)

        async def strict_fired() -> bool:
            return (await stored_state(store, suite, "strict")).state == "firing"

        await wait_until(strict_fired, 20)
        await judged(store, suite, daemon)  # the lenient rule was judged too
        states = await stored_states(store, [(suite, "strict"), (suite, "lenient")])
        assert [s.state for s in states] == ["firing", "inactive"]
        snap = await snapshot_of(store, suite)
        assert snap is not None
        view = snap.rule("strict")
        assert view is not None
        assert view.estimate is not None
        assert view.estimate.interval == "gaffke"
        hist = (await store.reads.read_state(suite)).hist
        assert view.estimate == estimate(
            hist, 5, "pass^k", n_boot=cfg.stats.n_boot, interval="gaffke"
        )
        suite_est = snap.estimate("pass^k", 5)
        assert suite_est is not None
        assert suite_est.interval == "percentile"
        lenient_view = snap.rule("lenient")
        assert lenient_view is not None
        assert lenient_view.estimate is None  # the suite's own estimate serves
