"""CPU-bound work of the HTTP port in worker threads, a bounded number of requests at once.

Decoding a megabyte of OTLP or comparing two 50,000-task sides is a fraction
of a second of Python: on the event loop it would stall every other request,
``/healthz`` included. A request holds one of a ``Slots``' places while it
works (waiting at most ``wait`` seconds for one, else ``Busy``) and runs its
CPU-bound steps through the place's ``Worker``, in the default executor's
threads. numpy releases the GIL in its kernels; the Python between them
shares it with the loop, which gets it back every switch interval (5 ms).

A place is given back when its holder is done *and* its last thread has
returned: a request cancelled mid-computation (the server shutting down)
keeps its place until the thread it started ends, so the bound holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Busy(Exception):
    """Every place was taken for ``wait`` seconds: answer 503 with Retry-After."""


def _retrieve(future: asyncio.Future[Any]) -> None:
    # A result nobody awaits any more (its caller was cancelled) is read here,
    # so asyncio does not log "exception was never retrieved".
    if not future.cancelled():
        future.exception()


class Worker:
    """Runs a slot holder's functions in worker threads, one after another."""

    def __init__(self) -> None:
        self._pending: asyncio.Future[Any] | None = None

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread; its result, or its exception."""
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(None, functools.partial(fn, *args))
        future.add_done_callback(_retrieve)
        self._pending = future
        # Shielded: a cancelled caller leaves the thread's future alone, and
        # the slot waits for it (``_release_when_idle``).
        return await asyncio.shield(future)

    def _release_when_idle(self, release: Callable[[], None]) -> None:
        future = self._pending
        if future is None or future.done():
            release()
        else:
            future.add_done_callback(lambda _: release())


class Slots:
    """``limit`` places for CPU-bound requests; ``wait`` seconds to get one (None: as long
    as it takes)."""

    def __init__(self, limit: int, wait: float | None = None) -> None:
        self.limit = limit
        self.wait = wait
        self._free = asyncio.Semaphore(limit)

    @property
    def busy(self) -> int:
        """Places held now (for tests and metrics)."""
        return self.limit - self._free._value

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[Worker]:
        """A place for the duration of the block, and the worker to run its steps; Busy when
        none came free within ``wait``."""
        try:
            async with asyncio.timeout(self.wait):
                await self._free.acquire()
        except TimeoutError:
            raise Busy(f"{self.limit} at once already, none done within {self.wait} s") from None
        worker = Worker()
        try:
            yield worker
        finally:
            worker._release_when_idle(self._free.release)
