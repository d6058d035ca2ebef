"""Benchmark: the daemon recomputing 1,000 changed suites, against the math alone.

A private redis-server holds 1,000 suites of 1,000 live-like tasks each
(n uniform in [5, 100] per task, so every suite has hundreds of (n, c)
cells), every one of them marked changed. One daemon's CI ticks then claim,
recompute and write every snapshot (both metrics at k = 5, B = 2000: the
issue's "one CI"):
the figure is the wall time until no mark is left, beside the same
computation without Redis (``snapshot.full_estimates`` on the same
histograms) measured in the same run, and the target, one 5 s ``ci_interval``.
Then two daemons drain the same marks side by side: each takes its own
share (the claims), and the shares add up to all suites exactly once.

The suites' histograms are written directly (what 52 million trial events
would leave behind), so the benchmark measures the CI path, not ingest.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np

from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.embedded.processes import RedisServer, free_port
from reliabilityd.stats import snapshot
from reliabilityd.stats.histogram import Histogram
from reliabilityd.store import Store, connect

SUITES = 1000
TASKS = 1000
CI_INTERVAL = 5.0


def live_like(rng: np.random.Generator) -> Histogram:
    n = rng.integers(5, 101, size=TASKS)
    p = rng.beta(2.0, 0.8, size=TASKS)
    return Histogram.from_pairs(np.column_stack([n, rng.binomial(n, p)]))


async def seed(store: Store, hists: list[Histogram]) -> None:
    """Write each suite's counters and histogram, and mark every suite changed."""
    pipe = store.client.pipeline(transaction=False)
    for i, hist in enumerate(hists):
        suite = f"suite-{i:04d}"
        cells: list[str | int] = []
        for n, c, count in hist.cells():
            cells += [f"{n}:{c}", count]
        pipe.hset(store.key(suite, "hist"), items=cells)
        pipe.hset(
            store.key(suite, "meta"),
            mapping={"version": 1, "trials": int((hist.n * hist.count).sum())},
        )
    names = [f"suite-{i:04d}" for i in range(len(hists))]
    pipe.sadd(store.keys.suites, *names)
    pipe.sadd(store.keys.changed, *names)
    await pipe.execute()


async def drain(daemons: list[Daemon]) -> tuple[float, list[int]]:
    """Run the daemons' CI ticks until no mark is left; (seconds, suites each one did)."""
    shares = [0] * len(daemons)

    async def ticks(i: int, daemon: Daemon) -> None:
        while True:
            done = await daemon.recompute.ci_tick()
            shares[i] += len(done)
            if not done and not await daemon.store.snapshots.changed():
                return

    started = time.perf_counter()
    await asyncio.gather(*(ticks(i, d) for i, d in enumerate(daemons)))
    return time.perf_counter() - started, shares


async def run(workdir: Path) -> None:
    server = RedisServer("redis", workdir / "redis", free_port())
    server.workdir.mkdir(parents=True)
    server.start()
    try:
        rng = np.random.default_rng(20261130)
        hists = [live_like(rng) for _ in range(SUITES)]
        cells = int(np.mean([len(h) for h in hists]))
        cfg = Config(
            redis=RedisConfig(url=server.url, prefix="bench"),
            mqtt=MqttConfig(enabled=False),
            stats=StatsConfig(k=[5], ci_interval=CI_INTERVAL),
        )
        settings = Daemon(cfg).recompute.settings("suite-0000")
        started = time.perf_counter()
        for hist in hists:
            snapshot.full_estimates(hist, settings)
        compute = time.perf_counter() - started

        client = connect(server.url)
        store = Store(client, "bench")
        await seed(store, hists)
        one = Daemon(cfg, store)
        took, _ = await drain([one])
        print(
            f"{SUITES:,} changed suites x {TASKS:,} live-like tasks ({cells} (n, c) cells each),"
            " both metrics at k = 5, B = 2000:"
        )
        print(f"  math alone (full_estimates, no Redis)   {compute:6.2f} s")
        print(
            f"  one daemon, claim to snapshot written   {took:6.2f} s"
            f"   {took / compute:4.2f}x the math, {took / CI_INTERVAL:.0%} of a"
            f" {CI_INTERVAL:.0f} s ci_interval"
        )

        await seed(store, hists)
        second = Daemon(cfg, Store(connect(server.url), "bench"))
        took2, shares = await drain([one, second])
        print(
            f"  two daemons side by side                {took2:6.2f} s"
            f"   shares {shares[0]} + {shares[1]} = {sum(shares)} suites"
            " (one process, one core: the split, not a speed-up)"
        )
        await second.store.client.aclose()
        await client.aclose()
    finally:
        server.stop()


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="reliabilityd-bench-ci-") as tmp:
        asyncio.run(run(Path(tmp)))
