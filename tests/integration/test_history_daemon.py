"""History written by running daemons: points with snapshots, restarts, replicas, alerts, CLI."""

from __future__ import annotations

import asyncio
import json
import math

import msgspec
import pytest

from reliabilityd import Client
from reliabilityd.alerting.notify import parse_time
from reliabilityd.config import Config, DaemonConfig
from reliabilityd.embedded.processes import free_port
from reliabilityd.events import TrialEvent
from reliabilityd.rules import Rule
from reliabilityd.stats.compare import Side
from reliabilityd.stats.history import SCALE, History, Point, label
from reliabilityd.stats.slices import slice_id
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Store
from reliabilityd.testing import TestingSource, commit_to
from tests.support.daemon import running, store_for
from tests.support.helpers import judged, stored_snapshot, wait_until
from tests.support.query import apply, cli, config_for
from tests.support.servers import RedisServer

SUITE = "deploy-bot"
# Per task passes out of 5: pass^5 is low, so the rule below fires on the first snapshot.
PASSES = [4, 2, 5, 3, 1, 2, 3, 5, 2, 1, 4, 3, 3, 2, 2, 3, 4, 2, 3, 2]
RULE = Rule(name="deploy-pass5", k=5, below=0.9, severity="page")


def events(round_: int, passes: list[int] = PASSES) -> list[TrialEvent]:
    return [
        TrialEvent(SUITE, f"task {i}", f"r{round_}-{r}", "pass" if r < c else "fail")
        for i, c in enumerate(passes)
        for r in range(5)
    ]


def alerting_config(redis_server: RedisServer, prefix: str, instance: str = "") -> Config:
    cfg = config_for(redis_server, prefix)
    return msgspec.structs.replace(
        cfg, alerts=[RULE], daemon=DaemonConfig(instance=instance or f"{prefix}-d")
    )


async def apply_async(cfg: Config, evs: list[TrialEvent]) -> None:
    """Commit ``evs`` through the commit the daemon's sources use, with ``cfg``'s settings."""
    async with commit_to(cfg) as commit:
        sink = await TestingSource(evs).run(commit)
    assert sink.counted() == len(evs)


async def snapshot_of(store: Store) -> Snapshot:
    snap = await stored_snapshot(store, SUITE)
    assert snap is not None
    return snap


def matches(point: Point, snap: Snapshot) -> bool:
    """The point holds the snapshot's estimates (to the stored resolution, bounds outward)."""
    for est in [*snap.pass_at_k, *snap.pass_hat_k]:
        p, lo, hi = point.values[label(est.metric, est.k)]
        for have, exact in ((p, est.value), (lo, est.ci_low), (hi, est.ci_high)):
            if (have is None) != (exact is None):
                return False
            if have is not None and exact is not None and abs(have - exact) > 1 / SCALE:
                return False
        if lo is not None and est.ci_low is not None and lo > est.ci_low:
            return False
        if hi is not None and est.ci_high is not None and hi < est.ci_high:
            return False
    return True


