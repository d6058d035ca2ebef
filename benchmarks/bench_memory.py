"""Benchmark: Redis memory per suite of 50 tasks x 6 trials, beside the previous layout.

A private redis-server; ``--suites`` suites (default 1,000), each of 50
tasks with 6 trials apiece committed through the ingest path (the counters,
histogram, tasks hash, lottery index, dedup records and change marks a real
commit writes), then one daemon's CI ticks until no mark is left (each
suite's snapshot and its first history point at the default k = [1, 5]):
the scale probe's shape. The figures, all from the same run:

* ``used_memory`` grown per suite, everything included, and each kind of key
  by ``MEMORY USAGE`` (the shared dedup buckets divided among the suites);
* the same suite under the previous history layout (a 28,608-byte string per
  k, written whole at the first point), measured on such strings here;
* the per-series budget: one series' history once every tier is full, and
  the allowance for about 10 trial links per task stated in
  docs/operating.md (``LINKS_ALLOWANCE``), beside what a list of ten 36-byte
  trial ids per task would cost (a key per task: over the allowance).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.embedded.processes import RedisServer, free_port
from reliabilityd.events import TrialEvent
from reliabilityd.stats import history
from reliabilityd.stats.history import Point, label
from reliabilityd.store import SnapshotWrite, Store, connect

PREFIX = "bench"
TASKS, TRIALS = 50, 6
KS = [1, 5]
OLD_STRING = 28_608  # the previous layout: 1,788 records of 16 bytes per k
LINKS_PER_TASK, LINK_BYTES = 10, 36
# docs/operating.md: 500 links (10 per task) at 24 bytes a link.
LINKS_ALLOWANCE = 12_000
T0 = 1_764_460_800


def kind(key: str) -> str:
    """What a key holds, from its name."""
    if ":h:k" in key:
        return "history"
    if key.endswith(":snapshot"):
        return "snapshot"
    if ":dedup" in key or ":dd:" in key:
        return "dedup records"
    for part in ("meta", "tasks", "hist", "lottery", "slices", "labels"):
        if f":{part}" in key:
            return part
    return "other"


async def memory_by_kind(store: Store) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    pipe = store.client.pipeline(transaction=False)
    names: list[str] = []
    async for raw in store.client.scan_iter(match=f"{PREFIX}:*", count=1000):
        name = raw.decode() if isinstance(raw, bytes) else str(raw)
        names.append(name)
        pipe.memory_usage(name, samples=0)
    for name, used in zip(names, await pipe.execute(), strict=True):
        out[kind(name)] += int(used or 0)
    return dict(out)


async def full_history(store: Store) -> int:
    """MEMORY USAGE of one series' history strings (both ks) once every tier is full."""
    now = T0 + 430 * 86_400
    times = {now - d * 86_400 for d in range(430)}
    times |= {now - h * 3600 for h in range(200)}
    times |= {now - m * 60 for m in range(400)}
    times |= {now - s * 10 for s in range(400)}
    values: dict[str, history.Estimate3] = {
        label(m, k): (0.5, 0.4, 0.6) for m in ("pass@k", "pass^k") for k in KS
    }
    writes = [
        SnapshotWrite("full-series", v, {"json": "x"}, {}, point=Point(float(t), values))
        for v, t in enumerate(sorted(times), start=1)
    ]
    for i in range(0, len(writes), 200):
        await store.snapshots.write_snapshots(writes[i : i + 200])
    used = await store.history.memory("full-series")
    for name in [store.keys.history(store.keys.snapshot("full-series"), k) for k in KS]:
        assert await store.client.strlen(name) == history.SERIES_BYTES
    return sum(v for name, v in used.items() if ":h:k" in name)


async def run(workdir: Path, suites: int) -> None:
    server = RedisServer("redis", workdir / "redis", free_port())
    server.workdir.mkdir(parents=True)
    server.start()
    client = connect(server.url)
    store = Store(client, PREFIX)
    try:
        rng = np.random.default_rng(20261202)
        before = int((await client.info("memory"))["used_memory"])
        names = [f"suite-{i:05d}" for i in range(suites)]
        for start in range(0, suites, 50):
            batch = {}
            for suite in names[start : start + 50]:
                p = rng.beta(2.0, 0.8, size=TASKS)
                batch[suite] = [
                    TrialEvent(
                        suite, f"task {t:02d}", f"trial {t}-{j}", "pass" if ok else "fail", ts=T0
                    )
                    for t in range(TASKS)
                    for j, ok in enumerate(rng.random(TRIALS) < p[t])
                ]
            await store.ingest.apply(batch, windows=dict.fromkeys(batch, 0), dedup_ttl=7200)
        cfg = Config(
            redis=RedisConfig(url=server.url, prefix=PREFIX),
            mqtt=MqttConfig(enabled=False),
            stats=StatsConfig(k=KS),
        )
        daemon = Daemon(cfg, store)
        started = time.perf_counter()
        while (await daemon.recompute.ci_tick()).marks or await store.snapshots.changed():
            pass
        ticked = time.perf_counter() - started
        after = int((await client.info("memory"))["used_memory"])
        kinds = await memory_by_kind(store)
        total = sum(kinds.values())
        # The previous layout's history strings, on keys named as these suites' are.
        old = []
        for suite in names[:20]:
            name = store.keys.history(store.keys.snapshot(suite), 1) + ":old"
            await client.set(name, b"\0" * OLD_STRING)
            old.append(int(await client.memory_usage(name, samples=0) or 0))
            await client.delete(name)
        old_series = len(KS) * float(np.mean(old))
        # The trial-links allowance, measured on a stand-in list per task.
        links = []
        for t in range(20):
            name = f"{PREFIX}:{{{names[0]}}}:task:{t:02d}:trials-standin"
            await client.rpush(name, *(b"x" * LINK_BYTES for _ in range(LINKS_PER_TASK)))
            links.append(int(await client.memory_usage(name, samples=0) or 0))
            await client.delete(name)
        links_suite = TASKS * float(np.mean(links))
        full = await full_history(store)
        per = {k: v / suites for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])}
        hist_now = per.get("history", 0.0)
        print(
            f"{suites:,} suites of {TASKS} tasks x {TRIALS} trials, k = {KS}, snapshots and"
            f" their first history point written ({ticked:.1f} s of CI ticks)"
        )
        print(f"  used_memory grew        {(after - before) / suites:8,.0f} B a suite (all)")
        print(f"  MEMORY USAGE of its keys {total / suites:8,.0f} B a suite:")
        for name, value in per.items():
            print(f"    {name:<22} {value:8,.0f}")
        prev = total / suites - hist_now + old_series
        print(
            f"  previous history layout  {prev:8,.0f} B a suite (history {old_series:,.0f} B"
            f" instead of {hist_now:,.0f} B): {prev / (total / suites):.1f}x this layout"
        )
        print(
            f"  with the trial-links allowance     {total / suites + LINKS_ALLOWANCE:8,.0f} B a"
            f" suite by MEMORY USAGE, {(after - before) / suites + LINKS_ALLOWANCE:,.0f} B by"
            f" used_memory (allowance {LINKS_ALLOWANCE:,} B; a list of {LINKS_PER_TASK}"
            f" {LINK_BYTES}-byte ids per task would take {links_suite:,.0f} B)"
        )
        print(
            f"  budget per series: history full at k = {KS}: {full:,} B;"
            f" a one-point history {hist_now:,.0f} B"
        )
    finally:
        await client.aclose()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(Path(tmp), args.suites))


if __name__ == "__main__":
    main()
