"""The HTTP port's connections: the file-limit reserve and aiohttp's request handler.

``connection_limit`` keeps ``http.max_connections`` under the process's file
limit; ``Runner`` serves the app with handlers that close slow clients, cap
open connections (the oldest idle one makes room) and log a malformed
request as one rate-limited line that never echoes what was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
from typing import Any

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


# Descriptors the daemon keeps beside its HTTP connections (Redis and MQTT
# connections, the listening socket, log files, the event loop's own), on
# top of one per request in flight (the HTTP port's Redis pool).
FD_RESERVE = 64
MIN_CONNECTIONS = 8
# The listening socket's queue: asyncio accepts up to this many connections
# in one go before the handler sees any, so the file limit must hold them too.
BACKLOG = 64


def connection_limit(config: HttpConfig) -> int:
    """``http.max_connections``, kept under the process's file limit.

    Each connection holds a descriptor; with the file table full, the daemon
    could not accept ``/healthz``, reconnect to Redis or open its broker
    connection. The soft ``RLIMIT_NOFILE`` is raised towards the hard one as
    far as needed; past what that allows, the limit is lowered (logged as
    ``http_connections_clamped``). ConfigError when fewer than
    ``MIN_CONNECTIONS`` would remain.
    """
    reserve = FD_RESERVE + config.max_inflight + BACKLOG
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


_malformed = RateLimited()


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
    (a slowloris, say) is closed. Past ``max_connections`` the oldest
    connection that has no request in hand (idle, or still sending headers)
    is closed to make room, so a flood of idle sockets cannot keep
    ``/healthz`` or a producer out; when every connection is busy with a
    request the new one is answered 503 and closed. A malformed request is
    logged as one rate-limited line with secrets masked, never a traceback,
    and answered without echoing what was sent (it may hold a bearer token).
    """

    __slots__ = ("_deadline", "_limits", "_served")

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        limits: HttpConfig = getattr(self._manager, "limits")  # noqa: B009
        self._limits = limits
        self._served = 0
        if self._manager is not None and len(self._manager.connections) > limits.max_connections:
            idle = next(
                (
                    c
                    for c in self._manager.connections
                    if c is not self
                    and isinstance(c, _Handler)
                    and c._current_request is None
                    and c.transport is not None
                    and not c.transport.is_closing()
                ),
                None,
            )
            if idle is not None and idle.transport is not None:
                idle.transport.close()
            else:
                if isinstance(transport, asyncio.WriteTransport):
                    transport.write(_BUSY)
                self.force_close()
                transport.close()
                return
        self._deadline = self._loop.call_later(limits.read_timeout, self._check_progress)

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
        _malformed.emit(
            logging.WARNING,
            "http_malformed_request",
            status=status,
            peer=request.remote,
            error=redact(f"{type(exc).__name__}: {exc}")[:200],
        )
        response = web.Response(status=status, text=f"{status}: malformed HTTP request\n")
        response.force_close()
        return response


class _Server(web.Server):
    limits: HttpConfig

    def __call__(self) -> RequestHandler:
        return _Handler(self, loop=self._loop, **self._kwargs)


class Runner(web.AppRunner):
    limits: HttpConfig

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _Server  # the same server, making _Handler connections
        server.limits = self.limits  # type: ignore[attr-defined]
        return server
