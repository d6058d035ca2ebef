"""A changed config is judged at start-up on the data already stored (real daemon, real Redis)."""

from __future__ import annotations

from reliabilityd.cli.status import status
from reliabilityd.client._client import AsyncClient
from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.events import TrialEvent
from reliabilityd.rules import Rule
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Store
from reliabilityd.testing import TestingSource
from tests.support.daemon import running, store_for
from tests.support.helpers import judged, stored_snapshot, stored_state, stored_states, wait_until
from tests.support.servers import RedisServer

SUITE = "quiet-bot"
TASKS = 20
# Every task passed 10 of its 10 trials but the first five, which passed 5 of 10.
OLD_RULE = Rule(name="pass5-low", suite="quiet-*", k=5, below=0.2, trigger="ci-low")
# pass^3 of that suite is 0.75 * 1 + 0.25 * C(5,3)/C(10,3) = 0.77: its bound is under 0.95.
NEW_RULE = Rule(name="pass3-low", suite="quiet-*", k=3, below=0.95, trigger="ci-low")
# pass^1 is 0.875: its whole interval is above 0.5; this rule stays inactive.
NEW_CALM_RULE = Rule(name="pass1-low", suite="quiet-*", k=1, below=0.5, trigger="ci-low")


def config(redis_server: RedisServer, prefix: str, ks: list[int], rules: list[Rule]) -> Config:
    return Config(
        redis=RedisConfig(url=redis_server.url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=ks, ci_interval=0.2, n_boot=200),
        alerts=[*rules],
    )


def events() -> list[TrialEvent]:
    return [
        TrialEvent(SUITE, f"task {t}", f"t{t}-r{r}", "fail" if t < 5 and r % 2 else "pass")
        for t in range(TASKS)
        for r in range(10)
    ]


async def snapshot_of(store: Store) -> Snapshot | None:
    return await stored_snapshot(store, SUITE)


async def test_a_new_rule_and_a_new_k_are_judged_on_stored_data_after_a_restart(
    redis_server: RedisServer, prefix: str
) -> None:
    first = config(redis_server, prefix, [5], [OLD_RULE])
    async with running(first) as daemon:
        await TestingSource(events()).run(daemon.commit)

        async def snapshotted() -> bool:
            snap = await snapshot_of(daemon.store)
            return snap is not None and snap.version >= 1

        await wait_until(snapshotted, 20)
    async with store_for(first) as store:
        before = await snapshot_of(store)
        assert before is not None
        assert [e.k for e in before.pass_hat_k] == [5]
        version = before.version
        trials = (await store.reads.read_state(SUITE)).counters.trials

    # Restart with a new k in stats.k and two new rules; no trial arrives.
    second = config(redis_server, prefix, [2, 5], [OLD_RULE, NEW_RULE, NEW_CALM_RULE])
    async with running(second) as daemon:
        store = daemon.store

        async def new_k_computed() -> bool:
            snap = await snapshot_of(store)
            return snap is not None and {e.k for e in snap.pass_hat_k} == {1, 2, 3, 5}

        await wait_until(new_k_computed, 20)

        async def new_rule_fired() -> bool:
            state = await stored_state(store, SUITE, NEW_RULE.name)
            return state.state == "firing"

        await wait_until(new_rule_fired, 20)
        # A few more passes of the evaluator on the same snapshot.
        await judged(store, SUITE, daemon, passes=3)
        calm, old = await stored_states(
            store, [(SUITE, NEW_CALM_RULE.name), (SUITE, OLD_RULE.name)]
        )
        assert calm.state == "inactive"
        assert old.state == "inactive"
        after = await snapshot_of(store)
        assert after is not None
        # The same data: no trial came in, the snapshot is of the same version.
        assert after.version == version
        assert (await store.reads.read_state(SUITE)).counters.trials == trials
        pass3 = after.estimate("pass^k", 3)
        assert pass3 is not None
        assert pass3.ci_low is not None
        assert pass3.ci_low < NEW_RULE.below
        pass1 = after.estimate("pass^k", 1)
        assert pass1 is not None
        assert pass1.ci_low is not None
        assert pass1.ci_low >= NEW_CALM_RULE.below

        # `reliabilityd status` has a row for the new k and the new rule's state.
        lines: list[str] = []
        async with AsyncClient(redis_server.url, prefix=prefix) as client:
            await status(
                client,
                SUITE,
                ks=[],
                rules=second.rules(),
                as_json=False,
                out=lines.append,
            )
        rows = [line.split() for line in "\n".join(lines).splitlines()]
        assert [r[3] for r in rows if r[:2] == [SUITE, str(TASKS)]] == ["1", "2", "3", "5"], lines
        assert [SUITE, NEW_RULE.name, "firing"] in [r[:3] for r in rows], lines
