"""Querying without the key schema: Client, status, cases, tasks, reset, forget."""

from __future__ import annotations

import asyncio
import json

import msgspec
import pytest

from reliabilityd import Client, estimate, lottery_cases
from reliabilityd.config import Config
from reliabilityd.events import TrialEvent
from reliabilityd.store import connect
from reliabilityd.testing import TestingSource
from tests.support.daemon import running
from tests.support.helpers import stored_snapshot, wait_until
from tests.support.query import apply, cli, config_for
from tests.support.servers import RedisServer

EXAMPLE_PASSES = [4, 2, 5, 3, 1, 2, 3, 5, 2, 1, 4, 3, 3, 2, 2, 3, 4, 2, 3, 2]


def example_events(suite: str) -> list[TrialEvent]:
    return [
        TrialEvent(suite, f"deploy service {i}", f"run-{r}", "pass" if r < c else "fail")
        for i, c in enumerate(EXAMPLE_PASSES)
        for r in range(5)
    ]


def snapshot_by_daemon(cfg: Config, suite: str) -> None:
    """Let a daemon compute the suite's snapshot, then stop it."""

    async def go() -> None:
        async with running(cfg) as daemon:

            async def has_snapshot() -> bool:
                return await daemon.store.snapshots.document(suite) is not None

            await wait_until(has_snapshot, 20)

    asyncio.run(go())


def test_client_reads_snapshot_and_computes_any_k(redis_server: RedisServer, prefix: str) -> None:
    cfg = config_for(redis_server, prefix)
    apply(cfg, example_events("deploy-bot"))
    snapshot_by_daemon(cfg, "deploy-bot")
    with Client(redis_server.url, prefix=prefix) as rel:
        assert rel.suites() == ["deploy-bot"]
        snap = rel.snapshot("deploy-bot")
        assert snap is not None
        hat5 = snap.estimate("pass^k", 5)
        assert hat5 is not None
        assert hat5.value == pytest.approx(0.10)
        # gaffke, the default: 2 of 20 tasks at 1, so exactly Clopper-Pearson.
        assert hat5.ci == pytest.approx((0.012348527, 0.316982714), abs=1e-9)
        # Any k, not only the configured ones, computed from the stored histogram.
        tasks = [(5, c) for c in EXAMPLE_PASSES]
        for k in (2, 3, 4):
            got = rel.estimate("deploy-bot", k, "pass^k")
            assert got == estimate(tasks, k, "pass^k")
        assert rel.estimate("deploy-bot", 6).value is None
        # Every estimate() option passes through, the interval included.
        for interval in ("gaffke", "percentile"):
            chosen = rel.estimate("deploy-bot", 5, "pass@k", interval=interval, n_boot=500, seed=3)
            assert chosen == estimate(tasks, 5, "pass@k", interval=interval, n_boot=500, seed=3)
        assert rel.estimate("deploy-bot", 5, interval="gaffke") != rel.estimate(
            "deploy-bot", 5, interval="percentile"
        )
        assert rel.tasks("deploy-bot") == {
            f"deploy service {i}": (5, c) for i, c in enumerate(EXAMPLE_PASSES)
        }
        assert rel.cases("deploy-bot", 5, top=1)[0].task == "deploy service 0"
        assert rel.snapshot("no-such-suite") is None


async def test_client_works_inside_a_running_event_loop(
    redis_server: RedisServer, prefix: str
) -> None:
    # A notebook runs a loop already; the sync Client must not need one.
    with Client(redis_server.url, prefix=prefix) as rel:
        assert rel.suites() == []


