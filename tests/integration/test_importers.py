"""Importing tau-bench, tau2-bench, Inspect AI and multivon-eval results into a real Redis.

After an import the suite's pass^k, estimated from the stored histogram,
equals what each harness's own code computes for the same file.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from reliabilityd import estimate, estimate_metrics
from reliabilityd.cli._main import main
from reliabilityd.events import TrialEvent, validate
from reliabilityd.importers._import import (
    ImportFileError,
    import_file,
    read,
    suite_name,
    task_name,
)
from reliabilityd.store import Store
from reliabilityd.store._ingest import CHUNK
from tests.support import result_files as rf
from tests.support.daemon import make_config, running
from tests.support.helpers import current_snapshot
from tests.support.servers import Mosquitto, RedisServer

DATA = Path(__file__).parent.parent / "data"


def write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc, indent=1))
    return path


def random_matrix(
    rng: np.random.Generator, tasks: int, runs: int, extra: tuple[str, ...] = ()
) -> rf.Matrix:
    """Tasks with their own skill (so pass^k is far from trivial), plus some `extra` outcomes."""
    out: rf.Matrix = {}
    for t in range(tasks):
        skill = rng.beta(2, 0.7)
        row = ["pass" if rng.random() < skill else "fail" for _ in range(runs)]
        for j in range(runs):
            if extra and rng.random() < 0.08:
                row[j] = extra[int(rng.integers(len(extra)))]
        out[str(t)] = row
    return out


async def pass_hat(store: Store, suite: str, k: int) -> float | None:
    """The suite's pass^k point value (no CI: a CI would clamp the value into itself)."""
    state = await store.reads.read_state(suite)
    return estimate_metrics(state.hist, k, ("pass^k",), with_ci=False)["pass^k"].value


# --- names -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("airline@openai/gpt-4.1", "airline@openai_gpt-4.1"),
        ("a{b}c+d#e", "a_b_c_d_e"),
        ("tab\there\nnewline", "tab_here_newline"),
        ("  padded  ", "padded"),
        ("", "imported"),
    ],
)
def test_suite_names_are_mapped_to_valid_ones(raw: str, expected: str) -> None:
    assert suite_name(raw) == expected


def test_long_names_are_cut_to_200_bytes_and_stay_distinct() -> None:
    a, b = suite_name("é" * 150 + "x"), suite_name("é" * 150 + "y")
    assert a != b
    for name in (a, b, task_name("prompt\n" * 100)):
        assert len(name.encode()) <= 200
        assert validate(TrialEvent(suite=a, task=name, trial="t", outcome="pass")) is None


def test_undetectable_content_names_the_formats(tmp_path: Path) -> None:
    with pytest.raises(ImportFileError, match="--format"):
        read(write(tmp_path / "x.json", {"something": "else"}))
    (tmp_path / "bad.json").write_text("nope")
    with pytest.raises(ImportFileError, match="not JSON"):
        read(tmp_path / "bad.json")


# --- tau-bench -------------------------------------------------------------


async def test_tau_bench_pass_hat_k_matches_tau_bench(
    store: Store, tmp_path: Path, rng: np.random.Generator
) -> None:
    matrix = random_matrix(rng, 40, 5, extra=("raise",))
    doc = rf.tau_bench_doc(matrix)
    path = write(tmp_path / "tool-calling-gpt-4o-0.0_range_0-40.json", doc)
    report = await import_file(store, path)
    assert report.format == "tau-bench"
    assert report.suite == "tool-calling-gpt-4o-0.0_range_0-40"  # the file's name
    assert report.counted == 200
    assert report.notes == []
    for k in range(1, 6):
        assert await pass_hat(store, report.suite, k) == pytest.approx(
            rf.tau_bench_pass_hat_k(doc, k), rel=1e-12, abs=1e-15
        )


