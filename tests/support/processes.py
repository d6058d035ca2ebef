"""Servers only the tests start: Redis Cluster nodes, Prometheus and Alertmanager.

Each is a ``reliabilityd.embedded.processes.Server`` (a process on a free
port in a directory of its own, to stop, kill and start again), like the
redis-server and mosquitto the demo starts.
"""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from reliabilityd.embedded.processes import RedisServer, Server, binary

__all__ = ["Alertmanager", "ClusterNode", "Prometheus", "cluster_create", "free_cluster_port"]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_port() -> int:
    """A free port p <= 55535 whose cluster bus port p + 10000 is free too."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randrange(20_000, 55_535)
        if _bindable(port) and _bindable(port + 10_000):
            return port
    raise RuntimeError("no free port pair for a Redis Cluster node")


class ClusterNode(RedisServer):
    def argv(self) -> list[str]:
        return [
            *super().argv(),
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            f"nodes-{self.port}.conf",
        ]


def cluster_create(nodes: list[ClusterNode], timeout: float = 30.0) -> None:
    """Join redis-server processes into a cluster with `redis-cli --cluster create`."""
    subprocess.run(
        [
            binary("redis-cli"),
            "--cluster",
            "create",
            *(f"127.0.0.1:{n.port}" for n in nodes),
            "--cluster-replicas",
            "0",
            "--cluster-yes",
        ],
        check=True,
        capture_output=True,
        timeout=timeout,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = subprocess.run(
            [binary("redis-cli"), "-p", str(nodes[0].port), "cluster", "info"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        if "cluster_state:ok" in info:
            return
        time.sleep(0.1)
    raise TimeoutError("cluster did not reach cluster_state:ok")


def wait_http_ready(url: str, timeout: float = 30.0) -> None:
    """Until `url` answers 200 (Prometheus and Alertmanager: /-/ready)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1.0) as response:
            if response.status == 200:
                return
        time.sleep(0.05)
    raise TimeoutError(f"{url} not ready after {timeout} s")


class Prometheus(Server):
    """A private Prometheus scraping `targets` every second and evaluating `rule_files`.

    The config is written as JSON, which YAML parsers read as it is.
    """

    def __init__(
        self,
        name: str,
        workdir: Path,
        port: int,
        *,
        targets: list[str],
        rule_files: tuple[Path, ...] = (),
        job: str = "reliabilityd",
        interval: str = "1s",
    ) -> None:
        super().__init__(name, workdir, port)
        self.targets = targets
        self.rule_files = rule_files
        self.job = job
        self.interval = interval

    def argv(self) -> list[str]:
        conf = self.workdir / "prometheus.yml"
        conf.write_text(
            json.dumps(
                {
                    "global": {
                        "scrape_interval": self.interval,
                        "evaluation_interval": self.interval,
                    },
                    "rule_files": [str(p) for p in self.rule_files],
                    "scrape_configs": [
                        {"job_name": self.job, "static_configs": [{"targets": self.targets}]}
                    ],
                }
            )
        )
        return [
            binary("prometheus"),
            f"--config.file={conf}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]

    def start(self, timeout: float = 10.0) -> None:
        super().start(timeout)
        wait_http_ready(f"{self.url}/-/ready")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Alertmanager(Server):
    """A private Alertmanager that keeps what it receives and sends nothing anywhere."""

    def argv(self) -> list[str]:
        conf = self.workdir / "alertmanager.yml"
        # One receiver without integrations: alerts are kept and visible in the
        # API, and no notification leaves the machine.
        conf.write_text(
            json.dumps({"route": {"receiver": "keep"}, "receivers": [{"name": "keep"}]})
        )
        return [
            binary("prometheus-alertmanager")
            if shutil.which("prometheus-alertmanager")
            else binary("alertmanager"),
            f"--config.file={conf}",
            f"--storage.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            # No gossip: a lone instance must not listen on the cluster port 9094.
            "--cluster.listen-address=",
        ]

    def start(self, timeout: float = 10.0) -> None:
        super().start(timeout)
        wait_http_ready(f"{self.url}/-/ready")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"
