"""No command prints a credential: every verb, against a closed port and a wrong password.

The one function (``logs.redact``) masks URL userinfo, the values of
credential query keys and tokens in every message; what is data (a plain
link used as a task name) is printed as it is.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reliabilityd.cli._main import main
from tests.support.servers import Mosquitto, PasswordRedis, free_port

SECRET = "Sekr1t-PW"
RULES = '[[alerts]]\nname = "r"\nsuite = "*"\nk = 1\nbelow = 0.5\ntrigger = "ci-low"\n'


def every_verb(redis: str, mqtt: str, tmp_path: Path) -> dict[str, list[str]]:
    """Each verb that takes an address, given ``redis`` and ``mqtt`` (and a config naming both)."""
    rules = tmp_path / "rules.toml"
    rules.write_text(RULES)
    named = tmp_path / "named.toml"
    named.write_text(
        f'external_url = "https://ui:{SECRET}@rel.example.com/?token={SECRET}"\n'
        f'[redis]\nurl = "{redis}"\n[mqtt]\nurl = "{mqtt}"\n'
    )
    events = tmp_path / "events.jsonl"
    events.write_text('{"suite": "s", "task": "t", "trial": "1", "outcome": "pass"}\n')
    r = ["--redis", redis]
    return {
        "status": ["status", *r],
        "status-config": ["status", "-c", str(named)],
        "cases": ["cases", "s", *r],
        "tasks": ["tasks", "s", *r],
        "reset": ["reset", "s", "--yes", *r],
        "forget": ["forget", "s", "t", "--yes", *r],
        "forecast": ["forecast", "-c", str(rules), *r],
        "rejected": ["rejected", *r],
        "check": ["check", *r],
        "import": ["import", str(events), *r],
        "compare": ["compare", "a", "b", *r],
        "gate": ["gate", "s", "--at-least", "0.5", *r],
        "history": ["history", "s", *r],
        "emit": ["emit", "s", "t", "pass", "--mqtt", mqtt, "--timeout", "1"],
        "emit-config": ["emit", "s", "t", "pass", "-c", str(named), "--timeout", "1"],
        "endpoints": ["endpoints", "-c", str(named)],
        "ui": ["ui", "-c", str(named)],
    }


# What each verb answers when the address does not work: 4 for Redis or the
# broker unreachable; the ones that only name addresses succeed.
EXPECTED = {"endpoints": 0, "ui": 0}


def run_every_verb(
    capsys: pytest.CaptureFixture[str], redis: str, mqtt: str, tmp_path: Path
) -> dict[str, tuple[int, str]]:
    said = {}
    for name, argv in every_verb(redis, mqtt, tmp_path).items():
        code = main(argv)
        out = capsys.readouterr()
        said[name] = (code, out.out + out.err)
    return said


def assert_masked(said: dict[str, tuple[int, str]], redis_shown: str, mqtt_shown: str) -> None:
    for name, (code, text) in said.items():
        assert SECRET not in text, (name, text)
        assert code == EXPECTED.get(name, 4), (name, code, text)
        if name.startswith("emit"):
            assert mqtt_shown in text, (name, text)  # the broker it tried, masked
        elif name != "ui":
            assert redis_shown in text, (name, text)  # the Redis it asked, masked
    assert said["ui"][1] == "https://***@rel.example.com/?token=***\n"


@pytest.mark.parametrize("form", ["userinfo", "query"])
def test_no_verb_prints_a_secret_of_a_closed_port(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    redis_port, mqtt_port = free_port(), free_port()
    if form == "userinfo":
        redis = f"redis://:{SECRET}@127.0.0.1:{redis_port}/0"
        shown = f"redis://***@127.0.0.1:{redis_port}/0"
    else:
        redis = f"redis://127.0.0.1:{redis_port}/0?password={SECRET}&socket_keepalive=true"
        shown = f"redis://127.0.0.1:{redis_port}/0?password=***&socket_keepalive=true"
    mqtt = f"mqtt://agent:{SECRET}@127.0.0.1:{mqtt_port}"
    said = run_every_verb(capsys, redis, mqtt, tmp_path)
    # The same URLs from the environment.
    monkeypatch.setenv("RELIABILITYD_REDIS_URL", redis)
    monkeypatch.setenv("RELIABILITYD_MQTT_URL", mqtt)
    for verb in (["status"], ["emit", "s", "t", "pass", "--timeout", "1"]):
        code = main(verb)
        out = capsys.readouterr()
        said[f"{verb[0]}-env"] = (code, out.out + out.err)
    assert_masked(said, shown, f"mqtt://***@127.0.0.1:{mqtt_port}")
    assert "($RELIABILITYD_REDIS_URL)" in said["status-env"][1]


def test_no_verb_prints_a_wrong_password(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    password_redis: PasswordRedis,
    password_broker: Mosquitto,
) -> None:
    redis = f"redis://:{SECRET}@127.0.0.1:{password_redis.port}/0"
    mqtt = f"mqtt://agent:{SECRET}@127.0.0.1:{password_broker.port}"
    said = run_every_verb(capsys, redis, mqtt, tmp_path)
    assert_masked(
        said,
        f"redis://***@127.0.0.1:{password_redis.port}/0",
        f"mqtt://***@127.0.0.1:{password_broker.port}",
    )
    # The servers said why: a wrong password, not a closed port.
    assert "invalid username-password pair" in said["status"][1]
    assert "the broker refused the connection" in said["emit"][1]


def test_the_daemon_logs_no_secret_of_the_servers_it_cannot_use(
    tmp_path: Path, password_redis: PasswordRedis, password_broker: Mosquitto
) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[redis]\nurl = "redis://:{SECRET}@127.0.0.1:{password_redis.port}/0"\n'
        f'[mqtt]\nurl = "mqtt://agent:{SECRET}@127.0.0.1:{password_broker.port}"\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "reliabilityd", "run", "-c", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    try:
        # Wait for the refusals of both: what they log is what is checked.
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            text = "".join(lines)
            if "invalid username-password pair" in text and "refused" in text:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    text = "".join(lines) + out + err
    assert "invalid username-password pair" in text, text  # Redis refused the password
    assert "refused" in text, text  # and so did the broker
    assert SECRET not in text, text


def test_a_link_is_data_and_stays_as_it_is(
    capsys: pytest.CaptureFixture[str], password_redis: PasswordRedis, tmp_path: Path
) -> None:
    redis = f"redis://:{PasswordRedis.password}@127.0.0.1:{password_redis.port}/0"
    link = "https://ci.example.com/runs/42?attempt=3&task=basic"
    events = tmp_path / "events.jsonl"
    events.write_text('{"suite": "s", "task": "t", "trial": "1", "outcome": "pass"}\n')
    assert main(["import", str(events), "--redis", redis]) == 0
    capsys.readouterr()
    assert main(["forget", "s", link, "--yes", "--redis", redis]) == 1
    err = capsys.readouterr().err
    # The task name whole, the Redis asked without its password.
    assert err == (
        f"reliabilityd: suite 's' has no task {link!r} in "
        f"redis://***@127.0.0.1:{password_redis.port}/0 (--redis)\n"
    )
