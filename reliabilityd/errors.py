"""The one exception hierarchy of reliabilityd; messages say what to do next."""

from __future__ import annotations


class ReliabilitydError(Exception):
    """Base of every error reliabilityd raises on purpose."""


class ConfigError(ReliabilitydError):
    """A configuration file that cannot be used: names the file and the field."""

    exit_code = 2

    def __init__(self, path: str, field: str, message: str) -> None:
        self.path = path
        self.field = field
        self.message = message
        where = f"{path}: {field}" if field else path
        super().__init__(f"{where}: {message}")


def first_config_error(group: BaseExceptionGroup[ConfigError]) -> ConfigError:
    """The first ConfigError of a (nested) exception group: the one a loop raised first."""
    first = group.exceptions[0]
    return first_config_error(first) if isinstance(first, BaseExceptionGroup) else first
