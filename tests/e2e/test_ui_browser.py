"""The web UI in headless chromium, loaded from a daemon with real data.

Real redis-server and mosquitto; trials published over MQTT; a rule that
fires; a dead letter. The suite's last 90 minutes are written before the
daemon starts through the daemon's own path (commits, then snapshots with
their history points at the times they stand for), so the charts have a
past to draw. The tests assert what a person sees and save screenshots in
test-artifacts/.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest

from reliabilityd.config import Config, HttpConfig, StatsConfig
from reliabilityd.events import Outcome, TrialEvent
from reliabilityd.rules import Rule
from reliabilityd.stats import history
from reliabilityd.stats.snapshot import StatsSettings, build, full_estimates, redis_fields
from reliabilityd.store import Store
from tests.support.browser import CdpError, Page, browser
from tests.support.daemon import make_config, running, store_for
from tests.support.helpers import publish, stored_state, wait_until
from tests.support.servers import Mosquitto, RedisServer, free_port

SUITE = "checkout-bot"
TASKS = [f"checkout {i}" for i in range(12)]
WINDOW = 10
KS = [1, 3]
PAST = 90  # minutes of history written before the daemon starts
# The windowed detector: the scenario's drop must page within seconds of a fresh start.
RULE = Rule(
    name="checkout-reliability",
    k=3,
    below=0.6,
    resolve_above=0.7,
    min_tasks=5,
    severity="page",
    trigger="detector",
)
DESKTOP = (1280, 900)
PHONE = (375, 812)


def _config(redis: RedisServer, broker: Mosquitto, prefix: str) -> Config:
    cfg = make_config(
        redis_url=redis.url,
        mqtt_url=broker.url,
        prefix=prefix,
        ks=KS,
        window=WINDOW,
        http=HttpConfig(port=free_port()),
        alerts=[RULE],
    )
    return msgspec.structs.replace(
        cfg, stats=msgspec.structs.replace(cfg.stats, window=WINDOW, lottery_limit=5)
    )


def _outcome(task: int, step: int) -> Outcome:
    """The past: most tasks always pass, a few fail one run in three or four."""
    if task in (3, 7):
        return "fail" if step % 3 == 0 else "pass"
    if task == 9:
        return "fail" if step % 4 == 1 else "pass"
    return "pass"


async def _write_past(store: Store, stats: StatsConfig, now: float) -> None:
    """One commit and one snapshot a minute for PAST minutes, as the daemon writes them."""
    settings = StatsSettings(ks=tuple(KS), window=WINDOW, n_boot=stats.n_boot)
    for step in range(PAST):
        at = now - (PAST + 5 - step) * 60.0
        events = [
            TrialEvent(SUITE, task, f"past-{step}", _outcome(i, step), ts=at)
            for i, task in enumerate(TASKS)
        ]
        await store.ingest.apply({SUITE: events}, windows={SUITE: WINDOW}, dedup_ttl=86400)
        state = await store.reads.read_state(SUITE)
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
            lottery_k=max(KS),
            lottery_rows=[],
            now=at,
        )
        ci, values = redis_fields(snap)
        wrote, _ = await store.snapshots.write_snapshot(
            SUITE, state.counters.version, ci, values, point=history.point_of(estimates, at)
        )
        assert wrote


class Scene(msgspec.Struct):
    base: str
    link: str  # the firing notification's generatorURL
    reason: str  # the dead letter's
    cfg: Config


@contextlib.asynccontextmanager
async def scene(redis: RedisServer, broker: Mosquitto, prefix: str) -> AsyncIterator[Scene]:
    """A daemon whose suite has a past, a firing alert and a dead letter; quiet once yielded."""
    cfg = _config(redis, broker, prefix)
    async with store_for(cfg) as store:
        await _write_past(store, cfg.stats, time.time())
        async with running(cfg) as daemon:
            await asyncio.wait_for(daemon.http_listening.wait(), 10)
            # The regression, over MQTT: eight tasks now fail most of their runs.
            now = [
                msgspec.json.encode(
                    {
                        "suite": SUITE,
                        "task": task,
                        "trial": f"now-{j}",
                        "outcome": "fail" if i < 8 and j % 4 else "pass",
                    }
                )
                for i, task in enumerate(TASKS)
                for j in range(WINDOW)
            ]
            # A harness's usual mistakes: an integer trial id and "PASS".
            bad = b'{"suite": "%s", "task": "checkout 0", "trial": 7, "outcome": "PASS"}' % (
                SUITE.encode()
            )
            await publish(broker.port, f"{prefix}/trials/x", [*now, bad])

            async def fired() -> bool:
                state = await stored_state(store, SUITE, RULE.name)
                return state.state == "firing"

            await wait_until(fired, within=30, interval=0.2)
            # During the breach four tasks get worse still: the tasks that moved.
            worse = [
                msgspec.json.encode(
                    {"suite": SUITE, "task": task, "trial": f"later-{j}", "outcome": "fail"}
                )
                for task in TASKS[:4]
                for j in range(5)
            ]
            await publish(broker.port, f"{prefix}/trials/x", worse)

            async def quiet() -> bool:
                counts = await store.reads.task_counts(SUITE)
                if any(counts.get(task) != (WINDOW, 1) for task in TASKS[:4]):
                    return False
                ((data, snap, _),) = await store.snapshots.versions([SUITE])
                letters = await store.reads.recent_deadletters(since=0, suite=SUITE)
                notes = await store.alerts.alert_history(cfg.alerts_key)
                return data == snap and bool(letters) and bool(notes)

            await wait_until(quiet, within=30, interval=0.2)
            (letter,) = await store.reads.recent_deadletters(since=0, suite=SUITE)
            notes = [
                msgspec.json.decode(n) for n in await store.alerts.alert_history(cfg.alerts_key)
            ]
            (note,) = [n for n in notes if n["state"] == "firing"]
            yield Scene(
                base=f"http://127.0.0.1:{cfg.http.port}",
                link=note["generator_url"],
                reason=letter.reason,
                cfg=cfg,
            )


SEEN = """(() => {
  const svg = document.querySelector('figure[data-metric="pass^k"] svg.chart');
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.width, r.height]; };
  const pts = [...svg.querySelectorAll('circle.pt')];
  const bands = [...svg.querySelectorAll('path.band')];
  const marks = [...svg.querySelectorAll('line.mark')];
  return {
    t0: Number(svg.dataset.t0), t1: Number(svg.dataset.t1),
    points: pts.map((p) => [Number(p.dataset.t), box(p)[0] + box(p)[1] / 2]),
    bands: bands.map((b) => [box(b)[1], box(b)[2], getComputedStyle(b).fill]),
    marks: marks.map((m) => [Number(m.dataset.t), m.dataset.state, m.dataset.rule, box(m)[0]]),
    focus: [...document.querySelectorAll('section.rule.focus')].map((s) => s.id),
    text: document.body.innerText,
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    background: getComputedStyle(document.body).backgroundColor,
    width: window.innerWidth,
  };
})()"""


def _luminance(css: str) -> float:
    r, g, b = (int(x) for x in re.findall(r"\d+", css)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


async def _look(page: Page, url: str) -> dict[str, Any]:
    await page.goto(url)
    seen: dict[str, Any] = await page.eval(SEEN)
    return seen


@pytest.mark.timeout(240)
async def test_the_suite_page_shows_the_history_the_alert_and_the_dead_letter(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    async with scene(redis_server, mosquitto, prefix) as sc, browser() as b:
        # The alert's link opens the suite's page at the alert.
        assert sc.link.startswith(f"{sc.base}/suites/{SUITE}?rule={RULE.name}&at=")
        page = await b.page()
        await page.viewport(*DESKTOP)
        await page.color_scheme("light")
        seen = await _look(page, sc.link)
        async with store_for(sc.cfg) as store:
            past = await store.history.read(SUITE, since=seen["t0"], until=seen["t1"])
        drawn = [p for p in past.points if history.label("pass^k", RULE.k) in p.values]
        # As many dots as the history has points, at the history's times.
        assert len(drawn) > PAST // 2
        assert [t for t, _ in seen["points"]] == [p.t for p in drawn]
        # The band is drawn: wide, tall, filled.
        assert seen["bands"]
        width, height, fill = max(seen["bands"])
        assert width > 200
        assert height > 1
        assert fill not in ("none", "rgba(0, 0, 0, 0)")
        # The firing alert is marked at its time, between the points around it.
        (firing,) = [t for t in past.transitions if t.rule == RULE.name and t.state == "firing"]
        marks = [m for m in seen["marks"] if m[1] == "firing" and m[2] == RULE.name]
        assert [m[0] for m in marks] == [firing.t]
        x = marks[0][3]
        before = [px for t, px in seen["points"] if t < firing.t]
        after = [px for t, px in seen["points"] if t > firing.t]
        assert before
        assert max(before) <= x + 1
        if after:
            assert x <= min(after) + 1
        assert seen["focus"] == [f"rule-{RULE.name}"]
        assert f"Opened at alert {RULE.name}" in seen["text"]
        # The tasks that moved during the breach, worst first.
        moved = await page.eval(
            "[...document.querySelectorAll('table.movers tbody tr')]"
            ".map((tr) => [...tr.cells].map((td) => td.innerText))"
        )
        assert [row[0] for row in moved] == TASKS[:4]
        assert {tuple(row[1:4]) for row in moved} == {("3/10", "1/10", "-20.0 pp")}
        # The dead letter's reason, as the daemon recorded it.
        assert sc.reason in seen["text"]
        assert seen["overflow"] <= 0
        assert _luminance(seen["background"]) > 0.8
        await page.screenshot("ui-suite-desktop.png")

        # A phone at night: 375 px wide, dark theme, nothing scrolls sideways.
        await page.viewport(*PHONE, mobile=True)
        await page.color_scheme("dark")
        phone = await _look(page, sc.link)
        assert phone["width"] == PHONE[0]
        assert phone["overflow"] <= 0
        assert _luminance(phone["background"]) < 0.2
        assert len(phone["points"]) == len(drawn)
        assert sc.reason in phone["text"]
        await page.screenshot("ui-suite-phone.png")

        # The index: the suite, its value, its trend, its alert and the rejected count.
        await page.viewport(*DESKTOP)
        await page.color_scheme("light")
        row: dict[str, Any] = {}

        async def index_firing() -> bool:
            # The index reads the summary rows, written once the tick's verdicts are in.
            nonlocal row
            await page.goto(f"{sc.base}/")
            row = await page.eval(
                f"""(() => {{
                  const tr = document.querySelector('tr.suite[data-suite="{SUITE}"]');
                  return {{text: tr.innerText,
                           spark: tr.querySelectorAll('svg.spark path.line').length,
                           rejected: tr.querySelector('td.rejected').innerText}};
                }})()"""
            )
            return "FIRING" in row["text"].upper()

        await wait_until(index_firing, 30)
        assert "FIRING" in row["text"].upper()
        assert row["spark"] >= 1
        assert row["rejected"] == "1"
        await page.screenshot("ui-index-desktop.png")


@pytest.mark.timeout(240)
async def test_an_open_page_refreshes_at_most_every_5_s_and_not_while_hidden(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    async with scene(redis_server, mosquitto, prefix) as sc, browser() as b:
        page = await b.page()
        await page.goto(f"{sc.base}/suites/{SUITE}")

        async def fragments(n: int) -> bool:
            return len(page.request_times("fragment=1")) >= n

        async def refreshed(n: int) -> bool:
            done = await page.eval(
                "Number(document.getElementById('content').dataset.refreshes || '0')"
            )
            return bool(done >= n)

        # Three refreshes, each at least 5 s after the one before (a lower bound a
        # busy machine only lengthens), and each answer applied to the page.
        await wait_until(partial(fragments, 3), 60, interval=0.2)
        times = page.request_times("fragment=1")
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) >= 5.0, gaps
        await wait_until(partial(refreshed, 3), 30, interval=0.2)
        # Hidden: no request at all; shown again: it resumes.
        await page.eval(
            "Object.defineProperty(document, 'visibilityState', {get: () => 'hidden', "
            "configurable: true}); document.dispatchEvent(new Event('visibilitychange'))"
        )
        # Every request sent so far has been answered and applied: none in flight.
        sent = len(page.request_times("fragment=1"))
        await wait_until(partial(refreshed, sent), 30, interval=0.2)
        hidden_from = len(page.request_times("fragment=1"))
        # Two refresh periods and more, hidden: a busy machine can only delay a
        # request, never add one, so no request here means none was scheduled.
        await asyncio.sleep(11)
        assert len(page.request_times("fragment=1")) == hidden_from
        await page.eval(
            "Object.defineProperty(document, 'visibilityState', {get: () => 'visible', "
            "configurable: true}); document.dispatchEvent(new Event('visibilitychange'))"
        )
        await wait_until(partial(fragments, hidden_from + 1), 30, interval=0.2)


@pytest.mark.timeout(240)
def test_the_demo_banner_leads_a_browser_to_the_demo_suite_page(tmp_path: Path) -> None:
    """`reliabilityd demo`, as the README's first screen runs it: the printed URL opens."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "reliabilityd",
            "demo",
            "--duration",
            "60",
            "--no-live",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = None
        for line in proc.stdout:
            if match := re.match(
                r"open (http://127\.0\.0\.1:\d+/suites/support-bot) in a browser", line
            ):
                url = match[1]
                break
        assert url, "the demo printed no page address"

        async def look() -> dict[str, Any]:
            async with browser() as b:
                page = await b.page()
                await page.viewport(*PHONE, mobile=True)
                seen: dict[str, Any] = {}
                for _ in range(100):
                    await asyncio.sleep(0.5)
                    try:  # the banner comes before the HTTP port listens
                        await page.goto(url)
                        seen = await page.eval(
                            "({h1: document.querySelector('h1').innerText, "
                            "charts: document.querySelectorAll('svg.chart').length, "
                            "rules: document.querySelectorAll('section.rule').length, "
                            "points: document.querySelectorAll('svg.chart circle.pt').length})"
                        )
                    except CdpError:
                        continue
                    if seen["points"]:
                        await page.screenshot("ui-demo-phone.png")
                        return seen
                return seen

        seen = asyncio.run(look())
        assert seen["h1"] == "support-bot"
        assert seen["charts"] == 2
        assert seen["rules"] == 1
        assert seen["points"] >= 1
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
