"""Per-run counts: counted once, capped to the newest runs, forgotten, reset, expired;
read folded or not; estimated and compared as sides; against a real Redis."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal
from urllib.parse import quote

import msgspec
import numpy as np
import pytest

from reliabilityd.client import AsyncClient
from reliabilityd.config import Config
from reliabilityd.events import TrialEvent
from reliabilityd.importers import ImportFileError, import_file
from reliabilityd.importers.inspect_log import LINK_ENV
from reliabilityd.stats.compare import Side, compare
from reliabilityd.stats.estimate import estimate
from reliabilityd.stats.histogram import Histogram
from reliabilityd.store import Recent, RunSummary, Store, connect
from reliabilityd.store._base import _text
from tests.support.query import apply as query_apply
from tests.support.query import cli, config_for
from tests.support.servers import RedisServer

KEEP = Recent(trials=5, failures=4, runs=3)


def trial(task: str, trial: str, outcome: str, run: str | None, ts: float) -> TrialEvent:
    """An event of suite s with its own time (so its run's first and last trial are known)."""
    return TrialEvent("s", task, trial, outcome, ts=ts, run=run)  # type: ignore[arg-type]


async def apply(store: Store, events: list[TrialEvent], keep: Recent = KEEP, **kw: object) -> None:
    await store.ingest.apply({"s": events}, windows={}, dedup_ttl=7200, recent={"s": keep}, **kw)  # type: ignore[arg-type]


def expected_counts(events: list[TrialEvent], run: str) -> dict[str, tuple[int, int]]:
    seen: set[tuple[str, str]] = set()
    out: dict[str, tuple[int, int]] = {}
    for e in events:
        if e.run != run or (e.task, e.trial) in seen or e.outcome not in ("pass", "fail"):
            continue
        seen.add((e.task, e.trial))
        n, c = out.get(e.task, (0, 0))
        out[e.task] = (n + 1, c + (e.outcome == "pass"))
    return out


@pytest.mark.seeded
async def test_each_run_counts_each_trial_once_folded_or_not(
    redis_server: RedisServer, prefix: str, rng: np.random.Generator
) -> None:
    store = Store(connect(redis_server.url), prefix)
    try:
        t0 = 1_760_000_000.0
        events = [
            trial(
                f"t{int(rng.integers(6))}",
                f"x{i}",
                str(rng.choice(["pass", "pass", "fail", "error", "skip"])),
                ("a", "b", None)[i % 3],
                t0 + i,
            )
            for i in range(300)
        ]
        # Calls of a few events each (a log entry per call, folded past 32 of them),
        # a redelivery of the first 120 among them, and one mixed with new trials:
        # the duplicates add nothing.
        for start in range(0, 300, 7):
            await apply(store, events[start : start + 7])
            if start == 140:
                await apply(store, events[:120])
                # New trials mixed with redelivered ones: a log entry naming duplicates.
                await apply(store, events[100:160])
                (head,) = await store.client.lrange(store.key("s", "trials"), 0, 0)
                assert _text(head).split("\x1d")[1]  # its duplicates' positions
        for folded in (False, True):
            if folded:
                assert await store.ingest.fold("s", KEEP)
                assert await store.client.llen(store.key("s", "trials")) == 0
            for run in ("a", "b"):
                want = expected_counts(events, run)
                assert await store.reads.task_counts(Side("s", run=run)) == want
            listed = await store.reads.runs("s")
            assert [r.run for r in listed] == ["b", "a"]  # newest last trial first
            a = expected_counts(events, "a")
            stamps = [e.ts or 0.0 for e in events if e.run == "a" and e.outcome in ("pass", "fail")]
            assert listed[1] == RunSummary(
                "a",
                min(stamps),
                max(stamps),
                sum(n for n, _ in a.values()),
                sum(c for _, c in a.values()),
                len(a),
            )
        # The whole suite counted every trial, with or without a run.
        whole = await store.reads.task_counts("s")
        assert sum(n for n, _ in whole.values()) == sum(
            sum(n for n, _ in expected_counts(events, r).values()) for r in ("a", "b")
        ) + sum(1 for e in events if e.run is None and e.outcome in ("pass", "fail"))
        assert await store.reads.task_counts(Side("s", run="nope")) == {}
    finally:
        await store.client.aclose()


async def test_past_max_runs_the_oldest_run_retires_with_its_counts(
    redis_server: RedisServer, prefix: str
) -> None:
    store = Store(connect(redis_server.url), prefix)
    try:
        t0 = 1_760_000_000.0
        for j, run in enumerate(["r1", "r2", "r3"]):
            await apply(
                store, [trial("t", f"{run}-{i}", "pass", run, t0 + 10 * j + i) for i in range(3)]
            )
        await store.ingest.fold("s", KEEP)
        # r1 gets a late trial: its last trial is now the newest, so r2 is the oldest.
        await apply(store, [trial("t", "r1-late", "fail", "r1", t0 + 100)])
        await apply(store, [trial("u", "r4-0", "pass", "r4", t0 + 50)])
        # Unfolded, the reader shows what the fold will keep (the newest three).
        assert [r.run for r in await store.reads.runs("s", most=3)] == ["r1", "r4", "r3"]
        await store.ingest.fold("s", KEEP)
        assert [r.run for r in await store.reads.runs("s")] == ["r1", "r4", "r3"]
        assert not await store.client.exists(store.key("s", "run:r2"))
        assert await store.client.zcard(store.key("s", "runs")) == 3
        assert await store.reads.task_counts(Side("s", run="r2")) == {}
        assert await store.reads.task_counts(Side("s", run="r1")) == {"t": (4, 3)}
        # The whole suite keeps every trial: retiring a run drops only its own counts.
        assert (await store.reads.task_counts("s"))["t"] == (10, 9)
    finally:
        await store.client.aclose()


async def test_forget_expiry_and_reset_take_the_runs_counts(
    redis_server: RedisServer, prefix: str
) -> None:
    store = Store(connect(redis_server.url), prefix)
    try:
        now = time.time()
        events = [
            trial(t, f"{t}{i}", "pass" if i else "fail", "r", now) for t in "ab" for i in range(3)
        ]
        events += [trial("a", "a-other", "pass", "q", now)]
        await apply(store, events, touch={"s"})
        # Forgotten (the log folded first): task a leaves both runs; run q had only a.
        assert await store.admin.forget_task("s", "a", KEEP)
        assert await store.reads.task_counts(Side("s", run="r")) == {"b": (3, 2)}
        assert [(r.run, r.trials, r.passes, r.tasks) for r in await store.reads.runs("s")] == [
            ("r", 3, 2, 1)
        ]
        assert not await store.client.exists(store.key("s", "run:q"))
        # Idle expiry takes b, and the run with it, unfolded or not.
        await apply(store, [trial("b", "b9", "pass", "r", now)], touch={"s"})
        assert await store.admin.expire_idle("s", time.time() + 1, recent=KEEP) == 1
        assert await store.reads.runs("s") == []
        assert await store.reads.task_counts(Side("s", run="r")) == {}
        # Reset deletes every run key.
        await apply(store, [trial("c", "c1", "pass", "r", now)])
        await store.ingest.fold("s", KEEP)
        assert await store.reads.runs("s") != []
        await store.admin.reset_suite("s")
        for name in ("runs", "run", "run:r"):
            assert not await store.client.exists(store.key("s", name))
        assert await store.reads.runs("s") == []
    finally:
        await store.client.aclose()


async def test_without_recent_trials_the_log_still_carries_runs(
    redis_server: RedisServer, prefix: str
) -> None:
    store = Store(connect(redis_server.url), prefix)
    keep = Recent(trials=0, runs=5)
    try:
        now = time.time()
        await apply(
            store, [trial("t", "a", "pass", "r", now), trial("t", "b", "fail", None, now)], keep
        )
        # Only the trial with a run is logged; nothing goes to the recent trials.
        assert await store.client.llen(store.key("s", "trials")) == 1
        assert await store.ingest.fold("s", keep)
        assert not await store.client.exists(store.key("s", "recent"))
        assert not await store.client.exists(store.key("s", "failures"))
        assert await store.reads.task_counts(Side("s", run="r")) == {"t": (1, 1)}
        # Without a run in the chunk, nothing is logged.
        await apply(store, [trial("t", "c", "pass", None, now)], keep)
        assert await store.client.llen(store.key("s", "trials")) == 0
    finally:
        await store.client.aclose()


async def test_a_runs_estimate_and_a_run_against_another_are_the_stats_code(
    redis_server: RedisServer, prefix: str
) -> None:
    store = Store(connect(redis_server.url), prefix)
    try:
        now = time.time()
        base = {f"t{i}": [i % 2 == 0] * 3 for i in range(12)}
        events = [
            trial(task, f"a{task}{e}", "pass" if ok else "fail", "A", now)
            for task, oks in base.items()
            for e, ok in enumerate(oks)
        ]
        events += [
            trial(task, f"b{task}{e}", "pass" if (ok or e > 0) else "fail", "B", now + 1)
            for task, oks in base.items()
            for e, ok in enumerate(oks)
        ]
        await apply(store, events)
        async with AsyncClient(redis_server.url, prefix=prefix) as client:
            a = await client.tasks("s")
            assert a["t0"] == (6, 6)
            counts_a = await store.reads.task_counts(Side("s", run="A"))
            est = await client.estimate(Side("s", run="A"), 3, n_boot=200, seed=1)
            assert est == estimate(
                Histogram.from_pairs(list(counts_a.values())), 3, n_boot=200, seed=1
            )
            assert est.value == 0.5
            # k past the run's three trials per task: UNKNOWN, as everywhere.
            assert (await client.estimate(Side("s", run="A"), 4)).value is None
            cmp = await client.compare(
                Side("s", run="A"), Side("s", run="B"), 2, n_boot=200, seed=1
            )
            counts_b = await store.reads.task_counts(Side("s", run="B"))
            assert cmp == compare(
                counts_a, counts_b, 2, names=("s (run A)", "s (run B)"), n_boot=200, seed=1
            )
            assert cmp.shared == 12
            diff = cmp.difference()
            assert diff.value is not None
            assert diff.value > 0
            assert [r.run for r in await client.runs("s")] == ["B", "A"]
    finally:
        await store.client.aclose()


def test_a_run_takes_no_label_filter() -> None:
    with pytest.raises(ValueError, match="not per slice"):
        Side("s", {"model": "x"}, run="r")


# --- the command line: runs, status --run, compare --run, gate --run --------------------


def two_runs(cfg: Config) -> None:
    """Run "before" passes half of 12 tasks every time; run "after" two thirds of the time
    on the failing ones; both three epochs, committed as the daemon's sources commit."""
    events = []
    for i in range(12):
        for e in range(3):
            ok = i % 2 == 0
            events.append(
                TrialEvent("cli", f"t{i}", f"b/{i}/{e}", "pass" if ok else "fail", run="before")
            )
            ok = ok or e > 0
            events.append(
                TrialEvent("cli", f"t{i}", f"a/{i}/{e}", "pass" if ok else "fail", run="after")
            )
    query_apply(cfg, events)


def test_runs_status_compare_and_gate_take_a_run(
    redis_server: RedisServer, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config_for(redis_server, prefix)
    two_runs(cfg)
    where = ["--redis", redis_server.url, "--prefix", prefix]

    code, out, _ = cli(capsys, "runs", "cli", *where)
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["RUN", "FIRST", "TRIAL", "LAST", "TRIAL", "TASKS", "TRIALS", "PASSES"]
    assert {r[0]: r[3:] for r in rows[1:3]} == {
        "before": ["12", "36", "18"],
        "after": ["12", "36", "30"],
    }
    code, out, _ = cli(capsys, "runs", "cli", "--json", *where)
    listed = msgspec.json.decode(out, type=list[RunSummary])
    assert {(r.run, r.trials, r.passes, r.tasks) for r in listed} == {
        ("before", 36, 18, 12),
        ("after", 36, 30, 12),
    }

    # One run's numbers: pass^3 of "before" is 6 of 12 tasks; k = 4 is past its data.
    code, out, _ = cli(capsys, "status", "cli", "--run", "before", "--k", "3", "--k", "4", *where)
    assert code == 0, out
    assert out.splitlines()[0].startswith("cli (run before): 12 tasks, 36 trials, 18 passes")
    table = {line.split()[0]: line for line in out.splitlines()[2:4]}
    assert "50.0%" in table["3"].split("]")[1]  # pass^3, after pass@3's interval
    assert "UNKNOWN" in table["4"]
    code, out, _ = cli(capsys, "status", "cli", "--run", "before", "--json", "--k", "3", *where)
    doc = msgspec.json.decode(out)
    assert (doc["run"], doc["trials"], doc["pass_hat_k"][0]["value"]) == ("before", 36, 0.5)
    code, _, err = cli(capsys, "status", "cli", "--run", "nope", *where)
    assert code == 2
    assert "holds no run 'nope'" in err
    assert "before" in err.split("newest first:")[1]

    # One run against another: the paired comparison over their 12 shared tasks.
    code, out, _ = cli(
        capsys, "compare", "cli", "--run", "before", "--run", "after", "--k", "2", *where
    )
    assert code == 0, out
    assert "'cli (run after)' against 'cli (run before)', k=2: 12 shared tasks" in out
    code, out, _ = cli(
        capsys, "compare", "cli", "--run", "before", "--run", "after", "--json", "--k", "2", *where
    )
    cmp = msgspec.json.decode(out)
    assert cmp["baseline"] == "cli (run before)"
    assert cmp["differences"]["pass^k"]["value"] > 0
    code, _, err = cli(capsys, "compare", "cli", "--run", "before", *where)
    assert code == 2
    assert "--run twice" in err

    # gate: one run against a threshold, and the newer run against the older.
    code, out, _ = cli(
        capsys,
        "gate",
        "cli",
        "--run",
        "after",
        "--compare-run",
        "before",
        "--k",
        "2",
        "--json",
        *where,
    )
    doc = msgspec.json.decode(out)
    assert (doc["run"], doc["baseline_run"]) == ("after", "before")
    assert code == {"pass": 0, "fail": 1, "undecided": 3}[doc["verdict"]]
    code, out, _ = cli(
        capsys, "gate", "cli", "--run", "before", "--at-least", "0.99", "--k", "3", *where
    )
    assert code == 1, out  # pass^3 of run "before" is 50%: its upper bound is below 99%
    code, _, err = cli(capsys, "gate", "cli", "--run", "gone", "--at-least", "0.5", *where)
    assert code == 2
    assert "holds no run 'gone'" in err
    code, _, err = cli(
        capsys, "gate", "cli", "--run", "after", "--slice", "m=x", "--at-least", "0.5", *where
    )
    assert code == 2
    assert "not per slice" in err


# --- the Inspect importer: the eval id as run, each sample epoch's viewer link ---------


@pytest.mark.parametrize("fmt", ["eval", "json"])
@pytest.mark.seeded
async def test_an_imported_inspect_log_is_a_run_linked_epoch_by_epoch(
    *,
    redis_server: RedisServer,
    prefix: str,
    tmp_path: Path,
    rng: np.random.Generator,
    fmt: Literal["eval", "json"],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.integration.test_importers import inspect_log

    store = Store(connect(redis_server.url), prefix)
    try:
        name = "2026-11-30T00-00-00+00-00_gsm8k_x.log." + fmt
        log = await inspect_log(rng, tmp_path / name, fmt, epochs=3)
        report = await import_file(store, tmp_path / name)
        eval_id = log.eval.eval_id
        assert [(r.run, r.trials, r.tasks) for r in await store.reads.runs(report.suite)] == [
            (eval_id, 36, 12)
        ]
        rows = await store.reads.trials(report.suite, "5")
        assert {(r.trial, r.run, r.url) for r in rows} == {
            (
                f"{eval_id}/{e}",
                eval_id,
                f"#/logs/{quote(name, safe='/')}/samples/sample/5/{e}/",
            )
            for e in (1, 2, 3)
        }
        # A template of the user's, and none at all.
        monkeypatch.setenv(
            LINK_ENV, "https://logs.example/v/#/logs/{log}/samples/sample/{id}/{epoch}/"
        )
        again = await import_file(store, tmp_path / name, suite="templated")
        (row, *_) = await store.reads.trials(again.suite, "5")
        assert row.url is not None
        assert row.url.startswith("https://logs.example/v/#/logs/")
        monkeypatch.setenv(LINK_ENV, "none")
        bare = await import_file(store, tmp_path / name, suite="bare")
        assert all(r.url is None for r in await store.reads.trials(bare.suite, "5"))
        monkeypatch.setenv(LINK_ENV, "{nope}")
        with pytest.raises(ImportFileError, match=LINK_ENV):
            await import_file(store, tmp_path / name, suite="refused")
    finally:
        await store.client.aclose()
