"""Request bodies in flight: each read under a deadline, all of them under one memory budget.

A body is read before its request takes an inflight place
(``http.max_inflight``), so a client slow to send its body holds a
connection, never a place that other requests need. ``Bodies`` bounds the
bytes buffered across every request at once (``http.max_body_bytes``),
bodies being read and bodies being committed alike. A chunk that would pass
the budget first closes the connections of the slow bodies still being read
(unfinished for more than ``SLOW_AFTER``), oldest first; when that frees too
little, its request is answered 503 with Retry-After. Bodies are counted as
they arrive, not by their declared length, so a client that declares a
large body and trickles it holds only what it sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from reliabilityd.daemon._http_server import SLOW_AFTER, close_slow, delivered, reading
from reliabilityd.errors import ReliabilitydError

__all__ = ["Bodies", "BodyRefused"]

T = TypeVar("T")


class BodyRefused(ReliabilitydError):
    """A body that was not read whole: the HTTP status and the reason to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(eq=False)
class _Held:
    """The bytes one request's body holds of the budget."""

    since: float
    close: Callable[[], None]
    size: int = 0
    dropped: bool = False  # closed to make room: its bytes are already given back


class Bodies:
    """The budget of body bytes buffered at once, and the reads it bounds."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.used = 0
        self._clock = clock
        # Bodies still being read, oldest first: the ones that may be closed for room.
        self._reading: dict[_Held, None] = {}

    def hold(self, close: Callable[[], None]) -> _Held:
        """A body starts to be read; ``close`` ends its connection if it must make room."""
        held = _Held(self._clock(), close)
        self._reading[held] = None
        return held

    def take(self, held: _Held, size: int) -> bool:
        """``size`` more bytes for ``held``; False when even closing slow reads leaves no room."""
        if held.dropped:
            return False
        now = self._clock()
        while self.used + size > self.limit:
            victim = next((h for h in self._reading if h is not held), None)
            if victim is None or now - victim.since < SLOW_AFTER:
                return False
            self._drop(victim)
            victim.close()
        held.size += size
        self.used += size
        return True

    def read_done(self, held: _Held) -> None:
        """The body is in whole: it keeps its bytes but may no longer be closed for room."""
        self._reading.pop(held, None)

    def release(self, held: _Held) -> None:
        """The request is answered: its bytes go back to the budget."""
        if not held.dropped:
            self._drop(held)

    def _drop(self, held: _Held) -> None:
        self._reading.pop(held, None)
        self.used -= held.size
        held.size = 0
        held.dropped = True

    @contextlib.asynccontextmanager
    async def read(
        self, request: web.BaseRequest, *, max_payload: int, seconds: float
    ) -> AsyncIterator[bytes]:
        """The whole body of ``request``, held against the budget until the block ends.

        BodyRefused with 413 past ``max_payload`` (after decompression), 408
        when it is not in within ``seconds`` or its connection was
        closed, 503 when the budget has no room for it.
        """
        held = self.hold(lambda: close_slow(request, "max_body_bytes"))
        reading(request)
        try:
            chunks: list[bytes] = []
            total = 0
            try:
                async with asyncio.timeout(seconds):
                    while chunk := await request.content.readany():
                        total += len(chunk)
                        if total > max_payload:
                            raise BodyRefused(
                                413, f"body exceeds {max_payload} bytes (after decompression)"
                            )
                        if not self.take(held, len(chunk)):
                            raise BodyRefused(
                                408 if held.dropped else 503,
                                "closed to make room for other bodies"
                                if held.dropped
                                else f"bodies in flight fill http.max_body_bytes ({self.limit}): "
                                "retry",
                            )
                        chunks.append(chunk)
            except TimeoutError:
                raise BodyRefused(408, f"body not sent within {seconds} s") from None
            except (ConnectionError, asyncio.IncompleteReadError):
                raise BodyRefused(408, "the connection closed before the body was in") from None
            except RuntimeError:
                # aiohttp's StreamReader says "Connection closed." this way when the
                # connection is gone before a read starts waiting.
                if request.protocol is not None and request.protocol.transport is not None:
                    raise
                raise BodyRefused(408, "the connection closed before the body was in") from None
            except HttpProcessingError as exc:  # a broken chunked encoding or compression
                raise BodyRefused(400, f"malformed body: {exc.message[:200]}") from None
            self.read_done(held)
            delivered(request)
            yield b"".join(chunks)
        finally:
            self.release(held)

    async def handle(
        self,
        request: web.BaseRequest,
        inflight: asyncio.Semaphore,
        handle: Callable[[bytes], Awaitable[T]],
        max_payload: int,
        seconds: float,
    ) -> T:
        """Read the body (``read``), then ``handle`` it in one of ``inflight``'s places.

        The body first: a client slow to send it holds its connection and
        the bytes it sent, never a place other requests need. BodyRefused
        as ``read`` does, and 503 when every place is taken.
        """
        async with self.read(request, max_payload=max_payload, seconds=seconds) as payload:
            if inflight.locked():
                raise BodyRefused(503, "requests in flight fill http.max_inflight: retry")
            async with inflight:
                return await handle(payload)
