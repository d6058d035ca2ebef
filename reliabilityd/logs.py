"""Structured logs: one event per line as key=value pairs, never a secret."""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any

log = logging.getLogger("reliabilityd")

# Secrets a message may carry: the userinfo and the query of a URL (a Redis or
# broker password, a webhook key), credentials after an auth scheme, and the
# value of an Authorization header.
_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@?#]*@")
_QUERY = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s?#'\"]*)\?[^\s#'\"]*")
_SCHEME = re.compile(r"(?i)\b(bearer|basic|token|digest)(\s+)[^\s'\",]+")
_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key|cookie)(['\"]?\s*[:=]\s*['\"]?)"
    r"(?!bearer\b|basic\b|token\b|digest\b)[^\s'\",]+"
)
MASK = "***"


def redact(text: str) -> str:
    """``text`` with URL userinfo and queries, auth credentials and header values masked."""
    if "://" in text:
        text = _USERINFO.sub(rf"\1{MASK}@", text)
        text = _QUERY.sub(rf"\1?{MASK}", text)
    text = _SCHEME.sub(rf"\1\2{MASK}", text)
    return _HEADER.sub(rf"\1\2{MASK}", text)


class RedactingFormatter(logging.Formatter):
    """Formats as usual, then masks secrets in the whole line (tracebacks included)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def _value(v: Any) -> str:
    text = redact(str(v))
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
        RedactingFormatter("ts=%(asctime)s level=%(levelname)s %(message)s", "%Y-%m-%dT%H:%M:%S%z")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def set_level(level: str | int) -> None:
    """The root logger's level from now on (a reload's ``daemon.log_level``)."""
    logging.getLogger().setLevel(level)


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
