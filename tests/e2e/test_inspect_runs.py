"""Two live ``inspect eval`` runs of one task, kept apart: both listed by ``runs``, one
compared with the other by ``compare --run A --run B``, and each sample epoch's link to
Inspect's log viewer in ``trials``; a real daemon, redis-server and mosquitto."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from urllib.parse import quote

import msgspec
import pytest

from reliabilityd.config import StatsConfig
from reliabilityd.store import RunSummary
from tests.e2e.test_inspect_live import SUITE, final_snapshot, start_eval, watch
from tests.support.daemon import make_config, running
from tests.support.servers import Mosquitto, RedisServer

VIEWER = "http://127.0.0.1:7575/"


async def cli(*argv: str) -> str:
    """``reliabilityd ARGV`` as a user runs it; its output, once it exits 0."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "reliabilityd",
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, (argv, out.decode(), err.decode())
    return out.decode()


@pytest.mark.timeout(240)
async def test_two_evals_are_two_runs_compared_and_linked_epoch_by_epoch(
    redis_server: RedisServer,
    mosquitto: Mosquitto,
    prefix: str,
    tmp_path: Path,
) -> None:
    from inspect_ai.log import read_eval_log_async

    stats = StatsConfig(k=[1, 2], ci_interval=0.3, n_boot=500, url_base=VIEWER)
    cfg = make_config(
        redis_url=redis_server.url, mqtt_url=mosquitto.url, prefix=prefix, stats=stats
    )
    config_file = tmp_path / "reliabilityd.toml"
    config_file.write_text(
        f'[redis]\nurl = "{redis_server.url}"\nprefix = "{prefix}"\n'
        f'[stats]\nurl_base = "{VIEWER}"\n'
    )
    where = ["-c", str(config_file)]
    logs: list[Path] = []
    async with running(cfg) as daemon:
        # Two evals of one task and model (a change between them: another seed), one
        # after the other: both land in the suite <task>@<model>.
        for n, seed in enumerate((1, 2)):
            home = tmp_path / f"eval{n}"
            home.mkdir()
            run = await start_eval(
                home, mosquitto, prefix, ["samples=10", "epochs=3", "delay=0.05", f"seed={seed}"]
            )
            await watch(daemon, run)
            logs.append(run.log_path())
            await final_snapshot(daemon, 30 * (n + 1))
    headers = [await read_eval_log_async(str(p), header_only=True) for p in logs]
    first, second = (h.eval.eval_id for h in headers)

    # Both runs listed, each with its own 30 trials over the same 10 tasks.
    listed = msgspec.json.decode(await cli("runs", SUITE, "--json", *where), type=list[RunSummary])
    assert {(r.run, r.tasks, r.trials) for r in listed} == {(first, 10, 30), (second, 10, 30)}
    table = await cli("runs", SUITE, *where)
    print(table)
    assert table.splitlines()[0].split()[0] == "RUN"
    assert {line.split()[0] for line in table.splitlines()[1:3]} == {first, second}

    # One run against the other: the paired comparison over their 10 shared tasks.
    argv = ["compare", SUITE, "--run", first, "--run", second, "--k", "1", "--min-shared", "5"]
    out = await cli(*argv, *where)
    print(out)
    assert f"'{SUITE} (run {second})' against '{SUITE} (run {first})', k=1: 10 shared tasks" in out
    cmp = msgspec.json.decode(await cli(*argv, "--json", *where))
    passes = {r.run: r.passes for r in listed}
    # pass^1 of each side is its passes over its trials (3 epochs of each of 10 tasks).
    diff = cmp["differences"]["pass^k"]
    assert diff["baseline"] == pytest.approx(passes[first] / 30)
    assert diff["candidate"] == pytest.approx(passes[second] / 30)

    # Each sample epoch's link: the viewer's route to that sample's epoch in its log
    # (a trial id is <eval_id>/<epoch>, unique within its task).
    rows = msgspec.json.decode(await cli("trials", SUITE, "--json", "--limit", "100", *where))
    links = {(r["task"], r["trial"]): (r["run"], r["url"]) for r in rows}
    want = {}
    for header, path in zip(headers, logs, strict=True):
        log = quote(path.name, safe="/")  # the viewer decodes each part of its route
        eval_id = header.eval.eval_id
        for sample in range(10):
            for epoch in (1, 2, 3):
                want[(str(sample), f"{eval_id}/{epoch}")] = (
                    eval_id,
                    f"{VIEWER}#/logs/{log}/samples/sample/{sample}/{epoch}/",
                )
    assert links == want
    print(await cli("trials", SUITE, "3", *where))
