"""Benchmark: the CI tick by phase, 5,000 changed series drained, a running daemon's freshness.

Everything in one run (``--parts`` picks some: phases, math, drain, fresh, publish,
metrics):

* phases: ``bench_tick_phases`` at ``--phase-suites`` (1,000): the CPU of each
  phase of the daemon's whole tick per changed series;
* math: every series' estimates (both metrics at k = 1 and 5, ``gaffke``,
  B = 2000) by the per-series path (``snapshot.full_estimates``, on the first
  ``--baseline`` series) and by the batched pass (``full_estimates_many``);
  the per-series figure is every other figure's baseline;
* drain: a private redis-server (the ``deploy/`` settings: every write waits
  for its fsync) holds 5,000 suites of 200 live-like tasks each (n uniform
  in [5, 100] per task, about 190 (n, c) cells), every one marked changed;
  one daemon's CI ticks drain them (wall and CPU), the evaluator reads back
  what they wrote, and two replicas in two processes drain them again (each
  one's share: they add up to every suite exactly once);
* fresh: a running daemon (``_freshness``: every loop, MQTT ingest of one
  trial per changed series each ``ci_interval``) at ``--fresh`` changed
  series (1,000 and 5,000), one process and two replicas (``--replicas``):
  freshness from commit to snapshot write, median / p99 / max, the share
  fresh within one tick, and the daemon CPU per change;
* publish: the retained snapshot publisher's rate and CPU per snapshot
  beside aiomqtt awaiting each publish (``_publish``);
* metrics: ``/metrics`` with 10,000 suites: the view read and the text
  formatted cold (the process's first scrape), again with nothing new, and
  after half the suites got a new snapshot; each beside the read and text
  before the column-at-a-time text (``benchmarks._line_text``: a row decoded
  at a time, a line written at a time).

The drain's histograms are written directly (what the events would leave
behind, without the lottery index), so that figure measures the CI path,
not ingest; the freshness runs seed each task's hash too, so the trials
they publish move cells as live ones do. ``--profile`` prints the
one-daemon drain's top cProfile entries, and each freshness daemon's (the
``BENCH_PROFILE_LINES`` environment variable's count of them, 40 unless set,
and the 30 with most time of their own).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import multiprocessing
import os
import pstats
import tempfile
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from benchmarks import _freshness, _publish
from benchmarks._line_text import LineText
from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.daemon._metrics_text import SuiteView
from reliabilityd.daemon._recompute import RECONCILE_EVERY
from reliabilityd.daemon._rows import row_of
from reliabilityd.daemon.metrics import Metrics
from reliabilityd.embedded.processes import Mosquitto, RedisServer, free_port
from reliabilityd.stats import snapshot
from reliabilityd.stats.histogram import Histogram
from reliabilityd.store import Row, Series, SnapshotWrite, Store, connect

CI_INTERVAL = 5.0
KS = [1, 5]
PREFIX = "bench"


def live_like(rng: np.random.Generator, tasks: int) -> Histogram:
    n = rng.integers(5, 101, size=tasks)
    p = rng.beta(2.0, 0.8, size=tasks)
    return Histogram.from_pairs(np.column_stack([n, rng.binomial(n, p)]))


def config(url: str) -> Config:
    return Config(
        redis=RedisConfig(url=url, prefix=PREFIX),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=KS, ci_interval=CI_INTERVAL),
    )


def name(i: int) -> str:
    return f"suite-{i:05d}"


async def seed(store: Store, hists: list[Histogram], version: int) -> None:
    """Write each suite's counters and histogram, and mark every suite changed."""
    pipe = store.client.pipeline(transaction=False)
    for i, hist in enumerate(hists):
        if i and i % 500 == 0:
            await pipe.execute()
        cells: list[str | int] = []
        for n, c, count in hist.cells():
            cells += [f"{n}:{c}", count]
        pipe.delete(store.key(name(i), "hist"))
        pipe.hset(store.key(name(i), "hist"), items=cells)
        pipe.hset(
            store.key(name(i), "meta"),
            mapping={"version": version, "trials": int((hist.n * hist.count).sum())},
        )
    names = [name(i) for i in range(len(hists))]
    pipe.sadd(store.keys.suites, *names)
    pipe.sadd(store.keys.changed, *names)
    await pipe.execute()


