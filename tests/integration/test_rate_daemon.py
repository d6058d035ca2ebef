"""The rate trigger judged by a real daemon on real Redis: its inputs (each task's
lifetime counts, kept beside a window), its state by compare-and-set, an alarm on a
drop, the hold and the resolve, and a restart that goes on from the stored state."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import pytest

from reliabilityd.cli.forecast import forecast
from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.events import TrialEvent
from reliabilityd.rules import Rule, views
from reliabilityd.stats import ratecusum
from reliabilityd.store import Series, Store, TriggerInput, Undecodable
from reliabilityd.testing import TestingSource
from tests.support.daemon import running
from tests.support.helpers import judged, stored_snapshot, stored_state, wait_until
from tests.support.servers import RedisServer

RULE = Rule(
    name="deploy-rate",
    suite="deploy-*",
    k=5,
    below=0.75,
    resolve_above=0.8,
    trigger="rate",
    grid=1.0,
    hold=1.0,
    # The references refresh at every tick for the first second, then hourly.
    warmup=1.0,
)
TASKS = 40


def config(redis_server: RedisServer, prefix: str, window: int) -> Config:
    return Config(
        redis=RedisConfig(url=redis_server.url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=[1, 5], ci_interval=0.2, n_boot=200, window=window),
        alerts=[RULE],
    )


def round_of(suite: str, r: int, failing: int) -> list[TrialEvent]:
    """One trial per task; the first ``failing`` tasks fail it, and task 39 fails every
    fifth round (so no reference is 1)."""
    return [
        TrialEvent(
            suite,
            f"task {t}",
            f"r{r}",
            "fail" if t < failing or (t == 39 and r % 5 == 0) else "pass",
        )
        for t in range(TASKS)
    ]


async def read_one(store: Store, series: Series) -> TriggerInput:
    """The rule's inputs on one series (``store.triggers.read`` of a batch of one)."""
    (got,) = await store.triggers.read([(series, [RULE.name], False)])
    assert got is not None
    return got


async def write_one(store: Store, series: Series, seq: int, state: ratecusum.Tracker) -> bool:
    """``store.triggers.write`` of a batch of one."""
    (won,) = await store.triggers.write([(series, RULE.name, seq, state)])
    return won


async def tracker(store: Store, suite: str) -> ratecusum.Tracker:
    got = await read_one(store, Series(suite))
    state = got.states[0][1]
    assert isinstance(state, ratecusum.Tracker)
    return state


