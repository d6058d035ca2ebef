"""What every verb shares: the exit codes, loading the config, the Redis options, argument types.

One exit-code table for the whole command line (docs/querying.md):

====  ==================================================================
0     success, or the gate passed
1     a failing verdict (the gate failed, the daemon is unhealthy), or the
      command could not do what was asked (no such task, declined)
2     usage or configuration error (argparse's own code too)
3     undecided: the data cannot decide yet, or the number is UNKNOWN
4     Redis or the MQTT broker unreachable or unusable
====  ==================================================================
"""

from __future__ import annotations

import argparse
import sys

from reliabilityd.config import Config
from reliabilityd.logs import redact

__all__ = [
    "EXIT_FAIL",
    "EXIT_OK",
    "EXIT_UNDECIDED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "Exit",
    "add_redis_options",
    "load_config",
    "positive",
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
