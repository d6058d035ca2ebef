"""Reloading the config on SIGHUP; ``main``, the daemon with its signal handlers.

A reload reads the config file again and checks it whole, as at start-up;
a file that does not load or check keeps the running config (logged as
``reload_failed`` with the file, the field and why). The keys in
``RELOADABLE`` then take the file's values and every other key keeps the
running one: those that differ are logged once as ``reload_ignored`` (they
need a restart). The result is checked across keys again (a reloaded token
beside the running ``http.host``, say) and handed to the daemon's parts at
once (``Daemon.install``), between two CI ticks. Nothing is restarted: the
sources, their connections and the batches in flight go on as they were,
so a reload loses nothing and counts nothing twice.

``RELOADABLE`` is a list of what may change, not of what may not: a key
added to the config later needs a restart until it is named here.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from reliabilityd import config as config_mod
from reliabilityd import logs
from reliabilityd.config import Config
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.daemon.supervisor import LoopErrors
from reliabilityd.errors import ConfigError
from reliabilityd.logs import emit, kv, log

__all__ = ["RELOADABLE", "Reloader", "differences", "install_signals", "main", "merge"]

# Dotted paths of the keys (or whole tables) a reload applies.
RELOADABLE = frozenset(
    {
        "alerts",  # threshold and canary rules
        "sinks",  # MQTT topic, Redis stream, Alertmanager, webhook
        "external_url",
        "http.token",
        "http.tokens",
        "grants",  # tenants: suite globs, quotas, dead-letter streams
        "suites",  # per-suite overrides
        "stats",  # k, intervals, windows, slicing, max_suites, ci_interval, ...
        "store.deadletter_maxlen",
        "daemon.log_level",
    }
)


def _fields(value: Any) -> tuple[str, ...]:
    return tuple(getattr(type(value), "__struct_fields__", ()))


def differences(old: Any, new: Any, prefix: str = "") -> Iterator[str]:
    """The dotted paths of the leaf keys whose values differ between two configs."""
    if isinstance(old, msgspec.Struct) and type(old) is type(new):
        for name in _fields(old):
            yield from differences(getattr(old, name), getattr(new, name), f"{prefix}{name}.")
    elif old != new:
        yield prefix.rstrip(".")


def merge(running: Config, loaded: Config) -> tuple[Config, list[str]]:
    """``running`` with the ``RELOADABLE`` keys of ``loaded``; and the other keys that differ."""
    merged, ignored = _merge(running, loaded, "")
    assert isinstance(merged, Config)
    return merged, ignored


def _merge(running: Any, loaded: Any, prefix: str) -> tuple[Any, list[str]]:
    changes: dict[str, Any] = {}
    ignored: list[str] = []
    for name in _fields(running):
        path = prefix + name
        old, new = getattr(running, name), getattr(loaded, name)
        if path in RELOADABLE:
            changes[name] = new
        elif any(r.startswith(path + ".") for r in RELOADABLE):
            changes[name], deeper = _merge(old, new, path + ".")
            ignored += deeper
        else:
            ignored += differences(old, new, path + ".")
    return msgspec.structs.replace(running, **changes), ignored


class Reloader:
    """Reloads ``path`` into ``daemon`` on request (SIGHUP), one reload at a time.

    ``base_level`` is the log level the command line set: the one a
    ``daemon.log_level`` of ``""`` means. ``prepare`` turns the file's config
    into the one the daemon runs with, as at start-up (``run --embedded``
    puts its servers' URLs and port in), so those are not taken for changes.
    """

    def __init__(
        self,
        daemon: Daemon,
        path: str | None,
        base_level: int | str,
        prepare: Callable[[Config], Config] = lambda c: c,
    ) -> None:
        self.daemon = daemon
        self.path = path
        self.base_level = base_level
        self.prepare = prepare
        self.reloads = 0  # reloads applied (for tests and tools)
        self._task: asyncio.Task[None] | None = None
        self._again = False
        if daemon.config.daemon.log_level:
            logs.set_level(daemon.config.daemon.log_level)

    def request(self) -> None:
        """Reload soon; a request during a reload makes one more after it (signal-safe)."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._run(), name="reload")

    async def _run(self) -> None:
        self._again = True
        while self._again:
            self._again = False
            try:
                await self.reload()
            except Exception:  # never leaves the daemon without a config
                log.exception("%s", kv("reload_failed", path=self.path, kept="the running config"))

    async def reload(self) -> bool:
        """Read, check and install the file's reloadable keys; False when it was refused."""
        if self.path is None:
            emit(logging.WARNING, "reload_skipped", reason="started without a config file (-c)")
            return False
        running = self.daemon.config
        try:
            merged, ignored = merge(running, self.prepare(config_mod.load(self.path)))
            config_mod.check(merged, self.path)
        except ConfigError as exc:
            emit(logging.ERROR, "reload_failed", error=exc, kept="the running config")
            return False
        if ignored:
            emit(logging.WARNING, "reload_ignored", keys=",".join(ignored), needs="a restart")
        changed = list(differences(running, merged))
        await self.daemon.install(merged)
        logs.set_level(merged.daemon.log_level or self.base_level)
        self.reloads += 1
        emit(logging.INFO, "reloaded", path=self.path, changed=",".join(changed) or "nothing")
        return True


def install_signals(
    loop: asyncio.AbstractEventLoop, stop: asyncio.Event, reloader: Reloader
) -> None:
    """SIGTERM and SIGINT stop the daemon; SIGHUP reloads its config."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if hasattr(signal, "SIGHUP"):  # not on Windows
        loop.add_signal_handler(signal.SIGHUP, reloader.request)


async def main(config: Config, path: str | None = None) -> int:
    """Run a daemon until SIGTERM or SIGINT; SIGHUP reloads ``path`` (``run -c``)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(LoopErrors())
    daemon = Daemon(config)
    install_signals(loop, stop, Reloader(daemon, path, logging.getLogger().level))
    try:
        await daemon.run(stop)
    except ConfigError as exc:
        emit(logging.ERROR, "config_error", error=exc)
        return exc.exit_code
    finally:
        await daemon.store.client.aclose()
    return 0
