"""The store's own errors: redis-py's exceptions translated at the store's edge, and no
module above the store that imports redis or names a key."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import redis.exceptions as rex

from reliabilityd.errors import ReliabilitydError
from reliabilityd.store import (
    StoreError,
    StoreRefused,
    StoreTimeout,
    StoreUnavailable,
)
from reliabilityd.store._errors import translate

PACKAGE = Path(__file__).resolve().parents[2] / "reliabilityd"
# The store translates redis-py; embedded starts Redis servers and asks one, while it
# loads, before any store exists (embedded/_servers.py says why).
MAY_IMPORT_REDIS = ("store", "embedded")


@pytest.mark.parametrize(
    ("raised", "kind", "code", "starts"),
    [
        # redis-py strips the reply's first word when it picks a class: it comes back.
        (rex.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
         StoreRefused, "OOM", "OOM command not allowed"),
        (rex.ReadOnlyError("You can't write against a read only replica."),
         StoreRefused, "READONLY", "READONLY You can't write"),
        (rex.NoScriptError("No matching script."), StoreRefused, "NOSCRIPT", "NOSCRIPT No"),
        (rex.ResponseError("BUSY Redis is busy running a script."), StoreRefused, "BUSY", "BUSY "),
        (rex.ResponseError("NOGROUP No such key 's' or consumer group 'g'"),
         StoreRefused, "NOGROUP", "NOGROUP No such key"),
        (rex.ResponseError("wrong number of arguments for 'get' command"),
         StoreRefused, "ERR", "ERR wrong number"),
        (rex.ClusterDownError("The cluster is down"), StoreRefused, "CLUSTERDOWN", "CLUSTERDOWN"),
        (rex.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."),
         StoreUnavailable, None, "Error 111 connecting"),
        (rex.BusyLoadingError("Redis is loading the dataset in memory"),
         StoreUnavailable, None, "Redis is loading"),
        (rex.ConnectionError("No connection available."),
         StoreUnavailable, None, "no free Redis connection in time"),
        (rex.RedisClusterException("Redis Cluster cannot be connected."),
         StoreUnavailable, None, "Redis Cluster cannot"),
        (ConnectionResetError(104, "Connection reset by peer"),
         StoreUnavailable, None, "ConnectionResetError:"),
        (rex.TimeoutError("Timeout reading from socket"), StoreTimeout, None, "Timeout reading"),
        (TimeoutError(), StoreTimeout, None, "TimeoutError"),
        (rex.DataError("Invalid input of type: 'NoneType'."), StoreError, None, "Invalid input"),
    ],
)  # fmt: skip
def test_each_redis_py_error_becomes_the_stores_own(
    raised: BaseException, kind: type[StoreError], code: str | None, starts: str
) -> None:
    got = translate(raised)
    assert type(got) is kind
    assert isinstance(got, ReliabilitydError)
    assert not isinstance(got, rex.RedisError)
    assert str(got).startswith(starts), str(got)
    if code is not None:
        assert isinstance(got, StoreRefused)
        assert got.code == code


def test_a_timeout_is_a_kind_of_unavailable_and_a_store_error_stays_itself() -> None:
    assert issubclass(StoreTimeout, StoreUnavailable)
    refused = StoreRefused("OOM full", "OOM")
    assert translate(refused) is refused


def _python_files(under: Path) -> list[Path]:
    return sorted(p for p in under.rglob("*.py") if "__pycache__" not in p.parts)


def _imports_redis(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [n for n in names if n.split(".")[0] in ("redis", "hiredis")]
    return found


def test_no_module_above_the_store_imports_redis() -> None:
    """Every module of the package is read, so a new one is covered without an edit here."""
    offenders = [
        f"{path.relative_to(PACKAGE)}: {names}"
        for path in _python_files(PACKAGE)
        if path.relative_to(PACKAGE).parts[0] not in MAY_IMPORT_REDIS
        and (names := _imports_redis(path))
    ]
    assert offenders == []
    # The check reads real imports: the store's own are found.
    assert _imports_redis(PACKAGE / "store" / "_errors.py")


def test_no_module_above_the_store_builds_a_key() -> None:
    """Keys are named by the store's parts (``store.keys``), never by their callers."""
    pattern = re.compile(r"\bstore\.keys\b|\bKeys\(")
    offenders = [
        f"{path.relative_to(PACKAGE)}:{text.count(chr(10), 0, m.start()) + 1}"
        for path in _python_files(PACKAGE)
        if path.relative_to(PACKAGE).parts[0] != "store"
        for text in [path.read_text(encoding="utf-8")]
        for m in pattern.finditer(text)
    ]
    assert offenders == []
