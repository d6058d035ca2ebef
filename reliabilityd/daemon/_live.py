"""Live values: a suite's point estimates and counters refreshed soon after each commit.

Commits name their suites and the versions they made (``committed``); the
loop refreshes each within ``LIVE_INTERVAL``, without a CI, under the
settings the daemon has now (a reload's included): every suite due in one
round together, in one pipeline of reads, one vectorised pass of point
estimates and one pipeline of writes. A Redis error leaves the round's
suites due for the next round; a suite whose state does not compute is
refreshed alone, so it costs the others nothing.

The CI tick writes the same value fields with every snapshot. While it
recomputes (``yielding``) no round begins: commits wait, one entry a suite
however many come, and a suite whose snapshot the tick writes at or past
its due version is no longer due (``written``). So a series changed while
the tick drains its marks is read once, by the tick, not also by this
loop, and the tick never waits behind it; a suite is refreshed here only
when no snapshot this replica's tick wrote holds its last commit, at most
one round after the tick that held it back (a hold as long as the tick's
claim loop: its deadline is checked between batches).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

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
        # Each due suite, with the newest version a commit made of it.
        self._dirty: dict[str, int] = {}
        self._wake = asyncio.Event()
        # Clear while the CI tick recomputes (``yielding``): no round begins.
        self._open = asyncio.Event()
        self._open.set()
        self._failed_log = RateLimited()

    @property
    def due(self) -> dict[str, int]:
        """The suites due now, each with the version it is due at."""
        return dict(self._dirty)

    def committed(self, applied: Iterable[tuple[str, int]]) -> None:
        """These (suite, version) pairs' live values are due (called after every commit)."""
        self._due(applied)
        self._wake.set()

    def written(self, versions: Mapping[str, int]) -> None:
        """Snapshots, values included, were written at these versions (suite: version):
        a suite due at or below its version is due no more."""
        for suite, version in versions.items():
            due = self._dirty.get(suite)
            if due is not None and due <= version:
                del self._dirty[suite]

    @contextlib.contextmanager
    def yielding(self) -> Iterator[None]:
        """While the CI tick recomputes: no round begins, and one in progress stops after
        its current batch (its other suites stay due). One tick at a time holds it."""
        self._open.clear()
        try:
            yield
        finally:
            self._open.set()

    def _due(self, applied: Iterable[tuple[str, int]]) -> None:
        for suite, version in applied:
            if self._dirty.get(suite, -1) < version:
                self._dirty[suite] = version

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
        """One round's refresh; each suite alone when the round's state does not compute,
        and a suite that does not compute alone is logged and left (the tick sets it
        aside too): the others get theirs, and the loop goes on."""
        try:
            await self.refresh_many(suites)
            return
        except StoreError:
            raise
        except Exception:
            pass
        for suite in suites:
            try:
                await self.refresh_many([suite])
            except StoreError:
                raise
            except Exception as exc:
                self._failed_log.emit(
                    logging.WARNING,
                    "live_refresh_failed",
                    suite=suite,
                    suites=1,
                    error=describe(exc),
                )

    async def loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._wake.wait()
            await self._open.wait()
            self._wake.clear()
            dirty, self._dirty = self._dirty, {}
            due = sorted(dirty)
            for begin in range(0, len(due), ROUND_BATCH):
                if not self._open.is_set():
                    # The tick began: the rest wait for it (it may write them).
                    self._due((suite, dirty[suite]) for suite in due[begin:])
                    break
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
                    self._due((suite, dirty[suite]) for suite in batch)
            await asyncio.sleep(LIVE_INTERVAL)
            if self._dirty:
                self._wake.set()
