"""Synchronous code over asyncio: one event loop in a thread of its own.

``Client`` and ``Emitter`` both serve plain code (scripts, notebooks, agents
with a loop of their own already running) with asyncio machinery inside.
The loop lives in a daemon thread; a call blocks the caller until its
coroutine finishes there. Objects bound to a loop (redis-py's connections,
an MQTT connection) must be made by coroutines run on this loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["LoopThread"]


class LoopThread:
    """An event loop running in a daemon thread, for synchronous callers."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        return self.loop.is_closed()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start the coroutine on the loop; its result arrives in the returned future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run the coroutine on the loop and wait for its result (or raise its error)."""
        return self.submit(coro).result(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Stop the loop once what it runs now yields, and join the thread. Idempotent."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.loop.close()
