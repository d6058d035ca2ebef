"""The HTTP port's connections: the file-limit reserve and aiohttp's request handler.

``connection_limit`` keeps ``http.max_connections`` under the process's file
limit; ``Runner`` serves the app with handlers that close slow clients, cap
open connections (``_Server.room_from`` picks the one that makes room, never a
producer's kept-alive connection that keeps sending requests whole), cap the
unfinished requests of one client address
(``http.max_pending_per_address``) and log a malformed request as one
rate-limited line that never echoes what was sent.

A request is *unfinished* from the moment its connection opens (or, on a
kept-alive connection, its next body starts to be read) until it is in
whole: the headers of a request without a body, or the last byte of a body
(``delivered``). Only unfinished requests older than ``SLOW_AFTER`` count
against the per-address cap, so a producer's kept-alive connections and
the requests it has delivered never do, and one that sends each request
whole is unfinished only until the server reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from reliabilityd.config import HttpConfig
from reliabilityd.errors import ConfigError
from reliabilityd.logs import RateLimited, emit, redact

# The answer to a connection past the cap when every open one is busy.
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\nContent-Length: 0\r\n"
    b"Connection: close\r\n\r\n"
)


# Descriptors the daemon keeps beside its HTTP connections and its two Redis
# pools (MQTT connections, the listening socket, log files, the event loop's
# own): the pools' connections (redis.max_connections, and one per request in
# flight for the HTTP port's) are reserved on top.
FD_RESERVE = 32
MIN_CONNECTIONS = 8
# The listening socket's queue. asyncio accepts up to this many connections
# per loop iteration, and a connection reaches the handler two iterations
# after its accept (a task makes its transport, which then schedules
# connection_made); the connection it evicts closes one iteration later
# still. Under a flood, three batches are open beyond the cap at the peak:
# the file limit holds ``ACCEPT_PIPELINE * BACKLOG`` descriptors for them.
BACKLOG = 64
ACCEPT_PIPELINE = 3
# Seconds after which an unfinished request counts as slow: only slow ones are
# closed for the per-address cap and the body budget, and past the connection
# cap a request that has not moved on for this long makes room first. A burst
# of producers connecting at once is not slow; a client still sending after a
# second is.
SLOW_AFTER = 1.0


def connection_limit(config: HttpConfig, redis_connections: int) -> int:
    """``http.max_connections``, kept under the process's file limit.

    Each connection holds a descriptor; with the file table full, the daemon
    could not accept ``/healthz``, reconnect to Redis or open its broker
    connection. The soft ``RLIMIT_NOFILE`` is raised towards the hard one as
    far as needed; past what that allows, the limit is lowered (logged as
    ``http_connections_clamped``). ConfigError when fewer than
    ``MIN_CONNECTIONS`` would remain. ``redis_connections`` is the size of
    the daemon's own Redis pool (``redis.max_connections``).
    """
    reserve = FD_RESERVE + redis_connections + config.max_inflight + ACCEPT_PIPELINE * BACKLOG
    wanted = config.max_connections + reserve
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        if raised > soft:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
                soft = raised
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return config.max_connections
    allowed = soft - reserve
    if allowed < MIN_CONNECTIONS:
        raise ConfigError(
            "RLIMIT_NOFILE",
            "$.http.max_connections",
            f"the file limit {soft} leaves {max(allowed, 0)} descriptors for HTTP connections "
            f"after the {reserve} the daemon keeps: raise LimitNOFILE",
        )
    emit(
        logging.WARNING,
        "http_connections_clamped",
        max_connections=config.max_connections,
        allowed=allowed,
        nofile=soft,
        reserve=reserve,
    )
    return allowed


# aiohttp (3.x) offers no setting for a deadline on a request's headers, a cap
# on open connections, or how a malformed request is logged and answered:
# `keepalive_timeout` only covers the pause after a complete request, and
# RequestHandler.handle_error answers and logs with the offending line. The
# only hook is the connection handler web.Server makes, and AppRunner builds
# its Server itself, so Runner re-classes that Server to make _Handler
# connections. tests/integration/test_http_edges.py pins each behaviour
# (slow and idle clients closed, the connection cap, idle ones evicted for a
# new one, one masked line per malformed request), so an aiohttp release that
# moved these hooks fails there, not in production.


class _Handler(RequestHandler):
    """aiohttp's connection handler with the limits of ``HttpConfig``.

    A connection that has not completed a request within ``read_timeout``
    (a slowloris, say) is closed. Past ``max_connections`` one connection
    is closed to make room (``_Server.room_from``), so a flood of idle or
    slow sockets cannot keep ``/healthz`` or a producer out; when every
    connection is busy with a delivered request the new one is answered 503
    and closed. Past
    ``max_pending_per_address`` unfinished requests from one address, its
    oldest slow one is closed. A malformed request is
    logged as one rate-limited line with secrets masked, never a traceback,
    and answered without echoing what was sent (it may hold a bearer token).
    """

    __slots__ = ("_deadline", "_limits", "_moved", "_peer", "_proven", "_served", "_stage")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stage: Stage | None = None
        self._moved = 0.0  # when its unfinished request last reached a new stage
        self._proven = False  # it has delivered a request whole
        self._peer = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        limits: HttpConfig = getattr(self._manager, "limits")  # noqa: B009
        self._limits = limits
        self._served = 0
        peer = transport.get_extra_info("peername")
        self._peer = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        server = self._manager
        assert isinstance(server, _Server)
        if len(server.connections) > limits.max_connections:
            victim = server.room_from(self, self._loop.time())
            if victim is not None and victim.transport is not None:
                victim.close_slow("max_connections")
            else:
                if isinstance(transport, asyncio.WriteTransport):
                    transport.write(_BUSY)
                self.force_close()
                transport.close()
                return
        server.unfinished(self, "fresh")
        server.cap_address(self._peer, limits.max_pending_per_address, self._loop.time())
        self._deadline = self._loop.call_later(limits.read_timeout, self._check_progress)

    def close_slow(self, why: str) -> None:
        """Close this connection to make room (``why`` names the limit), and log it."""
        if isinstance(self._manager, _Server):
            self._manager.finished(self)
            self._manager.closed_log.emit(
                logging.WARNING, "http_connection_closed", peer=self._peer, limit=why
            )
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        count = self._request_count
        super().data_received(data)
        if self._stage is None or not isinstance(self._manager, _Server):
            return
        if self._request_count > count:
            self._manager.unfinished(self, "ready")  # its headers are in: served next
        elif self._stage == "fresh" or (self._stage is None and self._current_request is None):
            self._manager.unfinished(self, "head")  # a first or a next request begins

    def reading(self) -> None:
        """A body starts to be read: the request is unfinished until ``delivered``."""
        if isinstance(self._manager, _Server):
            self._manager.unfinished(self, "body")

    def delivered(self) -> None:
        """The whole request is in: it no longer counts as unfinished."""
        self._proven = True
        if isinstance(self._manager, _Server):
            self._manager.finished(self)

    async def _handle_request(
        self,
        request: Any,
        start_time: float | None,
        request_handler: Callable[[Any], Awaitable[web.StreamResponse]],
    ) -> tuple[web.StreamResponse, bool]:
        if request.content.is_eof():  # no body, or all of it already in
            self.delivered()
        try:
            return await super()._handle_request(request, start_time, request_handler)
        finally:
            self.delivered()

    def _check_progress(self) -> None:
        """Close a connection that completed no request since the last check and is not busy."""
        if self._current_request is None and self._request_count == self._served:
            if self.transport is not None:
                self.transport.close()
            return
        self._served = self._request_count
        self._deadline = self._loop.call_later(self._limits.read_timeout, self._check_progress)

    def connection_lost(self, exc: BaseException | None) -> None:
        deadline = getattr(self, "_deadline", None)
        if deadline is not None:
            deadline.cancel()
        if isinstance(self._manager, _Server):
            self._manager.finished(self)
        super().connection_lost(exc)

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:
            return super().handle_error(request, status, exc, message)
        server = self._manager
        assert isinstance(server, _Server)
        server.malformed_log.emit(
            logging.WARNING,
            "http_malformed_request",
            status=status,
            peer=request.remote,
            error=redact(f"{type(exc).__name__}: {exc}")[:200],
        )
        response = web.Response(status=status, text=f"{status}: malformed HTTP request\n")
        response.force_close()
        return response


# Where an unfinished request is: its connection sent nothing yet, part of
# its headers, all of them (it is served next), or its body is being read.
Stage = Literal["fresh", "head", "ready", "body"]


class _Server(web.Server):
    """aiohttp's server, making ``_Handler`` connections and keeping their unfinished requests.

    ``_unfinished`` holds every connection whose request is unfinished, the
    one that moved on least recently first: a connection moves to the end
    each time its request reaches a new stage (``Stage``), so past
    ``max_connections`` the one that makes room is the one stuck longest,
    never a request that is being sent whole right now. ``_by_address``
    holds them per client address with the time each became unfinished, so
    the caps find their victim without a scan.
    """

    limits: HttpConfig
    # This server's own log lines: two daemons in one process fold apart.
    malformed_log: RateLimited
    closed_log: RateLimited
    _unfinished: dict[_Handler, None]
    _by_address: dict[str, dict[_Handler, float]]

    def __call__(self) -> RequestHandler:
        return _Handler(self, loop=self._loop, **self._kwargs)

    def unfinished(self, conn: _Handler, stage: Stage) -> None:
        """``conn``'s request is unfinished and has reached ``stage`` (from now, or still)."""
        if conn._stage == stage:
            return
        now = self._loop.time()
        if conn._stage is None:
            self._by_address.setdefault(conn._peer, {})[conn] = now
        else:
            del self._unfinished[conn]
        self._unfinished[conn] = None
        conn._stage = stage
        conn._moved = now

    def finished(self, conn: _Handler) -> None:
        """``conn``'s request is in whole, or the connection is gone."""
        if conn._stage is None:
            return
        del self._unfinished[conn]
        conn._stage = None
        mine = self._by_address.get(conn._peer)
        if mine is not None:
            mine.pop(conn, None)
            if not mine:
                del self._by_address[conn._peer]

    def room_from(self, besides: _Handler, now: float) -> _Handler | None:
        """The connection to close for ``besides``, a new one past the cap, if any.

        In order: the unfinished request that has not moved on for
        ``SLOW_AFTER`` or longer (the one stuck longest); else a newcomer, a
        connection that has not yet delivered a request whole (the one that
        moved on least recently); else the oldest idle connection. A
        connection that has delivered a request and is sending its next one,
        moving on within the second, is never closed for room: under a flood
        of sockets a producer that is in stays in, and the sockets crowd out
        each other.
        """
        newcomer: _Handler | None = None
        for conn in self._unfinished:  # least recently moved on first
            if conn is besides or conn.transport is None:
                continue
            if now - conn._moved >= SLOW_AFTER:
                return conn
            if not conn._proven:
                newcomer = conn
                break
        if newcomer is not None:
            return newcomer
        idle = (
            c
            for c in self.connections
            if c is not besides
            and isinstance(c, _Handler)
            and c._current_request is None
            and c._stage is None
            and c.transport is not None
            and not c.transport.is_closing()
        )
        return next(idle, None)

    def cap_address(self, peer: str, most: int, now: float) -> None:
        """Close the slow unfinished requests of ``peer`` past ``most``, oldest first.

        Requests unfinished for less than ``SLOW_AFTER`` are left alone: a
        burst of clients that send their requests at once is not slow.
        """
        mine = self._by_address.get(peer)
        while mine is not None and len(mine) > most:
            oldest, since = next(iter(mine.items()))
            if now - since < SLOW_AFTER:
                return
            oldest.close_slow("max_pending_per_address")
            mine = self._by_address.get(peer)


class Runner(web.AppRunner):
    limits: HttpConfig

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _Server  # the same server, making _Handler connections
        assert isinstance(server, _Server)
        server.limits = self.limits
        server.malformed_log = RateLimited()
        server.closed_log = RateLimited()
        server._unfinished = {}
        server._by_address = {}
        return server


def reading(request: web.BaseRequest) -> None:
    """``request``'s body starts to be read (``_Handler.reading``)."""
    if isinstance(request.protocol, _Handler):
        request.protocol.reading()


def delivered(request: web.BaseRequest) -> None:
    """``request`` is in whole (``_Handler.delivered``)."""
    if isinstance(request.protocol, _Handler):
        request.protocol.delivered()


def close_slow(request: web.BaseRequest, why: str) -> None:
    """Close ``request``'s connection to make room for others (``why`` names the limit)."""
    if isinstance(request.protocol, _Handler):
        request.protocol.close_slow(why)
    elif request.transport is not None:
        request.transport.close()