@pytest.mark.parametrize("window", [0, 20])
async def test_a_drop_fires_holds_and_resolves(
    redis_server: RedisServer, prefix: str, window: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pace from snapshots a second apart, for the forecast.
    monkeypatch.setattr(views, "PACE_MIN_SECONDS", 0.5)
    cfg = config(redis_server, prefix, window)
    suite = "deploy-bot"

    async with running(cfg) as daemon:
        store = daemon.store

        async def commit(events: list[TrialEvent]) -> None:
            await TestingSource([events]).run(daemon.commit)

        async def state_is(want: str) -> bool:
            return (await stored_state(store, suite, RULE.name)).state == want

        # Healthy: 30 rounds over about 3 s, so the state sees several ticks and grids;
        # the last after a pause past PACE_MIN_SECONDS, so the suite has a pace.
        for r in range(30):
            await commit(round_of(suite, r, failing=0))
            await asyncio.sleep(0.7 if r == 28 else 0.1)
        await judged(store, suite, daemon)
        snap = await stored_snapshot(store, suite)
        assert snap is not None
        view = snap.rule(RULE.name)
        assert view is not None
        assert view.alarmed_at is None
        assert await state_is("inactive")
        healthy = await tracker(store, suite)
        assert healthy.alarms == 0
        assert sorted(healthy.tasks) == sorted(f"task {t}" for t in range(TASKS))
        # Every task's lifetime counts reached the state, window or not.
        assert healthy.seen_n.tolist() == [30] * TASKS
        if window:
            totals = await store.client.hgetall(store.key(suite, "totals"))
            assert totals[b"task 39"] == b"30:24"
            window_value = await store.client.hget(store.key(suite, "tasks"), "task 39")
            assert isinstance(window_value, bytes)
            assert window_value.startswith(b"20:16:")

        # The forecast simulates the rule, on a 20-trial window where the suite has none.
        async def paced() -> bool:
            snap = await stored_snapshot(store, suite)
            return snap is not None and snap.pace is not None and snap.pace > 0

        await wait_until(paced, 30)
        lines: list[str] = []
        assert await forecast(store, cfg, suite, hours=0.5, out=lines.append) == 0
        row = next(line for line in lines if RULE.name in line)
        assert "expected false pages/day" in row, row
        assert ("its interval on a 20-trial window" in row) == (window == 0), row
        assert "a rate rule's references from a day of counts" in lines[-1]

        # A fifth of the tasks start failing every trial.
        for r in range(30, 36):
            await commit(round_of(suite, r, failing=TASKS // 5))
            await asyncio.sleep(0.1)
        await wait_until(lambda: state_is("firing"), 30)
        assert (await stored_state(store, suite, RULE.name)).reason == "below"
        fired = await tracker(store, suite)
        assert fired.alarms >= 1
        assert fired.alarmed_at is not None

    # A restart goes on from the stored state: nothing of it is fed twice.
    async with running(cfg) as daemon:
        store = daemon.store

        async def commit_again(events: list[TrialEvent]) -> None:
            await TestingSource([events]).run(daemon.commit)

        # Healthy again: the alarm holds its second, then resolves where the point
        # estimate is back at resolve_above (the window's at once; the lifetime's
        # was never under it).
        for r in range(36, 60 if window else 40):
            await commit_again(round_of(suite, r, failing=0))
            await asyncio.sleep(0.1)

        async def resolved() -> bool:
            return (await stored_state(store, suite, RULE.name)).state == "resolved"

        await wait_until(resolved, 30)
        rounds = 60 if window else 40

        async def all_fed() -> bool:
            seen: list[int] = (await tracker(store, suite)).seen_n.tolist()
            return seen == [rounds] * TASKS

        await wait_until(all_fed, 30)
        after = await tracker(store, suite)
        assert after.alarms >= fired.alarms
        # Each outcome reached the references once: they hold what was counted (from the
        # first round on, decayed by a few seconds of a day's half-life), no more.
        assert np.allclose(after.ref_n, after.seen_n, rtol=1e-3)
        assert np.all(after.ref_n > fired.ref_n)


async def test_a_state_moved_on_by_another_writer_is_not_overwritten(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = config(redis_server, prefix, 0)
    first, second, third = (
        ratecusum.Tracker(RULE.knobs(), ["a"], np.array([n]), np.array([n]), now=0.0)
        for n in (1, 2, 3)
    )

    def seen(state: object) -> list[int]:
        assert isinstance(state, ratecusum.Tracker)
        got: list[int] = state.seen_n.tolist()
        return got

    async with running(cfg) as daemon:
        store = daemon.store
        series = Series("deploy-cas")
        got = await read_one(store, series)
        assert got.states == [(0, None)]
        assert await write_one(store, series, 0, first)
        assert not await write_one(store, series, 0, second)
        got = await read_one(store, series)
        assert got.states[0][0] == 1
        assert seen(got.states[0][1]) == [1]
        # A damaged seq is replaced by the next write, whose reader sent -1: the script
        # reads every damage as the store does.
        key = store.triggers.key(series, RULE.name)
        for damaged in ("x", "1.5", "nan", "1e1", " 5", "1234567890123456"):
            await store.client.hset(key, "seq", damaged)
            got = await read_one(store, series)
            assert got.states[0][0] == -1, damaged
            assert await write_one(store, series, -1, third), damaged
            got = await read_one(store, series)
            assert got.states[0][0] == 1
            assert seen(got.states[0][1]) == [3]
        # A damaged document reads as undecodable, with its key, and the next write
        # replaces it.
        await store.client.hset(key, "doc", b"\x93garbage")
        got = await read_one(store, series)
        state = got.states[0][1]
        assert isinstance(state, Undecodable)
        assert state.key == key
        assert state.document == "trigger_state"
        assert await write_one(store, series, 1, first)
        # A key of another type (damage) reads as no state, and a write replaces it.
        await store.client.set(key, "damaged")
        got = await read_one(store, series)
        assert got.states == [(0, None)]
        assert await write_one(store, series, 0, second)
        assert seen((await read_one(store, series)).states[0][1]) == [2]


async def test_damaged_counts_and_state_never_stop_the_tick(
    redis_server: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """What Redis holds is outside input: a task's value that is not counts is left out,
    a state that does not decode is logged and replaced, and the suite's rule is judged."""
    cfg = config(redis_server, prefix, 0)
    suite = "deploy-damaged"
    async with running(cfg) as daemon:
        store = daemon.store

        async def commit(r: int) -> None:
            await TestingSource([round_of(suite, r, failing=0)]).run(daemon.commit)

        await commit(0)
        await judged(store, suite, daemon)
        key = store.triggers.key(Series(suite), RULE.name)
        await store.client.hset(key, mapping={"doc": b"\x93damaged", "seq": "x"})
        await store.client.hset(store.key(suite, "tasks"), "task 7", "not counts")
        with caplog.at_level(logging.WARNING, logger="reliabilityd"):
            await commit(1)

            async def replaced() -> bool:
                got = await read_one(store, Series(suite))
                return isinstance(got.states[0][1], ratecusum.Tracker)

            await wait_until(replaced, 30)
        assert "event=trigger_state_undecodable" in caplog.text
        state = await tracker(store, suite)
        assert "task 7" not in state.tasks
        assert len(state.tasks) == TASKS - 1
        await judged(store, suite, daemon)
        snap = await stored_snapshot(store, suite)
        assert snap is not None
        assert snap.rule(RULE.name) is not None
        assert (await stored_state(store, suite, RULE.name)).state == "inactive"
