"""What every part of the store shares: the client type, reply helpers, the records callers get.

Callers of the store get these Structs, ints and Histograms, never raw Redis
replies.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, cast
from urllib.parse import parse_qsl, urlsplit

import msgspec
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import (
    AbstractConnection,
    BlockingConnectionPool,
    Connection,
    ConnectionPool,
    parse_url,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from reliabilityd.stats.histogram import Histogram
from reliabilityd.store._errors import gate_calls

Redis = aioredis.Redis | RedisCluster
# A pool's size when the caller names none (a command, the Client); the
# daemon sizes its pools from its config (redis.max_connections, http.max_inflight).
DEFAULT_CONNECTIONS = 16
# Connections per cluster node beyond the calls the store lets through at
# once: redis-py's refresh of the cluster's layout takes its own.
CLUSTER_SLACK = 4

__all__ = [
    "DEFAULT_CONNECTIONS",
    "Applied",
    "Counters",
    "DeadLetter",
    "ImportApplied",
    "Redis",
    "StreamCursor",
    "SuiteState",
    "connect",
    "url_problem",
]


class Counters(msgspec.Struct, frozen=True):
    """A suite's lifetime counters at one version."""

    trials: int = 0
    errors: int = 0
    skips: int = 0
    duplicates: int = 0
    version: int = 0
    last_trial_at: float | None = None
    # Events counted in the suite but in no slice (past its most slices); 0 for a slice.
    slice_overflow: int = 0


class DeadLetter(msgspec.Struct, frozen=True):
    """One rejected input as stored in the dead-letter stream."""

    id: str
    payload: bytes
    truncated: bool
    reason: str
    source: str
    time: float
    # The suite it is filed under: the one the payload names, when it names a
    # valid one its sender may write.
    suite: str | None = None
    # The reason's class: one of rejections.REASON_CLASSES.
    reason_class: str = "other"
    # The [[grants]] entry whose stream holds it (the suite's, else the sender's).
    grant: str | None = None


class StreamCursor(msgspec.Struct, frozen=True):
    """The last entry id of a stream batch, committed with the batch."""

    stream: str
    group: str
    entry_id: str


class SuiteState(msgspec.Struct, frozen=True):
    """A suite's counters and histogram at one version, read atomically."""

    suite: str
    counters: Counters
    hist: Histogram
    # Each task's last outcomes, oldest first ("1" = pass), when asked for.
    windows: list[str] | None = None
    # The slice's id when the state is one slice's, None for the suite as a whole.
    slice: str | None = None


class Applied(msgspec.Struct, frozen=True):
    """What one suite's batch changed."""

    suite: str
    counted: int
    errors: int
    skips: int
    duplicates: int
    version: int
    # Of the counted trials, how many passed.
    passes: int = 0
    # Events counted in the whole but in no slice: their slice would pass the suite's most.
    overflow: int = 0


class ImportApplied(msgspec.Struct, frozen=True):
    """What an import changed; ``already`` events were in the ledger before."""

    counted: int
    errors: int
    skips: int
    duplicates: int
    version: int
    already: int


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _count(raw: Any) -> int:
    """A count as Redis holds it (0 when absent or not a number)."""
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0


def _pairs(flat: Sequence[bytes | str]) -> dict[str, str]:
    it = iter(flat)
    return {_text(k): _text(v) for k, v in zip(it, it, strict=True)}


def _parameters(*callables: object) -> set[str]:
    names: set[str] = set()
    for fn in callables:
        names.update(inspect.signature(fn).parameters)  # type: ignore[arg-type]
    return names - {"self", "kwargs", "args"}


def url_problem(url: str, *, cluster: bool = False) -> str | None:
    """What redis-py would refuse in a Redis URL, naming the parameter; None when it is usable.

    redis-py passes a query parameter it does not know on to the connection
    class, which raises a TypeError at the first command; this names it at once.
    """
    try:
        parsed = parse_url(url)
    except ValueError as exc:
        return str(exc)
    connection = parsed.get("connection_class", Connection)
    known = _parameters(ConnectionPool.__init__, BlockingConnectionPool.__init__)
    for cls in connection.__mro__:
        if "__init__" in vars(cls):
            known |= _parameters(vars(cls)["__init__"])
    if cluster:
        known |= _parameters(RedisCluster.__init__)
    for name, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if name not in known:
            return f"unknown query parameter {name!r} in the Redis URL"
    return None


# A pooled connection idle this long pings Redis before its next command.
HEALTH_CHECK_SECONDS = 1.0


class _Reconnecting(AbstractConnection):
    """Mixed into a pool's connection class: a stale connection connects again, unused.

    After a Redis restart every connection idle in a pool is dead, and each
    would fail the next command it carries (redis-py finds out only then),
    seconds or a minute after Redis is back. A connection idle for more than
    ``HEALTH_CHECK_SECONDS`` pings first (redis-py's health check); when the
    ping fails it connects again before the command is sent, so nothing is
    ever sent twice, and a Redis that is really down still fails the command.

    The handshake of a new socket never pings: redis-py pipelines it (CLIENT
    SETINFO twice, SELECT, then reads their replies), and a ping due between
    two of its sends, when the loop stalls past the interval, would read the
    first SETINFO's reply as its own (on Redis before 7.2 an error, which
    failed whatever command had opened the connection).
    """

    # redis-py leaves check_health, connect and the handshake unannotated.
    async def check_health(self) -> None:
        try:
            await super().check_health()  # type: ignore[no-untyped-call]
        except (RedisConnectionError, RedisTimeoutError):
            await self.disconnect()
            await self.connect()  # type: ignore[no-untyped-call]

    async def on_connect_check_health(self, check_health: bool = True) -> None:
        await super().on_connect_check_health(check_health=False)


_RECONNECTING: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def _health_checked(pool: ConnectionPool) -> ConnectionPool:
    """``pool`` with connections that ping when idle and reconnect when stale."""
    base = pool.connection_class  # by the URL's scheme: TCP, TLS or a Unix socket
    checked = _RECONNECTING.get(base)
    if checked is None:
        checked = cast(
            "type[AbstractConnection]",
            type(f"Reconnecting{base.__name__}", (_Reconnecting, base), {}),
        )
        _RECONNECTING[base] = checked
    pool.connection_class = checked
    pool.connection_kwargs["health_check_interval"] = HEALTH_CHECK_SECONDS
    return pool


def connect(
    url: str,
    *,
    cluster: bool = False,
    timeout: float = 10.0,
    max_connections: int = DEFAULT_CONNECTIONS,
) -> Redis:
    """A client for a single node or a cluster, with timeouts on every call and a bounded pool.

    At most ``max_connections`` connections (per node for a cluster); a
    command waits up to ``timeout`` for a free one, then raises
    StoreUnavailable, whatever redis-py's own default pool would do (from
    8.1 it raises at once past 100 connections, before that it has no
    bound). ValueError for a URL redis-py cannot use (``url_problem``).
    """
    problem = url_problem(url, cluster=cluster)
    if problem is not None:
        raise ValueError(problem)
    if cluster:
        # redis-py's asyncio cluster client raises, never waits, at a node's
        # max_connections: the store holds its calls to the size instead.
        client = RedisCluster.from_url(
            url,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            max_connections=max_connections + CLUSTER_SLACK,
        )
        gate_calls(client, max_connections, timeout)
        return client
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
    )
    return aioredis.Redis.from_pool(_health_checked(pool))