async def test_incomplete_tau_bench_file_counts_runs_present_and_says_so(
    store: Store, tmp_path: Path
) -> None:
    matrix = {"0": ["pass", "pass", "pass"], "1": ["pass", "fail"], "2": ["pass", "pass", "fail"]}
    doc = rf.tau_bench_doc(matrix)
    report = await import_file(store, write(tmp_path / "ckpt.json", doc), run="r1")
    assert "incomplete: 1 of 3 tasks" in report.notes[0]
    # Ours: task 1 has 1/2, so pass^2 = (1 + 0 + 1/3) / 3; tau-bench divides
    # task 1 by C(3, 2) as if its missing run failed.
    assert await pass_hat(store, report.suite, 2) == pytest.approx((1 + 0 + 1 / 3) / 3)
    assert rf.tau_bench_pass_hat_k(doc, 2) == pytest.approx((1 + 0 + 1 / 3) / 3)
    assert await pass_hat(store, report.suite, 3) is None  # task 1 has 2 runs: UNKNOWN
    # The complete file under the same run id adds only the missing run.
    matrix["1"].append("pass")
    full = rf.tau_bench_doc(matrix)
    again = await import_file(store, write(tmp_path / "ckpt.json", full), run="r1")
    assert (again.counted, again.already) == (1, 8)
    assert again.notes == []
    assert await pass_hat(store, report.suite, 3) == pytest.approx(rf.tau_bench_pass_hat_k(full, 3))


# --- tau2-bench ------------------------------------------------------------


async def test_tau2_bench_pass_hat_k_matches_tau2_bench(
    store: Store, tmp_path: Path, rng: np.random.Generator
) -> None:
    matrix = random_matrix(rng, 30, 4, extra=("infra", "max_steps"))
    doc = rf.tau2_doc(matrix)
    report = await import_file(store, write(tmp_path / "results.json", doc))
    assert report.format == "tau2-bench"
    assert report.suite == "airline@openai_gpt-4.1"
    infra = sum(row.count("infra") for row in matrix.values())
    assert report.errors == infra
    assert report.counted == 120 - infra
    state = await store.reads.read_state(report.suite)
    assert state.counters.errors == infra
    for k in range(1, 5):
        expected = rf.tau2_pass_hat_k(doc, k)
        got = await pass_hat(store, report.suite, k)
        assert got == (None if expected is None else pytest.approx(expected, rel=1e-12, abs=1e-15))


# --- Inspect AI ------------------------------------------------------------


async def inspect_log(
    rng: np.random.Generator, path: Path, fmt: Literal["eval", "json"], epochs: int = 5
) -> Any:
    """An Inspect eval log written by Inspect itself, with scores as scorers give them.

    The async writer: the sync one, called under a running loop, patches
    asyncio globally (nest_asyncio) and leaves event loops behind.
    """
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalSample,
        EvalSpec,
        write_eval_log_async,
    )
    from inspect_ai.scorer import Score

    samples = []
    for i in range(12):
        skill = rng.beta(2, 0.7)
        for epoch in range(1, epochs + 1):
            u = rng.random()
            # Values as scorers give them: "C"/"I", 1.0, True, "yes".
            value: Any = (
                ["C", 1.0, True, "yes"][i % 4] if u < skill else ["I", 0.0, 0.5, "no"][i % 4]
            )
            samples.append(
                EvalSample(
                    id=i, epoch=epoch, input="q", target="a", scores={"match": Score(value=value)}
                )
            )
    spec = EvalSpec(
        created="2026-11-30T00:00:00+00:00",
        task="inspect_evals/gsm8k",
        dataset=EvalDataset(),
        model="openai/gpt-4o",
        config=EvalConfig(epochs=epochs),
    )
    log = EvalLog(eval=spec, samples=samples, status="success")
    await write_eval_log_async(log, str(path), format=fmt)
    return log


