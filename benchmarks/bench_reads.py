"""Benchmark: the list-wide reads from the summary rows, beside the per-suite read path.

A private redis-server (the ``deploy/`` settings) gets N suites of 10 tasks x 3
trials each through the store's write path (``store.ingest.apply``, no MQTT),
every tenth of them failing most trials; one threshold rule watches every
suite. One daemon's CI tick computes every snapshot, judges the rule and
writes the rows. Then, at 1,000 and at 10,000 suites (``max_suites`` is not
in the way: the store's apply admits whatever it is handed), each figure is
the median of ``--repeat`` calls, in process, without HTTP:

* the index's first page and a filtered page (state ``firing``; a name
  substring) from the rows: the reads and the HTML, beside the per-suite
  path the index had before (every suite's snapshot document, every rule's
  state, every suite's day of history: the reads alone);
* ``/metrics``: the view read from the rows and the text formatted, beside
  the per-suite view (every snapshot document and rule state, formatted by
  the same code);
* ``reliabilityd status`` (plain, the whole deployment) at ``--status-suites``,
  beside its reads before the rows (every suite's summary, one at a time).

The load average (1, 5, 15 min) is printed before and after: the machine's
other work moves every figure, so read each beside its baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec

from reliabilityd.alerting import registry
from reliabilityd.cli.status import status
from reliabilityd.client import AsyncClient
from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.daemon._metrics_text import SuiteText, SuiteView
from reliabilityd.daemon.metrics import read_view
from reliabilityd.daemon.ui import _data, _index
from reliabilityd.embedded.processes import RedisServer, free_port
from reliabilityd.events import TrialEvent
from reliabilityd.rules import AlertState, Rule
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Series, Store, connect

PREFIX = "bench"
DAY = 86400.0
RULE = Rule(name="low", suite="*", k=1, below=0.5, trigger="ci-low")


def config(url: str) -> Config:
    cfg = Config(
        redis=RedisConfig(url=url, prefix=PREFIX),
        mqtt=MqttConfig(enabled=False),
        # One tick drains every mark (TICK_SHARE of the interval).
        stats=StatsConfig(k=[1, 3], ci_interval=3600.0, n_boot=200, max_suites=100_000),
    )
    return msgspec.structs.replace(cfg, alerts=[RULE])


def name(i: int) -> str:
    return f"suite-{i:05d}"


def events(i: int) -> list[TrialEvent]:
    """Every tenth suite passes a third of its trials (its rule fires); the rest nearly all."""
    bad = i % 10 == 0
    return [
        TrialEvent(
            name(i),
            f"task {t}",
            f"r{j}",
            "pass" if (j == 0 if bad else (t + j + i) % 29) else "fail",
        )
        for t in range(10)
        for j in range(3)
    ]


async def seed(store: Store, start: int, stop: int) -> None:
    for lo in range(start, stop, 250):
        batch = {name(i): events(i) for i in range(lo, min(stop, lo + 250))}
        await store.ingest.apply(batch, windows=dict.fromkeys(batch, 0), dedup_ttl=3600)


async def median(call: Callable[[], Awaitable[object]], repeat: int) -> float:
    took = []
    for _ in range(repeat):
        started = time.perf_counter()
        await call()
        took.append(time.perf_counter() - started)
    return statistics.median(took)


async def per_suite_index(store: Store, cfg: Config) -> None:
    """The index's reads before the rows: every suite's document, states and day."""
    now = time.time()
    known = await store.reads.suites()
    await store.snapshots.documents(known)
    await registry.statuses(store, cfg.alerts, suites=known)
    await store.reads.rejected_counts(now)
    await store.history.read_many([Series(s) for s in known], since=now - DAY, until=now)


async def rows_index(store: Store, **query: str) -> int:
    page = await _data.index(store, time.time(), **query)  # type: ignore[arg-type]
    _index.index_main(page)
    return len(page.rows)


async def per_suite_metrics(store: Store, cfg: Config, text: SuiteText) -> None:
    """/metrics before the rows: every snapshot document and rule state, then the text."""
    suites = await store.reads.suites()
    docs = await store.snapshots.documents(suites)
    pairs = [(w.suite, w.name) for w in await registry.watched(store, cfg.alerts, suites)]
    states = await store.alerts.alert_states(pairs)
    text.view = SuiteView(
        [d for d in docs if isinstance(d, Snapshot)],
        [
            (s, r, st)
            for (s, r), st in zip(pairs, states, strict=True)
            if isinstance(st, AlertState)
        ],
        {},
        redis_up=True,
        read_at=time.time(),
    )
    text.render()


async def rows_metrics(store: Store, text: SuiteText) -> None:
    text.view = await read_view(store, [])
    text.render()


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


async def figures(store: Store, cfg: Config, suites: int, repeat: int) -> None:
    ms = 1e3
    # The per-suite path takes seconds at 10,000 suites: three calls are enough.
    base = await median(lambda: per_suite_index(store, cfg), min(repeat, 3))
    first = await median(lambda: rows_index(store), repeat)
    firing = await median(lambda: rows_index(store, state="firing"), repeat)
    contains = await median(lambda: rows_index(store, contains="-0012"), repeat)
    prefix = await median(lambda: rows_index(store, prefix="suite-001"), repeat)
    print(f"{suites:,} suites (load {load()}):")
    print(f"  index, per-suite reads (before): {base * ms:8.1f} ms")
    print(f"  index, first page from the rows: {first * ms:8.1f} ms  ({base / first:5.1f}x)")
    print(f"  index, state=firing page:        {firing * ms:8.1f} ms  ({base / firing:5.1f}x)")
    print(f"  index, name holds '-0012':       {contains * ms:8.1f} ms  ({base / contains:5.1f}x)")
    print(f"  index, name starts 'suite-001':  {prefix * ms:8.1f} ms  ({base / prefix:5.1f}x)")
    # Each path keeps its text across scrapes, as the daemon does: a series' lines are
    # formatted once per snapshot; the first scrape formats every one (cold).
    before, after = SuiteText(), SuiteText()
    old_cold = await median(lambda: per_suite_metrics(store, cfg, before), 1)
    new_cold = await median(lambda: rows_metrics(store, after), 1)
    old = await median(lambda: per_suite_metrics(store, cfg, before), repeat)
    new = await median(lambda: rows_metrics(store, after), repeat)
    size = len(after.render()) // 1024
    print(
        f"  /metrics ({size:,} KiB), per-suite view (before): cold {old_cold * ms:8.1f} ms,"
        f" then {old * ms:8.1f} ms"
    )
    print(
        f"  /metrics, from the rows:                  cold {new_cold * ms:8.1f} ms,"
        f" then {new * ms:8.1f} ms  ({old / new:5.1f}x)"
    )


async def per_suite_status(client: AsyncClient, cfg: Config) -> None:
    """status's reads before the rows: every suite's summary (its state, its snapshot, its
    slices and labels) one suite at a time, then the rules' states."""
    for suite in await client.suites():
        await client.summary(suite)
    await registry.statuses(client.store, cfg.alerts)
    await client.store.reads.rejected_counts(time.time())


