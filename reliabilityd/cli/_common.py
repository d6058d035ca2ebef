"""What every verb shares: exit codes, the config, finding Redis and the broker, options.

One exit-code table for the whole command line (docs/querying.md):

====  ==================================================================
0     success, or the gate passed
1     a failing verdict (the gate failed, the daemon is unhealthy), or the
      command could not do what was asked (no such task, declined)
2     usage or configuration error (argparse's own code too), a suite
      named that does not exist
3     undecided: the data cannot decide yet, or the number is UNKNOWN
4     Redis or the MQTT broker unreachable or unusable
141   standard output closed before the command finished (``| head``): the
      code a shell gives a program that SIGPIPE ended
====  ==================================================================
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from reliabilityd import locate
from reliabilityd.config import Config
from reliabilityd.locate import Located, unreachable
from reliabilityd.logs import redact

__all__ = [
    "EXIT_FAIL",
    "EXIT_OK",
    "EXIT_PIPE",
    "EXIT_UNDECIDED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "Exit",
    "RedisTarget",
    "add_redis_options",
    "load_config",
    "mqtt_target",
    "positive",
    "redis_target",
    "run_on_redis",
    "say",
]

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_UNDECIDED = 3
EXIT_UNREACHABLE = 4
EXIT_PIPE = 128 + 13  # SIGPIPE


class Exit(Exception):
    """Leave the command with this exit code (the message is already printed)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def run_on_redis(target: RedisTarget, work: Coroutine[Any, Any, int]) -> int:
    """Run a command's coroutine; a Redis that cannot be reached or refuses is exit 4, named."""
    from reliabilityd.store import StoreError, StoreUnavailable

    try:
        return asyncio.run(work)
    except StoreUnavailable as exc:
        say(unreachable("Redis", target.describe(), exc))
        return EXIT_UNREACHABLE
    except StoreError as exc:
        say(f"Redis at {target.describe()} answered: {exc}")
        return EXIT_UNREACHABLE


def say(message: str) -> None:
    """One line to standard error, prefixed with the program's name; secrets masked."""
    print(f"reliabilityd: {redact(message)}", file=sys.stderr)


def load_config(path: str | None) -> Config:
    """The config from ``path``, or the defaults; a config error exits 2 with its message."""
    from reliabilityd import config as config_mod
    from reliabilityd.errors import ConfigError

    try:
        return config_mod.load(path) if path else config_mod.Config()
    except ConfigError as exc:
        say(f"config error: {exc}")
        raise Exit(exc.exit_code) from None


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_redis_options(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("-c", "--config", help="TOML config file (Redis URL, prefix, rules)")
    p.add_argument(
        "--redis",
        help="Redis URL (default: $RELIABILITYD_REDIS_URL, the config's, a running embedded "
        "daemon's, else redis://127.0.0.1:6379/0)",
    )
    p.add_argument("--prefix", help="key prefix (default: the config's, else rel)")
    return p


REDIS_SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class RedisTarget:
    """The Redis a command asks, and how it was found (for messages)."""

    where: Located
    prefix: str
    config: Config

    @property
    def url(self) -> str:
        return self.where.url

    def describe(self) -> str:
        """`redis://127.0.0.1:6379/0 (the default; ...)`: said whenever it finds nothing there.

        Without the URL's credentials: this is what every message names.
        """
        prefix = "" if self.prefix == "rel" else f", prefix {self.prefix!r}"
        return f"{redact(self.url)} ({self.where.source}{prefix})"

    def configured(self) -> Config:
        """The config with this Redis URL and prefix."""
        import msgspec

        redis = msgspec.structs.replace(self.config.redis, url=self.url, prefix=self.prefix)
        return msgspec.structs.replace(self.config, redis=redis)


def _checked(where: Located) -> Located:
    from urllib.parse import urlsplit

    if urlsplit(where.url).scheme not in REDIS_SCHEMES:
        say(
            f"{where.url!r} ({where.source}) is not a Redis URL: redis://HOST:PORT/DB, "
            "rediss://... or unix:///path/to/socket"
        )
        raise Exit(2)
    from reliabilityd.store import url_problem

    problem = url_problem(where.url)
    if problem is not None:
        say(f"{where}: {problem}")
        raise Exit(2)
    return where


def redis_target(args: argparse.Namespace) -> RedisTarget:
    """The Redis a command asks, the same way for every command (``reliabilityd.locate``).

    In order: ``--redis``; ``$RELIABILITYD_REDIS_URL``; the ``-c`` config's
    ``[redis] url`` when the file sets one; the embedded daemon running on the
    default data directory (its ``endpoints.json``); ``redis://127.0.0.1:6379/0``.
    """
    path = getattr(args, "config", None)
    cfg = load_config(path)
    prefix = getattr(args, "prefix", None) or cfg.redis.prefix
    where = locate.redis(getattr(args, "redis", None), given_as="--redis", config=path)
    return RedisTarget(_checked(where), prefix, cfg)


def mqtt_target(args: argparse.Namespace) -> Located:
    """The broker a command publishes to, found as Redis is: ``--mqtt``, then
    ``$RELIABILITYD_MQTT_URL``, the ``-c`` config's ``[mqtt] url`` when the file sets
    one, the running embedded daemon's, ``mqtt://127.0.0.1:1883``."""
    from reliabilityd.config import parse_mqtt_url

    where = locate.mqtt(
        getattr(args, "mqtt", None), given_as="--mqtt", config=getattr(args, "config", None)
    )
    try:
        parse_mqtt_url(where.url)
    except ValueError as exc:
        say(f"{where} is not a broker URL (mqtt://HOST:PORT or mqtts://...): {exc}")
        raise Exit(2) from None
    return where