@pytest.mark.parametrize("fmt", ["eval", "json"])
async def test_inspect_log_matches_inspects_own_reducers(
    store: Store, tmp_path: Path, rng: np.random.Generator, fmt: Literal["eval", "json"]
) -> None:
    from inspect_ai.scorer import pass_at, pass_k

    log = await inspect_log(rng, tmp_path / f"log.{fmt}", fmt)
    report = await import_file(store, tmp_path / f"log.{fmt}")
    assert (report.format, report.suite) == ("inspect", "inspect_evals_gsm8k@openai_gpt-4o")
    assert report.run == log.eval.eval_id
    assert report.counted == 60
    state = await store.reads.read_state(report.suite)
    by_sample: dict[Any, list[Any]] = {}
    for s in log.samples:
        by_sample.setdefault(s.id, []).append(s.scores["match"])
    for k in range(1, 6):
        for metric, reducer in (("pass^k", pass_k(k)), ("pass@k", pass_at(k))):
            inspect_value = np.mean([reducer(scores).value for scores in by_sample.values()])
            point = estimate_metrics(state.hist, k, (metric,), with_ci=False)  # type: ignore[arg-type]
            ours = point[metric].value  # type: ignore[index]
            assert ours == pytest.approx(float(inspect_value), rel=1e-9, abs=1e-12)


async def test_inspect_errored_and_unscored_samples_are_not_trials(
    store: Store, tmp_path: Path
) -> None:
    def sample(i: int, epoch: int, **extra: Any) -> dict[str, Any]:
        return {"id": i, "epoch": epoch, "input": "q", "target": "a", **extra}

    doc = {
        "version": 2,
        "status": "error",
        "eval": {"eval_id": "E1", "task": "t", "model": "m", "created": "2026-11-30"},
        "samples": [
            sample(1, 1, scores={"s": {"value": "C"}}),
            sample(1, 2, scores={"s": {"value": "I"}}),
            sample(2, 1, error={"message": "sandbox died", "traceback": ""}, scores={}),
            sample(2, 2, scores={"s": {"value": float("nan")}}),
        ],
    }
    path = tmp_path / "log.json"
    path.write_text(json.dumps(doc))  # NaN as Inspect writes it
    report = await import_file(store, path)
    assert (report.counted, report.errors, report.skips) == (2, 1, 1)
    assert any("status is 'error'" in n for n in report.notes)
    assert await store.reads.task_counts(report.suite) == {"1": (2, 1)}


# --- multivon-eval ---------------------------------------------------------


async def test_multivon_report_matches_multivon_and_leaves_out_errors(
    store: Store, tmp_path: Path, rng: np.random.Generator
) -> None:
    cases = [rf.multivon_case(f"deploy service {i}", 5, int(rng.integers(0, 6))) for i in range(20)]
    cases += [
        rf.multivon_case("deploy service 20", 5, 0, "judge_error"),
        rf.multivon_case("deploy service 21", 5, 0, "skipped"),
        rf.multivon_case("deploy\nservice 0", 5, 5),  # same task name after mapping
    ]
    doc = rf.multivon_doc(cases, "deploy-bot", "anthropic/claude")
    report = await import_file(store, write(tmp_path / "report.json", doc))
    assert (report.format, report.suite) == ("multivon", "deploy-bot@anthropic_claude")
    assert (report.counted, report.errors, report.skips) == (105, 5, 5)
    for k in range(1, 6):
        assert await pass_hat(store, report.suite, k) == pytest.approx(
            rf.multivon_pass_hat_k(doc, k), rel=1e-12, abs=1e-15
        )


async def test_the_readme_example_report_gives_its_numbers(store: Store) -> None:
    """The checked-in multivon-eval report of the README's 20 x 5 example: pass^5 = 0.10."""
    report = await import_file(store, DATA / "multivon_deploy_bot.json", suite="example")
    state = await store.reads.read_state("example")
    est = estimate(state.hist, 5, "pass^k", interval="percentile")
    assert report.counted == 100
    assert est.value == pytest.approx(0.1)
    assert est.ci == pytest.approx((0.0, 0.25))


# --- idempotence -----------------------------------------------------------


