"""Imports: result files counted through the suite's import ledger, once for good."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from reliabilityd.events import TrialEvent
from reliabilityd.store._base import ImportApplied, Redis, _text
from reliabilityd.store._errors import boundary
from reliabilityd.store._ingest import CHUNK, Ingest
from reliabilityd.store._recent import FOLD_AT, Recent
from reliabilityd.store._scripts import IMPORT_APPLY
from reliabilityd.store.keys import Keys


@boundary
class Imports:
    """Imported trials, the per-run ledger and the record of finished imports."""

    def __init__(self, client: Redis, keys: Keys, ingest: Ingest) -> None:
        self.client = client
        self.keys = keys
        self._ingest = ingest

    async def apply_import(
        self,
        suite: str,
        events: Sequence[TrialEvent],
        *,
        window: int,
        dedup_ttl: int,
        now: float | None = None,
        recent: Recent | None = None,
    ) -> ImportApplied:
        """Apply imported events, each (task, trial) at most once for good.

        Every chunk of ``CHUNK`` events is one EVAL that first drops the events
        the suite's import ledger already holds and records the rest, then
        counts them exactly as ``apply`` does: the ledger and the counts change
        together or not at all, so a crash between chunks loses nothing and a
        later import (even after the dedup records expired) counts nothing twice.
        """
        ledger = self.keys.imported(suite)
        acc = [0, 0, 0, 0, 0]
        already = 0
        # Up to 20 chunks per round trip bounds the client's memory on big files.
        step = 20 * CHUNK
        for group in range(0, len(events), step):
            # Each round trip with its own clock and lookback: a long import
            # writes its later chunks where live writers look then.
            stamp = repr(time.time() if now is None else now)
            width, lookback = await self._ingest.dedup_view(dedup_ttl)
            pipe = self.client.pipeline(transaction=False)
            sizes: list[int] = []
            for start in range(group, min(group + step, len(events)), CHUNK):
                chunk = events[start : start + CHUNK]
                keys, args = self._ingest.apply_call(
                    suite,
                    chunk,
                    dedup_ttl,
                    window,
                    stamp,
                    width=width,
                    lookback=lookback,
                    recent=recent,
                )
                pipe.eval(IMPORT_APPLY, len(keys) + 1, *keys, ledger, *args)
                sizes.append(len(chunk))
            # The daemon's CI loop takes this mark and recomputes the suite.
            pipe.sadd(self.keys.changed, suite)
            replies = await pipe.execute()
            logged = 0
            for size, reply in zip(sizes, replies[: len(sizes)], strict=True):
                counted, errors, skips, dups, version, _, _, log = (int(x) for x in reply)
                logged = max(logged, log)
                acc[0] += counted
                acc[1] += errors
                acc[2] += skips
                acc[3] += dups
                acc[4] = max(acc[4], version)
                already += size - (counted + errors + skips + dups)
            if recent is not None and logged >= FOLD_AT:
                await self._ingest.fold(suite, recent, down_to=FOLD_AT // 2)
        return ImportApplied(acc[0], acc[1], acc[2], acc[3], acc[4], already)

    async def record_import(self, suite: str, run: str, summary: bytes) -> bytes | None:
        """Note a finished import of ``run``; returns the earlier note if there is one."""
        key = self.keys.imports(suite)
        if await self.client.hsetnx(key, run, summary):
            return None
        earlier: Any = await self.client.hget(key, run)
        return None if earlier is None else bytes(earlier)

    async def import_records(self, suite: str) -> dict[str, bytes]:
        """Every finished import of a suite: run id -> the note written then."""
        raw = await self.client.hgetall(self.keys.imports(suite))
        return {_text(k): v if isinstance(v, bytes) else v.encode() for k, v in raw.items()}
