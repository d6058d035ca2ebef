"""Where a CI tick's CPU goes: seconds of CPU per phase, per series.

The same seeded suites as ``bench_ci`` (200 live-like tasks each with n
uniform in [5, 100], both metrics at k = 1 and 5, the default interval
``gaffke`` with B = 2000) drained by one daemon whose batches run one at a
time, so the phases never overlap and each phase's process CPU time
(``time.process_time``, worker threads included) is its own. Each tick is
the daemon's whole tick: the snapshots, then the evaluator's verdicts and
the summary rows of every suite. The start-up reconcile runs before the
clock starts.

    .venv/bin/python -m benchmarks.bench_tick_phases --suites 1000
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_ci import PREFIX, config, live_like, seed
from reliabilityd.daemon import _recompute
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.embedded.processes import RedisServer, free_port
from reliabilityd.stats import snapshot
from reliabilityd.store import Store, connect

SPENT: dict[str, float] = defaultdict(float)


def timed_async(owner: Any, name: str, label: str) -> None:
    inner: Callable[..., Awaitable[Any]] = getattr(owner, name)

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return await inner(*args, **kwargs)
        finally:
            SPENT[label] += time.process_time() - started

    setattr(owner, name, wrapper)


def timed(owner: Any, name: str, label: str) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            SPENT[label] += time.process_time() - started

    setattr(owner, name, wrapper)


async def whole_ticks(daemon: Daemon) -> None:
    """The daemon's ticks (``Recompute._tick`` without its idle sweep) until no mark is left."""
    recompute = daemon.recompute
    while True:
        tick = await recompute.ci_tick()
        suites = await daemon.store.reads.suites()
        await recompute.evaluator.evaluate(suites, tick.snapshots)
        await recompute.rows.write(recompute.config, suites, tick.snapshots)
        if not tick.marks and not await daemon.store.snapshots.changed():
            return


async def run(workdir: Path, suites: int) -> None:
    server = RedisServer("redis", workdir / "redis", free_port())
    server.workdir.mkdir(parents=True)
    server.start()
    try:
        rng = np.random.default_rng(20261201)
        store = Store(connect(server.url), PREFIX)
        await seed(store, [live_like(rng, 200) for _ in range(suites)], 1)
        daemon = Daemon(config(server.url), store)
        await store.snapshots.mark_stale(await store.reads.suites(), daemon.recompute.fingerprint)
        daemon.recompute._next_reconcile = time.monotonic() + _recompute.RECONCILE_EVERY
        _recompute.RECOMPUTE_LANES = 1
        timed_async(store.reads, "read_states", "read scripts (read_states)")
        timed_async(store.reads, "lottery_rows_many", "lottery ranges (lottery_rows_many)")
        timed_async(store.snapshots, "write_snapshots", "write scripts (write_snapshots)")
        timed_async(store.snapshots, "claim_changed", "claims")
        timed_async(store.snapshots, "release_claims", "claims")
        timed(snapshot, "full_estimates_many", "math (full_estimates_many)")
        timed(_recompute, "ranked_cell_groups_many", "lottery ranking (exact gaps)")
        timed(snapshot, "build", "snapshot build and JSON")
        timed(snapshot, "redis_fields", "snapshot build and JSON")
        timed_async(daemon.evaluator, "evaluate", "evaluator (every rule, every suite)")
        timed_async(daemon.recompute.rows, "write", "summary rows (with the trend)")
        cpu, wall = time.process_time(), time.perf_counter()
        await whole_ticks(daemon)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(
            f"{suites:,} series: {cpu:.2f} s CPU ({cpu / suites * 1e3:.2f} ms a series),"
            f" {wall:.2f} s wall"
        )
        for label, spent in sorted(SPENT.items(), key=lambda item: -item[1]):
            print(f"  {label:38s} {spent:6.2f} s  {spent / suites * 1e3:5.2f} ms a series")
        rest = cpu - sum(SPENT.values())
        print(f"  {'the rest (event loop, tasks, threads)':38s} {rest:6.2f} s")
        await store.client.aclose()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reliabilityd-bench-phases-") as tmp:
        asyncio.run(run(Path(tmp), args.suites))


if __name__ == "__main__":
    main()
