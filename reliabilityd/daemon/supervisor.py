"""The supervisor of the daemon's long-running loops.

A loop that fails for an unexpected reason is logged with its traceback and
started again after a capped backoff; only cancellation and a configuration
error (which no restart can fix) end it. The daemon runs every supervised
loop in one ``asyncio.TaskGroup``, so it exits only on a stop signal or a
configuration error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from reliabilityd.backoff import Backoff, sleep_or_stop
from reliabilityd.errors import ConfigError
from reliabilityd.logs import RateLimited, kv, log

# A loop that ran this long before failing starts again from the shortest wait.
HEALTHY_RUN = 60.0


async def supervise(
    name: str,
    run: Callable[[], Awaitable[None]],
    stop: asyncio.Event,
    *,
    backoff: Backoff | None = None,
) -> None:
    """Run ``run()`` until ``stop`` is set, restarting it whenever it fails or returns early."""
    pace = backoff or Backoff(0.5, 30.0)
    while not stop.is_set():
        started = time.monotonic()
        try:
            await run()
        except (asyncio.CancelledError, ConfigError):
            raise
        except Exception:
            if time.monotonic() - started > HEALTHY_RUN:
                pace.reset()
            delay = pace.next_delay()
            log.exception("%s", kv("loop_failed", loop=name, restart_in=round(delay, 2)))
            await sleep_or_stop(stop, delay)
            continue
        if stop.is_set():
            return
        # A loop returns only when told to stop; anything else is a fault.
        delay = pace.next_delay()
        log.warning("%s", kv("loop_returned", loop=name, restart_in=round(delay, 2)))
        await sleep_or_stop(stop, delay)


class LoopErrors:
    """An event loop's exception handler: errors with an OSError (a full file table,
    say) are one line at a limited rate, no traceback; anything else goes to
    asyncio's default handler. One per loop, so two loops' lines fold apart."""

    def __init__(self) -> None:
        self._log = RateLimited()

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError):
            self._log.emit(
                logging.ERROR,
                "event_loop_os_error",
                message=str(context.get("message", "")),
                error=f"{type(exc).__name__}: {exc}",
            )
            return
        loop.default_exception_handler(context)
