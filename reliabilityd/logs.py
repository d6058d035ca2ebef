"""Structured logs: one event per line as key=value pairs, never a secret."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

log = logging.getLogger("reliabilityd")


def _value(v: Any) -> str:
    text = str(v)
    if not text or any(ch in text for ch in ' "=\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def kv(event: str, **fields: Any) -> str:
    return " ".join([f"event={event}", *(f"{k}={_value(v)}" for k, v in fields.items())])


def emit(level: int, event: str, **fields: Any) -> None:
    if log.isEnabledFor(level):
        log.log(level, "%s", kv(event, **fields))


def setup(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("ts=%(asctime)s level=%(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S%z")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class RateLimited:
    """Log at most one line per interval; the line says how many were folded into it."""

    def __init__(self, interval: float = 5.0) -> None:
        self.interval = interval
        self._last = -float("inf")
        self._folded = 0

    def emit(self, level: int, event: str, **fields: Any) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            self._folded += 1
            return
        emit(level, event, **fields, suppressed=self._folded)
        self._last = now
        self._folded = 0
