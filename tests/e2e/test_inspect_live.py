"""The Inspect AI hook, live: real ``inspect eval`` runs (mockllm) against a real daemon,
redis-server and mosquitto.

The hook is loaded the way users get it: Inspect finds it through the
``inspect_ai`` entry point of the installed package, and turns it on because
``RELIABILITYD_INSPECT_URL`` names the broker.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from reliabilityd.daemon._daemon import Daemon
from reliabilityd.importers._import import import_file
from reliabilityd.rules import Rule
from reliabilityd.stats.snapshot import Snapshot
from tests.support.daemon import make_config, running
from tests.support.faults import mqtt_flush
from tests.support.helpers import stored_snapshot, stored_state, wait_until
from tests.support.servers import Mosquitto, RedisServer

TASKS = Path(__file__).parent / "inspect_tasks.py"
INSPECT = Path(sys.executable).parent / "inspect"
SUITE = "flaky@mockllm_model"  # what `reliabilityd import` names the log: <task>@<model>


class Watch:
    """An ``inspect eval`` subprocess and what the daemon showed while it ran."""

    def __init__(self, proc: asyncio.subprocess.Process, log_dir: Path) -> None:
        self.proc = proc
        self.log_dir = log_dir
        self.during: list[Snapshot] = []  # snapshots seen while the eval ran
        self.fired_at: float | None = None
        self.fired_while_running = False

    def log_path(self) -> Path:
        (path,) = self.log_dir.glob("*.eval")
        return path


async def start_eval(
    tmp_path: Path,
    mosquitto: Mosquitto,
    prefix: str,
    task_args: Sequence[str],
    *,
    url: str | None = None,
) -> Watch:
    env = {
        **os.environ,
        "RELIABILITYD_INSPECT_URL": mosquitto.url if url is None else url,
        "RELIABILITYD_INSPECT_TOPIC": f"{prefix}/trials/inspect",
        "INSPECT_LOG_DIR": str(tmp_path / "logs"),
    }
    args = [str(INSPECT), "eval", f"{TASKS}@flaky", "--display", "plain", "--max-samples", "2"]
    args += ["--no-fail-on-error", "--log-dir", str(tmp_path / "logs")]
    for arg in task_args:
        args += ["-T", arg]
    proc = await asyncio.create_subprocess_exec(
        *args,
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    return Watch(proc, tmp_path / "logs")


async def watch(daemon: Daemon, run: Watch, rule: str | None = None) -> str:
    """Poll the daemon until the eval exits; returns the eval's output."""
    output = asyncio.create_task(run.proc.communicate())
    while not output.done():
        snap = await stored_snapshot(daemon.store, SUITE)
        if snap is not None:
            run.during.append(snap)
        if rule is not None and run.fired_at is None:
            state = await stored_state(daemon.store, SUITE, rule)
            if state.state == "firing":
                run.fired_at = time.time()
                run.fired_while_running = run.proc.returncode is None
        await asyncio.wait([output], timeout=0.1)
    out, _ = output.result()
    text = out.decode(errors="replace")
    assert run.proc.returncode == 0, text
    return text


def by_k(snapshot: Snapshot, metric: str) -> dict[int, float | None]:
    ests = snapshot.pass_hat_k if metric == "pass^k" else snapshot.pass_at_k
    return {e.k: e.value for e in ests}


async def reducers(log_path: Path) -> dict[str, float]:
    """Inspect's own numbers at the end of the eval: accuracy per reducer, from its log.

    The async reader: the sync one, called under a running loop, patches
    asyncio globally (nest_asyncio) and leaves event loops behind.
    """
    from inspect_ai.log import read_eval_log_async

    log = await read_eval_log_async(str(log_path))
    assert log.results is not None
    return {s.reducer or "": s.metrics["accuracy"].value for s in log.results.scores}


async def final_snapshot(daemon: Daemon, trials: int) -> Snapshot:
    async def complete() -> bool:
        snap = await stored_snapshot(daemon.store, SUITE)
        return snap is not None and snap.trials == trials

    await wait_until(complete, 30)
    snap = await stored_snapshot(daemon.store, SUITE)
    assert snap is not None
    return snap


