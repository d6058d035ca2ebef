"""Fixtures that start private redis-server and mosquitto processes on free ports."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from reliabilityd.devservers import (
    ClusterNode,
    Mosquitto,
    RedisServer,
    cluster_create,
    free_cluster_port,
    free_port,
)

__all__ = ["ClusterNode", "Mosquitto", "RedisServer", "free_port"]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One Redis for the whole session; tests isolate themselves by key prefix."""
    server = RedisServer("redis", tmp_path_factory.mktemp("redis"), free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mosquitto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    server = Mosquitto("mosquitto", tmp_path_factory.mktemp("mosquitto"), free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own, to kill and restart."""
    workdir = tmp_path / "redis"
    workdir.mkdir()
    server = RedisServer("redis", workdir, free_port())
    server.start()
    yield server
    server.stop(signal.SIGKILL)


@pytest.fixture
def private_mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    """A broker of this test's own, to stop and restart."""
    workdir = tmp_path / "mosquitto"
    workdir.mkdir()
    server = Mosquitto("mosquitto", workdir, free_port())
    server.start()
    yield server
    server.stop(signal.SIGKILL)


@pytest.fixture
def prefix() -> str:
    """A key prefix (and MQTT topic root) of this test's own."""
    return f"t{uuid.uuid4().hex[:10]}"


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
