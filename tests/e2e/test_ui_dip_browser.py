"""A 12-second dip two hours ago, on a suite's chart in headless chromium.

Real redis-server and a daemon with its HTTP port. The suite's snapshots are
written every 5 s for 20 minutes two hours ago through the store's own write
(as the tick writes them, each with its history point); for 12 s its pass^k
falls to 19% and recovers. Two hours back the history keeps a point a minute,
each the minute's last snapshot (never the dip) beside the minute's minimum:
the chart draws that minimum down to 19%.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from reliabilityd.events import TrialEvent
from reliabilityd.stats import history
from reliabilityd.stats.history import Estimate3, label
from reliabilityd.stats.snapshot import StatsSettings, build, full_estimates, redis_fields
from reliabilityd.store import Store
from tests.support.browser import browser
from tests.support.daemon import running, store_for
from tests.support.helpers import commit_all
from tests.support.http import http_config
from tests.support.servers import RedisServer

SUITE = "dip-bot"
K = 1
LEVEL, DIP = 0.9, 0.19

SEEN = """(() => {
  const svg = document.querySelector('figure[data-metric="pass^k"] svg.chart');
  const box = (el) => el.getBoundingClientRect();
  return {
    values: [...svg.querySelectorAll('circle.pt')].map((p) => Number(p.dataset.v)),
    dips: [...svg.querySelectorAll('line.dip')].map((d) => ({
      t: Number(d.dataset.t), low: Number(d.dataset.low),
      top: box(d).top, bottom: box(d).bottom, title: d.textContent,
    })),
    chart: [box(svg).top, box(svg).height],
  };
})()"""


def _values(x: float) -> dict[str, Estimate3]:
    return {
        label("pass^k", K): (x, x - 0.05, x + 0.05),
        label("pass@k", K): (x, x - 0.05, x + 0.05),
    }


async def _write_past(store: Store, start: float, dip_at: float, now: float) -> None:
    """A snapshot every 5 s for 20 minutes from ``start``, 19% from ``dip_at`` for 12 s;
    then one a minute until ``now``, so the dip is older than the 10 s tier reaches."""
    state = await store.reads.read_state(SUITE)
    # The snapshot's document: one real build of the stored data.
    settings = StatsSettings(ks=(K,), window=0, n_boot=200)
    estimates = full_estimates(state.hist, settings)
    snap = build(
        suite=SUITE,
        hist=state.hist,
        trials=state.counters.trials,
        errors=0,
        skips=0,
        duplicates=0,
        version=state.counters.version,
        settings=settings,
        estimates=estimates,
        lottery_k=K,
        lottery_rows=[],
        now=start,
    )
    ci, values = redis_fields(snap)
    times = [start + 5 * step for step in range(240)]
    times += [float(t) for t in range(int(start) + 1260, int(now), 60)]
    for at in times:
        x = DIP if dip_at <= at < dip_at + 12 else LEVEL
        wrote, _ = await store.snapshots.write_snapshot(
            SUITE,
            state.counters.version,
            ci,
            values,
            point=history.Point(float(at), _values(x)),
        )
        assert wrote
        # Each point is a new version of the series' history (one point per version).
        await store.client.hset(store.keys.snapshot(SUITE), f"history:k{K}", -1)


@pytest.mark.timeout(120)
async def test_a_12_second_dip_shows_on_the_suites_chart(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix, ks=[K])
    await commit_all(
        cfg,
        [TrialEvent(SUITE, f"task {t}", f"r{t}-{j}", "pass") for t in range(10) for j in range(3)],
    )
    now = time.time()
    start = (now - 2 * 3600) // 60 * 60
    dip_at = start + 10 * 60 + 21  # 12 s inside one minute: 21 s to 33 s past it
    async with store_for(cfg) as store:
        await _write_past(store, start, dip_at, now)
        past = await store.history.read(SUITE)
        (bucket,) = [p for p in past.points if p.t == dip_at // 60 * 60 + 55]
        assert bucket.tier == 1
        # The minute's last snapshot is back at the level; its minimum is the dip.
        assert bucket.values[label("pass^k", K)][0] == pytest.approx(LEVEL, abs=1e-4)
        assert bucket.minima[label("pass^k", K)] == pytest.approx(DIP, abs=1e-4)
    async with running(cfg) as daemon, browser() as b:
        await asyncio.wait_for(daemon.http_listening.wait(), 10)
        page = await b.page()
        await page.viewport(1280, 900)
        await page.goto(f"http://127.0.0.1:{cfg.http.port}/suites/{SUITE}")
        seen: dict[str, Any] = await page.eval(SEEN)
        # No point on the chart is the dip: each is its minute's last snapshot.
        assert seen["values"]
        assert min(seen["values"]) > 0.5
        # The minimum is drawn down from the point of that minute, to 19%.
        # The daemon's own first snapshot may land in the bucket of the last point written
        # above (a minimum at the written level beside a live 100%): only that minute's
        # minimum is the dip.
        (dip,) = [d for d in seen["dips"] if d["low"] < 0.5]
        assert dip["t"] == bucket.t
        assert dip["low"] == pytest.approx(DIP, abs=1e-4)
        _, height = seen["chart"]
        # From the 90% level to the 19% one: most of the chart's height apart.
        assert dip["bottom"] - dip["top"] > 0.4 * height
        assert "as low as 19.0%" in dip["title"]
        await page.screenshot("ui-suite-dip.png")
