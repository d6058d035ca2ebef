"""Live values: a suite's point estimates and counters refreshed soon after each commit.

Commits name their suites (``committed``); the loop refreshes each within
``LIVE_INTERVAL``, without a CI, under the settings the daemon has now (a
reload's included). A Redis error leaves the suite due for the next round.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from reliabilityd.alerting.watchdog import describe
from reliabilityd.logs import RateLimited
from reliabilityd.stats import snapshot
from reliabilityd.store import Store, StoreError

__all__ = ["LIVE_INTERVAL", "LiveValues"]

LIVE_INTERVAL = 0.2


class LiveValues:
    """The suites whose live values are due, and the loop that refreshes them."""

    def __init__(self, store: Store, settings: Callable[[str], snapshot.StatsSettings]) -> None:
        self.store = store
        self.settings = settings
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        self._failed_log = RateLimited()

    def committed(self, suites: Sequence[str]) -> None:
        """These suites' live values are due (called after every commit)."""
        self._dirty.update(suites)
        self._wake.set()

    async def refresh(self, suite: str) -> None:
        """Point estimates and counters of the suite's current version, no CI."""
        state = await self.store.reads.read_state(suite)
        c = state.counters
        estimates = snapshot.point_estimates(state.hist, self.settings(suite))
        values: dict[str, str | int] = {
            **snapshot.counter_fields(state.hist.tasks, c.trials, c.errors, c.skips, c.duplicates),
            "live_updated_at": snapshot.rfc3339(time.time()),
            **snapshot.value_fields(estimates),
        }
        await self.store.snapshots.write_snapshot(suite, c.version, {}, values)

    async def loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._wake.wait()
            self._wake.clear()
            dirty, self._dirty = self._dirty, set()
            for suite in sorted(dirty):
                try:
                    await self.refresh(suite)
                except StoreError as exc:
                    self._failed_log.emit(
                        logging.WARNING, "live_refresh_failed", suite=suite, error=describe(exc)
                    )
                    self._dirty.add(suite)
            await asyncio.sleep(LIVE_INTERVAL)
            if self._dirty:
                self._wake.set()
