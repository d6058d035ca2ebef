"""Administration: instance heartbeats and write probes, forgetting tasks, resetting suites."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast

import msgspec

from reliabilityd.store import _recent
from reliabilityd.store._base import Redis, _text
from reliabilityd.store._errors import boundary
from reliabilityd.store._recent import Recent
from reliabilityd.store._rows import Rows
from reliabilityd.store._scripts import EXPIRE_IDLE, FORGET, RELEASE
from reliabilityd.store.keys import Keys, Series, glob_escape

# KEYS of FORGET and EXPIRE_IDLE, in order (then each run's count hash).
_FORGET_KEYS = (
    "meta",
    "tasks",
    "hist",
    "lottery",
    "touched",
    "recent",
    "failures",
    "runs",
    "run",
    "totals",
)


@boundary
class Admin:
    """Liveness of instances and the lifecycle of suites and tasks."""

    def __init__(self, client: Redis, keys: Keys, rows: Rows) -> None:
        self.client = client
        self.keys = keys
        self.rows = rows

    async def heartbeat(self, instance: str, ttl: float, info: Mapping[str, Any]) -> None:
        await self.client.set(
            self.keys.heartbeat(instance), msgspec.json.encode(info), px=int(ttl * 1000)
        )

    async def heartbeat_info(self, instance: str) -> dict[str, Any] | None:
        """The instance's last heartbeat document, None when there is none (or unreadable)."""
        raw = await self.client.get(self.keys.heartbeat(instance))
        if raw is None:
            return None
        try:
            info = msgspec.json.decode(raw)
        except msgspec.DecodeError:
            return None
        return cast(dict[str, Any], info) if isinstance(info, dict) else None

    async def heartbeat_age(self, instance: str) -> float | None:
        """Seconds since the instance's last heartbeat, None when there is none."""
        info = await self.heartbeat_info(instance)
        if info is None:
            return None
        return max(0.0, time.time() - float(info.get("at", 0.0)))

    async def ping(self) -> None:
        """One PING: returns once Redis answers (``/readyz``)."""
        await self.client.ping()

    async def probe_write(self, instance: str) -> None:
        """One small write with a TTL: raises the StoreError that would stop ingest."""
        await self.client.set(self.keys.probe(instance), "1", px=5000)

    async def forget_task(self, suite: str, task: str, recent: Recent | None = None) -> bool:
        """Remove one task from the suite's counts, histogram, lottery index, recent
        trials and per-run counts, atomically.

        Then from each slice of the suite that has it (one call per slice).
        The suite's trial log is folded first (with ``recent``, the suite's
        settings), so none of the task's trials is left to be folded back.
        """
        await _recent.fold(self.client, self.keys, suite, recent or Recent())
        keys = await self._forget_keys(suite)
        if not int(await self.client.eval(FORGET, len(keys), *keys, task)):
            return False
        marks = [suite]
        for raw in await self.client.hkeys(self.keys.slices(suite)):
            series = Series(suite, _text(raw))
            keys = [self.keys.series(series, name) for name in _FORGET_KEYS]
            if int(await self.client.eval(FORGET, len(keys), *keys, task)):
                marks.append(series.member)
        await self.client.sadd(self.keys.changed, *marks)  # the CI loop recomputes them
        return True

    async def expire_idle(
        self, suite: str, before: float, limit: int = 500, recent: Recent | None = None
    ) -> int:
        """Take out (at most ``limit``) tasks without an event since ``before``; how many left.

        Only tasks of suites applied with ``touch`` are in the idle index. A
        task's recent trials leave with it (the trial log folded first).
        """
        await _recent.fold(self.client, self.keys, suite, recent or Recent())
        keys = await self._forget_keys(suite)
        gone = int(await self.client.eval(EXPIRE_IDLE, len(keys), *keys, repr(before), limit))
        if gone:
            await self.client.sadd(self.keys.changed, suite)  # the CI loop recomputes it
        return gone

    async def _forget_keys(self, suite: str) -> list[str]:
        """FORGET's KEYS for the suite: ``_FORGET_KEYS``, then each of its runs' counts."""
        keys = [self.keys.suite(suite, name) for name in _FORGET_KEYS]
        runs: list[Any] = await self.client.zrange(self.keys.suite(suite, "runs"), 0, -1)
        return keys + [self.keys.suite(suite, f"run:{_text(r)}") for r in runs]

    async def reset_suite(self, suite: str, batch: int = 1000) -> int:
        """Delete every key of the suite, its summary rows, and drop it from the suite list;
        returns keys deleted.

        The counts go first, in one command, so readers never see half a
        suite; dedup records and alert state follow by SCAN (O(keys in the
        database): an administrative command, not a hot path).
        """
        core = [
            self.keys.suite(suite, name)
            for name in ("meta", "tasks", "totals", "hist", "lottery", "snapshot", "runs", "run")
        ]
        slice_ids = [_text(s) for s in await self.client.hkeys(self.keys.slices(suite))]
        deleted = int(await self.client.delete(*core))
        # Its summary rows go with its counts: no list shows a suite Redis no longer has.
        await self.rows.drop([suite], [Series(suite, sid) for sid in slice_ids])
        pattern = glob_escape(self.keys.suite(suite, "")) + "*"
        pending: list[Any] = []
        async for key in self.client.scan_iter(match=pattern, count=batch):
            pending.append(key)
            if len(pending) >= batch:
                deleted += int(await self.client.unlink(*pending))
                pending = []
        if pending:
            deleted += int(await self.client.unlink(*pending))
        keys = self.keys
        await self.client.eval(RELEASE, 3, keys.suites, keys.suite_pools, keys.pool_sizes, suite)
        await self.client.srem(keys.changed, suite)
        return deleted
