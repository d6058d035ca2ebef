"""compare, gate and the command line's exit-code table, against a real redis-server."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from reliabilityd import Client, Comparison, Side, compare, estimate
from reliabilityd.cli._common import (
    EXIT_FAIL,
    EXIT_OK,
    EXIT_UNDECIDED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from reliabilityd.cli._main import main
from reliabilityd.config import Config, MqttConfig, RedisConfig
from reliabilityd.daemon._check import UNREACHABLE
from reliabilityd.events import TrialEvent
from reliabilityd.store import Store, connect
from tests.support.helpers import toml_of
from tests.support.servers import RedisServer


def events(suite: str, passes: dict[str, tuple[int, int]]) -> list[TrialEvent]:
    return [
        TrialEvent(suite, task, f"run-{r}", "pass" if r < c else "fail")
        for task, (n, c) in passes.items()
        for r in range(n)
    ]


def store_suites(url: str, prefix: str, suites: dict[str, dict[str, tuple[int, int]]]) -> None:
    async def go() -> None:
        client = connect(url)
        try:
            await Store(client, prefix).ingest.apply(
                {s: events(s, p) for s, p in suites.items()}, windows={}, dedup_ttl=3600
            )
        finally:
            await client.aclose()

    asyncio.run(go())


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# 60 tasks of 10 trials: the baseline passes 9 or 10 of each, the candidate
# loses 5 passes on every fifth task; "tiny" shares 6 tasks only.
OLD = {f"task {i:02d}": (10, 10 if i % 2 else 9) for i in range(60)}
NEW = {t: (n, c - 5) if i % 5 == 0 else (n, c) for i, (t, (n, c)) in enumerate(OLD.items())}
NEW["task 99"] = (10, 10)
PERFECT = {f"task {i:03d}": (10, 10) for i in range(400)}
POOR = {f"task {i:02d}": (10, 3) for i in range(60)}
TINY = {f"task {i:02d}": (10, 9) for i in range(6)}
SHORT = {t: (3, 3) for t in OLD}


@pytest.fixture
def where(redis_server: RedisServer, prefix: str) -> list[str]:
    store_suites(
        redis_server.url,
        prefix,
        {
            "old": OLD,
            "new": NEW,
            "perfect": PERFECT,
            "poor": POOR,
            "tiny": TINY,
            "short": SHORT,
        },
    )
    return ["--redis", redis_server.url, "--prefix", prefix]


def test_client_compare_matches_the_pure_comparison(
    redis_server: RedisServer, prefix: str, where: list[str]
) -> None:
    with Client(redis_server.url, prefix=prefix) as rel:
        got = rel.compare("old", Side("new"), 5, "pass@k", seed=3)
    assert got == compare(OLD, NEW, 5, "pass@k", seed=3, names=("old", "new"))
    assert (got.shared, got.only_baseline, got.only_candidate) == (60, 0, 1)
    assert got.difference("pass^k").direction == "worse"
    assert got.worse()[0].candidate_c == 4


def test_compare_prints_both_metrics_and_the_moved_tasks(
    capsys: pytest.CaptureFixture[str], where: list[str]
) -> None:
    code, out, _ = cli(capsys, "compare", "old", "new", "--k", "5", *where)
    assert code == EXIT_OK
    assert "60 shared tasks (0 only in 'old', 1 only in 'new')" in out
    assert "pass^5" in out
    assert "pass@5" in out
    assert "worse" in out
    assert "task 05  10/10 -> 5/10  100.0% -> 0.4% (-99.6 pp)" in out
    code, out, _ = cli(capsys, "compare", "old", "new", "--json", "--metric", "pass@k", *where)
    assert code == EXIT_OK
    doc = msgspec.json.decode(out, type=Comparison)
    assert doc.metric == "pass@k"
    assert doc.k == 5  # the largest configured k
    assert set(doc.differences) == {"pass@k", "pass^k"}


def test_compare_is_unknown_or_a_usage_error(
    capsys: pytest.CaptureFixture[str], where: list[str]
) -> None:
    code, out, _ = cli(capsys, "compare", "old", "tiny", *where)
    assert code == EXIT_UNDECIDED
    assert "share 6 tasks" in out
    code, out, _ = cli(capsys, "compare", "old", "short", "--k", "5", *where)
    assert code == EXIT_UNDECIDED
    assert "does not extrapolate" in out
    code, _, err = cli(capsys, "compare", "old", "nope", *where)
    assert code == EXIT_USAGE
    assert "no suite named 'nope'" in err


def test_gate_at_least(capsys: pytest.CaptureFixture[str], where: list[str]) -> None:
    code, out, _ = cli(capsys, "gate", "perfect", "--at-least", "0.9", *where)
    assert code == EXIT_OK
    assert out.startswith("pass: pass^5 of 'perfect'")
    code, out, _ = cli(capsys, "gate", "poor", "--metric", "pass^k", "--at-least", "0.5", *where)
    assert code == EXIT_FAIL
    assert out.startswith("fail:")
    # The value itself sits between the bounds: not decided yet.
    value = estimate(list(OLD.values()), 5).value
    assert value is not None
    code, out, _ = cli(capsys, "gate", "old", "--at-least", f"{value:.3f}", "--json", *where)
    assert code == EXIT_UNDECIDED
    doc = json.loads(out)
    assert doc["verdict"] == "undecided"
    assert doc["exit_code"] == EXIT_UNDECIDED
    assert doc["estimate"]["ci"][0] < value < doc["estimate"]["ci"][1]
    code, out, _ = cli(capsys, "gate", "short", "--k", "5", "--at-least", "0.1", *where)
    assert code == EXIT_UNDECIDED
    assert "UNKNOWN" in out


def test_gate_compare(capsys: pytest.CaptureFixture[str], where: list[str]) -> None:
    code, out, _ = cli(capsys, "gate", "new", "--compare", "old", "--k", "1", *where)
    assert code == EXIT_FAIL, out
    assert out.startswith("fail: 'new' must not be worse than 'old' by more than 0.0 pp")
    code, out, _ = cli(
        capsys, "gate", "old", "--compare", "old", "--margin", "0.2", "--json", *where
    )
    assert code == EXIT_OK, out
    doc = json.loads(out)
    assert doc["verdict"] == "pass"
    assert doc["comparison"]["differences"]["pass^k"]["value"] == 0.0
    # Identical sides, no margin: never "fail", but the bound cannot reach 0 either.
    code, _, _ = cli(capsys, "gate", "old", "--compare", "old", *where)
    assert code == EXIT_UNDECIDED
    code, _, _ = cli(capsys, "gate", "tiny", "--compare", "old", "--margin", "0.5", *where)
    assert code == EXIT_UNDECIDED


def test_compare_and_gate_compare_judge_on_student_and_a_one_side_gate_refuses_it(
    capsys: pytest.CaptureFixture[str], where: list[str]
) -> None:
    code, out, _ = cli(
        capsys, "compare", "old", "new", "--k", "1", "--interval", "student", "--json", *where
    )
    assert code == EXIT_OK
    doc = msgspec.json.decode(out, type=Comparison)
    assert doc == compare(OLD, NEW, 1, interval="student", names=("old", "new"))
    assert doc.differences["pass^k"].interval == "student"
    assert doc.differences["pass^k"].method == "student-t"
    code, out, _ = cli(
        capsys, "gate", "new", "--compare", "old", "--k", "1", "--interval", "student", *where
    )
    assert code == EXIT_FAIL, out
    code, _, err = cli(
        capsys, "gate", "perfect", "--at-least", "0.9", "--interval", "student", *where
    )
    assert code == EXIT_USAGE
    assert "needs two sides" in err


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reliabilityd", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_exit_code_table_from_real_commands(where: list[str], tmp_path: Path) -> None:
    """0 pass, 1 fail, 2 usage, 3 undecided, 4 unreachable: as a user's shell sees them."""
    assert run("gate", "perfect", "--at-least", "0.9", *where).returncode == EXIT_OK
    assert run("gate", "poor", "--at-least", "0.5", *where).returncode == EXIT_FAIL
    assert run("gate", "perfect", *where).returncode == EXIT_USAGE  # neither test given
    assert run("gate", "perfect", "--at-least", "2", *where).returncode == EXIT_USAGE
    bad = tmp_path / "bad.toml"
    bad.write_text("[stats]\nk = 0\n")
    assert run("gate", "perfect", "--at-least", "0.9", "-c", str(bad)).returncode == EXIT_USAGE
    assert run("gate", "tiny", "--compare", "old", *where).returncode == EXIT_UNDECIDED
    down = ["--redis", f"redis://127.0.0.1:{closed_port()}/0"]
    proc = run("gate", "perfect", "--at-least", "0.9", *down)
    assert proc.returncode == EXIT_UNREACHABLE, proc.stderr
    assert "Redis at" in proc.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["tasks", "old"],
        ["cases", "old"],
        ["compare", "old", "new"],
        ["gate", "new", "--compare", "old"],
        ["import", "tests/data/tau_bench_results.json"],
    ],
    ids=lambda argv: argv[0] if argv[0] != "gate" else "gate-compare",
)
def test_redis_unreachable_is_4(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = cli(capsys, *argv, "--redis", f"redis://127.0.0.1:{closed_port()}/0")
    assert code == EXIT_UNREACHABLE, err
    assert "127.0.0.1" in err


def test_broker_unreachable_is_4(capsys: pytest.CaptureFixture[str]) -> None:
    mqtt = f"mqtt://127.0.0.1:{closed_port()}"
    code, _, err = cli(capsys, "emit", "s", "t", "pass", "--mqtt", mqtt, "--timeout", "2")
    assert code == EXIT_UNREACHABLE, err
    code, _, err = cli(capsys, "emit", "s", "t", "pass", "--mqtt", "http://nowhere")
    assert code == EXIT_USAGE, err


def test_check_says_4_when_redis_is_unreachable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert UNREACHABLE == EXIT_UNREACHABLE
    cfg = Config(
        redis=RedisConfig(url=f"redis://127.0.0.1:{closed_port()}/0"),
        mqtt=MqttConfig(enabled=False),
    )
    path = tmp_path / "c.toml"
    path.write_bytes(toml_of(cfg))
    code, out, _ = cli(capsys, "check", "-c", str(path))
    assert code == EXIT_UNREACHABLE
    assert "Redis unusable" in out


def test_gate_looks_judges_each_look_at_the_spread_confidence(
    capsys: pytest.CaptureFixture[str], where: list[str]
) -> None:
    code, out, _ = cli(capsys, "gate", "old", "--at-least", "0.1", "--json", *where)
    one = json.loads(out)
    code, out, _ = cli(
        capsys, "gate", "old", "--at-least", "0.1", "--looks", "10", "--json", *where
    )
    ten = json.loads(out)
    assert (one["looks"], ten["looks"]) == (1, 10)
    assert ten["estimate"]["confidence"] == pytest.approx(1 - 0.05 / 10)
    # A wider interval at each of ten looks: its lower bound is lower.
    assert ten["estimate"]["ci"][0] < one["estimate"]["ci"][0]
    code, out, _ = cli(capsys, "gate", "old", "--at-least", "0.1", "--looks", "10", *where)
    assert code == ten["exit_code"]
    assert "one of at most 10 looks: each judged at 99.50% confidence" in out
    code, out, _ = cli(capsys, "gate", "new", "--compare", "old", "--looks", "4", "--json", *where)
    assert code == json.loads(out)["exit_code"]
    assert json.loads(out)["comparison"]["differences"]["pass^k"]["confidence"] == 0.9875