async def test_a_daemon_writes_history_with_its_snapshots_and_it_survives_a_restart(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = alerting_config(redis_server, prefix)
    async with store_for(cfg) as store:
        await apply_async(cfg, events(0))
        async with running(cfg) as daemon:

            async def marked() -> bool:
                h = await store.history.read(SUITE)
                return bool(h.points) and bool(h.transitions)

            await wait_until(marked, 20)
            # More ticks: nothing more to record at this version.
            await judged(store, SUITE, daemon, passes=3)
            snap = await snapshot_of(store)
            before = await store.history.read(SUITE)
        (point,) = before.points
        assert matches(point, snap)
        updated = parse_time(snap.updated_at)
        assert updated is not None
        assert point.t == math.floor(updated)
        assert set(point.values) == {label(m, k) for m in ("pass@k", "pass^k") for k in (1, 5)}
        # The rule fired once: one transition, at the verdict's time, with its severity.
        (mark,) = before.transitions
        assert (mark.rule, mark.state, mark.severity, mark.reason) == (
            RULE.name,
            "firing",
            "page",
            "below",
        )
        assert point.t <= mark.t < point.t + 30

        # Restarted, the daemon finds the history as it was and adds to it.
        async with running(cfg) as daemon:
            # The start-up reconcile (the first tick) and a few more ticks, no new data.
            await judged(store, SUITE, daemon, passes=3)
            assert await store.history.read(SUITE) == before
            await apply_async(cfg, events(1, [5] * len(PASSES)))

            async def recomputed() -> bool:
                return (await snapshot_of(store)).version > snap.version

            await wait_until(recomputed, 20)
            after = await store.history.read(SUITE)
            newer = await snapshot_of(store)
        assert matches(after.points[-1], newer)
        assert not matches(after.points[-1], snap)
        # Points of earlier minutes stay; a point of the same minute is the newer snapshot's.
        assert [p for p in after.points if p.t // 60 < after.points[-1].t // 60] == [
            p for p in before.points if p.t // 60 < after.points[-1].t // 60
        ]
        assert after.transitions == before.transitions
        with Client(redis_server.url, prefix=prefix) as rel:
            assert rel.history(SUITE) == after
            assert rel.history(SUITE, since=after.points[-1].t + 1).points == []


async def test_two_replicas_write_one_point_per_version(
    redis_server: RedisServer, prefix: str
) -> None:
    a = alerting_config(redis_server, prefix, f"{prefix}-a")
    b = alerting_config(redis_server, prefix, f"{prefix}-b")
    async with store_for(a) as store:
        await apply_async(a, events(0))
        async with running(a) as one, running(b) as other:

            async def has_point() -> bool:
                return bool((await store.history.read(SUITE)).points)

            await wait_until(has_point, 20)
            await judged(store, SUITE, one, other)  # both replicas have judged it
            first = await store.history.read(SUITE)
            # The same version recomputed again and again, by whichever replica claims it:
            # the snapshot is rewritten each time, the history is not.
            for _ in range(4):
                stamp = (await snapshot_of(store)).updated_at
                await store.snapshots.mark_changed([SUITE])

                async def rewritten(stamp: str = stamp) -> bool:
                    return (await snapshot_of(store)).updated_at != stamp

                await wait_until(rewritten, 20)
                # A second later (a busy machine only makes it later): a new point
                # would have a new t.
                await asyncio.sleep(1.1)
            assert await store.history.read(SUITE) == first
        assert len(first.points) == 1
        assert len(first.transitions) == 1


def test_history_command_prints_points_and_transitions_and_json(
    redis_server: RedisServer, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = alerting_config(redis_server, prefix)
    apply(cfg, events(0))

    async def daemon_run() -> History:
        async with running(cfg) as daemon:

            async def marked() -> bool:
                h = await daemon.store.history.read(SUITE)
                return bool(h.points) and bool(h.transitions)

            await wait_until(marked, 20)
            return await daemon.store.history.read(SUITE)

    hist = asyncio.run(daemon_run())
    redis = ["--redis", redis_server.url, "--prefix", prefix]
    code, out, err = cli(capsys, "history", SUITE, *redis)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["TIME", "EVERY", "PASS^5", "[CI]", "PASS@5", "[CI]"]
    (point,) = hist.points
    p, lo, hi = point.values[label("pass^k", 5)]
    assert p is not None
    assert lo is not None
    assert hi is not None
    row = next(line for line in lines[1:] if " 10s " in line)
    assert f"{100 * p:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]" in row
    mark = next(line for line in lines[1:] if " alert " in line)
    assert f"{RULE.name} -> firing (page, below)" in mark
    # Interleaved in time order: the alert was decided after the snapshot it judged.
    assert lines.index(row) < lines.index(mark)
    assert lines[-1].startswith("1 point of 'deploy-bot', 1 alert transition")

    code, out, _ = cli(capsys, "history", SUITE, "--json", "--since", "1h", *redis)
    assert code == 0
    assert msgspec.json.decode(out.encode(), type=History) == hist
    assert set(json.loads(out)) == {"suite", "slice", "points", "transitions"}
    code, out, _ = cli(capsys, "history", SUITE, "--json", "--k", "1", *redis)
    assert code == 0
    only = msgspec.json.decode(out.encode(), type=History)
    assert set(only.points[0].values) == {label("pass@k", 1), label("pass^k", 1)}

    # Nothing in the time asked for; a time in the future; an ISO time.
    code, out, _ = cli(capsys, "history", SUITE, "--until", "2020-01-01T00:00:00Z", *redis)
    assert code == 0
    assert out.startswith("no history of 'deploy-bot' in that time")
    # Exit codes as status: 2 for a suite not there or a k the history lacks, 4 unreachable.
    code, _, err = cli(capsys, "history", "nope", *redis)
    assert code == 2
    assert "no suite named 'nope'" in err
    code, _, err = cli(capsys, "history", SUITE, "--k", "3", *redis)
    assert code == 2
    assert "has k = 1, 5, not k=3" in err
    with pytest.raises(SystemExit) as usage:
        cli(capsys, "history", SUITE, "--since", "yesterday", *redis)
    assert usage.value.code == 2
    assert "neither a duration" in capsys.readouterr().err
    code, _, err = cli(capsys, "history", SUITE, "--redis", f"redis://127.0.0.1:{free_port()}/0")
    assert code == 4
    assert "cannot reach Redis" in err


async def test_a_slice_rule_records_its_transitions_and_baseline_on_the_slice(
    redis_server: RedisServer, prefix: str
) -> None:
    base = alerting_config(redis_server, prefix)
    cfg = msgspec.structs.replace(
        base,
        stats=msgspec.structs.replace(base.stats, slice_by=["model"]),
        alerts=[msgspec.structs.replace(RULE, slices=True)],
    )
    low, high = slice_id(["model"], {"model": "a"}), slice_id(["model"], {"model": "b"})
    evs = [
        msgspec.structs.replace(e, trial=f"{model}-{e.trial}", labels={"model": model})
        for model, passes in (("a", PASSES), ("b", [5] * len(PASSES)))
        for e in events(0, passes)
    ]
    async with store_for(cfg) as store:
        await apply_async(cfg, evs)  # sliced by model, as cfg says
        async with running(cfg) as daemon:

            async def marked() -> bool:
                h = await store.history.read(SUITE, slice=low)
                whole = await store.history.read(SUITE)
                return bool(h.points and h.transitions and whole.transitions)

            await wait_until(marked, 20)
            # Every series judged: model b's slice too, which must not breach.
            await judged(store, SUITE, daemon, slices=[low, high])
            sliced = await store.history.read(SUITE, slice=low)
            fine = await store.history.read(SUITE, slice=high)
            whole = await store.history.read(SUITE)
            low_snap = await stored_snapshot(store, SUITE, slice=low)
            counts = await store.reads.task_counts(Side(SUITE, {"model": "a"}))
            baseline = await store.alerts.baseline(SUITE, f"{RULE.name}[{low}]")
    assert low_snap is not None
    assert matches(sliced.points[-1], low_snap)
    (mark,) = sliced.transitions
    assert (mark.rule, mark.state) == (f"{RULE.name}[{low}]", "firing")
    # The whole suite's history holds the whole's transitions only; model b never breached.
    assert [(t.rule, t.state) for t in whole.transitions] == [(RULE.name, "firing")]
    assert fine.points
    assert fine.transitions == []
    # The breach's baseline is the slice's tasks, not the suite's.
    assert baseline is not None
    assert baseline.tasks == counts == {f"task {i}": (5, c) for i, c in enumerate(PASSES)}
