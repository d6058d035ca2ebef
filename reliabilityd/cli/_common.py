"""What every verb shares: loading the config, the Redis options, argument types."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from reliabilityd.config import Config

__all__ = [
    "Exit",
    "RedisTarget",
    "add_redis_options",
    "load_config",
    "positive",
    "redis_target",
    "say",
]


class Exit(Exception):
    """Leave the command with this exit code (the message is already printed)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def say(message: str) -> None:
    """One line to standard error, prefixed with the program's name."""
    print(f"reliabilityd: {message}", file=sys.stderr)


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


def redis_target(args: argparse.Namespace) -> RedisTarget:
    """The Redis of a command with ``add_redis_options``: --redis, the config's, the default."""
    cfg = load_config(args.config)
    prefix = args.prefix or cfg.redis.prefix
    if args.redis:
        return RedisTarget(args.redis, prefix, cfg, "--redis")
    if args.config:
        return RedisTarget(cfg.redis.url, prefix, cfg, f"from {args.config}")
    return RedisTarget(cfg.redis.url, prefix, cfg, "the default")
