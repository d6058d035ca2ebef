"""Every surface lists the same rules: a firing canary and a firing slice rule on each.

Real redis-server and a daemon with its HTTP port; trials committed through
the sources' commit. A canary (``prod`` against ``canary``) and a
``slices = true`` threshold rule on a sliced suite fire; then the Client,
``status`` (plain and ``--json``), ``history``, ``/metrics``, the index, the
suite and slice pages, the alert link's banner and the suite JSON must each
show both, from the one registry (``alerting.registry``).
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Sequence
from functools import partial
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import msgspec
import pytest

from reliabilityd.cli._history import with_watched
from reliabilityd.cli._main import main
from reliabilityd.cli.status import status
from reliabilityd.client import AsyncClient
from reliabilityd.config import Config
from reliabilityd.events import TrialEvent
from reliabilityd.rules import CanaryRule, Rule
from reliabilityd.rules.canary import Compare
from reliabilityd.stats.slices import slice_id
from reliabilityd.store import Store
from tests.support.daemon import store_for
from tests.support.helpers import commit_all, current_snapshot, stored_state, toml_of, wait_until
from tests.support.http import http_config, scrape, serving
from tests.support.servers import RedisServer

BROWSER = "text/html,application/xhtml+xml"
BASELINE, CANDIDATE, SLICED = "prod", "canary", "sliced"
CANARY = CanaryRule(
    name="canary-regression",
    compare=Compare(baseline={"suite": BASELINE}, candidate={"suite": CANDIDATE}),
    k=1,
    top=3,
)
SLICE_RULE = Rule(
    name="sliced-reliability", suite=SLICED, k=1, below=0.7, trigger="ci-low", slices=True
)
BAD, GOOD = slice_id(["model"], {"model": "bad"}), slice_id(["model"], {"model": "good"})
SLICE_NAME = f"{SLICE_RULE.name}[{BAD}]"
TASKS = 40
_trial = itertools.count()


def _config(redis: RedisServer, prefix: str) -> Config:
    cfg = http_config(redis, prefix, ks=[1])
    return msgspec.structs.replace(
        cfg,
        stats=msgspec.structs.replace(cfg.stats, slice_by=["model"]),
        alerts=[CANARY, SLICE_RULE],
    )


def _trials(suite: str, passes: Sequence[int], **labels: str) -> list[TrialEvent]:
    """Ten trials per task i, passes[i] of them passing."""
    prefix = labels.get("model", "task")
    return [
        TrialEvent(
            suite,
            f"{prefix} {i:02d}",
            f"r{next(_trial)}",
            "pass" if j < c else "fail",
            labels=dict(labels) or None,
        )
        for i, c in enumerate(passes)
        for j in range(10)
    ]


async def _firing(store: Store) -> bool:
    canary = await stored_state(store, CANDIDATE, CANARY.name)
    sliced = await stored_state(store, SLICED, SLICE_NAME)
    return canary.state == "firing" and sliced.state == "firing"


async def _get(base: str, path: str, accept: str = "application/json") -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(base + path, headers={"Accept": accept}) as resp,
    ):
        return resp.status, (await resp.read()).decode()


def _section(html: str, tag: str, attr: str, value: str) -> str:
    """The HTML of the first ``<tag ... attr="value">`` element up to its closing tag."""
    match = re.search(rf'<{tag} [^>]*{attr}="{re.escape(escape(value))}"[^>]*>', html)
    assert match, (attr, value, html[:2000])
    end = html.index(f"</{tag}>", match.end())
    return html[match.start() : end]


def _by_name(alerts: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in alerts}


async def test_a_firing_canary_and_slice_rule_appear_on_every_surface(
    redis_server: RedisServer, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(redis_server, prefix)
    async with serving(cfg) as (_, base), store_for(cfg) as store:
        # The canary: 16 of 40 tasks fall from 10/10 to 2/10. The sliced suite: the
        # "bad" slice's 4 tasks fail every trial, the "good" slice's 36 pass.
        await commit_all(
            cfg,
            [
                *_trials(BASELINE, [10] * TASKS),
                *_trials(CANDIDATE, [10] * (TASKS - 16) + [2] * 16),
                *_trials(SLICED, [0] * 4, model="bad"),
                *_trials(SLICED, [10] * 36, model="good"),
            ],
        )
        await wait_until(partial(_firing, store), 60)
        await current_snapshot(store, SLICED)

        # The Client: both rules, each where it belongs.
        async with AsyncClient(redis_server.url, prefix=prefix) as client:
            every = {a.name: a for a in await client.alerts(cfg.alerts)}
            assert every[CANARY.name].state == "firing"
            assert every[CANARY.name].kind == "canary"
            assert (every[CANARY.name].baseline, every[CANARY.name].candidate) == (
                BASELINE,
                CANDIDATE,
            )
            difference, ci = every[CANARY.name].difference, every[CANARY.name].ci
            assert difference is not None
            assert ci is not None
            assert ci[1] < -CANARY.margin
            assert every[SLICE_NAME].state == "firing"
            assert every[SLICE_NAME].slice == BAD
            assert every[f"{SLICE_RULE.name}[{GOOD}]"].state == "inactive"
            # A canary is on its baseline's reads too.
            on_prod = [a.name for a in await client.alerts(cfg.alerts, BASELINE)]
            assert on_prod == [CANARY.name]
            on_slice = [a.name for a in await client.alerts(cfg.alerts, SLICED, slice=BAD)]
            assert on_slice == [SLICE_NAME]

            # status, plain: a row for each, naming what it watches.
            lines: list[str] = []
            assert (
                await status(client, None, ks=[], rules=cfg.alerts, as_json=False, out=lines.append)
                == 0
            )
            lines = "\n".join(lines).splitlines()
            rows = [line.split() for line in lines]
            assert [CANDIDATE, CANARY.name, "firing"] in [r[:3] for r in rows]
            assert [SLICED, SLICE_NAME, "firing"] in [r[:3] for r in rows]
            (canary_line,) = [line for line in lines if CANARY.name in line]
            assert f"{CANDIDATE} - {BASELINE} = {100 * difference:+.1f} pp" in canary_line
            lines.clear()
            assert (
                await status(
                    client, BASELINE, ks=[], rules=cfg.alerts, as_json=False, out=lines.append
                )
                == 0
            )
            assert any(
                CANARY.name in line and "firing" in line for line in "\n".join(lines).splitlines()
            )

            # The command line reads the same rules from the config file.
            path = tmp_path / "c.toml"
            path.write_bytes(toml_of(cfg))
            capsys.readouterr()
            assert await asyncio.to_thread(main, ["status", "-c", str(path)]) == 0
            printed = [line.split()[:3] for line in capsys.readouterr().out.splitlines()]
            assert [CANDIDATE, CANARY.name, "firing"] in printed
            assert [SLICED, SLICE_NAME, "firing"] in printed

            # status --json: the suite's JSON read, its slices with their estimates and rules.
            lines.clear()
            await status(client, BASELINE, ks=[], rules=cfg.alerts, as_json=True, out=lines.append)
            doc = msgspec.json.decode(lines[0])
            canary = _by_name(doc["alerts"])[CANARY.name]
            assert (canary["state"], canary["baseline"], canary["candidate"]) == (
                "firing",
                BASELINE,
                CANDIDATE,
            )
            lines.clear()
            await status(client, SLICED, ks=[], rules=cfg.alerts, as_json=True, out=lines.append)
            doc = msgspec.json.decode(lines[0])
            assert _by_name(doc["alerts"])[SLICE_NAME]["state"] == "firing"
            assert _by_name(doc["alerts"])[SLICE_NAME]["slice"] == BAD
            slices = {s["slice"]: s for s in doc["slice_snapshots"]}
            assert set(slices) == {BAD, GOOD}
            assert slices[BAD]["pass_hat_k"][0]["value"] == 0.0
            assert slices[GOOD]["pass_hat_k"][0]["value"] == 1.0

            # history: the canary's transitions on both sides' histories, the slice
            # rule's on its suite's.
            for suite, name in (
                (BASELINE, CANARY.name),
                (CANDIDATE, CANARY.name),
                (SLICED, SLICE_NAME),
            ):
                hist = await with_watched(
                    client, cfg.alerts, await client.history(suite), since=None, until=None
                )
                assert (name, "firing") in [(t.rule, t.state) for t in hist.transitions], suite

        # /metrics: one alert_state series per rule and slice (from the summary rows,
        # written once the tick's verdicts are in: wait for the firing ones).
        got = await scrape(base)

        def state(suite: str, rule: str, value: str) -> float | None:
            labels = (("rule", rule), ("state", value), ("suite", suite))
            return got.get(("reliabilityd_alert_state", labels))

        async def rows_firing() -> bool:
            nonlocal got
            got = await scrape(base)
            return (
                state(CANDIDATE, CANARY.name, "firing")
                == state(SLICED, SLICE_NAME, "firing")
                == 1.0
            )

        await wait_until(rows_firing, 30)

        assert state(CANDIDATE, CANARY.name, "firing") == 1.0
        assert state(SLICED, SLICE_NAME, "firing") == 1.0
        assert state(SLICED, f"{SLICE_RULE.name}[{GOOD}]", "inactive") == 1.0
        assert state(SLICED, SLICE_RULE.name, "inactive") == 1.0

        # The index: each suite's worst state, the canary's on both sides (the rows carry
        # the states the scrape just showed).
        code, html = await _get(base, "/", BROWSER)
        assert code == 200
        for suite in (BASELINE, CANDIDATE, SLICED):
            row = _section(html, "tr", "data-suite", suite)
            assert '<span class="state firing">' in row, suite

        # The baseline's page: the canary's card names both sides, its difference and
        # interval, and the tasks that got worse.
        code, html = await _get(base, f"/suites/{BASELINE}", BROWSER)
        assert code == 200
        card = _section(html, "section", "data-rule", CANARY.name)
        assert '<span class="state firing">' in card
        assert f'<strong class="baseline">{BASELINE}</strong>' in card
        assert f'<strong class="candidate">{CANDIDATE}</strong>' in card
        assert f"{100 * difference:+.1f} pp" in card
        assert f"[{100 * ci[0]:+.1f} pp, {100 * ci[1]:+.1f} pp]" in card
        assert card.count("<tr><td>task ") == CANARY.top
        assert "No alert rule watches" not in html

        # The alert's link: the candidate's page, opened at the canary's card.
        notes = [msgspec.json.decode(n) for n in await store.alerts.alert_history(cfg.alerts_key)]
        (note,) = [n for n in notes if n["rule"] == CANARY.name and n["state"] == "firing"]
        link = note["generator_url"]
        assert link.startswith(f"{base}/suites/{CANDIDATE}?rule={CANARY.name}&at=")
        code, html = await _get(base, link[len(base) :], BROWSER)
        assert code == 200
        banner = _section(html, "p", "class", "banner")
        assert "unknown rule" not in banner
        assert '<span class="state firing">' in banner
        assert f'id="rule-{CANARY.name}"' in html

        # The sliced suite's page: the slice rule's card names its slice, the failing
        # slice is singled out among the cards side by side.
        code, html = await _get(base, f"/suites/{SLICED}", BROWSER)
        card = _section(html, "section", "data-rule", SLICE_NAME)
        assert '<span class="state firing">' in card
        assert "On the slice" in card
        assert _section(html, "section", "data-slice", BAD).startswith(
            '<section class="slice failing"'
        )
        assert _section(html, "section", "data-slice", GOOD).startswith('<section class="slice"')
        # The slice's own page: its rule, its charts.
        code, html = await _get(base, f"/suites/{SLICED}?slice={quote(BAD, safe='')}", BROWSER)
        assert code == 200
        assert '<span class="state firing">' in _section(html, "section", "data-rule", SLICE_NAME)
        assert html.count('<svg class="chart"') == 2

        # The suite JSON: the same rules, the slices with their estimates.
        code, raw = await _get(base, f"/suites/{BASELINE}")
        assert _by_name(msgspec.json.decode(raw)["alerts"])[CANARY.name]["state"] == "firing"
        code, raw = await _get(base, f"/suites/{SLICED}")
        doc = msgspec.json.decode(raw)
        assert _by_name(doc["alerts"])[SLICE_NAME]["state"] == "firing"
        assert {s["slice"] for s in doc["slice_snapshots"]} == {BAD, GOOD}
        code, raw = await _get(base, f"/suites/{SLICED}?slice={quote(BAD, safe='')}")
        assert [a["name"] for a in msgspec.json.decode(raw)["alerts"]] == [SLICE_NAME]
