"""Which change marks a CI tick takes, in what order, and handing them back.

Every commit marks its series changed in Redis (``rel:{/ci}:changed``). A
tick claims marks in batches of ``CLAIM_BATCH`` (the claim script moves them
into the claims with a deadline, so a replica that dies holding them loses
nothing) and releases each batch once its snapshots are written.

Order: a change is fresh within one tick when the first tick to begin after
its commit writes it; one committed during a tick has until the end of the
next. So a tick first reads up to ``FIRST_READ`` marks and claims those by
name (those the last tick found and did not reach first, then the rest in a
shuffled order of this replica's own, so two replicas mostly take different
names), and only then claims at random while a burst lasts. A tick cut off
by its deadline leaves the marks made during it, or, under a backlog larger
than a tick computes, the oldest it found, which the next tick takes first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from reliabilityd.backoff import JITTER
from reliabilityd.store import Store

__all__ = ["CLAIM_BATCH", "Claims"]

# Change marks taken per claim, and how long a claim lasts before it returns.
CLAIM_BATCH = 256
CLAIM_LIFETIME = 30.0
# The marks a tick reads at its start to claim first: more than one tick computes
# (1,500-2,100 series a second on one core), a bounded read however large the backlog.
FIRST_READ = 16_384
# A claim is computed in batches of LANE_BATCH series (one pipeline per step, one
# vectorised pass of math), given to the caller's ``compute`` all at once.
LANE_BATCH = 128


class Claims:
    """One replica's claims of change marks, tick after tick."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # The marks the last tick found and did not reach before its deadline.
        self._carried: list[str] = []
        # Claims a Redis error interrupted, handed back at the next tick.
        self._unfinished: set[str] = set()

    async def hand_back(self) -> None:
        """Claims a Redis error interrupted: marked again and released now, rather than
        when they expire."""
        if self._unfinished:
            await self.store.snapshots.mark_changed(sorted(self._unfinished))
            await self.store.snapshots.release_claims(sorted(self._unfinished))
            self._unfinished.clear()

    async def _first(self) -> list[str]:
        found = await self.store.snapshots.some_changed(FIRST_READ)
        present = set(found)
        first = [mark for mark in self._carried if mark in present]
        carried = set(first)
        fresh = [mark for mark in found if mark not in carried]
        JITTER.shuffle(fresh)  # an order of this replica's own
        return first + fresh

    async def drain(
        self, deadline: float, compute: Callable[[list[str]], Awaitable[None]]
    ) -> list[str]:
        """Claim and ``compute`` batch after batch until no mark is left to claim or
        ``deadline`` (monotonic) passes; the marks claimed. A Redis error from ``compute``
        releases the rest of its claim, keeps the failed batches for ``hand_back`` and
        is raised."""
        first = await self._first()
        taken = 0
        done: list[str] = []
        try:
            while True:
                named = first[taken : taken + CLAIM_BATCH]
                taken += len(named)
                claimed, held = await self.store.snapshots.claim_marks(
                    CLAIM_BATCH, CLAIM_LIFETIME, named
                )
                batches = [claimed[i : i + LANE_BATCH] for i in range(0, len(claimed), LANE_BATCH)]
                results = await asyncio.gather(
                    *(compute(batch) for batch in batches), return_exceptions=True
                )
                failed = [(b, r) for b, r in zip(batches, results, strict=True) if r is not None]
                if failed:
                    self._unfinished.update(s for b, _ in failed for s in b)
                    await self.store.snapshots.release_claims(
                        [s for s in claimed if s not in self._unfinished]
                    )
                    raise failed[0][1]
                # One write for the claims (each write waits for the AOF fsync).
                await self.store.snapshots.release_claims(claimed)
                done.extend(claimed)
                if time.monotonic() >= deadline:
                    return done
                if taken < len(first):
                    continue
                if named:
                    # The last of the marks found: fewer than a claim's worth end the tick
                    # as one short claim would; after a burst, go on with those made since.
                    if len(first) < CLAIM_BATCH:
                        return done
                    continue
                # Marks held back are series another replica is computing: the claim after
                # its release takes them, and more marks may wait behind them.
                if not claimed or len(claimed) + held < CLAIM_BATCH:
                    return done
        finally:
            self._carried = first[taken:]
