"""Benchmark: importing and emitting, each beside a baseline measured in the same run.

* Import: ``import_file`` of a tau-bench file (read, map, ledger, count)
  against ``Store.apply`` of the same events already in memory (no file, no
  ledger), on a private redis-server; plus the import ledger's memory per
  imported trial.
* Emit: events acknowledged per second by an ``Emitter`` (100 per message)
  against a bare aiomqtt publisher sending the same 100-event arrays at QoS 1,
  on a private mosquitto; and by an ``Emitter`` publishing each of
  ``SUITES`` interleaved suites on its own topic (``{suite}``). aiomqtt
  comes with the dev extra, not with the package: without it the command
  says so in one line.

Best of three alternating rounds each, as the machines here are shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import signal
import tempfile
import time
from pathlib import Path

import msgspec

from reliabilityd.client.emitter import Emitter
from reliabilityd.embedded.processes import Mosquitto, RedisServer, free_port
from reliabilityd.events import TrialEvent
from reliabilityd.importers._import import import_file, read
from reliabilityd.store import Store, connect

TASKS = 20_000
TRIALS = 5
EMITTED = 100_000
BATCH = 100
ROUNDS = 3
SUITES = 10


def _tau_bench_file(path: Path) -> None:
    runs = [
        {"task_id": t, "trial": j, "reward": 1.0 if (t * 7 + j) % 10 < 7 else 0.0, "info": {}}
        for j in range(TRIALS)
        for t in range(TASKS)
    ]
    path.write_text(json.dumps(runs))


async def _import_round(store: Store, path: Path, r: int) -> tuple[float, float]:
    started = time.perf_counter()
    report = await import_file(store, path, suite=f"imp{r}")
    ours = report.counted / (time.perf_counter() - started)
    parsed = read(path)
    events = [TrialEvent(f"base{r}", t.task, f"x/{t.trial}", t.outcome) for t in parsed.trials]
    started = time.perf_counter()
    await store.ingest.apply({f"base{r}": events}, windows={}, dedup_ttl=7200)
    return ours, len(events) / (time.perf_counter() - started)


def _emit_round(url: str, topic: str, suites: int = 1) -> float:
    names = ["bench"] if suites == 1 else [f"bench-{s}" for s in range(suites)]
    started = time.perf_counter()
    with Emitter(url, topic=topic, batch_size=BATCH, max_pending=20_000) as em:
        for i in range(EMITTED):
            em.emit(names[i % suites], f"task {i % 5000}", "pass")
        em.flush(120)
    return EMITTED / (time.perf_counter() - started)


async def _bare_round(port: int, topic: str) -> float:
    import aiomqtt

    events = [TrialEvent("bench", f"task {i % 5000}", f"b{i}", "pass") for i in range(EMITTED)]
    started = time.perf_counter()
    payloads = [msgspec.json.encode(events[i : i + BATCH]) for i in range(0, EMITTED, BATCH)]
    async with aiomqtt.Client("127.0.0.1", port, identifier="bench-bare") as client:
        client.pending_calls_threshold = 10_000
        for i in range(0, len(payloads), 10):
            await asyncio.gather(*(client.publish(topic, p, qos=1) for p in payloads[i : i + 10]))
    return EMITTED / (time.perf_counter() - started)


async def _main() -> None:
    with tempfile.TemporaryDirectory(prefix="reliabilityd-bench-") as tmp:
        redis = RedisServer("redis", Path(tmp), free_port())
        broker = Mosquitto("mosquitto", Path(tmp), free_port())
        redis.start()
        broker.start()
        client = connect(redis.url)
        try:
            store = Store(client, "bench")
            path = Path(tmp) / "results.json"
            _tau_bench_file(path)
            imp = base = emit = bare = split = 0.0
            for r in range(ROUNDS):
                ours, baseline = await _import_round(store, path, r)
                imp, base = max(imp, ours), max(base, baseline)
                emit = max(emit, await asyncio.to_thread(_emit_round, broker.url, "bench/emit"))
                bare = max(bare, await _bare_round(broker.port, "bench/bare"))
                per_suite = await asyncio.to_thread(
                    _emit_round, broker.url, "bench/suite/{suite}", SUITES
                )
                split = max(split, per_suite)
            ledger = int(await client.memory_usage(store.keys.imported("imp0"), samples=0) or 0)
            events = TASKS * TRIALS
            print(f"best of {ROUNDS} alternating rounds")
            print(
                f"import ({events:,} tau-bench runs)  {imp:>9,.0f} ev/s   "
                f"Store.apply of the same events {base:>9,.0f} ev/s   {imp / base:>5.0%}"
            )
            print(
                f"emit ({EMITTED:,} events, {BATCH}/msg)  {emit:>9,.0f} ev/s   "
                f"bare aiomqtt publisher       {bare:>9,.0f} ev/s   {emit / bare:>5.0%}"
            )
            print(
                f"emit per suite ({SUITES} suites, {{suite}} topic) {split:>9,.0f} ev/s   "
                f"bare aiomqtt publisher       {bare:>9,.0f} ev/s   {split / bare:>5.0%}"
            )
            print(f"import ledger: {ledger / events:.1f} B per imported trial (MEMORY USAGE)")
        finally:
            await client.aclose()
            with contextlib.suppress(Exception):
                broker.stop(signal.SIGKILL)
            with contextlib.suppress(Exception):
                redis.stop(signal.SIGKILL)


def main() -> None:
    if importlib.util.find_spec("aiomqtt") is None:
        raise SystemExit(
            "make bench-import: its baseline publisher is aiomqtt, from the dev extra: "
            "pip install 'reliabilityd[dev]'"
        )
    asyncio.run(_main())


if __name__ == "__main__":
    main()
