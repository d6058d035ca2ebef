"""The on-call index at 1,000 suites in headless chromium: pages of 100, its filters, phones.

Real redis-server; 1,000 suites written through the store's apply (every tenth
one failing most of its trials, so its rule fires), one daemon computing their
snapshots and rows. The test pages with the pager's link and filters with the
form as a person does, and saves desktop and phone screenshots in
test-artifacts/.
"""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest

from reliabilityd.events import TrialEvent
from reliabilityd.rules import Rule
from tests.support.browser import Page, browser, chromium_binary
from tests.support.daemon import store_for
from tests.support.helpers import wait_until
from tests.support.http import http_config, serving
from tests.support.servers import RedisServer

pytestmark = pytest.mark.skipif(chromium_binary() is None, reason="needs chromium")

SUITES = 1000
RULE = Rule(name="low", k=1, below=0.5, trigger="ci-low")
DESKTOP = (1280, 900)
PHONE = (375, 812)


def _name(i: int) -> str:
    return f"team-{i % 7}-suite-{i:04d}"


def _events(i: int) -> list[TrialEvent]:
    bad = i % 10 == 0
    return [
        TrialEvent(_name(i), f"task {t}", f"r{j}", "pass" if (j == 0 or not bad) else "fail")
        for t in range(6)
        for j in range(3)
    ]


async def _submit(page: Page, script: str) -> None:
    """Run ``script`` (which submits a form or follows a link) and wait for the new page."""
    loaded = page.browser.wait_event(page.session, "Page.loadEventFired")
    await page.eval(script)
    await asyncio.wait_for(loaded, 30)


async def _shown(page: Page) -> list[str]:
    return list(
        await page.eval("[...document.querySelectorAll('tr.suite')].map(r => r.dataset.suite)")
    )


async def test_the_index_of_1000_suites_pages_and_filters_in_a_browser(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = http_config(redis_server, prefix, ks=[1])
    cfg = msgspec.structs.replace(
        cfg,
        alerts=[RULE],
        stats=msgspec.structs.replace(cfg.stats, ci_interval=3600.0, max_suites=SUITES),
    )
    names = sorted(_name(i) for i in range(SUITES))
    async with store_for(cfg) as store:
        for lo in range(0, SUITES, 250):
            batch = {_name(i): _events(i) for i in range(lo, lo + 250)}
            await store.ingest.apply(batch, windows=dict.fromkeys(batch, 0), dedup_ttl=3600)
    async with serving(cfg) as (_, base), store_for(cfg) as store:

        async def every_row() -> bool:
            page = await store.rows.page(limit=SUITES)
            return page.total == SUITES and None not in page.rows and None not in page.states

        await wait_until(every_row, 120)
        async with browser() as b:
            page = await b.page()
            await page.viewport(*DESKTOP)
            started = time.monotonic()
            await page.goto(base + "/")
            first_load = time.monotonic() - started
            assert await _shown(page) == names[:100]
            assert "1\u2013100 of 1000" in await page.eval(
                "document.querySelector('.pager').innerText"
            )
            assert await page.eval("document.querySelectorAll('svg.spark').length") == 100
            await page.screenshot("ui-index-1000-desktop.png")

            # The pager's link: the next 100, in name order.
            await _submit(page, "document.querySelector('a[rel=next]').click()")
            assert await _shown(page) == names[100:200]
            assert "page=2" in await page.eval("location.search")

            # The form: the firing suites whose names hold "team-3".
            await _submit(
                page,
                "document.querySelector('select[name=state]').value = 'firing';"
                "document.querySelector('input[name=q]').value = 'team-3';"
                "document.querySelector('form.filters').submit()",
            )
            firing = [_name(i) for i in range(0, SUITES, 10) if i % 7 == 3]
            assert await _shown(page) == sorted(firing)
            assert await page.eval(
                "[...document.querySelectorAll('tr.suite .state')].every("
                "s => s.textContent === 'firing')"
            )
            assert await page.eval("document.querySelector('select[name=state]').value") == (
                "firing"
            )
            await page.screenshot("ui-index-1000-filtered-desktop.png")

            await page.viewport(*PHONE, mobile=True)
            await page.goto(base + "/")
            # One column: the table scrolls in its own box, never the page sideways.
            assert await page.eval("document.documentElement.scrollWidth <= window.innerWidth")
            await page.screenshot("ui-index-1000-phone.png")
    # A page of 1,000 suites loads as fast as a page of 100 would (rows, not every suite).
    assert first_load < 10.0