async def test_a_second_import_counts_nothing_even_after_dedup_expired(
    store: Store, tmp_path: Path, rng: np.random.Generator
) -> None:
    path = write(tmp_path / "r.json", rf.tau_bench_doc(random_matrix(rng, 10, 3)))
    first = await import_file(store, path, suite="s")
    before = await store.reads.read_state("s")
    # Every dedup record expires (simulated by deleting them).
    buckets = [k async for k in store.client.scan_iter(match=store.key("s", "dedup:*"))]
    assert sum([int(await store.client.scard(k)) for k in buckets]) == 30
    await store.client.delete(*buckets)
    second = await import_file(store, path, suite="s")
    assert (second.counted, second.already) == (0, 30)
    assert second.earlier is not None
    assert second.earlier["counted"] == first.counted == 30
    after = await store.reads.read_state("s")
    assert after.hist == before.hist
    assert after.counters.trials == 30


async def test_two_runs_of_the_same_tasks_both_count(store: Store, tmp_path: Path) -> None:
    doc = rf.tau_bench_doc({"0": ["pass", "fail"], "1": ["pass", "pass"]})
    path = write(tmp_path / "r.json", doc)
    await import_file(store, path, suite="s", run="monday")
    await import_file(store, path, suite="s", run="tuesday")
    assert await store.reads.task_counts("s") == {"0": (4, 2), "1": (4, 4)}
    assert sorted(await store.imports.import_records("s")) == ["monday", "tuesday"]


async def test_an_import_cut_short_counts_the_rest_exactly_once(
    store: Store, tmp_path: Path, rng: np.random.Generator
) -> None:
    matrix = random_matrix(rng, 500, 6)  # 3000 events: two EVAL chunks
    path = write(tmp_path / "big.json", rf.tau_bench_doc(matrix))
    parsed = read(path)
    events = [TrialEvent("s", t.task, f"{parsed.run}/{t.trial}", t.outcome) for t in parsed.trials]
    # A crash after the first chunk: only it reached Redis.
    await store.imports.apply_import("s", events[:CHUNK], window=0, dedup_ttl=60)
    report = await import_file(store, path, suite="s")
    assert (report.counted, report.already) == (3000 - CHUNK, CHUNK)
    counts = await store.reads.task_counts("s")
    assert counts == {t: (6, row.count("pass")) for t, row in matrix.items()}


# --- the command -----------------------------------------------------------


