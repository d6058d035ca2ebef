"""A result file's format told from a bounded prefix: a large file of no format is refused
without being read whole, and a large file of each harness is told from its first bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reliabilityd.importers import ImportFileError, detect, read
from reliabilityd.importers._detect import DETECT_BYTES, detect_head
from tests.support import result_files as rf


def _bytes_read() -> int:
    """Bytes this process has read through read(2) so far (Linux: /proc/self/io ``rchar``)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.mark.parametrize(
    "shape",
    [
        (b'{"notes": "', b"x", b'"}'),  # one long string in an object
        (b"[", b"1,", b"1]"),  # a list of numbers
        (b'[{"id": "', b"y", b'"}]'),  # a list whose first element never ends in the prefix
        (b'{"a": [', b"[1],", b"[]]}"),  # an object of no format's keys, nested
    ],
)
def test_a_large_file_of_no_format_is_refused_from_its_prefix(
    tmp_path: Path, shape: tuple[bytes, bytes, bytes]
) -> None:
    head, fill, tail = shape
    path = tmp_path / "one-line.json"
    size = 8 << 20  # 8 MiB on one line: read whole, far past the bound below
    with path.open("wb") as out:
        out.write(head)
        block = fill * ((1 << 20) // len(fill))
        for _ in range(size // len(block)):
            out.write(block)
        out.write(tail)
    before = _bytes_read()
    with pytest.raises(ImportFileError, match="cannot tell the format"):
        read(path)
    spent = _bytes_read() - before
    print(f"{path.stat().st_size} B file: {spent} B read to refuse it")
    assert spent <= DETECT_BYTES + (256 << 10)


def test_a_large_file_that_is_not_json_is_refused_from_its_first_bytes(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(b"2026-12-01 INFO started\n" * 200_000)
    with pytest.raises(ImportFileError, match=r"not JSON .* starts with b'2026-12-01 INFO"):
        read(path)


def _big_tau2(rng: np.random.Generator) -> Any:
    doc = rf.tau2_doc({str(t): ["pass", "fail", "infra", "pass"][t % 3 :] for t in range(300)})
    for sim in doc["simulations"]:  # a conversation per run, as tau2-bench keeps them
        sim["messages"] = [{"role": "user", "content": "x" * 2000}]
    return doc


def _big_tau(rng: np.random.Generator) -> Any:
    doc = rf.tau_bench_doc({str(t): ["pass", "fail"] for t in range(400)})
    for run in doc:
        run["traj"] = [{"role": "assistant", "content": "y" * 3000}]
    return doc


def _big_multivon(rng: np.random.Generator) -> Any:
    cases = [rf.multivon_case("z" * 3000, 3, int(rng.integers(0, 4))) for _ in range(400)]
    return rf.multivon_doc(cases, "deploy", "gpt-4o")


@pytest.mark.parametrize(
    ("build", "fmt"),
    [(_big_tau, "tau-bench"), (_big_tau2, "tau2-bench"), (_big_multivon, "multivon")],
)
def test_a_large_file_of_each_format_is_told_from_its_prefix_and_read_whole(
    tmp_path: Path, rng: np.random.Generator, build: Any, fmt: str
) -> None:
    doc = build(rng)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    assert path.stat().st_size > DETECT_BYTES
    assert detect(doc) == fmt
    assert detect_head(path.read_bytes()[:DETECT_BYTES]) == fmt
    parsed = read(path)
    assert parsed.format == fmt
    assert parsed == read(path, fmt)  # the same trials as with the format named


async def test_an_inspect_log_is_told_from_its_first_bytes(tmp_path: Path) -> None:
    from inspect_ai.log import EvalConfig, EvalDataset, EvalLog, EvalSpec, write_eval_log_async

    spec = EvalSpec(
        created="2026-11-30T00:00:00+00:00",
        task="inspect_evals/gsm8k",
        dataset=EvalDataset(),
        model="openai/gpt-4o",
        config=EvalConfig(epochs=1),
    )
    path = tmp_path / "log.json"
    await write_eval_log_async(EvalLog(eval=spec, status="success"), str(path), format="json")
    head = path.read_bytes()
    assert detect(json.loads(head)) == "inspect"
    assert detect_head(head[: head.index(b'"task"') + 40]) == "inspect"


@pytest.mark.parametrize(
    ("head", "fmt"),
    [
        (
            b'[{"task_id": 3, "trial": 0, "reward": 1.0, "info": {"x": "',
            "tau-bench",
        ),  # cut in a run
        (b'  {"timestamp": "t", "info": {"git_commit": "a", "num_trials": 4, "p": "', "tau2-bench"),
        (b'{"tasks": [{"id": "1"}], "simulations": [{"task_id": "', "tau2-bench"),
        (b'{"version": 2, "eval": {"eval_id": "e", "task": "gsm8k", "dataset": {"', "inspect"),
        (b'{"suite": "s", "summary": {"total": 3}, "cases": [{"input": "', "multivon"),
    ],
)
def test_each_format_is_told_from_a_prefix_that_ends_anywhere(head: bytes, fmt: str) -> None:
    assert detect_head(head) == fmt


@pytest.mark.parametrize(
    "head",
    [
        b'[{"task_id": 3, "reward": 1.0}, {"trial": 0',  # the first run lacks a key
        b'{"info": {"git_commit": "a"}, "other": {"num_trials": 4',  # num_trials not in info
        b'{"eval": "gsm8k", "task": "x"',  # eval is no object
        b'{"cases": {"a": 1}, "x": "',  # cases is no list
        b'{"nested": {"simulations": [], "eval": {"task": 1}}, "more": "',  # not at the top
        b'{"escaped \\" key": 1, "x": "',
    ],
)
def test_a_prefix_without_a_formats_keys_cannot_tell(head: bytes) -> None:
    with pytest.raises(ImportFileError, match="cannot tell the format"):
        detect_head(head)
