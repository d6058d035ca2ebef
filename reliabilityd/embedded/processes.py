"""Private servers for the demo, the benchmarks and the tests.

redis-server and mosquitto.

Each server runs with the settings shipped in the package's ``deploy/``
(append-only file with fsync always, broker persistence, deep queues; the
repository's ``deploy/`` links to the same files), on a free port, in a
directory of its own, so it can be stopped, killed and started again. Each
runs in a session of its own: a Ctrl-C in the terminal reaches only the
program that started it, which stops the servers in order.
"""

from __future__ import annotations

import abc
import contextlib
import getpass
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import BinaryIO

from reliabilityd.errors import ReliabilitydError

# The shipped server settings: package data, so an installed wheel has them too.
SERVER_CONFIGS = Path(__file__).resolve().parent.parent / "deploy"


class ServerError(ReliabilitydError):
    """A server this program starts itself did not come up; the message says where to look."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binary(name: str) -> str:
    """The path of a server program, from PATH or the sbin directories."""
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")
    if path is None:
        raise FileNotFoundError(f"{name} not found: run ./scripts/ensure-servers (make does)")
    return path


class Server(abc.ABC):
    """A server process that a test can stop, kill and start again on the same port."""

    def __init__(self, name: str, workdir: Path, port: int) -> None:
        self.name = name
        self.workdir = workdir
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: BinaryIO | None = None

    @abc.abstractmethod
    def argv(self) -> list[str]:
        """The command line that starts this server in the foreground."""

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self, timeout: float = 10.0) -> None:
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv(),
            cwd=self.workdir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise ServerError(
                    f"{self.name} exited with code {code} on start; see {self.log_path}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                return
            time.sleep(0.02)
        self.stop(signal.SIGKILL)
        raise ServerError(
            f"{self.name}: nothing listens on port {self.port} after {timeout} s; "
            f"see {self.log_path}"
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)
        self.proc.wait(timeout)
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()


class RedisServer(Server):
    def __init__(self, name: str, workdir: Path, port: int, binary: str | None = None) -> None:
        super().__init__(name, workdir, port)
        # None: the system's redis-server; embedded.py passes one from a Python package.
        self.binary = binary

    def argv(self) -> list[str]:
        return [
            self.binary or binary("redis-server"),
            str(SERVER_CONFIGS / "redis.conf"),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.workdir),
            "--daemonize",
            "no",
            "--protected-mode",
            "no",
        ]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


class Mosquitto(Server):
    # Settings replaced per instance; `extra` lines come last and win.
    _REPLACED = ("listener", "persistence_location", "allow_anonymous")

    def __init__(self, name: str, workdir: Path, port: int, extra: tuple[str, ...] = ()) -> None:
        super().__init__(name, workdir, port)
        self.extra = extra

    def argv(self) -> list[str]:
        conf = self.workdir / "mosquitto.conf"
        lines = [
            line
            for line in (SERVER_CONFIGS / "mosquitto.conf").read_text().splitlines()
            if not line.startswith(self._REPLACED)
        ]
        lines += [
            f"listener {self.port} 127.0.0.1",
            f"persistence_location {self.workdir}/",
            f"log_dest file {self.workdir}/mosquitto-broker.log",
            # Started as root, mosquitto drops to user `mosquitto`, which cannot
            # write its persistence file here: it would lose every queued
            # message on restart, silently. Stay the user the test runs as.
            f"user {getpass.getuser()}",
            *(self.extra or ("allow_anonymous true",)),
        ]
        conf.write_text("\n".join(lines) + "\n")
        return [binary("mosquitto"), "-c", str(conf)]

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"
