"""Drive `reliabilityd run --embedded` and the demo as a user does: a process, its output."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiomqtt
import msgspec
import redis.asyncio as aioredis

from reliabilityd.events import TrialEvent
from reliabilityd.store import Store

ENDPOINTS = re.compile(
    r"agents publish to\s+mqtt://127\.0\.0\.1:(\d+)\s.*\(MQTT ([0-9.]+), QoS 1; (.+)\)"
)
REDIS = re.compile(r"Redis is at\s+(redis://127\.0\.0\.1:(\d+)/0)\s+\((.+)\)")
HTTP = re.compile(r"HTTP is at\s+(http://127\.0\.0\.1:\d+)\s")


@dataclass
class Endpoints:
    mqtt_port: int
    protocol: str
    broker: str
    redis_url: str
    redis_port: int
    redis: str
    http_url: str


LOCATING = ("RELIABILITYD_REDIS_URL", "RELIABILITYD_MQTT_URL")


def private_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """(an environment, the default data directory in it): a private ``XDG_DATA_HOME``.

    Nothing in it names Redis or the broker, so the commands find the daemon
    ``embedded_run`` starts there, and no test touches the user's data directory.
    """
    env = {k: v for k, v in os.environ.items() if k not in LOCATING}
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    return env, tmp_path / "xdg" / "reliabilityd"


def cli(env: dict[str, str], *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``reliabilityd ARGV`` as a person runs it, in ``env``; never raises on its exit code."""
    return subprocess.run(
        [sys.executable, "-m", "reliabilityd", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def broken_system_servers(tmp_path: Path) -> dict[str, str]:
    """An environment whose redis-server and mosquitto exist but do not run."""
    stubs = tmp_path / "stubs"
    stubs.mkdir(exist_ok=True)
    for name in ("redis-server", "mosquitto"):
        stub = stubs / name
        stub.write_text("#!/bin/sh\necho 'cannot run here' >&2\nexit 1\n")
        stub.chmod(0o755)
    return {**os.environ, "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}"}


def processes_in(datadir: Path) -> list[str]:
    """Processes (pid and command) that work in or name the data directory (Linux /proc)."""
    found = []
    needle = str(datadir.resolve())
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cwd = os.readlink(proc / "cwd")
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if cwd.startswith(needle) or needle in cmd:
                found.append(f"{proc.name}: {cmd}")
    return found


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextlib.contextmanager
def embedded_run(datadir: Path, env: dict[str, str], timeout: float = 60) -> Iterator[Endpoints]:
    """`reliabilityd run --embedded` until the block ends, then SIGTERM; it must exit 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "reliabilityd", "run", "--embedded", "--data-dir", str(datadir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        mqtt = redis = http = None
        deadline = time.monotonic() + timeout
        while (mqtt is None or redis is None or http is None) and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            mqtt = mqtt or ENDPOINTS.search(line)
            redis = redis or REDIS.search(line)
            http = http or HTTP.search(line)
        if mqtt is None or redis is None or http is None:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise AssertionError(f"no endpoints printed; stderr:\n{err}")
        yield Endpoints(
            mqtt_port=int(mqtt[1]),
            protocol=mqtt[2],
            broker=mqtt[3],
            redis_url=redis[1],
            redis_port=int(redis[2]),
            redis=redis[3],
            http_url=http[1],
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, err


def check_demo_output(out: str) -> None:
    """What a person must see in the demo's plain lines."""
    lines = out.splitlines()
    fired = [i for i, line in enumerate(lines) if "ALERT firing   support-reliability" in line]
    resolved = [i for i, line in enumerate(lines) if "ALERT resolved support-reliability" in line]
    assert len(fired) == 1, out
    assert len(resolved) == 1, out
    assert fired[0] < resolved[0]
    regressed = next(i for i, line in enumerate(lines) if "support-bot has regressed" in line)
    assert regressed < fired[0]
    assert "pass^5=UNKNOWN" in out  # while tasks have fewer than 5 runs
    assert re.search(r"deploy-bot .*lottery='deploy service \d+'", out)
    published = re.search(r"published (\d+) trial events; Redis counted (\d+)", out)
    assert published is not None
    assert published[1] == published[2]


SUITE = "embedded-suite"


async def publish(ends: Endpoints, events: list[TrialEvent]) -> None:
    await publish_to(ends.mqtt_port, ends.protocol, events)


async def counts(
    url: str, trials: int, duplicates: int, within: float = 30, *, suite: str = SUITE
) -> tuple[int, int]:
    """(trials, duplicates) of ``suite`` once they reach these numbers, or after `within` s."""
    store = Store(aioredis.Redis.from_url(url))
    try:
        deadline = time.monotonic() + within
        while True:
            c = (await store.reads.read_state(suite)).counters
            if (c.trials, c.duplicates) == (trials, duplicates) or time.monotonic() > deadline:
                return c.trials, c.duplicates
            await asyncio.sleep(0.1)
    finally:
        await store.client.aclose()


async def publish_to(port: int, protocol: str, events: list[TrialEvent]) -> None:
    version = aiomqtt.ProtocolVersion.V5 if protocol == "5" else aiomqtt.ProtocolVersion.V311
    async with aiomqtt.Client(
        "127.0.0.1", port, identifier="test-agent", protocol=version
    ) as client:
        for i in range(0, len(events), 10):
            await client.publish(
                f"reliability/trials/{SUITE}", msgspec.json.encode(events[i : i + 10]), qos=1
            )
