"""Canary rules end to end: real redis-server and mosquitto, two daemons, every sink."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from functools import partial
from typing import Any

import msgspec
import pytest

from reliabilityd.alerting.outbox import Outbox
from reliabilityd.config import Config
from reliabilityd.daemon._canary import Canaries
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.events import TrialEvent
from reliabilityd.rules.canary import CanaryRule, Compare
from reliabilityd.stats.compare import Side, compare
from reliabilityd.store import Store
from reliabilityd.testing import TestingSource, commit_to
from tests.support.alerting import (
    alert_config,
    collect,
    delivered,
    flushed,
    history,
)
from tests.support.alertmanager import Receiver
from tests.support.daemon import running, store_for
from tests.support.helpers import current_snapshot, judged, stored_state, wait_until
from tests.support.servers import Mosquitto, RedisServer

BASELINE, CANDIDATE, RULE = "prod", "canary", "canary-regression"
TASKS = 60
_trial = itertools.count()


def canary_config(
    redis: RedisServer,
    broker: Mosquitto,
    prefix: str,
    receiver: Receiver,
    rules: Sequence[CanaryRule],
    *,
    name: str = "d",
) -> Config:
    cfg = alert_config(
        redis, broker, prefix, receiver, client_id=f"{prefix}-{name}", instance=f"{prefix}-{name}"
    )
    return msgspec.structs.replace(cfg, alerts=list(rules))


def rule(name: str = RULE, **options: Any) -> CanaryRule:
    return CanaryRule(
        name=name,
        compare=Compare(baseline={"suite": BASELINE}, candidate={"suite": CANDIDATE}),
        k=1,
        **options,
    )


def phase(suite: str, passes: Sequence[int]) -> list[TrialEvent]:
    """Ten trials for each task i, passes[i] of them passing: the window holds just these."""
    return [
        TrialEvent(suite, f"task {i:02d}", f"r{next(_trial)}", "pass" if j < c else "fail")
        for i, c in enumerate(passes)
        for j in range(10)
    ]


async def send(cfg: Config, *phases: list[TrialEvent]) -> None:
    """Commit the phases as one payload through the sources' commit, with ``cfg``'s settings
    (one Lua call per suite), marking the suites changed."""
    events = [e for events in phases for e in events]
    async with commit_to(cfg) as commit:
        sink = await TestingSource([events], topic=f"{cfg.redis.prefix}/trials/a").run(commit)
    assert sink.counted() == len(events)


async def settled(
    store: Store, *daemons: Daemon, slices: Sequence[str] = (), baseline: str | None = BASELINE
) -> None:
    """Until every daemon has judged both sides as committed now (the baseline suite, or
    the candidate's slices) and every notification it decided has been delivered."""
    if baseline is not None:
        await current_snapshot(store, baseline)
    await judged(store, CANDIDATE, *daemons, slices=slices)
    await wait_until(partial(delivered, store, *daemons, suite=CANDIDATE), 30)


async def state_of(store: Store, name: str = RULE) -> str:
    state = await stored_state(store, CANDIDATE, name)
    return state.state


async def expected(store: Store) -> Any:
    """The comparison of the stored counts as the daemons' settings compute it."""
    base = await store.reads.task_counts(BASELINE)
    cand = await store.reads.task_counts(CANDIDATE)
    return compare(base, cand, 1, n_boot=500, seed=0, top=TASKS, names=(BASELINE, CANDIDATE))


async def _count(items: list[Any], n: int) -> bool:
    return len(items) >= n


ALL_PASS = [10] * TASKS
# 18 tasks of 60 fall from 10/10 to 2/10: the upper bound is far under -0.05.
REGRESSED = [10] * (TASKS - 18) + [2] * 18
# 18 tasks at 6/10: the upper bound between -margin and -margin/2 (-0.032).
HALFWAY = [10] * (TASKS - 18) + [6] * 18


async def test_a_regressed_candidate_fires_once_across_two_replicas_and_resolves_with_hysteresis(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        a = canary_config(redis_server, mosquitto, prefix, am, [rule()], name="a")
        b = canary_config(redis_server, mosquitto, prefix, am, [rule()], name="b")
        async with (
            collect(mosquitto.port, f"{prefix}/alerts/#") as mqtt_msgs,
            running(a) as one,
            running(b) as other,
            store_for(a) as store,
        ):
            # Identical sides: judged by both replicas, no page.
            await send(a, phase(BASELINE, ALL_PASS), phase(CANDIDATE, ALL_PASS))
            await settled(store, one, other)
            assert await state_of(store) == "inactive"
            assert await history(store, a) == []

            await send(a, phase(CANDIDATE, REGRESSED))
            await wait_until(partial(_count, am.webhook, 1), 20)
            firing_cmp = await expected(store)
            await settled(store, one, other)  # both replicas judged it: still one page
            assert await state_of(store) == "firing"
            assert len(am.webhook) == 1

            # Back between the margins: still firing, nothing sent.
            await send(a, phase(CANDIDATE, HALFWAY))
            halfway = (await expected(store)).difference()
            assert halfway.ci is not None
            assert -0.05 <= halfway.ci[1] < -0.025  # the scenario's premise
            await settled(store, one, other)
            assert await state_of(store) == "firing"
            assert len(am.webhook) == 1

            await send(a, phase(CANDIDATE, ALL_PASS))
            await wait_until(partial(_count, am.webhook, 2), 20)
            resolved_cmp = await expected(store)
            await wait_until(partial(_count, am.alerts, 2), 20)
            # Judged again and every notification delivered: nothing more arrives.
            await settled(store, one, other)
            await flushed(mosquitto.port, f"{prefix}/alerts/~flush", mqtt_msgs)

            notes = await history(store, a)
            assert [n["state"] for n in notes] == ["firing", "resolved"]
            assert am.webhook == notes
            assert [m["state"] for m in mqtt_msgs] == ["firing", "resolved"]
            assert mqtt_msgs == notes

            firing = notes[0]
            assert (firing["rule"], firing["suite"], firing["reason"]) == (RULE, CANDIDATE, "worse")
            diff = firing_cmp.difference()
            assert (firing["value"], firing["ci_low"], firing["ci_high"]) == (
                diff.value,
                *diff.ci,
            )
            assert firing["ci_high"] < -0.05
            assert (firing["below"], firing["resolve_above"]) == (-0.05, -0.025)
            assert (firing["tasks"], firing["runs"]) == (TASKS, 10)
            detail = firing["canary"]
            assert (detail["baseline"], detail["candidate"]) == (BASELINE, CANDIDATE)
            assert (detail["baseline_value"], detail["candidate_value"]) == (1.0, diff.candidate)
            assert (detail["shared"], detail["only_baseline"], detail["only_candidate"]) == (
                TASKS,
                0,
                0,
            )
            # The top five that got worse, with n and c on each side.
            assert [
                (w["task"], w["baseline_n"], w["baseline_c"], w["candidate_n"], w["candidate_c"])
                for w in detail["worse"]
            ] == [(f"task {i}", 10, 10, 10, 2) for i in range(42, 47)]

            resolved = notes[1]
            rdiff = resolved_cmp.difference()
            assert (resolved["value"], resolved["ci_high"]) == (rdiff.value, rdiff.ci_high)
            assert resolved["ci_high"] >= -0.025
            assert resolved["started_at"] == firing["started_at"]
            assert resolved["canary"]["worse"] == []

            # Alertmanager got both, in its format, naming the sides and the worse tasks.
            assert am.rejected == []
            first, second = am.alerts
            assert first["labels"] == {
                "alertname": RULE,
                "suite": CANDIDATE,
                "metric": "pass^k",
                "k": "1",
                "severity": "page",
                "baseline": BASELINE,
                "candidate": CANDIDATE,
            }
            assert first["annotations"]["worse_tasks"].startswith("task 42 (10/10 -> 2/10), ")
            assert "worse by more than 5.0 pp" in first["annotations"]["summary"]
            assert second["labels"] == first["labels"]
            assert second["endsAt"] == resolved["ended_at"]


async def test_too_few_shared_tasks_are_unknown(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        loud = msgspec.structs.replace(rule(on_unknown="alert"), name="loud")
        quiet = msgspec.structs.replace(rule(), name="quiet")
        cfg = canary_config(redis_server, mosquitto, prefix, am, [loud, quiet])
        async with store_for(cfg) as store:
            # Five shared tasks, under the 10 a comparison needs; the candidate regressed.
            # Stored before the daemon starts: its first tick judges every rule, so a
            # suite without data would already be UNKNOWN (sharing no task).
            await send(cfg, phase(BASELINE, [10] * 8), phase(CANDIDATE, [10, 0, 0, 0, 0]))
            async with running(cfg) as daemon:
                await wait_until(partial(_count, am.webhook, 1), 20)
                await settled(store, daemon)  # the quiet rule was judged too
                (note,) = am.webhook
                assert (note["rule"], note["state"], note["reason"]) == (
                    "loud",
                    "firing",
                    "unknown",
                )
                assert (note["value"], note["ci_low"], note["ci_high"]) == (None, None, None)
                reason = note["canary"]["unknown_reason"]
                assert "share 5 tasks" in reason
                assert "3 only in prod" in reason
                assert await state_of(store, "quiet") == "inactive"


def versioned(passes: Sequence[int], version: str) -> list[TrialEvent]:
    """``phase(CANDIDATE, passes)`` with every event labelled ``agent_version = version``."""
    return [
        msgspec.structs.replace(e, labels={"agent_version": version})
        for e in phase(CANDIDATE, passes)
    ]


async def test_a_sliced_canary_compares_two_versions_of_one_suite_and_fires(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        versions = CanaryRule(
            name="versions",
            suite=CANDIDATE,
            compare=Compare(baseline={"agent_version": "1.4"}, candidate={"agent_version": "1.5"}),
            k=1,
        )
        # A label the suite's stored slices lack: UNKNOWN with the reason, never a pass.
        models = CanaryRule(
            name="models",
            suite=CANDIDATE,
            compare=Compare(baseline={"model": "a"}, candidate={"model": "b"}),
            k=1,
            on_unknown="alert",
        )
        cfg = canary_config(redis_server, mosquitto, prefix, am, [versions])
        cfg = msgspec.structs.replace(
            cfg,
            stats=msgspec.structs.replace(cfg.stats, slice_by=["agent_version"]),
            alerts=[versions, models],
        )
        async with store_for(cfg) as store:
            # Sliced by agent_version, as cfg says.
            await send(cfg, versioned(ALL_PASS, "1.4") + versioned(REGRESSED, "1.5"))
            base = await store.reads.task_counts(Side(CANDIDATE, {"agent_version": "1.4"}))
            cand = await store.reads.task_counts(Side(CANDIDATE, {"agent_version": "1.5"}))
            assert base == {f"task {i:02d}": (10, 10) for i in range(TASKS)}
            assert cand == {f"task {i:02d}": (10, c) for i, c in enumerate(REGRESSED)}
            async with running(cfg) as daemon:
                await wait_until(partial(_count, am.webhook, 2), 20)
                sides = await store.reads.slices(CANDIDATE)
                await settled(store, daemon, slices=sides, baseline=None)
                by_rule = {str(n["rule"]): n for n in am.webhook}
                assert len(am.webhook) == 2
                note = by_rule["versions"]
                assert (note["suite"], note["state"], note["reason"]) == (
                    CANDIDATE,
                    "firing",
                    "worse",
                )
                assert note["canary"]["baseline"] == "canary[agent_version=1.4]"
                assert note["canary"]["candidate"] == "canary[agent_version=1.5]"
                # The numbers of the stored slices' counts, as the daemon's settings compute them.
                want = compare(base, cand, 1, n_boot=500, seed=0, top=TASKS).difference()
                assert want.ci is not None
                assert (note["value"], note["ci_low"], note["ci_high"]) == (want.value, *want.ci)
                assert note["ci_high"] < -0.05
                assert await state_of(store, "versions") == "firing"
                unknown = by_rule["models"]
                assert (unknown["state"], unknown["reason"]) == ("firing", "unknown")
                assert "is not sliced by model" in unknown["canary"]["unknown_reason"]


async def test_for_holds_a_pending_canary_until_it_fires_without_new_data(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        cfg = canary_config(redis_server, mosquitto, prefix, am, [rule(for_seconds=1.5)])
        async with store_for(cfg) as store:
            await send(cfg, phase(BASELINE, ALL_PASS), phase(CANDIDATE, REGRESSED))
            async with running(cfg):
                await wait_until(lambda: _is(store, "pending"), 20)
                assert am.webhook == []
                # No commit since: the pending state alone keeps it judged each tick.
                await wait_until(lambda: _is(store, "firing"), 20)
                await wait_until(partial(_count, am.webhook, 1), 20)
                (note,) = am.webhook
                assert note["reason"] == "worse"


# 10 tasks of 60 fall from 10/10 to 2/10 (-0.133): student's upper bound is -0.055,
# gaffke's -0.014, which keeps room for an unseen task that flips.
NARROW = [10] * (TASKS - 10) + [2] * 10


async def test_a_canary_on_student_fires_on_a_drop_the_suites_gaffke_interval_cannot_see(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        rules = [rule(interval="student"), rule(name="on-gaffke")]
        cfg = canary_config(redis_server, mosquitto, prefix, am, rules)
        async with store_for(cfg) as store:
            await send(cfg, phase(BASELINE, ALL_PASS), phase(CANDIDATE, NARROW))
            async with running(cfg) as daemon:
                await settled(store, daemon)
                await wait_until(partial(_count, am.webhook, 1), 20)
                assert await state_of(store, "on-gaffke") == "inactive"
                (note,) = am.webhook
                assert (note["rule"], note["reason"]) == (RULE, "worse")
                assert note["canary"]["interval"] == "student"
                base = await store.reads.task_counts(BASELINE)
                cand = await store.reads.task_counts(CANDIDATE)
                diff = compare(base, cand, 1, interval="student").differences["pass^k"]
                assert diff.ci is not None
                assert note["ci_high"] == pytest.approx(diff.ci[1], abs=1e-4)


async def _is(store: Store, state: str) -> bool:
    return await state_of(store) == state


async def test_a_comparison_that_fails_does_not_stop_the_others(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str, caplog: Any
) -> None:
    with Receiver() as am:
        broken = CanaryRule(
            name="broken",
            compare=Compare(baseline={"suite": BASELINE}, candidate={"suite": "mangled"}),
            k=1,
        )
        cfg = canary_config(redis_server, mosquitto, prefix, am, [broken, rule()])
        async with store_for(cfg) as store:
            await send(cfg, phase(BASELINE, ALL_PASS), phase(CANDIDATE, REGRESSED))
            # A task record no version writes: c above n.
            await store.client.hset(store.keys.suite("mangled", "tasks"), "task 00", "3:5")
            async with running(cfg):
                await wait_until(partial(_count, am.webhook, 1), 20)
                (note,) = am.webhook
                assert (note["rule"], note["reason"]) == (RULE, "worse")
                assert "event=canary_failed rule=broken suite=mangled" in caplog.text


async def test_the_judge_reads_changed_suites_and_after_a_gap_every_comparison(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    with Receiver() as am:
        cfg = canary_config(redis_server, mosquitto, prefix, am, [rule()])
        slow = msgspec.structs.replace(
            cfg, stats=msgspec.structs.replace(cfg.stats, ci_interval=60.0)
        )
        async with store_for(cfg) as store:
            outbox = Outbox(slow, store, {}, "judge-test")
            judge = Canaries(slow, store, outbox)
            await send(cfg, phase(BASELINE, ALL_PASS), phase(CANDIDATE, ALL_PASS))
            await judge.judge([])  # the first judge reads every comparison
            assert await state_of(store) == "inactive"
            await send(cfg, phase(CANDIDATE, REGRESSED))
            await judge.judge([BASELINE + "-other"])  # no suite it reads changed
            assert await state_of(store) == "inactive"
            await judge.judge([CANDIDATE])
            assert await state_of(store) == "firing"

            await send(cfg, phase(CANDIDATE, ALL_PASS))
            await judge.judge([CANDIDATE])
            assert await state_of(store) == "resolved"

            # A regression no changed suite names waits without a gap ...
            again = Canaries(slow, store, outbox)
            await again.judge([])
            await send(cfg, phase(CANDIDATE, REGRESSED))
            await again.judge([])
            assert await state_of(store) == "resolved"
            # ... and after one of more than three intervals every comparison is judged.
            fast = msgspec.structs.replace(
                cfg, stats=msgspec.structs.replace(cfg.stats, ci_interval=0.01)
            )
            gap = Canaries(fast, store, outbox)
            await gap.judge([])  # its first judge; the regressed data already fires it
            assert await state_of(store) == "firing"
            await send(cfg, phase(CANDIDATE, ALL_PASS))
            await judge.judge([CANDIDATE])
            assert await state_of(store) == "resolved"
            await gap.judge([])
            await send(cfg, phase(CANDIDATE, REGRESSED))
            await asyncio.sleep(0.1)
            await gap.judge([])
            assert await state_of(store) == "firing"
            await outbox.close()
