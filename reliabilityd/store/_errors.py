"""The store's own errors, and the edge where redis-py's become them.

Every public coroutine of a store part is wrapped by ``boundary``: whatever
redis-py (or the socket under it) raises leaves the store as one of these,
so no layer above imports redis to learn what went wrong:

    ReliabilitydError
    └── StoreError            Redis did not do what a store call asked
        ├── StoreUnavailable  Redis cannot be reached: connection refused or lost,
        │   │                 still loading its data, no free connection in time
        │   └── StoreTimeout  Redis did not answer within the client's timeout
        ├── StoreRefused      Redis answered with an error; ``code`` is its first word
        │                     (OOM, READONLY, BUSY, NOSCRIPT, NOGROUP, CLUSTERDOWN, ERR...)
        └── StoreCorrupt      Redis holds a value the store cannot use; the message
                              names the key and how to repair it

Each is worth retrying later as a whole call: the writes are idempotent
(trial ids, versions, compare-and-set), and a caller that must not wait
(an HTTP request) answers 503 instead. redis-py's exception rides along as
``__cause__`` for the logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import re
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

import redis.exceptions as rex

from reliabilityd.errors import ReliabilitydError

__all__ = [
    "StoreCorrupt",
    "StoreError",
    "StoreRefused",
    "StoreTimeout",
    "StoreUnavailable",
    "boundary",
    "gate_calls",
    "translate",
]

T = TypeVar("T")
R = TypeVar("R")


class StoreError(ReliabilitydError):
    """Redis did not do what a store call asked; the call may be retried whole."""


class StoreUnavailable(StoreError):
    """Redis cannot be reached now (refused, lost, loading, no free connection in time)."""


class StoreTimeout(StoreUnavailable):
    """Redis did not answer within the client's timeout (``redis.timeout``)."""


class StoreRefused(StoreError):
    """Redis answered with an error reply; ``code`` is the reply's first word."""

    def __init__(self, message: str, code: str = "ERR") -> None:
        super().__init__(message)
        self.code = code


class StoreCorrupt(StoreError):
    """Redis holds a value the store cannot use; the message says which and what to do."""


# redis-py strips an error reply's first word when it picks a class for it
# (before 6.0 it keeps no trace of it): the word, recovered from the class.
# Subclasses come before their bases.
_CODES: tuple[tuple[type[rex.ResponseError], str], ...] = (
    (rex.OutOfMemoryError, "OOM"),
    (rex.ReadOnlyError, "READONLY"),
    (rex.NoScriptError, "NOSCRIPT"),
    (rex.ExecAbortError, "EXECABORT"),
    (rex.NoPermissionError, "NOPERM"),
    (rex.MasterDownError, "MASTERDOWN"),
    (rex.ClusterDownError, "CLUSTERDOWN"),
    (rex.TryAgainError, "TRYAGAIN"),
    (rex.ClusterCrossSlotError, "CROSSSLOT"),
    (rex.MovedError, "MOVED"),
    (rex.AskError, "ASK"),
)
_LEADING_CODE = re.compile(r"([A-Z][A-Z0-9_]+)(?:\s|$)")

# What redis-py says when a pool has no connection to hand out: a blocking
# pool that waited its timeout; a non-blocking one, by version.
_POOL_EMPTY = frozenset({"No connection available.", "Too many connections", "MaxConnectionsError"})
# What the store translates: redis-py's errors, its cluster client's (which
# are not RedisErrors), and the socket's.
TRANSLATED = (rex.RedisError, rex.RedisClusterException, OSError)


def _reply_code(exc: rex.ResponseError, text: str) -> str:
    status = getattr(exc, "status_code", None)
    if isinstance(status, str) and status:
        return status
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    leading = _LEADING_CODE.match(text)
    return leading[1] if leading else "ERR"


def translate(exc: BaseException) -> StoreError:
    """The store's error for one that redis-py or the socket raised; Redis's own words kept."""
    if isinstance(exc, StoreError):
        return exc
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, rex.TimeoutError | TimeoutError):
        return StoreTimeout(text)
    if isinstance(exc, rex.ResponseError):
        code = _reply_code(exc, text)
        return StoreRefused(text if text.startswith(code) else f"{code} {text}", code)
    if text in _POOL_EMPTY:
        return StoreUnavailable(
            f"no free Redis connection in time ({text}): every connection of the pool stayed in use"
        )
    if isinstance(exc, rex.ConnectionError | rex.InvalidResponse | rex.RedisClusterException):
        return StoreUnavailable(text)
    if isinstance(exc, OSError):
        return StoreUnavailable(f"{type(exc).__name__}: {text}")
    return StoreError(text)


class _Gate:
    """At most ``size`` store calls at once on one client, each waiting ``timeout`` for a place.

    redis-py's asyncio cluster client has no blocking pool: past a node's
    ``max_connections`` it raises instead of waiting. A store call takes at
    most one connection per node at a time, so holding the calls to ``size``
    holds every node's connections to it.
    """

    def __init__(self, size: int, timeout: float) -> None:
        self.size = size
        self.timeout = timeout
        self._free = asyncio.Semaphore(size)

    @contextlib.asynccontextmanager
    async def place(self) -> AsyncIterator[None]:
        try:
            async with asyncio.timeout(self.timeout):
                await self._free.acquire()
        except TimeoutError:
            raise StoreUnavailable(
                f"all {self.size} Redis connections stayed in use for {self.timeout:g} s"
            ) from None
        try:
            yield
        finally:
            self._free.release()


_GATES: weakref.WeakKeyDictionary[object, _Gate] = weakref.WeakKeyDictionary()
# Set while a store call runs in this task: a part calling another part
# neither waits for a second place nor translates twice.
_ENTERED: ContextVar[bool] = ContextVar("reliabilityd_store_entered", default=False)


def gate_calls(client: object, size: int, timeout: float) -> None:
    """Hold the store calls on ``client`` to ``size`` at once (a cluster client's pool)."""
    _GATES[client] = _Gate(size, timeout)


def _guarded(
    fn: Callable[..., Awaitable[R]],
) -> Callable[..., Coroutine[Any, Any, R]]:
    @functools.wraps(fn)
    async def call(self: Any, *args: Any, **kwargs: Any) -> R:
        if _ENTERED.get():
            return await fn(self, *args, **kwargs)
        entered = _ENTERED.set(True)
        try:
            gate = _GATES.get(self.client)
            if gate is None:
                return await fn(self, *args, **kwargs)
            async with gate.place():
                return await fn(self, *args, **kwargs)
        except TRANSLATED as exc:
            raise translate(exc) from exc
        finally:
            _ENTERED.reset(entered)

    return call


def boundary(cls: type[T]) -> type[T]:
    """Make ``cls``, a store part holding ``client``, raise only the store's errors.

    Every public coroutine method is wrapped; the private ones run inside a
    public one.
    """
    for name, fn in list(vars(cls).items()):
        if not name.startswith("_") and inspect.iscoroutinefunction(fn):
            setattr(cls, name, _guarded(fn))
    return cls
