"""After `run --embedded`, the other commands find it: status, tasks, check, its HTTP port."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from reliabilityd.events import TrialEvent
from tests.support.embedded import SUITE, counts, embedded_run, publish


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reliabilityd", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_the_cli_finds_a_running_embedded_daemon(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RELIABILITYD_REDIS_URL"}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    datadir = tmp_path / "xdg" / "reliabilityd"  # the default data directory
    config = tmp_path / "config.toml"
    config.write_text("[daemon]\nheartbeat_ttl = 15.0\n")  # no [redis] url, as embedded configs

    with embedded_run(datadir, env) as ends:
        # The HTTP port is on by default, on loopback, and recorded for the CLI.
        recorded = json.loads((datadir / "endpoints.json").read_text())
        assert ends.http_url == f"http://127.0.0.1:{recorded['http']}"
        with urllib.request.urlopen(f"{ends.http_url}/healthz", timeout=10) as resp:
            assert json.loads(resp.read())["status"] == "ok"

        where = f"{ends.redis_url} (the embedded daemon in {datadir})"
        done = cli(env, "status")
        assert done.returncode == 0, done.stderr
        assert f"no suites yet in {where}" in done.stdout

        asyncio.run(publish(ends, [TrialEvent(SUITE, "t", str(i), "pass") for i in range(10)]))
        assert asyncio.run(counts(ends.redis_url, 10, 0)) == (10, 0)
        done = cli(env, "tasks", SUITE)
        assert done.returncode == 0, done.stderr
        assert "t     10  10" in done.stdout

        # The web UI: `ui` names the suite's page, and a browser's request gets it.
        done = cli(env, "ui", SUITE)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"{ends.http_url}/suites/{SUITE}\n"
        page = urllib.request.Request(done.stdout.strip(), headers={"Accept": "text/html"})
        with urllib.request.urlopen(page, timeout=10) as resp:
            assert resp.headers["Content-Type"].startswith("text/html")
            assert f"<h1>{SUITE}</h1>" in resp.read().decode()

        # A healthy embedded daemon is healthy to check, with or without its config.
        for argv in (["check", "-c", str(config)], ["check"]):
            done = cli(env, *argv)
            assert done.returncode == 0, done.stdout + done.stderr
            assert done.stdout.startswith("healthy: instance")

        # Missing suites: the same exit and message for status and tasks.
        for verb in ("status", "tasks"):
            done = cli(env, verb, "nobody")
            assert done.returncode == 2  # a usage error: no such suite
            assert done.stderr == f"reliabilityd: no suite named 'nobody' in {where}\n"

    # Stopped: no UI to name.
    done = cli(env, "ui")
    assert done.returncode == 1
    assert "no web UI found" in done.stderr

    # Stopped: the CLI no longer asks its Redis, and says which one it asked instead.
    done = cli(env, "check", "--redis", ends.redis_url)
    assert done.returncode == 4  # Redis unreachable, in the one exit-code table
    assert f"({ends.redis_url} (--redis))" in done.stdout
