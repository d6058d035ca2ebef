"""Fixtures that start private redis-server, mosquitto, Prometheus and Alertmanager processes."""

from __future__ import annotations

import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from reliabilityd.embedded.processes import Mosquitto, RedisServer, Server, free_port
from reliabilityd.store import Store, connect
from tests.support.processes import (
    Alertmanager,
    ClusterNode,
    Prometheus,
    cluster_create,
    free_cluster_port,
)

__all__ = ["Alertmanager", "ClusterNode", "Mosquitto", "Prometheus", "RedisServer", "free_port"]


S = TypeVar("S", bound=Server)


def _served(server: S, *, last_signal: int = signal.SIGTERM) -> Iterator[S]:
    server.workdir.mkdir(parents=True, exist_ok=True)
    server.start()
    yield server
    server.stop(last_signal)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One Redis for the whole session; tests isolate themselves by key prefix."""
    yield from _served(RedisServer("redis", tmp_path_factory.mktemp("redis"), free_port()))


@pytest.fixture(scope="session")
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    yield from _served(Mosquitto("mosquitto", tmp_path_factory.mktemp("mosquitto"), free_port()))


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own, to kill and restart."""
    server = RedisServer("redis", tmp_path / "redis", free_port())
    yield from _served(server, last_signal=signal.SIGKILL)


@pytest.fixture
def private_mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    """A broker of this test's own, to stop and restart."""
    server = Mosquitto("mosquitto", tmp_path / "mosquitto", free_port())
    yield from _served(server, last_signal=signal.SIGKILL)


@pytest.fixture
def prefix() -> str:
    """A key prefix (and MQTT topic root) of this test's own."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def store(redis_server: RedisServer, prefix: str) -> AsyncIterator[Store]:
    """A Store on the session's Redis under the test's own key prefix."""
    client = connect(redis_server.url)
    yield Store(client, prefix)
    await client.aclose()


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[list[ClusterNode]]:
    """Three redis-server processes joined by `redis-cli --cluster create`."""
    nodes = []
    for i in range(3):
        workdir = tmp_path / f"node{i}"
        workdir.mkdir()
        node = ClusterNode(f"node{i}", workdir, free_cluster_port())
        node.start()
        nodes.append(node)
    try:
        cluster_create(nodes)
        yield nodes
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL)


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Alertmanager]:
    """A real Alertmanager (Debian's prometheus-alertmanager) of this test's own."""
    yield from _served(Alertmanager("alertmanager", tmp_path / "alertmanager", free_port()))


StartPrometheus = Callable[[list[str], tuple[Path, ...]], Prometheus]


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[StartPrometheus]:
    """Starts a real Prometheus scraping the given targets with the given rule files."""
    started: list[Prometheus] = []

    def start(targets: list[str], rule_files: tuple[Path, ...] = ()) -> Prometheus:
        workdir = tmp_path / f"prometheus{len(started)}"
        workdir.mkdir(parents=True)
        server = Prometheus(
            "prometheus", workdir, free_port(), targets=targets, rule_files=rule_files
        )
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def password_broker(tmp_path: Path) -> Iterator[Mosquitto]:
    """A broker that refuses anonymous clients; user `agent`, password `s3cr3t pass`."""
    passwords = tmp_path / "passwd"
    passwords.touch()
    subprocess.run(
        ["mosquitto_passwd", "-b", str(passwords), "agent", "s3cr3t pass"],
        check=True,
        capture_output=True,
    )
    broker = Mosquitto(
        "mosquitto",
        tmp_path,
        free_port(),
        extra=("allow_anonymous false", f"password_file {passwords}"),
    )
    broker.start()
    yield broker
    broker.stop()


class PasswordRedis(RedisServer):
    """A redis-server that refuses clients without its password (``requirepass``)."""

    password = "right-password"

    def argv(self) -> list[str]:
        return [*super().argv(), "--requirepass", self.password]


@pytest.fixture
def password_redis(tmp_path: Path) -> Iterator[PasswordRedis]:
    yield from _served(PasswordRedis("redis", tmp_path / "password-redis", free_port()))
