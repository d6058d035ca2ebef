"""Where a CI tick's CPU goes: seconds of CPU per phase, per series.

The same seeded suites as ``bench_ci`` (200 live-like tasks each with n
uniform in [5, 100], both metrics at k = 1 and 5, the default interval
``gaffke`` with B = 2000) drained by one daemon whose batches run one at a
time, so the phases never overlap and each phase's process CPU time
(``time.process_time``, worker threads included) is its own. Each tick is
the daemon's whole tick: the snapshots, then the evaluator's verdicts and
the summary rows of every suite. The start-up reconcile runs before the
clock starts.

With ``--rules`` (comma-separated: ``none``, ``ci-low``, ``detector``,
``rate``) the drain runs once per rule, each time with that one rule watching
every suite, on a fresh Redis holding the same suites, each task's counts in
its tasks hash (and with ``detector``, a 20-trial window of outcomes). A
first drain, untimed, computes every snapshot and writes every rate rule's
first state; then ten tasks of each suite gain a trial and the timed drain
recomputes them, so a rate rule's figure is a tick of its statistics (the
read, the advance, the compare-and-set), beside the others' in the same run.

    .venv/bin/python -m benchmarks.bench_tick_phases --suites 1000
    .venv/bin/python -m benchmarks.bench_tick_phases --suites 1000 --rules ci-low,rate
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

import msgspec
import numpy as np

from benchmarks.bench_ci import PREFIX, config, live_like, name, seed
from reliabilityd.daemon import _recompute
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.embedded.processes import RedisServer, free_port
from reliabilityd.rules import Rule
from reliabilityd.stats import snapshot
from reliabilityd.stats.histogram import Histogram
from reliabilityd.store import Store, connect

RULES = {
    "none": None,
    "ci-low": Rule(name="watch", suite="*", k=5, below=0.05, trigger="ci-low"),
    "detector": Rule(name="watch", suite="*", k=5, below=0.05, trigger="detector"),
    "rate": Rule(name="watch", suite="*", k=5, below=0.05, trigger="rate"),
}
WINDOW = 20

SPENT: dict[str, float] = defaultdict(float)
# What each timer replaced, put back after a run (a run per rule in one process).
REPLACED: list[tuple[Any, str, Any]] = []


def timed_async(owner: Any, name: str, label: str) -> None:
    inner: Callable[..., Awaitable[Any]] = getattr(owner, name)
    REPLACED.append((owner, name, inner))

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return await inner(*args, **kwargs)
        finally:
            SPENT[label] += time.process_time() - started

    setattr(owner, name, wrapper)


def timed(owner: Any, name: str, label: str) -> None:
    inner: Callable[..., Any] = getattr(owner, name)
    REPLACED.append((owner, name, inner))

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


async def tasks_hashes(
    store: Store, hists: list[Histogram], rng: np.random.Generator, *, window: int
) -> list[list[tuple[int, int]]]:
    """Each suite's tasks hash from its histogram (``t<i>`` -> ``n:c``, with ``window`` a
    window's outcomes after them); returns each suite's tasks' (n, c)."""
    out = []
    pipe = store.client.pipeline(transaction=False)
    for i, hist in enumerate(hists):
        pairs = [(int(n), int(c)) for n, c, count in hist.cells() for _ in range(count)]
        values: list[str] = []
        for t, (n, c) in enumerate(pairs):
            if window:
                bits = "".join("1" if x else "0" for x in rng.random(min(n, window)) < c / n)
                values += [f"t{t}", f"{len(bits)}:{bits.count('1')}:{bits}"]
            else:
                values += [f"t{t}", f"{n}:{c}"]
        pipe.hset(store.key(name(i), "tasks"), items=values)
        out.append(pairs)
        if i % 200 == 199:
            await pipe.execute()
    await pipe.execute()
    return out


async def one_more_trial(
    store: Store, pairs: list[list[tuple[int, int]]], rng: np.random.Generator, *, version: int
) -> None:
    """Ten tasks of each suite gain a trial (its lifetime counts, as APPLY leaves them), and
    every suite is marked changed at ``version``."""
    pipe = store.client.pipeline(transaction=False)
    for i, tasks in enumerate(pairs):
        values: list[str] = []
        for t in rng.choice(len(tasks), size=min(10, len(tasks)), replace=False):
            n, c = tasks[t]
            tasks[t] = (n + 1, c + int(rng.random() < 0.8))
            values += [f"t{t}", f"{tasks[t][0]}:{tasks[t][1]}"]
        pipe.hset(store.key(name(i), "tasks"), items=values)
        pipe.hset(store.key(name(i), "meta"), "version", version)
        if i % 200 == 199:
            await pipe.execute()
    pipe.sadd(store.keys.changed, *(name(i) for i in range(len(pairs))))
    await pipe.execute()


async def run(workdir: Path, suites: int, rule: str | None = None) -> float:
    """The drain's CPU seconds a series, with its phases printed."""
    server = RedisServer("redis", workdir / "redis", free_port())
    server.workdir.mkdir(parents=True)
    server.start()
    SPENT.clear()
    try:
        rng = np.random.default_rng(20261201)
        store = Store(connect(server.url), PREFIX)
        hists = [live_like(rng, 200) for _ in range(suites)]
        await seed(store, hists, 1)
        cfg = config(server.url)
        watch = RULES[rule] if rule is not None else None
        if watch is not None:
            window = WINDOW if watch.trigger == "detector" else 0
            cfg = msgspec.structs.replace(
                cfg,
                alerts=[watch],
                stats=msgspec.structs.replace(cfg.stats, window=window),
            )
        daemon = Daemon(cfg, store)
        await store.snapshots.mark_stale(await store.reads.suites(), daemon.recompute.fingerprint)
        daemon.recompute._next_reconcile = time.monotonic() + _recompute.RECONCILE_EVERY
        _recompute.RECOMPUTE_LANES = 1
        if rule is not None:
            pairs = await tasks_hashes(store, hists, rng, window=cfg.stats.window)
            await whole_ticks(daemon)  # every snapshot, and a rate rule's first state
            await one_more_trial(store, pairs, rng, version=2)
            print(f"rule: {rule}")
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
        while REPLACED:
            owner, attr, inner = REPLACED.pop()
            setattr(owner, attr, inner)
    return cpu / suites


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", type=int, default=1000)
    parser.add_argument(
        "--rules",
        type=lambda text: [x for x in text.split(",") if x],
        help=f"one drain per rule, comma-separated, of {', '.join(RULES)}",
    )
    args = parser.parse_args()
    spent: dict[str | None, float] = {}
    for rule in args.rules or [None]:
        if rule is not None and rule not in RULES:
            parser.error(f"--rules: {rule!r} is not one of {', '.join(RULES)}")
        with tempfile.TemporaryDirectory(prefix="reliabilityd-bench-phases-") as tmp:
            spent[rule] = asyncio.run(run(Path(tmp), args.suites, rule))
    if len(spent) > 1:
        first, base = next(iter(spent.items()))
        for rule, cpu in spent.items():
            print(f"{rule}: {cpu * 1e3:.2f} ms a series, {cpu / base:.2f}x the {first} rule's")


if __name__ == "__main__":
    main()
