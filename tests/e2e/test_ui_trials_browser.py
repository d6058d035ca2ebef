"""From a firing alert to the failing trial's transcript, in headless chromium.

Real redis-server, mosquitto and a daemon with its HTTP port; a stand-in
trace viewer (an aiohttp server on another port) that serves one page per
trial. Trials are published over MQTT, each with a `url` of its own on the
viewer and a `run`; six of ten tasks pass 4 of their 10 trials, so a
threshold rule fires and they are the lottery cases. The browser opens the
firing notification's generatorURL, reads a lottery case's last failing and
last passing trial and the failures that moved a task during the breach,
follows the failing one's link to the viewer and lands
on exactly the url that was published for it (sent without a referrer), and
opens the task's recent trials, saved as screenshots in test-artifacts/ at
desktop and phone widths.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import msgspec
import pytest
from aiohttp import web

from reliabilityd.config import HttpConfig
from reliabilityd.rules import Rule
from tests.support.browser import browser
from tests.support.daemon import make_config, running, store_for
from tests.support.helpers import current_snapshot, publish, stored_state, wait_until
from tests.support.servers import Mosquitto, RedisServer, free_port

SUITE = "trace-bot"
TASKS = [f"fix bug {i}" for i in range(10)]
FLAKY = 6  # the first six pass 4 of their 10 trials; the others all 10
TRIALS = 10
RULE = Rule(name="trace-reliability", k=3, below=0.8, min_tasks=5, trigger="ci-low")
DESKTOP = (1280, 900)
PHONE = (375, 812)


def _outcome(task: int, j: int) -> str:
    return "fail" if task < FLAKY and j % 3 else "pass"


class Viewer:
    """A trace viewer stand-in: one page per trial, and every request it was sent."""

    def __init__(self) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.seen: list[tuple[str, str | None]] = []  # (path and query, Referer)

    def url(self, task: int, trial: str) -> str:
        return f"{self.base}/trace/{task}/{quote(trial)}?view=transcript"

    async def page(self, request: web.Request) -> web.Response:
        self.seen.append((request.path_qs, request.headers.get("Referer")))
        trial = request.match_info["trial"]
        return web.Response(
            text=f'<!doctype html><title>trace</title><h1 id="trial">{trial}</h1>',
            content_type="text/html",
        )


@contextlib.asynccontextmanager
async def viewer() -> AsyncIterator[Viewer]:
    v = Viewer()
    app = web.Application()
    app.router.add_get("/trace/{task}/{trial}", v.page)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", v.port).start()
    try:
        yield v
    finally:
        await runner.cleanup()


LOTTERY = """[...document.querySelectorAll('table.lottery tbody tr')].map((tr) => ({
  task: tr.dataset.task,
  view: tr.querySelector('a.task').getAttribute('href'),
  failing: tr.querySelector('td.failing a.trial-link')?.href,
  failingRel: tr.querySelector('td.failing a.trial-link')?.rel,
  passing: tr.querySelector('td.passing a.trial-link')?.href,
  text: tr.innerText,
}))"""

MOVERS = """[...document.querySelectorAll('table.movers tbody tr')].map((tr) => ({
  task: tr.dataset.task,
  cells: [...tr.cells].map((td) => td.innerText),
  links: [...tr.querySelectorAll('td.moved-by a.trial-link')].map((a) => a.href),
}))"""

TRIAL_LIST = """(() => ({
  h1: document.querySelector('h1').innerText,
  rows: [...document.querySelectorAll('table.trials tbody tr')].map((tr) => ({
    trial: tr.dataset.trial,
    outcome: tr.querySelector('.outcome').innerText,
    when: tr.querySelector('time').innerText,
    run: tr.querySelector('td.run').innerText,
    link: tr.querySelector('a.trial-link')?.href,
  })),
  overflow: document.documentElement.scrollWidth - window.innerWidth,
  width: window.innerWidth,
}))()"""


@pytest.mark.timeout(240)
async def test_a_firing_alert_leads_to_the_failing_trial_that_was_published(
    redis_server: RedisServer, mosquitto: Mosquitto, prefix: str
) -> None:
    cfg = make_config(
        redis_url=redis_server.url,
        mqtt_url=mosquitto.url,
        prefix=prefix,
        ks=[1, 3],
        http=HttpConfig(port=free_port()),
        alerts=[RULE],
    )
    async with viewer() as v, running(cfg) as daemon, store_for(cfg) as store:
        await asyncio.wait_for(daemon.http_listening.wait(), 10)
        events = [
            {
                "suite": SUITE,
                "task": task,
                "trial": f"{i}-{j}",
                "outcome": _outcome(i, j),
                "url": v.url(i, f"{i}-{j}"),
                "run": "nightly-7",
            }
            for j in range(TRIALS)
            for i, task in enumerate(TASKS)
        ]
        await publish(
            mosquitto.port, f"{prefix}/trials/x", [msgspec.json.encode(e) for e in events]
        )
        # The url of each task's last failing and last passing event, as published.
        last: dict[tuple[str, str], str] = {}
        for e in events:
            last[(e["task"], e["outcome"])] = e["url"]

        async def fired() -> bool:
            notes = await store.alerts.alert_history(cfg.alerts_key)
            state = await stored_state(store, SUITE, RULE.name)
            return state.state == "firing" and bool(notes)

        await wait_until(fired, within=60, interval=0.2)
        (note,) = [msgspec.json.decode(n) for n in await store.alerts.alert_history(cfg.alerts_key)]
        assert note["state"] == "firing"
        # During the breach a reliable task fails three times: a task that moved, by these.
        moved = TASKS[FLAKY]
        later = [
            {
                "suite": SUITE,
                "task": moved,
                "trial": f"{FLAKY}-later-{j}",
                "outcome": "fail",
                "url": v.url(FLAKY, f"{FLAKY}-later-{j}"),
                "run": "nightly-7",
            }
            for j in range(3)
        ]
        await publish(mosquitto.port, f"{prefix}/trials/x", [msgspec.json.encode(e) for e in later])
        last[(moved, "fail")] = later[-1]["url"]

        async def counted() -> bool:
            rows = await store.reads.trials(SUITE, moved)
            return bool(rows) and rows[0].trial == later[-1]["trial"]

        await wait_until(counted, within=30, interval=0.2)
        await current_snapshot(store, SUITE)  # the page's lottery cases: of every trial
        base = f"http://127.0.0.1:{cfg.http.port}"
        assert note["generator_url"].startswith(f"{base}/suites/{SUITE}?rule={RULE.name}&at=")

        async with browser() as b:
            page = await b.page()
            await page.viewport(*DESKTOP)
            await page.color_scheme("light")
            # The firing alert's page: the lottery cases, each with its pair of trials.
            await page.goto(note["generator_url"])
            cases: list[dict[str, Any]] = await page.eval(LOTTERY)
            # The flaky six, then the task that failed during the breach (10 of 13).
            assert [c["task"] for c in cases] == TASKS[: FLAKY + 1]
            for case in cases:
                assert case["failing"] == last[(case["task"], "fail")]
                assert case["passing"] == last[(case["task"], "pass")]
                assert case["failingRel"] == "noopener noreferrer"
                assert case["view"] == f"/suites/{SUITE}/tasks/{quote(case['task'])}"
            # The task that moved links the failures that moved it, newest first.
            movers: list[dict[str, Any]] = await page.eval(MOVERS)
            assert [m["task"] for m in movers] == [moved]
            assert movers[0]["links"] == [e["url"] for e in reversed(later)]
            assert movers[0]["cells"][1:4] == ["10/10", "0/3", "-100.0 pp"]
            await page.screenshot("ui-lottery-trials-desktop.png")

            # Follow the first case's failing trial to the viewer: exactly the url that
            # was published for it, and the daemon's address not sent along.
            first = cases[0]
            await page.follow(
                f'document.querySelector(\'tr[data-task="{first["task"]}"] td.failing '
                "a.trial-link')"
            )
            landed = await page.eval(
                "({href: location.href, trial: document.querySelector('#trial').innerText})"
            )
            expected = last[(first["task"], "fail")]
            assert landed["href"] == expected
            assert expected == v.url(0, "0-8")  # task 0's trials 0..9: 8 is its last failure
            assert landed["trial"] == "0-8"
            assert v.seen == [(expected.removeprefix(v.base), None)]

            # The case's own view: its last trials, newest first, each with its link.
            await page.goto(note["generator_url"])
            await page.follow(f"document.querySelector('tr[data-task=\"{first['task']}\"] a.task')")
            seen: dict[str, Any] = await page.eval(TRIAL_LIST)
            assert seen["h1"] == first["task"]
            wanted = [f"0-{j}" for j in range(TRIALS - 1, -1, -1)]
            assert [r["trial"] for r in seen["rows"]] == wanted
            assert [r["outcome"].lower() for r in seen["rows"]] == [
                _outcome(0, int(t[2:])) for t in wanted
            ]
            assert [r["link"] for r in seen["rows"]] == [v.url(0, t) for t in wanted]
            assert {r["run"] for r in seen["rows"]} == {"nightly-7"}
            assert all(r["when"].endswith(" ago") for r in seen["rows"])
            assert seen["overflow"] <= 0
            await page.screenshot("ui-task-trials-desktop.png")

            await page.viewport(*PHONE, mobile=True)
            await page.goto(f"{base}/suites/{SUITE}/tasks/{quote(first['task'])}")
            phone: dict[str, Any] = await page.eval(TRIAL_LIST)
            assert phone["width"] == PHONE[0]
            assert phone["overflow"] <= 0  # the table scrolls in its own box, not the page
            assert [r["trial"] for r in phone["rows"]] == wanted
            await page.screenshot("ui-task-trials-phone.png")