@pytest.mark.timeout(180)
async def test_live_numbers_equal_inspects_reducers_and_the_import_adds_nothing(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str, tmp_path: Path
) -> None:
    cfg = make_config(
        redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix, ks=[1, 2, 3, 4]
    )
    async with running(cfg) as daemon:
        run = await start_eval(
            tmp_path, mosquitto, prefix, ["samples=8", "epochs=4", "delay=0.25", "seed=7"]
        )
        output = await watch(daemon, run)
        assert "hooks enabled: 1" in output
        final = await final_snapshot(daemon, 32)
        theirs = await reducers(run.log_path())
        # During the eval: the suite already had numbers, on part of the trials.
        partial = [s for s in run.during if 0 < s.trials < 32]
        assert partial, [s.trials for s in run.during]
        mid = partial[len(partial) // 2]
        print(f"during: {mid.trials} trials, pass^1 {by_k(mid, 'pass^k')[1]}")
        print(f"after: pass^k {by_k(final, 'pass^k')}, pass@2 {by_k(final, 'pass@k')[2]}")
        print(f"Inspect's reducers: {theirs}")
        for k in range(1, 5):
            assert by_k(final, "pass^k")[k] == pytest.approx(theirs[f"pass_k_{k}"], rel=1e-9)
        assert by_k(final, "pass@k")[2] == pytest.approx(theirs["pass_at_2"], rel=1e-9)
        # Importing the finished log counts nothing again, even with every live
        # dedup record gone: the ledger the daemon wrote holds each trial.
        store = daemon.store
        buckets = [k async for k in store.client.scan_iter(match=store.key(SUITE, "dedup:*"))]
        assert buckets
        await store.client.delete(*buckets)
        report = await import_file(store, run.log_path())
        assert report.suite == SUITE
        assert (report.counted, report.duplicates, report.already) == (0, 0, 32)
        state = await store.reads.read_state(SUITE)
        assert state.counters.trials == 32


@pytest.mark.timeout(180)
async def test_a_regression_mid_eval_fires_before_the_eval_ends(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str, tmp_path: Path
) -> None:
    """k = 1 over 6 epochs: pass^1 is known once each of the 10 samples has one scored epoch.

    Every answer from the 21st generate call on is wrong (of 60): pass^1 falls
    from near 1 to under a third, and the rule (CI lower bound under 0.6, all
    10 tasks judged) fires while the remaining 40 calls still run. One epoch
    raises: it is an error, in neither n nor c.
    """
    rule = Rule(
        name="inspect-regression", suite=SUITE, k=1, below=0.6, min_tasks=10, trigger="ci-low"
    )
    cfg = make_config(
        redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix, ks=[1], alerts=[rule]
    )
    args = ["samples=10", "epochs=6", "delay=0.3", "seed=3", "regress_after=20"]
    args += ["raise_sample=4", "raise_call=5"]
    async with running(cfg) as daemon:
        run = await start_eval(tmp_path, mosquitto, prefix, args)
        await watch(daemon, run, rule.name)
        final = await final_snapshot(daemon, 59)
        from inspect_ai.log import read_eval_log_async

        log = await read_eval_log_async(str(run.log_path()), header_only=True)
        assert log.stats.completed_at
        completed = datetime.fromisoformat(log.stats.completed_at).timestamp()
        assert run.fired_at is not None, "the rule never fired"
        print(f"fired {completed - run.fired_at:.2f} s before the eval completed")
        assert run.fired_while_running
        assert run.fired_at < completed
        state = await daemon.store.reads.read_state(SUITE)
        assert (state.counters.trials, state.counters.errors) == (59, 1)
        theirs = await reducers(run.log_path())
        assert by_k(final, "pass^k")[1] == pytest.approx(theirs["pass_k_1"], rel=1e-9)


@pytest.mark.timeout(120)
async def test_the_hook_is_off_unless_the_url_is_set(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str, tmp_path: Path
) -> None:
    cfg = make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix)
    async with running(cfg) as daemon:
        run = await start_eval(tmp_path, mosquitto, prefix, ["samples=2", "epochs=2"], url="")
        output = await watch(daemon, run)
        assert "hooks enabled: 0" in output
        assert run.log_path().exists()
        # A marker after the eval has exited: anything it sent is counted before it.
        await mqtt_flush(mosquitto.port, f"{prefix}/trials/inspect", daemon.store)()
        assert SUITE not in await daemon.store.reads.suites()