async def status_figure(url: str, cfg: Config, suites: int) -> None:
    lines: list[str] = []
    async with AsyncClient(url, prefix=PREFIX) as client:
        started = time.perf_counter()
        await per_suite_status(client, cfg)
        before = time.perf_counter() - started
        started = time.perf_counter()
        await status(client, None, ks=[], rules=cfg.alerts, as_json=False, out=lines.append)
        took = time.perf_counter() - started
    print(f"  status at {suites:,} suites, per-suite reads (before): {before * 1e3:8.1f} ms")
    print(
        f"  status at {suites:,} suites, from the rows (printed):  {took * 1e3:8.1f} ms"
        f"  ({before / took:5.1f}x)"
    )


async def run(workdir: Path, args: argparse.Namespace) -> None:
    server = RedisServer("redis", workdir / "redis", free_port())
    server.workdir.mkdir(parents=True)
    server.start()
    try:
        cfg = config(server.url)
        client = connect(server.url)
        store = Store(client, PREFIX)
        daemon = Daemon(cfg, store)
        print(f"load average before: {load()}")
        have = 0
        for count in sorted({args.status_suites, *args.suites}):
            started = time.perf_counter()
            await seed(store, have, count)
            seeded = time.perf_counter() - started
            started = time.perf_counter()
            async with daemon.recompute.tick:
                await daemon.recompute._tick()
            print(
                f"seeded {count - have:,} suites in {seeded:.1f} s, one tick (snapshots,"
                f" verdicts, rows) {time.perf_counter() - started:.1f} s"
            )
            have = count
            if count in args.suites:
                await figures(store, cfg, count, args.repeat)
            if count == args.status_suites:
                await status_figure(server.url, cfg, count)
        await client.aclose()
        print(f"load average after: {load()}")
    finally:
        server.stop()


def main() -> None:
    logging.disable(logging.WARNING)  # every firing rule logs its transition
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--status-suites", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reliabilityd-bench-reads-") as tmp:
        asyncio.run(run(Path(tmp), args))


if __name__ == "__main__":
    main()
