"""A running daemon's freshness while it ingests the trials that change its series.

``bench_ci`` seeds the suites (each task in its task hash, histogram and
meta, as ingest would leave them, without the lottery index); then, per
figure, one daemon process (or two replicas sharing the MQTT subscription,
``shared_group``) runs whole: every loop, the MQTT source, the CI tick at
``ci_interval``, the evaluator, the snapshot publisher. A publisher in this
process sends one trial to every changed series each ``ci_interval``, spread
evenly over it, for ``rounds`` intervals: ingest shares each daemon's
interpreter with its tick.

Freshness of a change: from the moment the daemon's commit of the trial
returned (its observer) to the moment the write of a snapshot holding that
version returned, over every change. A daemon records both in its own
process (``time.time()``; one machine, one clock) and hands them back.
"""

from __future__ import annotations

import asyncio
import bisect
import cProfile
import io
import multiprocessing
import os
import pstats
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from typing import Any

import msgspec
import numpy as np

from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.daemon._recompute import Tick
from reliabilityd.events import TrialEvent
from reliabilityd.mqtt_connector import connect as mqtt_connect
from reliabilityd.sources import Batch, Committed, Letter
from reliabilityd.stats.histogram import Histogram
from reliabilityd.store import SnapshotWrite, Store, connect

TOPIC = "bench/fresh"


def fresh_config(url: str, broker: int, prefix: str, replica: int, shared: bool) -> Config:
    return Config(
        redis=RedisConfig(url=url, prefix=prefix),
        mqtt=MqttConfig(
            url=f"mqtt://127.0.0.1:{broker}",
            topic=f"{TOPIC}/#",
            client_id=f"bench-fresh-{replica}",
            shared_group="fresh" if shared else "",
        ),
        stats=StatsConfig(k=[1, 5], ci_interval=5.0),
    )


def suite_name(i: int) -> str:
    return f"fresh-{i:05d}"


async def seed_tasks(store: Store, rng: np.random.Generator, suites: int, tasks: int) -> None:
    """Live-like suites (n uniform in [5, 100] a task), each task in its task hash too, so a
    new trial of ``task j`` moves its cell as ingest's would."""
    pipe = store.client.pipeline(transaction=False)
    for i in range(suites):
        n = rng.integers(5, 101, size=tasks)
        c = rng.binomial(n, rng.beta(2.0, 0.8, size=tasks))
        hist = Histogram.from_pairs(np.column_stack([n, c]))
        suite = suite_name(i)
        cells: list[str | int] = []
        for cn, cc, count in hist.cells():
            cells += [f"{cn}:{cc}", count]
        pipe.hset(store.key(suite, "hist"), items=cells)
        pipe.hset(
            store.key(suite, "tasks"),
            mapping={f"task {j}": f"{a}:{b}" for j, (a, b) in enumerate(zip(n, c, strict=True))},
        )
        pipe.hset(store.key(suite, "meta"), mapping={"version": 1, "trials": int(n.sum())})
        if i % 200 == 199:
            await pipe.execute()
    pipe.sadd(store.keys.suites, *(suite_name(i) for i in range(suites)))
    await pipe.execute()


# What a replica hands back: its commits and won writes (time, suite, version), its
# ticks (start, end) and its CPU seconds.
Handed = tuple[
    list[tuple[float, str, int]], list[tuple[float, str, int]], list[tuple[float, float]], float
]


