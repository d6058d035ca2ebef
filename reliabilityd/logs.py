"""Structured logs: one event per line as key=value pairs, never a secret."""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any
from urllib.parse import unquote

log = logging.getLogger("reliabilityd")

# Secrets a message may carry: a URL's userinfo (a Redis or broker password),
# the values of a URL's query keys that name credentials (a webhook's
# ``?key=``, redis-py's ``?password=``), a bearer token, and the value of an
# authorization header. Everything else stays as it was: a plain link such
# as ``https://ci.example.com/runs/42?attempt=3`` is data, not a secret.
_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@?#]*@")
_QUERY = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s?#'\"]*\?)([^\s#'\"]*)")
_SECRET_KEY = re.compile(
    r"(?i)^(?:[a-z0-9]*[_.-])*(?:password|passwd|pass|pwd|secret|token|key|apikey|sig|signature"
    r"|auth|authorization|credentials?|session|sessionid)$"
)
_BEARER = re.compile(r"(?i)\b(bearer)(\s+)[^\s'\",]+")
_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|api-key|cookie)"
    r"(['\"]?\s*[:=]\s*['\"]?|\s+(?=(?:bearer|basic|token|digest)\s))"
    r"((?:bearer|basic|token|digest)\s+)?[^\s'\",]+"
)
MASK = "***"


def _query(match: re.Match[str]) -> str:
    pairs = match[2].split("&")
    for i, pair in enumerate(pairs):
        key, sep, _ = pair.partition("=")
        if sep and _SECRET_KEY.match(unquote(key)):
            pairs[i] = f"{key}={MASK}"
    return match[1] + "&".join(pairs)


def redact(text: str) -> str:
    """``text`` with its credentials masked, and nothing else changed.

    The one function for secrets in logs and in every command's messages:
    URL userinfo (``redis://***@host``), the values of credential query keys
    (``?key=***``), bearer tokens and authorization header values.
    """
    if "://" in text:
        text = _USERINFO.sub(rf"\1{MASK}@", text)
        text = _QUERY.sub(_query, text)
    text = _HEADER.sub(rf"\1\2\3{MASK}", text)
    return _BEARER.sub(rf"\1\2{MASK}", text)


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