def test_status_table_json_and_on_demand_k(
    redis_server: RedisServer, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config_for(redis_server, prefix)
    apply(cfg, example_events("deploy-bot"))
    snapshot_by_daemon(cfg, "deploy-bot")
    where = ["--redis", redis_server.url, "--prefix", prefix]

    code, out, _ = cli(capsys, "status", *where)
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert rows[0][:3] == ["SUITE", "TASKS", "TRIALS"]
    k5 = next(r for r in rows[1:] if r[3] == "5")
    assert k5[:5] == ["deploy-bot", "20", "100", "5", "5"]
    # pass@5 = 100% [83.2, 100.0], pass^5 = 10% [1.2, 31.7] (gaffke, the default interval)
    assert " ".join(k5[5:11]) == "100.0% [83.2, 100.0] 10.0% [1.2, 31.7]"

    code, out, _ = cli(capsys, "status", "deploy-bot", "--json", *where)
    doc = json.loads(out)
    assert doc["suite"] == "deploy-bot"
    assert [e["value"] for e in doc["pass_hat_k"] if e["k"] == 5] == [pytest.approx(0.1)]

    code, out, _ = cli(capsys, "status", "deploy-bot", "--k", "3", "--k", "7", *where)
    assert code == 0
    k3 = next(line for line in out.splitlines() if line.split()[3] == "3")
    expected = estimate([(5, c) for c in EXAMPLE_PASSES], 3, "pass^k")
    assert f"{100 * expected.value:.1f}%" in k3  # type: ignore[operator]
    k7 = next(line for line in out.splitlines() if line.split()[3] == "7")
    assert "UNKNOWN (20 of 20 tasks short)" in k7

    code, _, err = cli(capsys, "status", "nope", *where)
    assert code == 2
    assert "no suite named 'nope'" in err


def test_cases_and_tasks(
    redis_server: RedisServer, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config_for(redis_server, prefix)
    apply(cfg, example_events("deploy-bot"))
    where = ["--redis", redis_server.url, "--prefix", prefix]
    code, out, _ = cli(capsys, "cases", "deploy-bot", "--k", "5", "--top", "2", *where)
    assert code == 0
    assert out.splitlines()[1].split() == ["deploy", "service", "0", "5", "4"]
    assert len(out.splitlines()) == 3
    code, out, _ = cli(capsys, "cases", "deploy-bot", "--k", "1", *where)
    assert "no lottery cases at k=1" in out
    code, out, _ = cli(capsys, "tasks", "deploy-bot", *where)
    assert len(out.splitlines()) == 21
    assert "deploy service 7" in out


def test_forget_moves_the_task_out_of_every_number(
    redis_server: RedisServer, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config_for(redis_server, prefix)
    apply(cfg, example_events("deploy-bot"))
    where = ["--redis", redis_server.url, "--prefix", prefix]
    code, _, err = cli(capsys, "forget", "deploy-bot", "deploy service 0", *where)
    assert code == 1  # no terminal and no --yes: refuses
    assert "pass --yes" in err
    code, out, _ = cli(capsys, "forget", "deploy-bot", "deploy service 0", "--yes", *where)
    assert code == 0
    assert out.strip() == "forgot task 'deploy service 0' of 'deploy-bot'"
    with Client(redis_server.url, prefix=prefix) as rel:
        remaining = [(5, c) for c in EXAMPLE_PASSES[1:]]
        assert len(rel.tasks("deploy-bot")) == 19
        assert rel.estimate("deploy-bot", 5) == estimate(remaining, 5)
        # The lottery index lost it too.
        left = {f"deploy service {i}": (5, c) for i, c in enumerate(EXAMPLE_PASSES) if i}
        for k in (2, 5):
            assert rel.cases("deploy-bot", k, top=5) == lottery_cases(left, k, limit=5)
    code, _, err = cli(capsys, "forget", "deploy-bot", "deploy service 0", "--yes", *where)
    assert code == 1
    assert "has no task" in err

    # The daemon notices (version moved) and recomputes the snapshot.
    snapshot_by_daemon(cfg, "deploy-bot")
    with Client(redis_server.url, prefix=prefix) as rel:
        snap = rel.snapshot("deploy-bot")
        assert snap is not None
        assert snap.tasks == 19


def test_reset_deletes_the_suite_and_nothing_else(
    redis_server: RedisServer, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config_for(redis_server, prefix)
    # Glob characters in a suite name must not widen the reset to other suites.
    apply(cfg, example_events("x*") + example_events("xy") + example_events("x?"))

    async def keys() -> list[str]:
        client = connect(redis_server.url)
        try:
            raw = await client.keys(f"{prefix}:*")
            return sorted(k.decode() if isinstance(k, bytes) else k for k in raw)
        finally:
            await client.aclose()

    async def recorded(suite: str) -> int:
        """Trials in the suite's dedup buckets."""
        client = connect(redis_server.url)
        try:
            buckets = [k for k in await keys() if k.startswith(f"{prefix}:{{{suite}}}:dedup:")]
            return sum([int(await client.scard(k)) for k in buckets])
        finally:
            await client.aclose()

    buckets = len([k for k in asyncio.run(keys()) if k.startswith(f"{prefix}:{{x*}}:dedup:")])
    assert asyncio.run(recorded("x*")) == 100
    where = ["--redis", redis_server.url, "--prefix", prefix]
    code, out, _ = cli(capsys, "reset", "x*", "--yes", *where)
    assert code == 0
    # 5 core keys (snapshot absent: 4), the trial log (recent trials, not yet folded)
    # and the dedup buckets.
    assert out.strip() == f"reset 'x*': {5 + buckets} keys deleted"
    left = asyncio.run(keys())
    assert not [k for k in left if k.startswith(f"{prefix}:{{x*}}")]
    assert asyncio.run(recorded("xy")) == 100
    assert asyncio.run(recorded("x?")) == 100
    with Client(redis_server.url, prefix=prefix) as rel:
        assert rel.suites() == ["x?", "xy"]
        assert len(rel.tasks("xy")) == 20
    # Counting starts afresh: the same trials count again.
    apply(cfg, example_events("x*"))
    with Client(redis_server.url, prefix=prefix) as rel:
        want = {f"deploy service {i}": (5, c) for i, c in enumerate(EXAMPLE_PASSES)}
        assert rel.tasks("x*") == want


async def test_idle_tasks_leave_a_lifetime_suite(
    redis_server: RedisServer, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reliabilityd.config import SuiteOverride
    from reliabilityd.daemon import _recompute as daemon_mod

    monkeypatch.setattr(daemon_mod, "IDLE_SWEEP_EVERY", 0.1)
    cfg = msgspec.structs.replace(
        config_for(redis_server, prefix),
        suites=[SuiteOverride(match="retiring-*", idle_expiry=2.0)],
    )
    events = [
        TrialEvent(suite, task, f"r{r}", "pass" if r else "fail")
        for suite in ("retiring-bot", "lifetime-bot")
        for task in ("old task", "live task")
        for r in range(3)
    ]
    async with running(cfg) as daemon:
        store = daemon.store
        await TestingSource(events).run(daemon.commit)
        # The live task keeps getting events (every 0.3 s, well within its idle
        # expiry) until the old one, gone quiet, has left.
        r = 3

        async def retired() -> bool:
            nonlocal r
            if set(await store.reads.task_counts("retiring-bot")) == {"live task"}:
                return True
            await asyncio.sleep(0.3)
            live = TrialEvent("retiring-bot", "live task", f"r{r}", "pass")
            await TestingSource([live]).run(daemon.commit)
            r += 1
            return False

        await wait_until(retired, 20)
        assert r >= 4  # it left only after its idle expiry: live events were sent meanwhile
        n = r  # 3 first events, 2 of them passes, then every live one a pass
        assert await store.reads.task_counts("retiring-bot") == {"live task": (n, n - 1)}
        # A suite without idle expiry keeps every task.
        assert set(await store.reads.task_counts("lifetime-bot")) == {"old task", "live task"}
        state = await store.reads.read_state("retiring-bot")
        assert state.hist.cells() == [(n, n - 1, 1)]

        async def snapshot_follows() -> bool:
            snap = await stored_snapshot(store, "retiring-bot")
            return snap is not None and snap.tasks == 1

        await wait_until(snapshot_follows, 10)
