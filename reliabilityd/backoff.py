"""The one retry pacing of reliabilityd: capped exponential backoff with jitter.

Every loop that retries (Redis commits, reconnects, sinks, restarted loops)
waits through a ``Backoff``, so the caps live in one place and a stop signal
always cuts a wait short.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random

# reliabilityd's one generator for jitter and spread (backoff delays, re-read times, the
# order a replica claims marks in): the process-wide one belongs to the application,
# and a test that seeds or watches it must not see the daemon's loops draw from it.
# A forked child reseeds it: it draws its own jitter, not its parent's sequence again.
JITTER = random.Random()
os.register_at_fork(after_in_child=JITTER.seed)


class Backoff:
    """Delays ``start, 2 start, 4 start, ...`` up to ``cap``, each with +-``jitter`` share."""

    def __init__(self, start: float = 0.1, cap: float = 5.0, jitter: float = 0.1) -> None:
        if not 0 < start <= cap:
            raise ValueError("backoff needs 0 < start <= cap")
        self.start = start
        self.cap = cap
        self.jitter = jitter
        self._next = start
        self.attempts = 0

    def next_delay(self) -> float:
        """The delay to wait now; the one after it doubles (up to the cap)."""
        delay = self._next
        self._next = min(self._next * 2, self.cap)
        self.attempts += 1
        if self.jitter:
            delay *= 1 + JITTER.uniform(-self.jitter, self.jitter)
        return delay

    def reset(self) -> None:
        """After a success: the next failure waits ``start`` again."""
        self._next = self.start
        self.attempts = 0

    async def wait(self, stop: asyncio.Event | None = None) -> float:
        """Sleep the next delay, or less if ``stop`` is set meanwhile; returns the delay."""
        delay = self.next_delay()
        if stop is None:
            await asyncio.sleep(delay)
        else:
            await sleep_or_stop(stop, delay)
        return delay


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
