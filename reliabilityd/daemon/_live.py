"""Live values: a suite's point estimates and counters refreshed soon after each commit.

Commits name their suites (``committed``); the loop refreshes each within
``LIVE_INTERVAL``, without a CI, under the settings the daemon has now (a
reload's included): every suite due in one round together, in one pipeline
of reads, one vectorised pass of point estimates and one pipeline of
writes. A Redis error leaves the round's suites due for the next round; a
suite whose state does not compute is refreshed alone, so it costs the
others nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from reliabilityd.alerting.watchdog import describe
from reliabilityd.logs import RateLimited
from reliabilityd.stats import snapshot
from reliabilityd.store import SnapshotWrite, Store, StoreError

__all__ = ["LIVE_INTERVAL", "LiveValues"]

LIVE_INTERVAL = 0.2
# Suites refreshed per pipeline: a round of thousands goes in a few.
ROUND_BATCH = 256


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
        await self.refresh_many([suite])

    async def refresh_many(self, suites: Sequence[str]) -> None:
        """``refresh`` of each suite: one round trip of reads, one of writes."""
        if not suites:
            return
        states = await self.store.reads.read_states(suites)
        estimates = snapshot.point_estimates_many(
            [
                (state.hist, self.settings(suite))
                for suite, state in zip(suites, states, strict=True)
            ]
        )
        now = snapshot.rfc3339(time.time())
        writes = []
        for suite, state, est in zip(suites, states, estimates, strict=True):
            c = state.counters
            values: dict[str, str | int] = {
                **snapshot.counter_fields(
                    state.hist.tasks, c.trials, c.errors, c.skips, c.duplicates
                ),
                "live_updated_at": now,
                **snapshot.value_fields(est),
            }
            writes.append(SnapshotWrite(suite, c.version, {}, values))
        await self.store.snapshots.write_snapshots(writes)

    async def _round(self, suites: list[str]) -> None:
        """One round's refresh; each suite alone when the round's state does not compute."""
        try:
            await self.refresh_many(suites)
            return
        except StoreError:
            raise
        except Exception:
            if len(suites) == 1:
                raise
        for suite in suites:
            await self.refresh_many([suite])

    async def loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._wake.wait()
            self._wake.clear()
            dirty, self._dirty = self._dirty, set()
            due = sorted(dirty)
            for begin in range(0, len(due), ROUND_BATCH):
                batch = due[begin : begin + ROUND_BATCH]
                try:
                    await self._round(batch)
                except StoreError as exc:
                    self._failed_log.emit(
                        logging.WARNING,
                        "live_refresh_failed",
                        suite=batch[0],
                        suites=len(batch),
                        error=describe(exc),
                    )
                    self._dirty.update(batch)
            await asyncio.sleep(LIVE_INTERVAL)
            if self._dirty:
                self._wake.set()