def test_import_command_reports_and_is_idempotent(
    redis_server: RedisServer, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[redis]\nurl = "{redis_server.url}"\nprefix = "{prefix}"\n')
    path = write(tmp_path / "results.json", rf.tau2_doc({"a": ["pass", "fail"]}))
    assert main(["import", str(path), "-c", str(config), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["suite"], out["counted"]) == ("airline@openai_gpt-4.1", 2)
    assert main(["import", str(path), "-c", str(config)]) == 0
    text = capsys.readouterr().out
    assert "0 counted trials" in text
    assert "was first imported" in text


def test_import_command_rejects_an_unknown_shape(
    redis_server: RedisServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "x.json", {"hello": 1})
    assert main(["import", str(path), "--redis", redis_server.url]) == 2
    assert "--format" in capsys.readouterr().err


async def test_a_running_daemon_publishes_the_imported_suite(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str, tmp_path: Path
) -> None:
    """A live suite can start from a batch run: the daemon snapshots what was imported."""
    doc = json.loads((DATA / "tau_bench_results.json").read_text())
    cfg = make_config(redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix)
    async with running(cfg) as daemon:
        await import_file(daemon.store, DATA / "tau_bench_results.json", suite="live")
        # The snapshot of the whole import, not of its first chunk.
        snap = await current_snapshot(daemon.store, "live")
    phk = {e["k"]: e["value"] for e in snap["pass_hat_k"]}
    assert phk[3] == pytest.approx(rf.tau_bench_pass_hat_k(doc, 3))
    assert snap["trials"] == len(doc)


async def test_tau2_bench_dir_format_reads_the_simulation_files(
    store: Store, tmp_path: Path
) -> None:
    doc = rf.tau2_doc({"a": ["pass", "pass", "fail"], "b": ["pass", "infra", "pass"]})
    sims = doc.pop("simulations")
    doc["simulation_index"] = [{"id": s["id"], "task_id": s["task_id"]} for s in sims]
    run_dir = tmp_path / "airline-run"
    (run_dir / "simulations").mkdir(parents=True)
    write(run_dir / "results.json", doc)
    for sim in sims:
        write(run_dir / "simulations" / f"{sim['id']}.json", sim)
    report = await import_file(store, run_dir)
    assert (report.format, report.counted, report.errors) == ("tau2-bench", 5, 1)
    assert await store.reads.task_counts(report.suite) == {"a": (3, 2), "b": (2, 2)}


async def test_a_file_without_trials_is_refused(store: Store, tmp_path: Path) -> None:
    doc = rf.tau2_doc({"a": ["pass"]})
    doc["simulations"] = []
    with pytest.raises(ImportFileError, match="no trials"):
        await import_file(store, write(tmp_path / "results.json", doc))
    assert await store.reads.suites() == []


# What suite_name replaces, written out here: each suite-forbidden character, and
# one of each kind of character no name may hold (controls, a noncharacter, a
# lone surrogate, format characters, the line separator).
REPLACED = "{}/+#" + "\x00\n\x7f\x85\ufffe\U0010ffff\ud800\u200b\u202e\ufeff\u2028"


def each_replaced(test: Callable[..., None]) -> Any:
    """``test`` with one explicit example per replaced character, in every run."""
    for ch in REPLACED:
        test = example(f"a{ch}b", f"t{ch}u")(test)
    return test


@each_replaced
@given(st.text(max_size=400), st.text(max_size=400))
def test_any_name_maps_to_a_valid_one(suite: str, task: str) -> None:
    name = suite_name(suite)
    assert validate(TrialEvent(suite=name, task=task_name(task), trial="t", outcome="pass")) is None
    assert suite_name(name) == name  # valid names stay as they are
    name.encode()  # nothing UTF-8 cannot carry
    task_name(task).encode()


async def test_a_report_written_by_multivon_eval_itself(store: Store, tmp_path: Path) -> None:
    """multivon-eval 0.20.0 ran the README's example suite (tests/data/*.py.txt) and saved
    this report.

    Its own numbers, printed by the same run (report.pass_hat_k / pass_at_k):
    """
    own_hat = [0.56, 0.315, 0.19, 0.13, 0.1]
    own_at = [0.56, 0.805, 0.925, 0.98, 1.0]
    path = tmp_path / "report.json"
    path.write_bytes(gzip.decompress((DATA / "multivon_0.20_example_report.json.gz").read_bytes()))
    report = await import_file(store, path)
    assert (report.suite, report.counted, report.errors) == ("deploy-bot", 100, 5)
    hist = (await store.reads.read_state("deploy-bot")).hist
    for k in range(1, 6):
        assert estimate(hist, k, "pass^k").value == pytest.approx(own_hat[k - 1], abs=1e-12)
        assert estimate(hist, k, "pass@k").value == pytest.approx(own_at[k - 1], abs=1e-12)
    summary = json.loads(path.read_text())["summary"]["pass_hat_k"]
    multivon = estimate(hist, 5, "pass^k", interval="percentile")
    assert multivon.ci == pytest.approx(tuple(summary["ci_95"]))


async def test_tau_bench_published_run_reproduces_its_published_numbers(store: Store) -> None:
    """task_id, trial and reward of tau-bench's historical_trajectories/gpt-4o-airline.json
    (sierra-research/tau-bench at 59a200c, MIT licence; info and traj left out). tau-bench's
    README gives TC (gpt-4o) on airline pass^1..4 = 0.420, 0.273, 0.220, 0.200."""
    path = DATA / "tau_bench_gpt-4o-airline_rewards.json"
    report = await import_file(store, path, suite="tau-airline")
    assert (report.format, report.counted, report.notes) == ("tau-bench", 200, [])
    hist = (await store.reads.read_state("tau-airline")).hist
    published = [0.420, 0.273, 0.220, 0.200]
    doc = json.loads(path.read_text())
    for k in range(1, 5):
        value = estimate(hist, k, "pass^k").value
        assert value == pytest.approx(rf.tau_bench_pass_hat_k(doc, k), abs=1e-12)
        assert round(value or 0, 3) == published[k - 1]
