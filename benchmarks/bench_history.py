"""Benchmark: the snapshot write with its history point, beside the same write without it.

A private redis-server; 1,000 suites; each round writes every suite's
snapshot once (real snapshot fields: the JSON document and the flat fields
of a suite at k = [1, 5]) through ``Snapshots.write_snapshots``, pipelined
100 at a time, alternately with and without the history point. The figure
is the time per write of each, measured in the same run, and their ratio;
then the time to read one full series' history (both tiers full at two ks).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import numpy as np

from reliabilityd.embedded.processes import RedisServer, free_port
from reliabilityd.stats import history, snapshot
from reliabilityd.stats.estimate import Estimate
from reliabilityd.stats.histogram import Histogram
from reliabilityd.store import Store, connect
from reliabilityd.store._snapshots import SnapshotWrite

SUITES = 1000
ROUNDS = 6
CHUNK = 100
T0 = 1_764_460_800


def fields() -> tuple[dict[str, str | int], dict[str, str | int], list[Estimate]]:
    rng = np.random.default_rng(0)
    n = rng.integers(5, 101, size=200)
    hist = Histogram.from_pairs(np.column_stack([n, rng.binomial(n, 0.8)]))
    settings = snapshot.StatsSettings(ks=(1, 5), n_boot=500)
    estimates = snapshot.full_estimates(hist, settings)
    snap = snapshot.build(
        suite="suite-0000",
        hist=hist,
        trials=int((hist.n * hist.count).sum()),
        errors=0,
        skips=0,
        duplicates=0,
        version=1,
        settings=settings,
        estimates=estimates,
        lottery_k=5,
        lottery_rows=[],
        now=float(T0),
    )
    ci, values = snapshot.redis_fields(snap)
    return ci, values, estimates


async def main() -> None:
    ci, values, estimates = fields()
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer("redis", Path(tmp) / "redis", free_port())
        server.workdir.mkdir(parents=True)
        server.start()
        client = connect(server.url)
        store = Store(client, "bench")
        try:
            spent = {"with the point": 0.0, "without": 0.0}
            version = 0
            for round_ in range(ROUNDS):
                for label, with_point in (("with the point", True), ("without", False)):
                    version += 1
                    t = float(T0 + 60 * version)
                    writes = [
                        SnapshotWrite(
                            f"suite-{i:04d}",
                            version,
                            ci,
                            values,
                            point=history.point_of(estimates, t) if with_point else None,
                        )
                        for i in range(SUITES)
                    ]
                    started = time.perf_counter()
                    for i in range(0, SUITES, CHUNK):
                        await store.snapshots.write_snapshots(writes[i : i + CHUNK])
                    if round_ > 0:  # the first round creates the strings
                        spent[label] += time.perf_counter() - started
            per = {k: v / ((ROUNDS - 1) * SUITES) * 1e6 for k, v in spent.items()}
            print(f"snapshot write with its history point: {per['with the point']:.0f} us")
            print(f"snapshot write without it (same run):  {per['without']:.0f} us")
            print(f"ratio: {per['with the point'] / per['without']:.2f}")
            # One series with every slot filled, read whole.
            full = [
                SnapshotWrite("full", v, {"json": "x"}, {}, point=history.point_of(estimates, t))
                for v, t in enumerate(range(T0, T0 + 420 * 86_400, 600), start=1)
            ]
            for i in range(0, len(full), 1000):
                await store.snapshots.write_snapshots(full[i : i + 1000])
            started = time.perf_counter()
            reads = 20
            for _ in range(reads):
                got = await store.history.read("full")
            took = (time.perf_counter() - started) / reads * 1000
            print(f"reading a full series (2 ks, {len(got.points)} points): {took:.1f} ms")
        finally:
            await client.aclose()
            server.stop()


if __name__ == "__main__":
    asyncio.run(main())
