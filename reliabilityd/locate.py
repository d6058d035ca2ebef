"""Where the deployment is: the Redis, MQTT broker and HTTP address a command or client uses.

Every command and client finds them in one order, the first match winning
(docs/querying.md#finding-the-deployment):

1. what the caller names: ``--redis`` / ``--mqtt``, or the URL given to
   ``Client``, ``AsyncClient`` or ``Emitter``;
2. ``$RELIABILITYD_REDIS_URL`` / ``$RELIABILITYD_MQTT_URL``;
3. the ``-c`` config file, when the file itself sets ``[redis] url`` /
   ``[mqtt] url`` (a command's only; a client reads no config);
4. the embedded daemon running on the default data directory: the ports in
   its ``endpoints.json``, trusted only while its lock is held;
5. the default, ``redis://127.0.0.1:6379/0`` / ``mqtt://127.0.0.1:1883``.

The HTTP address (``reliabilityd ui``, ``endpoints``) has no variable and no
default: the config's ``external_url`` or ``[http] port``, else the running
embedded daemon's. Each answer is a ``Located``: the URL and how it was
found, so whatever cannot reach it or finds nothing there can say both.

This module also owns the data directory's ``endpoints.json`` format (the
``Ports`` struct): ``embedded`` writes it, everything here reads it, and it
sits below every layer so the client may read it too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from reliabilityd.logs import redact

__all__ = [
    "DEFAULT_MQTT",
    "DEFAULT_REDIS",
    "ENDPOINTS",
    "LOCK",
    "Located",
    "Ports",
    "default_datadir",
    "http",
    "mqtt",
    "redis",
    "running_endpoints",
    "unreachable",
]

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
DEFAULT_MQTT = "mqtt://127.0.0.1:1883"
REDIS_ENV = "RELIABILITYD_REDIS_URL"
MQTT_ENV = "RELIABILITYD_MQTT_URL"
# In the data directory: the ports, and the lock a running daemon holds.
ENDPOINTS = "endpoints.json"
LOCK = "lock"


class Ports(msgspec.Struct):
    """The ports of the embedded servers, as ``<data-dir>/endpoints.json`` records them."""

    redis: int
    mqtt: int
    http: int = 0


@dataclass(frozen=True)
class Located:
    """A URL and how it was found: ``redis://127.0.0.1:6379/0 (the default; ...)``."""

    url: str
    source: str

    def __str__(self) -> str:
        # Said in messages, so never with its credentials.
        return f"{redact(self.url)} ({self.source})"


def default_datadir() -> Path:
    """$XDG_DATA_HOME/reliabilityd, else ~/.local/share/reliabilityd."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "reliabilityd"


def running_endpoints(datadir: Path) -> Ports | None:
    """The ports of the embedded daemon serving ``datadir`` now; None when none runs there.

    Running means its lock is held: a stale endpoints.json of a stopped
    daemon names ports nothing may be listening on.
    """
    try:
        ports = msgspec.json.decode((datadir / ENDPOINTS).read_bytes(), type=Ports)
        lock = (datadir / LOCK).open("rb")
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    with lock:
        try:
            import fcntl
        except ImportError:  # no flock (Windows): trust the file
            return ports
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return ports  # held by the daemon
        fcntl.flock(lock, fcntl.LOCK_UN)
    return None


Service = Literal["redis", "mqtt"]


def redis(
    given: str | Located | None = None,
    *,
    given_as: str = "the URL given",
    config: str | os.PathLike[str] | None = None,
    datadir: Path | None = None,
) -> Located:
    """The Redis to use, in the module's order; ``given_as`` names a given URL (``--redis``)."""
    return _locate("redis", given, given_as, config, datadir)


def mqtt(
    given: str | Located | None = None,
    *,
    given_as: str = "the URL given",
    config: str | os.PathLike[str] | None = None,
    datadir: Path | None = None,
) -> Located:
    """The MQTT broker to use, in the module's order; ``given_as`` names a given URL."""
    return _locate("mqtt", given, given_as, config, datadir)


def http(
    config_base: str | None = None,
    *,
    config: str | os.PathLike[str] | None = None,
    datadir: Path | None = None,
) -> Located | None:
    """The HTTP base URL (no trailing slash), or None when nothing names one.

    ``config_base`` is what the ``config`` file gives (its ``external_url``,
    else its HTTP port's address: ``alerting.notify.base_url``).
    """
    if config_base:
        return Located(config_base.rstrip("/"), f"from {config}")
    datadir = datadir or default_datadir()
    ports = running_endpoints(datadir)
    if ports is not None and ports.http:
        return Located(f"http://127.0.0.1:{ports.http}", _embedded(datadir))
    return None


def unreachable(what: str, where: Located | str, exc: BaseException) -> str:
    """``cannot reach Redis at <where>: <exc>``, said once however many layers pass it up."""
    text = str(exc)
    start = f"cannot reach {what} at "
    return text if text.startswith(start) else f"{start}{where}: {text}"


def _locate(
    service: Service,
    given: str | Located | None,
    given_as: str,
    config: str | os.PathLike[str] | None,
    datadir: Path | None,
) -> Located:
    if isinstance(given, Located):
        return given
    if given:
        return Located(given, given_as)
    env = REDIS_ENV if service == "redis" else MQTT_ENV
    if value := os.environ.get(env):
        return Located(value, f"${env}")
    if config is not None and (value := _config_url(config, service)) is not None:
        return Located(value, f"from {os.fspath(config)}")
    datadir = datadir or default_datadir()
    ports = running_endpoints(datadir)
    if ports is not None:
        port = ports.redis if service == "redis" else ports.mqtt
        url = f"redis://127.0.0.1:{port}/0" if service == "redis" else f"mqtt://127.0.0.1:{port}"
        return Located(url, _embedded(datadir))
    default = DEFAULT_REDIS if service == "redis" else DEFAULT_MQTT
    return Located(default, f"the default; no embedded daemon runs in {datadir}")


def _embedded(datadir: Path) -> str:
    return f"the embedded daemon in {datadir}"


def _config_url(path: str | os.PathLike[str], table: Service) -> str | None:
    """The ``[table] url`` the config file itself sets, or None (unset, or unreadable)."""
    import tomllib

    try:
        doc = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None  # loading the config says what is wrong with it
    section = doc.get(table)
    url = section.get("url") if isinstance(section, dict) else None
    return url if isinstance(url, str) and url else None
