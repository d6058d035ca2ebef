"""A firing canary and a firing slice rule in headless chromium, desktop and phone.

Real redis-server and a daemon with its HTTP port; trials committed through
the sources' commit. The canary's past hour of differences is written
before the daemon starts through the store's own write (as the judge writes
it), so its chart has a past to draw. The tests assert what a person sees on
the candidate's page opened from the alert link, on the baseline's page, on
the sliced suite's page and on the failing slice's own page, and save
screenshots in test-artifacts/.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from functools import partial
from typing import Any
from urllib.parse import quote

import msgspec
import pytest

from reliabilityd.config import Config, SuiteOverride
from reliabilityd.events import TrialEvent
from reliabilityd.rules import CanaryRule, Rule
from reliabilityd.rules.canary import CanaryDetail, CanaryView, Compare
from reliabilityd.stats.slices import slice_id
from reliabilityd.store import Store
from tests.support.browser import Page, browser
from tests.support.daemon import running, store_for
from tests.support.helpers import commit_all, stored_state, wait_until
from tests.support.http import http_config
from tests.support.servers import RedisServer

BASELINE, CANDIDATE, SLICED = "prod-bot", "canary-bot", "support-bot"
CANARY = CanaryRule(
    name="canary-regression",
    compare=Compare(baseline={"suite": BASELINE}, candidate={"suite": CANDIDATE}),
    k=1,
)
SLICE_RULE = Rule(
    name="support-reliability", suite=SLICED, k=1, below=0.7, trigger="ci-low", slices=True
)
MODELS = ("model-a", "model-b", "model-c")
FAILING = slice_id(["model"], {"model": "model-b"})
SLICE_NAME = f"{SLICE_RULE.name}[{FAILING}]"
TASKS = 40
DESKTOP = (1280, 900)
PHONE = (375, 812)
_trial = itertools.count()


def _config(redis: RedisServer, prefix: str) -> Config:
    cfg = http_config(redis, prefix, ks=[1])
    return msgspec.structs.replace(
        cfg,
        suites=[SuiteOverride(match=SLICED, slice_by=["model"])],
        alerts=[CANARY, SLICE_RULE],
    )


def _trials(suite: str, passes: Sequence[int], model: str | None = None) -> list[TrialEvent]:
    name = model or "task"
    return [
        TrialEvent(
            suite,
            f"{name} {i:02d}",
            f"r{next(_trial)}",
            "pass" if j < c else "fail",
            labels=None if model is None else {"model": model},
        )
        for i, c in enumerate(passes)
        for j in range(10)
    ]


async def _write_past(store: Store, now: float) -> None:
    """The canary's last hour, one point a minute: level, then falling in the last 20."""
    for minute in range(60):
        at = now - (62 - minute) * 60.0
        drop = max(0, minute - 40) * 0.012
        view = CanaryView(
            at=at,
            value=-drop,
            ci=(-drop - 0.12, -drop + 0.1),
            detail=CanaryDetail(
                baseline=BASELINE,
                candidate=CANDIDATE,
                margin=CANARY.margin,
                resolve_margin=CANARY.resolve_at,
                baseline_value=1.0,
                candidate_value=1.0 - drop,
                shared=TASKS,
                only_baseline=0,
                only_candidate=0,
                min_shared=CANARY.min_shared,
                confidence=0.95,
                interval="gaffke",
                worse=[],
            ),
        )
        await store.alerts.write_canary_view(CANDIDATE, CANARY.name, view)


async def _firing(store: Store) -> bool:
    canary = await stored_state(store, CANDIDATE, CANARY.name)
    sliced = await stored_state(store, SLICED, SLICE_NAME)
    return canary.state == "firing" and sliced.state == "firing"


LOOK = """(() => {
  const box = (el) => { const r = el.getBoundingClientRect();
                        return {left: r.left, top: r.top, width: r.width, height: r.height}; };
  const canary = document.querySelector('section.rule.canary');
  const diff = canary && canary.querySelector('figure.difference svg.chart');
  return {
    text: document.body.innerText,
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    canary: canary && {
      text: canary.innerText, box: box(canary),
      points: diff ? diff.querySelectorAll('circle.pt').length : 0,
      threshold: diff ? diff.querySelectorAll('line.threshold').length : 0,
      worse: [...canary.querySelectorAll('table.worse tbody tr')]
        .map((tr) => tr.cells[0].innerText),
      under: [...canary.querySelectorAll('.num.under')].map((e) => getComputedStyle(e).color),
    },
    slices: [...document.querySelectorAll('section.slice')].map((s) => ({
      slice: s.dataset.slice, failing: s.classList.contains('failing'), box: box(s),
      text: s.innerText})),
    rules: [...document.querySelectorAll('section.rule')].map((s) => s.dataset.rule),
    focus: [...document.querySelectorAll('section.rule.focus')].map((s) => s.dataset.rule),
    banner: [...document.querySelectorAll('p.banner')].map((p) => p.innerText),
    charts: document.querySelectorAll('figure.series svg.chart').length,
    badges: [...document.querySelectorAll('tr.suite')].map((tr) => [tr.dataset.suite,
      tr.querySelector('.state') ? tr.querySelector('.state').innerText : null]),
  };
})()"""


async def _look(page: Page, url: str) -> dict[str, Any]:
    await page.goto(url)
    seen: dict[str, Any] = await page.eval(LOOK)
    return seen