async def drain(daemon: Daemon, wrote: dict[Series, snapshot.Snapshot] | None = None) -> int:
    """Run the daemon's CI ticks until no mark is left; the suites it did. With ``wrote``,
    every snapshot whose write won goes in it, as the ticks hand them to the evaluator."""
    did = 0
    while True:
        tick = await daemon.recompute.ci_tick()
        if wrote is not None:
            wrote.update(tick.snapshots)
        did += len(tick.marks)
        if not tick.marks and not await daemon.store.snapshots.changed():
            return did


async def evaluator_figures(daemon: Daemon, wrote: dict[Series, snapshot.Snapshot]) -> None:
    """The evaluator's read of the snapshots the ticks just wrote: read back and decoded,
    and handed over by the ticks (only their version and ``updated_at`` read)."""
    series = list(wrote)
    took: list[float] = []
    for fresh in (None, wrote, None, wrote):
        started = time.perf_counter()
        got = await daemon.evaluator.newest_snapshots(series, fresh)
        took.append(time.perf_counter() - started)
        assert got == wrote
    back, handed = min(took[0::2]), min(took[1::2])
    print(
        f"  the evaluator's read of those {len(series):,} snapshots: read back and decoded"
        f" {back * 1e3:6.1f} ms, handed over by the ticks {handed * 1e3:6.1f} ms"
        " (best of two each)"
    )


def replica(url: str, ready: Any, start: Event, out: Any) -> None:
    """One replica in its own process: (wall seconds, CPU seconds, suites it did)."""

    async def run() -> tuple[float, float, int]:
        client = connect(url)
        daemon = Daemon(config(url), Store(client, PREFIX))
        # A replica that is already running: its start-up reconcile is behind
        # it (a reconcile scan while the other replica holds claims would mark
        # those suites again, and both would compute them).
        await daemon.store.snapshots.mark_stale(
            await daemon.store.reads.suites(), daemon.recompute.fingerprint
        )
        daemon.recompute._next_reconcile = time.monotonic() + RECONCILE_EVERY
        ready.put(True)
        await asyncio.to_thread(start.wait)
        wall, cpu = time.perf_counter(), time.process_time()
        did = await drain(daemon)
        result = (time.perf_counter() - wall, time.process_time() - cpu, did)
        await client.aclose()
        return result

    out.put(asyncio.run(run()))


