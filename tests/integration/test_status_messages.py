"""status, cases and tasks say what they mean: RUNS, the k=1 lottery, a missing suite."""

from __future__ import annotations

import pytest

from reliabilityd.events import TrialEvent
from tests.support.query import apply, cli, config_for
from tests.support.servers import RedisServer


def test_the_k1_lottery_message_and_the_runs_footnote(
    redis_server: RedisServer, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config_for(redis_server, prefix)
    # Two tasks pass only sometimes, one always.
    events = [
        TrialEvent("s", task, str(r), "pass" if r < c else "fail")
        for task, c in (("half", 2), ("most", 3), ("all", 4))
        for r in range(4)
    ]
    apply(cfg, events)
    where = ["--redis", redis_server.url, "--prefix", prefix]
    code, out, _ = cli(capsys, "cases", "s", "--k", "1", *where)
    assert code == 0
    assert "at k=1 pass@k and pass^k are equal, so no task can be one; try --k 2" in out
    assert "passes only sometimes" not in out
    code, out, _ = cli(capsys, "cases", "s", "--k", "2", *where)
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["half", "most"]

    code, out, _ = cli(capsys, "status", "--k", "2", *where)
    assert code == 0
    assert "RUNS" in out.splitlines()[0]
    assert "(RUNS: the fewest trials among the tasks estimated at that k" in out


def test_status_and_tasks_on_a_missing_suite_exit_alike(
    redis_server: RedisServer, prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    where = ["--redis", redis_server.url, "--prefix", prefix]
    said = (
        f"reliabilityd: no suite named 'nope' in {redis_server.url} (--redis, prefix {prefix!r})\n"
    )
    for verb in ("status", "tasks"):
        code, out, err = cli(capsys, verb, "nope", *where)
        assert (code, out, err) == (2, "", said)  # a usage error, as the exit-code table says
    code, out, _ = cli(capsys, "status", *where)
    assert code == 0
    assert out == (
        f"no suites yet in {redis_server.url} (--redis, prefix {prefix!r}): nothing has been "
        "counted there under this prefix\n"
    )
