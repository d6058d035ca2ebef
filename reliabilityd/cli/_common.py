"""What every verb shares: exit codes, the config, finding Redis, options, argument types.

One exit-code table for the whole command line (docs/querying.md):

====  ==================================================================
0     success, or the gate passed
1     a failing verdict (the gate failed, the daemon is unhealthy), or the
      command could not do what was asked (no such task, declined)
2     usage or configuration error (argparse's own code too), a suite
      named that does not exist
3     undecided: the data cannot decide yet, or the number is UNKNOWN
4     Redis or the MQTT broker unreachable or unusable
====  ==================================================================
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import redis.exceptions

from reliabilityd.config import Config
from reliabilityd.logs import redact

__all__ = [
    "EXIT_FAIL",
    "EXIT_OK",
    "EXIT_UNDECIDED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "Exit",
    "RedisTarget",
    "add_redis_options",
    "load_config",
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


class Exit(Exception):
    """Leave the command with this exit code (the message is already printed)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def run_on_redis(target: RedisTarget, work: Coroutine[Any, Any, int]) -> int:
    """Run a command's coroutine; a Redis that cannot be reached or refuses is exit 4, named."""
    try:
        return asyncio.run(work)
    except redis.exceptions.ConnectionError as exc:
        say(f"cannot reach Redis at {target.describe()}: {exc}")
        return EXIT_UNREACHABLE
    except redis.exceptions.RedisError as exc:
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
    p.add_argument("--redis", help="Redis URL, when there is no config file")
    p.add_argument("--prefix", help="key prefix (default: the config's, else rel)")
    return p


REDIS_SCHEMES = ("redis", "rediss", "unix")


@dataclass(frozen=True)
class RedisTarget:
    """The Redis a command asks, and how it was found (for messages)."""

    url: str
    prefix: str
    config: Config
    found_by: str

    def describe(self) -> str:
        """`redis://127.0.0.1:6379/0 (the default)`: said whenever it finds nothing there."""
        prefix = "" if self.prefix == "rel" else f", prefix {self.prefix!r}"
        return f"{self.url} ({self.found_by}{prefix})"

    def configured(self) -> Config:
        """The config with this Redis URL and prefix."""
        import msgspec

        redis = msgspec.structs.replace(self.config.redis, url=self.url, prefix=self.prefix)
        return msgspec.structs.replace(self.config, redis=redis)


def _config_names_redis(path: str) -> bool:
    """Whether the config file itself sets ``[redis] url`` (not only the default)."""
    import tomllib
    from pathlib import Path

    try:
        doc = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # load_config has said what is wrong with it
    table = doc.get("redis")
    return isinstance(table, dict) and "url" in table


def _checked(url: str, found_by: str) -> str:
    from urllib.parse import urlsplit

    if urlsplit(url).scheme not in REDIS_SCHEMES:
        say(
            f"{url!r} ({found_by}) is not a Redis URL: redis://HOST:PORT/DB, rediss://... "
            "or unix:///path/to/socket"
        )
        raise Exit(2)
    from reliabilityd.store import url_problem

    problem = url_problem(url)
    if problem is not None:
        say(f"{redact(url)} ({found_by}): {problem}")
        raise Exit(2)
    return url


def redis_target(args: argparse.Namespace) -> RedisTarget:
    """The Redis a command asks, the same way for every command.

    In order: ``--redis``; ``$RELIABILITYD_REDIS_URL``; the ``-c`` config's
    ``[redis] url`` when the file sets one; the embedded daemon running on the
    default data directory (its ``endpoints.json``); ``redis://127.0.0.1:6379/0``.
    """
    import os

    cfg = load_config(getattr(args, "config", None))
    prefix = getattr(args, "prefix", None) or cfg.redis.prefix
    flag = getattr(args, "redis", None)
    env = os.environ.get("RELIABILITYD_REDIS_URL")
    if flag:
        url, found_by = flag, "--redis"
    elif env:
        url, found_by = env, "$RELIABILITYD_REDIS_URL"
    elif args.config and _config_names_redis(args.config):
        url, found_by = cfg.redis.url, f"from {args.config}"
    elif (embedded := _embedded_redis()) is not None:
        url, found_by = embedded
    else:
        url, found_by = cfg.redis.url, "the default"
    return RedisTarget(_checked(url, found_by), prefix, cfg, found_by)


def _embedded_redis() -> tuple[str, str] | None:
    from reliabilityd.embedded import _servers as embedded

    datadir = embedded.default_datadir()
    ports = embedded.running_endpoints(datadir)
    if ports is None:
        return None
    return f"redis://127.0.0.1:{ports.redis}/0", f"the embedded daemon in {datadir}"
