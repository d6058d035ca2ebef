"""After `run --embedded`, every command and client finds it: Redis, the broker, its HTTP port.

Each runs with a private ``XDG_DATA_HOME`` and no ``RELIABILITYD_*_URL`` in
its environment, so the running daemon's ``endpoints.json`` is the only way
to the servers: a verb that asked anything else would find no suite there.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import msgspec
import pytest

from reliabilityd import AsyncClient, Client, Emitter
from reliabilityd.client import EmitterError, StoreUnavailable
from reliabilityd.events import TrialEvent
from reliabilityd.locate import Located
from tests.support.embedded import (
    LOCATING,
    SUITE,
    cli,
    counts,
    embedded_run,
    private_env,
    publish,
)


def test_the_cli_finds_a_running_embedded_daemon(tmp_path: Path) -> None:
    env, datadir = private_env(tmp_path)
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

        # Missing suites: the same exit and message for every verb that names one.
        for argv in (
            ["status", "nobody"],
            ["tasks", "nobody"],
            ["cases", "nobody"],
            ["forget", "nobody", "t", "--yes"],
            ["history", "nobody"],
            ["compare", "nobody", SUITE],
            ["gate", "nobody", "--at-least", "0.5"],
        ):
            done = cli(env, *argv)
            assert done.returncode == 2, argv  # a usage error: no such suite
            assert done.stderr == f"reliabilityd: no suite named 'nobody' in {where}\n", argv

    # Stopped: no UI to name.
    done = cli(env, "ui")
    assert done.returncode == 1
    assert f"no web UI found: no running embedded daemon in {datadir}" in done.stderr

    # Stopped: the CLI no longer asks its Redis, and says which one it asked instead.
    done = cli(env, "check", "--redis", ends.redis_url)
    assert done.returncode == 4  # Redis unreachable, in the one exit-code table
    assert f"({ends.redis_url} (--redis))" in done.stdout


RULES = """
[[alerts]]
name = "found"
suite = "embedded-*"
k = 1
below = 0.5
trigger = "ci-low"
"""


@pytest.mark.timeout(240)
def test_every_verb_and_client_finds_the_running_embedded_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, datadir = private_env(tmp_path)
    # The clients run in this process: the same private environment for them.
    for var in LOCATING:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", env["XDG_DATA_HOME"])
    rules = tmp_path / "rules.toml"  # no [redis] or [mqtt] url: the daemon is found, not named
    rules.write_text(RULES)
    events = tmp_path / "events.jsonl"
    events.write_bytes(
        b"\n".join(
            msgspec.json.encode(TrialEvent(SUITE, f"t{i % 2}", f"file-{i}", "pass"))
            for i in range(5)
        )
    )

    with embedded_run(datadir, env) as ends:
        source = f"the embedded daemon in {datadir}"
        mqtt_url = f"mqtt://127.0.0.1:{ends.mqtt_port}"
        redis_at = Located(ends.redis_url, source)
        broker_at = Located(mqtt_url, source)

        done = cli(env, "endpoints")
        assert done.returncode == 0, done.stderr
        assert done.stdout == (
            f"redis  {redis_at}\nmqtt   {broker_at}\nhttp   {Located(ends.http_url, source)}\n"
        )
        assert cli(env, "endpoints", "mqtt").stdout == f"{mqtt_url}\n"

        # Trials in: one by `emit`, four by Emitter(), five by `import`.
        done = cli(env, "emit", SUITE, "t0", "pass", "--trial", "cli-0")
        assert (done.returncode, done.stdout) == (0, "cli-0\n"), done.stderr
        with Emitter() as emitter:
            assert emitter.where == broker_at
            for i in range(4):
                emitter.emit(SUITE, f"t{i % 2}", "pass", trial=f"py-{i}")
        done = cli(env, "import", str(events))
        assert done.returncode == 0, done.stderr
        assert asyncio.run(counts(ends.redis_url, 10, 0)) == (10, 0)

        # Reads: Client(), AsyncClient() and every query verb.
        with Client() as rel:
            assert rel.where == redis_at
            assert rel.tasks(SUITE) == {"t0": (6, 6), "t1": (4, 4)}

        async def read() -> tuple[Located, dict[str, tuple[int, int]]]:
            async with AsyncClient() as rel:
                return rel.where, await rel.tasks(SUITE)

        assert asyncio.run(read()) == (redis_at, {"t0": (6, 6), "t1": (4, 4)})
        expected = {
            ("status", SUITE): (0, f"{SUITE}  2      10"),
            ("tasks", SUITE): (0, "t0    6  6"),
            ("cases", SUITE, "--k", "1"): (0, f"no lottery cases at k=1 in {SUITE!r}"),
            ("history", SUITE): (0, f"of {SUITE!r}"),
            ("compare", SUITE, SUITE, "--k", "1", "--min-shared", "2"): (0, "2 shared"),
            ("gate", SUITE, "--k", "1", "--at-least", "0.01"): (0, f"pass: pass^1 of {SUITE!r}"),
            ("rejected",): (0, f"no dead letters in the last 1h in {redis_at}"),
            # The suite's data read; a window of 0 leaves nothing to simulate.
            ("forecast", SUITE, "-c", str(rules), "--hours", "0.5"): (0, f"{SUITE}  found: "),
            ("check",): (0, "healthy"),
            ("ui",): (0, ends.http_url),
            ("forget", SUITE, "t1", "--yes"): (0, "forgot task 't1'"),
            ("reset", SUITE, "--yes"): (0, "keys deleted"),
        }
        for argv, (code, shown) in expected.items():
            done = cli(env, *argv)
            assert done.returncode == code, (argv, done.stdout, done.stderr)
            assert shown in done.stdout, (argv, done.stdout)
        assert asyncio.run(read())[1] == {}

    # Stopped: whatever is given the old addresses cannot reach them, and says so.
    with Client(ends.redis_url) as rel, pytest.raises(StoreUnavailable) as err:
        rel.suites()
    assert str(err.value).startswith(
        f"cannot reach Redis at {ends.redis_url} (given to the client): "
    )
    with pytest.raises(EmitterError) as failed:
        Emitter(mqtt_url, connect_timeout=1).start()
    assert f"{mqtt_url} (given to the Emitter)" in str(failed.value)
    done = cli(env, "emit", SUITE, "t0", "pass", "--mqtt", mqtt_url, "--timeout", "1")
    assert done.returncode == 4
    assert f"{mqtt_url} (--mqtt)" in done.stderr
