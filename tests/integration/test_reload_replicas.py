"""Two replicas reloaded at different moments converge (real daemons, real Redis).

While one runs the new config and the other the old, each one's reconcile finds
the snapshots the other computed under other settings and recomputes them: they
re-mark each other's work. Once both have reloaded the same file they agree on
every suite's settings, and reconcile after reconcile recomputes nothing.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec
import pytest

from reliabilityd.config import Config, DaemonConfig, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.daemon._reload import Reloader
from reliabilityd.events import TrialEvent
from reliabilityd.store import Store, Undecodable
from reliabilityd.testing import TestingSource
from tests.support.daemon import running
from tests.support.helpers import wait_until
from tests.support.servers import RedisServer

SUITES = [f"bot-{i}" for i in range(6)]
RECONCILE = 0.4  # seconds between two reconciles of one replica (RECONCILE_EVERY)


def config(redis: RedisServer, prefix: str, instance: str, ks: list[int]) -> Config:
    return Config(
        redis=RedisConfig(url=redis.url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=ks, ci_interval=0.15, n_boot=200),
        daemon=DaemonConfig(instance=instance),
    )


def trials() -> dict[str, list[TrialEvent]]:
    return {
        s: [
            TrialEvent(s, f"task {t}", f"r{r}", "pass" if (t + r) % 3 else "fail")
            for t in range(8)
            for r in range(6)
        ]
        for s in SUITES
    }


async def stamps(store: Store) -> dict[str, tuple[str | None, str]]:
    """Per suite: the settings its stored snapshot was computed under, and when."""
    versions = await store.snapshots.versions(SUITES)
    docs = await store.snapshots.documents(SUITES)
    out = {}
    for suite, (_, _, settings), doc in zip(SUITES, versions, docs, strict=True):
        assert not isinstance(doc, Undecodable), doc
        out[suite] = (settings, "" if doc is None else doc.updated_at)
    return out


async def reconciles(daemons: list[Daemon], count: int) -> None:
    """Until each daemon has reconciled ``count`` more times."""
    marks = [d.recompute._next_reconcile for d in daemons]

    async def done() -> bool:
        return all(
            d.recompute._next_reconcile >= m + (count - 0.5) * RECONCILE
            for d, m in zip(daemons, marks, strict=True)
        )

    await wait_until(done, 30)


async def test_replicas_reloaded_at_different_moments_stop_re_marking_each_others_work(
    redis_server: RedisServer, prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("reliabilityd.daemon._recompute.RECONCILE_EVERY", RECONCILE)
    old_a, old_b = (config(redis_server, prefix, name, [1, 3]) for name in ("a", "b"))
    async with running(old_a) as a, running(old_b) as b:
        await TestingSource(e for events in trials().values() for e in events).run(a.commit)
        old = a.recompute.fingerprint(SUITES[0])
        assert b.recompute.fingerprint(SUITES[0]) == old

        async def all_computed_under(fingerprint: str) -> bool:
            return all(s == fingerprint for s, _ in (await stamps(a.store)).values())

        await wait_until(lambda: all_computed_under(old), 30)

        # Both files get a new k; A reloads now, B only later.
        reloaders = []
        for daemon, name in ((a, "a"), (b, "b")):
            path = tmp_path / f"{name}.toml"
            path.write_bytes(msgspec.toml.encode(config(redis_server, prefix, name, [1, 3, 5])))
            reloaders.append(Reloader(daemon, str(path), logging.INFO))
        assert await reloaders[0].reload()
        new = a.recompute.fingerprint(SUITES[0])
        assert new != old

        # Mixed: each reconcile of one of them finds the other's work stale and redoes it.
        seen: dict[str, set[str]] = {s: set() for s in SUITES}

        async def re_marked() -> bool:
            for suite, (_, updated) in (await stamps(a.store)).items():
                seen[suite].add(updated)
            return all(len(times) >= 4 for times in seen.values())

        await wait_until(re_marked, 30)

        assert await reloaders[1].reload()
        assert b.recompute.fingerprint(SUITES[0]) == new
        await wait_until(lambda: all_computed_under(new), 30)
        # Marks either one set before B's reload may still be claimed once more:
        # both reconcile under the new settings, and the marks run out.
        await reconciles([a, b], 2)

        async def no_marks() -> bool:
            return await a.store.snapshots.changed() == []

        await wait_until(no_marks, 30)
        await reconciles([a, b], 1)
        settled = await stamps(a.store)
        assert all(fingerprint == new for fingerprint, _ in settled.values())
        # Reconcile after reconcile, neither replica re-marks anything.
        await reconciles([a, b], 4)
        assert await stamps(a.store) == settled
        assert await a.store.snapshots.changed() == []