class _Recorder:
    """The daemon's commit observer, and each commit's (time, suite, version)."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.on = False
        self.commits: list[tuple[float, str, int]] = []

    def committed(self, batch: Batch, committed: Committed, seconds: float) -> None:
        self.daemon.committed(batch, committed, seconds)
        if self.on:
            now = time.time()
            self.commits.extend((now, a.suite, a.version) for a in committed.applied if a.counted)

    def deadlettered(self, letters: Sequence[Letter]) -> None:
        self.daemon.deadlettered(letters)


def replica(
    *,
    url: str,
    broker: int,
    prefix: str,
    index: int,
    shared: bool,
    ready: Any,
    go: Event,
    done: Event,
    out: Any,
    profile: bool = False,
) -> None:
    """One daemon in its own process, run whole; hands back its commits, its won snapshot
    writes and its CPU seconds between ``go`` and the parent's stop."""

    async def run() -> Handed:
        daemon = Daemon(fresh_config(url, broker, prefix, index, shared))
        recorder = _Recorder(daemon)
        daemon.commit.observer = recorder
        writes: list[tuple[float, str, int]] = []
        inner = daemon.store.snapshots.write_snapshots

        async def write_snapshots(batch: Sequence[SnapshotWrite]) -> list[tuple[bool, bool]]:
            won = await inner(batch)
            if recorder.on:
                now = time.time()
                writes.extend(
                    (now, w.suite, w.version) for w, r in zip(batch, won, strict=True) if r[0]
                )
            return won

        daemon.store.snapshots.write_snapshots = write_snapshots  # type: ignore[method-assign,assignment]
        ticks: list[tuple[float, float]] = []
        tick = daemon.recompute.ci_tick

        async def ci_tick() -> Tick:
            began = time.time()
            try:
                return await tick()
            finally:
                if recorder.on:
                    ticks.append((began, time.time()))

        daemon.recompute.ci_tick = ci_tick  # type: ignore[method-assign]
        stop = asyncio.Event()
        task = asyncio.create_task(daemon.run(stop))
        await daemon.subscribed.wait()
        ready.put(index)
        await asyncio.to_thread(go.wait)
        recorder.on = True
        profiler = cProfile.Profile() if profile else None
        if profiler is not None:
            profiler.enable()
        cpu = time.process_time()
        # The parent says when every change is in a snapshot.
        await asyncio.to_thread(done.wait)
        cpu = time.process_time() - cpu
        if profiler is not None:
            profiler.disable()
            text = io.StringIO()
            stats = pstats.Stats(profiler, stream=text)
            lines = int(os.environ.get("BENCH_PROFILE_LINES", "40"))
            stats.sort_stats("cumulative").print_stats(lines)
            # The leaves: where the time is spent, not only what it is spent under.
            stats.sort_stats("tottime").print_stats(30)
            print(text.getvalue(), flush=True)
        stop.set()
        await task
        await daemon.store.client.aclose()
        return recorder.commits, writes, ticks, cpu

    out.put(asyncio.run(run()))


async def _publish(broker: int, suites: int, rounds: int, interval: float, offset: int) -> float:
    """One trial to each of the first ``suites`` suites every ``interval``, spread evenly;
    the time the last one was acknowledged by the broker."""
    cfg = MqttConfig(url=f"mqtt://127.0.0.1:{broker}", topic=f"{TOPIC}/#")
    conn = await mqtt_connect(cfg, identifier="bench-fresh-publisher", persistent=False)
    pending: list[asyncio.Task[None]] = []
    started = time.perf_counter()
    step = interval / suites
    try:
        for r in range(rounds):
            for i in range(suites):
                delay = started + (r * suites + i) * step - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                event = TrialEvent(
                    suite_name(i),
                    f"task {(r * 7 + i) % 200}",
                    f"fresh-{offset}-{r}-{i}",
                    "pass" if (r + i) % 4 else "fail",
                )
                pending.append(
                    asyncio.create_task(
                        conn.publish(f"{TOPIC}/{i % 16}", msgspec.json.encode(event), retain=False)
                    )
                )
            await asyncio.gather(*pending)
            pending.clear()
    finally:
        await conn.close()
    return time.time()


async def _caught_up(store: Store, suites: int, seconds: float) -> bool:
    """Wait until every suite's snapshot holds its data version; False after ``seconds``."""
    names = [suite_name(i) for i in range(suites)]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        versions = await store.snapshots.versions(names)
        if all(data <= snap for data, snap, _ in versions):
            return True
        await asyncio.sleep(0.25)
    return False


@dataclass
class Freshness:
    suites: int
    replicas: int
    changes: int
    median: float
    p99: float
    worst: float
    within: float
    # Of the changes, the share whose snapshot came within one tick of the writer's.
    one_tick: float
    longest_tick: float
    cpu: list[float]
    writes: int
    caught_up: bool