@pytest.mark.timeout(240)
async def test_a_firing_canary_and_a_failing_slice_on_desktop_and_phone(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _config(redis_server, prefix)
    base = f"http://127.0.0.1:{cfg.http.port}"
    async with store_for(cfg) as store:
        await _write_past(store, time.time())
        async with running(cfg) as daemon, browser() as b:
            await asyncio.wait_for(daemon.http_listening.wait(), 10)
            await commit_all(
                cfg,
                [
                    *_trials(BASELINE, [10] * TASKS),
                    *_trials(CANDIDATE, [10] * (TASKS - 16) + [2] * 16),
                    *_trials(SLICED, [10] * 20, "model-a"),
                    *_trials(SLICED, [2] * 5, "model-b"),
                    *_trials(SLICED, [9] * 20, "model-c"),
                    # A suite that no rule watches: no state badge on the index.
                    *_trials("scratch", [5] * 4),
                ],
            )
            await wait_until(partial(_firing, store), 60)
            notes = [
                msgspec.json.decode(n) for n in await store.alerts.alert_history(cfg.alerts_key)
            ]
            (note,) = [n for n in notes if n["rule"] == CANARY.name and n["state"] == "firing"]
            page = await b.page()

            # The candidate's page from the alert's link: the canary's card first and
            # outlined, both sides, the difference in pp with its interval, in red under
            # the margin, its hour of differences charted, the tasks that got worse.
            await page.viewport(*DESKTOP)
            await page.color_scheme("light")
            seen = await _look(page, note["generator_url"])
            assert seen["focus"] == [CANARY.name]
            (banner,) = seen["banner"]
            assert banner.startswith(f"Opened at alert {CANARY.name}")
            assert "UNKNOWN RULE" not in banner.upper()
            assert banner.upper().endswith("FIRING")
            canary = seen["canary"]
            assert f"baseline {BASELINE}, candidate {CANDIDATE}" in canary["text"]
            assert "candidate - baseline: -32.0 pp" in canary["text"]
            assert canary["points"] >= 60
            assert canary["threshold"] == 1
            assert canary["worse"][:5] == [f"task {i:02d}" for i in range(24, 29)]
            assert canary["under"]
            assert canary["under"][0] != "rgb(27, 31, 36)"  # not the text colour
            assert seen["overflow"] <= 0
            await page.screenshot("ui-canary-desktop.png")

            await page.viewport(*PHONE, mobile=True)
            await page.color_scheme("dark")
            phone = await _look(page, note["generator_url"])
            assert phone["overflow"] <= 0
            assert phone["canary"]["box"]["width"] <= PHONE[0]
            await page.screenshot("ui-canary-phone.png")

            # The baseline's page lists the same canary.
            await page.viewport(*DESKTOP)
            await page.color_scheme("light")
            other = await _look(page, f"{base}/suites/{BASELINE}")
            assert other["rules"] == [CANARY.name]
            assert "candidate - baseline: -32.0 pp" in other["canary"]["text"]

            # The sliced suite: the slices side by side on a desktop, the failing one
            # singled out, the slice rule's card naming its slice.
            sliced = await _look(page, f"{base}/suites/{SLICED}")
            cards = {c["slice"]: c for c in sliced["slices"]}
            assert len(cards) == len(MODELS)
            assert [c["slice"] for c in sliced["slices"] if c["failing"]] == [FAILING]
            tops = {round(c["box"]["top"]) for c in cards.values()}
            assert len(tops) == 1, tops  # one row
            assert "20.0%" in cards[FAILING]["text"]
            assert SLICE_NAME in sliced["rules"]
            assert f"Failing: {FAILING}" in sliced["text"]
            await page.screenshot("ui-slices-desktop.png")

            # The failing slice's own page: its rule, its two charts.
            slice_url = f"{base}/suites/{SLICED}?slice={quote(FAILING, safe='')}&rule={SLICE_NAME}"
            own = await _look(page, slice_url)
            assert own["rules"] == [SLICE_NAME]
            assert own["focus"] == [SLICE_NAME]
            assert own["charts"] == 2
            assert own["overflow"] <= 0
            await page.screenshot("ui-slice-desktop.png")
            await page.viewport(*PHONE, mobile=True)
            await page.color_scheme("dark")
            own = await _look(page, slice_url)
            assert own["overflow"] <= 0
            await page.screenshot("ui-slice-phone.png")
            stacked = await _look(page, f"{base}/suites/{SLICED}")
            assert len({round(c["box"]["left"]) for c in stacked["slices"]}) == 1  # one column
            assert stacked["overflow"] <= 0

            # The index: the canary's state on both sides, none for a suite without rule.
            await page.viewport(*DESKTOP)
            await page.color_scheme("light")
            index: dict[str, Any] = {}

            async def index_firing() -> bool:
                # The index reads the summary rows, written once the tick's verdicts are in.
                nonlocal index
                index = dict((await _look(page, f"{base}/"))["badges"])
                return index.get(BASELINE) == index.get(CANDIDATE) == index.get(SLICED) == "FIRING"

            await wait_until(index_firing, 30)
            assert index[BASELINE] == index[CANDIDATE] == index[SLICED] == "FIRING"
            assert index["scratch"] is None
            await page.screenshot("ui-index-rules-desktop.png")
