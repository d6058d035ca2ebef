"""Inspect AI logs with errored epochs: the import says where Inspect's reducers differ, with
Inspect's own numbers; a log with no scored sample is refused naming the file and its status."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reliabilityd import estimate_metrics
from reliabilityd.importers._import import ImportFileError, import_file
from reliabilityd.store import Store


async def write_log(path: Path, rows: dict[int, str], status: str = "success") -> Any:
    """A log written by Inspect: per sample a row of C (correct), I, or E (the epoch raised)."""
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalError,
        EvalLog,
        EvalSample,
        EvalSpec,
        write_eval_log_async,
    )
    from inspect_ai.scorer import Score

    samples = []
    for i, row in rows.items():
        for epoch, mark in enumerate(row, 1):
            if mark == "E":
                error = EvalError(message="sandbox died", traceback="", traceback_ansi="")
                samples.append(
                    EvalSample(id=i, epoch=epoch, input="q", target="a", error=error, scores={})
                )
            else:
                score = {"match": Score(value=mark)}
                samples.append(EvalSample(id=i, epoch=epoch, input="q", target="a", scores=score))
    spec = EvalSpec(
        created="2026-11-30T00:00:00+00:00",
        task="gsm8k",
        dataset=EvalDataset(),
        model="mockllm/model",
        config=EvalConfig(epochs=len(next(iter(rows.values())))),
    )
    log = EvalLog(eval=spec, samples=samples, status=status)  # type: ignore[arg-type]
    await write_eval_log_async(log, str(path), format="eval")
    return log


def inspect_mean(log: Any, reducer: Any) -> float:
    """What Inspect reports: the reducer over each sample's scored epochs, NaN samples left out."""
    by_sample: dict[Any, list[Any]] = {}
    for s in log.samples:
        if s.error is None:
            by_sample.setdefault(s.id, []).append(s.scores["match"])
    values = [float(reducer(scores).value) for scores in by_sample.values()]
    kept = [v for v in values if not math.isnan(v)]
    return float(np.mean(kept))


async def test_an_errored_epoch_is_an_error_and_the_note_gives_inspects_numbers(
    store: Store, tmp_path: Path, rng: np.random.Generator
) -> None:
    from inspect_ai.scorer import pass_at, pass_k

    rows = {i: "".join("C" if rng.random() < 0.7 else "I" for _ in range(5)) for i in range(8)}
    rows[3] = rows[3][:2] + "E" + rows[3][3:]  # one epoch of sample 3 raised
    log = await write_log(tmp_path / "log.eval", rows)
    report = await import_file(store, tmp_path / "log.eval")
    assert (report.counted, report.errors) == (39, 1)
    (note,) = [n for n in report.notes if "errored" in n]
    assert note.startswith("1 errored epochs imported as errors (not in n or c): 1 of 8 samples")
    assert "UNKNOWN for k above 4" in note
    theirs_hat = inspect_mean(log, pass_k(5))
    theirs_at = inspect_mean(log, pass_at(5))
    assert f"pass^5 {theirs_hat:.3g} and pass@5 {theirs_at:.3g} over 7 of 8 samples" in note
    state = await store.reads.read_state(report.suite)
    point = estimate_metrics(state.hist, 5, ("pass^k",), with_ci=False)
    assert point["pass^k"].value is None  # UNKNOWN, as the note says
    for k in range(1, 5):  # up to the shortest sample the numbers are Inspect's
        ours = estimate_metrics(state.hist, k, ("pass^k", "pass@k"), with_ci=False)
        assert ours["pass^k"].value == pytest.approx(inspect_mean(log, pass_k(k)), rel=1e-9)
        assert ours["pass@k"].value == pytest.approx(inspect_mean(log, pass_at(k)), rel=1e-9)


async def test_a_log_with_no_scored_sample_names_the_file_and_its_status(
    store: Store, tmp_path: Path
) -> None:
    await write_log(tmp_path / "cut.eval", {0: "EE", 1: "EE"}, status="error")
    with pytest.raises(ImportFileError) as caught:
        await import_file(store, tmp_path / "cut.eval")
    message = str(caught.value)
    assert str(tmp_path / "cut.eval") in message
    assert "no scored samples (status 'error', 4 samples, 4 errored)" in message