def _freshness(results: Sequence[Handed]) -> list[tuple[float, bool]]:
    """Each commit's wait for the first snapshot write that holds its version, and whether
    that write came within one tick: no whole tick of the writing replica began after the
    commit and ended before the write."""
    by_suite: dict[str, list[tuple[int, float, int]]] = defaultdict(list)
    for replica_index, result in enumerate(results):
        for at, suite, version in result[1]:
            by_suite[suite].append((version, at, replica_index))
    for done in by_suite.values():
        done.sort()
    out: list[tuple[float, bool]] = []
    for at, suite, version in (c for r in results for c in r[0]):
        done = by_suite.get(suite, [])
        i = bisect.bisect_left([v for v, _, _ in done], version)
        later = [(t, r) for _, t, r in done[i:] if t >= at]
        if not later:
            out.append((float("inf"), False))
            continue
        written, by = min(later)
        missed = any(at <= s and e < written for s, e in results[by][2])
        out.append((written - at, not missed))
    return out


async def measure(
    *,
    url: str,
    broker: int,
    prefix: str,
    suites: int,
    replicas: int,
    rounds: int,
    interval: float,
    offset: int,
    profile: bool = False,
) -> Freshness:
    """One figure: ``replicas`` daemon processes, ``suites`` changed every interval."""
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    go, done = ctx.Event(), ctx.Event()
    procs = [
        ctx.Process(
            target=replica,
            kwargs={
                "url": url,
                "broker": broker,
                "prefix": prefix,
                "index": i,
                "shared": replicas > 1,
                "ready": ready,
                "go": go,
                "done": done,
                "out": out,
                "profile": profile,
            },
        )
        for i in range(replicas)
    ]
    for p in procs:
        p.start()
    store = Store(connect(url), prefix)
    try:
        for _ in procs:
            await asyncio.to_thread(ready.get, True, 300)
        # Every snapshot current before the clock starts (the first start computes them all).
        await _caught_up(store, suites, 300)
        go.set()
        await _publish(broker, suites, rounds, interval, offset)
        caught = await _caught_up(store, suites, 60)
        # A last tick's writes are recorded before the stop.
        await asyncio.sleep(0.5)
        done.set()
        results = [await asyncio.to_thread(out.get, True, 120) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=60)
        await store.client.aclose()
    fresh = _freshness(results)
    waits = sorted(w for w, _ in fresh)
    ticks = [e - s for r in results for s, e in r[2]]
    q = statistics.quantiles(waits, n=100) if len(waits) > 1 else waits * 99
    return Freshness(
        suites=suites,
        replicas=replicas,
        changes=len(waits),
        median=statistics.median(waits),
        p99=q[98],
        worst=waits[-1],
        within=sum(w <= interval for w in waits) / len(waits),
        one_tick=sum(ok for _, ok in fresh) / len(fresh),
        longest_tick=max(ticks, default=0.0),
        cpu=[r[3] for r in results],
        writes=sum(len(r[1]) for r in results),
        caught_up=caught,
    )


def report(f: Freshness, rounds: int, interval: float, baseline_ms: float) -> str:
    who = "one process" if f.replicas == 1 else f"{f.replicas} replicas"
    cpu = sum(f.cpu)
    # Everything the daemon did for the changes (tick, ingest, every loop), per change.
    per = cpu / max(f.changes, 1) * 1e3
    verdict = "all fresh within one tick" if f.one_tick == 1.0 else "NOT all within one tick"
    return (
        f"  {f.suites:,} changed series, {who}: freshness median {f.median:5.2f} s,"
        f" p99 {f.p99:5.2f} s, max {f.worst:5.2f} s over {f.changes:,} changes;"
        f" {f.one_tick:.1%} within one tick ({verdict}), longest tick {f.longest_tick:.2f} s"
        f" of {interval:.0f} s; daemon CPU {cpu:5.1f} s over {rounds} intervals with ingest"
        f" ({per:.2f} ms a change, {f.writes:,} snapshots written;"
        f" {per / baseline_ms:.2f}x the per-series math alone)"
        + ("" if f.caught_up else "; DID NOT catch up within 60 s of the last trial")
    )