def replicas(url: str, count: int) -> list[tuple[float, float, int]]:
    ctx = multiprocessing.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    start = ctx.Event()
    procs = [ctx.Process(target=replica, args=(url, ready, start, out)) for _ in range(count)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    start.set()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return sorted(results)


async def metrics_figures(store: Store, series: int) -> None:
    """Copies of the written snapshots up to ``series`` suites, then three scrapes' costs."""
    have = await store.reads.suites()
    docs = await store.snapshots.documents(have)
    snaps = [d for d in docs if isinstance(d, snapshot.Snapshot)]

    async def write(stamp: float, count: int) -> None:
        writes = []
        rows = []
        for i in range(count):
            snap = msgspec.structs.replace(
                snaps[i % len(snaps)],
                suite=f"metrics-{i:05d}",
                version=int(stamp),
                updated_at=snapshot.rfc3339(stamp),
            )
            ci, values = snapshot.redis_fields(snap)
            writes.append(SnapshotWrite(snap.suite, snap.version, ci, values))
            # /metrics reads the summary rows the tick writes beside each snapshot.
            rows.append(row_of(snap, [], None, stamp))
        for start in range(0, len(writes), 500):
            await store.snapshots.write_snapshots(writes[start : start + 500])
            await store.rows.write(rows[start : start + 500])

    # Only the copies: the benchmark's suites leave the set.
    await store.client.delete(store.keys.suites)
    await store.client.sadd(store.keys.suites, *(f"metrics-{i:05d}" for i in range(series)))
    await write(1_000_000.0, series)
    metrics = Metrics()
    before = LineText()
    decode = msgspec.msgpack.Decoder(Row).decode

    async def scrape() -> tuple[float, float, int]:
        started = time.perf_counter()
        await metrics.refresh(store, [], [])
        read = time.perf_counter() - started
        started = time.perf_counter()
        body = metrics.render()
        return read, time.perf_counter() - started, len(body)

    async def scrape_before() -> tuple[float, float]:
        """The read and text before: a row decoded at a time, a line written at a time."""
        started = time.perf_counter()
        key = store.keys.rows
        rows = [decode(raw) async for _, raw in store.client.hscan_iter(key, count=5000)]
        rows.sort(key=lambda r: (r.suite, r.slice or ""))
        before.view = SuiteView(list(rows), [], {}, redis_up=True, read_at=time.time())
        read = time.perf_counter() - started
        started = time.perf_counter()
        before.render()
        return read, time.perf_counter() - started

    def line(what: str, new: tuple[float, float], old: tuple[float, float]) -> str:
        took, was = sum(new), sum(old)
        return (
            f"  {what:<22} read {new[0] * 1e3:6.1f} ms + format {new[1] * 1e3:6.1f} ms"
            f" = {took * 1e3:6.1f} ms; before {old[0] * 1e3:6.1f} + {old[1] * 1e3:6.1f}"
            f" = {was * 1e3:6.1f} ms ({was / took:.1f}x)"
        )

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    old_cold = await scrape_before()
    cold_read, cold_render, size = await scrape()
    old_warm = await scrape_before()
    warm_read, warm_render, _ = await scrape()
    await write(1_000_001.0, series // 2)
    old_half = await scrape_before()
    half_read, half_render, _ = await scrape()
    lines = size // 1024
    print(
        f"/metrics with {series:,} suites (k = {', '.join(map(str, KS))}; {lines:,} KiB of text;"
        f" load {load}):"
    )
    print(line("cold (first scrape):", (cold_read, cold_render), old_cold))
    print(line("nothing new:", (warm_read, warm_render), old_warm))
    print(line(f"{series // 2:,} new snapshots:", (half_read, half_render), old_half))


PARTS = ("phases", "math", "drain", "fresh", "publish", "metrics")


async def run(workdir: Path, args: argparse.Namespace) -> None:
    parts = set(args.parts.split(","))
    unknown = parts - set(PARTS)
    if unknown:
        raise SystemExit(
            f"--parts: unknown {', '.join(sorted(unknown))}; one of {', '.join(PARTS)}"
        )
    if "phases" in parts:
        # bench_tick_phases takes its suites and daemon from this module.
        from benchmarks import bench_tick_phases as tick_phases

        print("CPU per changed series by phase (bench_tick_phases, one batch at a time):")
        await tick_phases.run(workdir / "phases", args.phase_suites)
    server = RedisServer("redis", workdir / "redis", free_port())
    server.workdir.mkdir(parents=True)
    server.start()
    try:
        rng = np.random.default_rng(20261201)
        hists = [live_like(rng, args.tasks) for _ in range(args.suites)]
        cells = int(np.mean([len(h) for h in hists]))
        settings = Daemon(config(server.url)).recompute.settings(name(0))
        started = time.process_time()
        for hist in hists[: args.baseline]:
            snapshot.full_estimates(hist, settings)
        alone = (time.process_time() - started) / args.baseline
        started = time.process_time()
        snapshot.full_estimates_many([(h, settings) for h in hists])
        batched = time.process_time() - started
        print(
            f"{args.suites:,} changed series x {args.tasks:,} live-like tasks ({cells} (n, c)"
            f" cells each), both metrics at k = {', '.join(map(str, KS))}, gaffke, B = 2000:"
        )
        print(
            f"  math, per-series path ({args.baseline} series)  {alone * 1e3:6.2f} ms a series"
            f"   ({alone * args.suites:5.1f} s for all)"
        )
        print(
            f"  math, batched (all series)            {batched / args.suites * 1e3:6.2f}"
            " ms a series"
            f"   ({batched:5.2f} s for all, {alone * args.suites / batched:.1f}x faster)"
        )
        client = connect(server.url)
        store = Store(client, PREFIX)
        if "drain" in parts or "metrics" in parts:
            await seed(store, hists, 1)
            one = Daemon(config(server.url), store)
            wrote: dict[Series, snapshot.Snapshot] = {}
            took, took_cpu = await timed_drain(one, wrote, args)
            if "drain" in parts:
                print(
                    f"  one daemon, claim to snapshot written {took:6.2f} s wall, {took_cpu:5.2f} s"
                    f" CPU ({took_cpu / args.suites * 1e3:.2f} ms a series,"
                    f" {took_cpu / args.suites / alone:.2f}x the per-series math)"
                    f"   {took / CI_INTERVAL:.0%} of a {CI_INTERVAL:.0f} s ci_interval"
                )
                await evaluator_figures(one, wrote)
                await seed(store, hists, 2)
                results = replicas(server.url, 2)
                shares = " + ".join(str(r[2]) for r in results)
                walls = ", ".join(f"{r[0]:.2f} s ({r[1]:.2f} s CPU)" for r in results)
                print(
                    f"  two replicas (two processes)           {walls}; shares {shares}"
                    f" = {sum(r[2] for r in results)} suites,"
                    f" each {max(r[0] for r in results) / took:.0%}"
                    " of the one daemon's time at most"
                )
        if "fresh" in parts:
            await fresh_figures(workdir, server.url, args, alone)
        if "publish" in parts:
            await _publish.figures(workdir)
        if "metrics" in parts:
            await metrics_figures(store, args.metrics_series)
        await client.aclose()
    finally:
        server.stop()


async def timed_drain(
    one: Daemon, wrote: dict[Series, snapshot.Snapshot], args: argparse.Namespace
) -> tuple[float, float]:
    """The one daemon's drain of every mark: (wall, CPU) seconds, profiled with --profile."""
    profile = cProfile.Profile() if args.profile else None
    wall, cpu = time.perf_counter(), time.process_time()
    if profile is not None:
        profile.enable()
    did = await drain(one, wrote)
    if profile is not None:
        profile.disable()
    took, took_cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert did == args.suites, did
    if profile is not None:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(15)
        print(text.getvalue())
    return took, took_cpu


async def fresh_figures(workdir: Path, url: str, args: argparse.Namespace, alone: float) -> None:
    """A running daemon's freshness with its ingest, one process and two replicas."""
    sizes = [int(x) for x in args.fresh.split(",")]
    counts = [int(x) for x in args.replicas.split(",")]
    broker = Mosquitto("mosquitto", workdir / "mosquitto", free_port())
    broker.workdir.mkdir(parents=True)
    broker.start()
    client = connect(url)
    store = Store(client, "fresh")
    try:
        await _freshness.seed_tasks(store, np.random.default_rng(7), max(sizes), args.tasks)
        print(
            f"a running daemon (every loop; MQTT ingest of one trial per changed series each"
            f" {CI_INTERVAL:.0f} s, spread over it, {args.rounds} intervals; {args.tasks} tasks"
            " a series): freshness from the trial's commit to its snapshot's write"
        )
        offset = 0
        for size in sizes:
            for count in counts:
                offset += 1
                got = await _freshness.measure(
                    url=url,
                    broker=broker.port,
                    prefix="fresh",
                    suites=size,
                    replicas=count,
                    rounds=args.rounds,
                    interval=CI_INTERVAL,
                    offset=offset,
                    profile=args.profile,
                )
                print(_freshness.report(got, args.rounds, CI_INTERVAL, alone * 1e3), flush=True)
    finally:
        await client.aclose()
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", type=int, default=5000)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--baseline", type=int, default=500, help="series on the per-series path")
    parser.add_argument("--metrics-series", type=int, default=10_000)
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"which figures, of {', '.join(PARTS)}"
    )
    parser.add_argument("--phase-suites", type=int, default=1000)
    parser.add_argument("--fresh", default="1000,5000", help="changed series per freshness run")
    parser.add_argument("--replicas", default="1,2", help="daemon processes per freshness run")
    parser.add_argument("--rounds", type=int, default=3, help="ci_intervals of ingest per run")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reliabilityd-bench-ci-") as tmp:
        asyncio.run(run(Path(tmp), args))


if __name__ == "__main__":
    main()
