"""A stored document this version cannot decode, on every surface, against a real redis-server.

What a daemon of another schema version, or damage, leaves in a suite's
snapshot field and in a rule's stored state: the store hands out
``Undecodable`` for each, and every reader (the evaluator, the pages,
/metrics, the Client, ``status``, ``forecast``, the live view) says
"undecodable" or leaves the document out, and goes on. The next snapshot of
the suite replaces the damaged one, and the rule's next transition its state.
"""

from __future__ import annotations

import logging

import aiohttp
import msgspec
import pytest
from rich.console import Console

from reliabilityd.cli.forecast import forecast
from reliabilityd.cli.status import status
from reliabilityd.client import AsyncClient, Undecodable, UndecodableError
from reliabilityd.config import Config
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.embedded import liveview
from reliabilityd.events import TrialEvent
from reliabilityd.rules import AlertState, Rule
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Series, Store
from tests.support.daemon import store_for
from tests.support.helpers import evaluations, stored_snapshot, wait_until
from tests.support.http import get, http_config, serving
from tests.support.servers import RedisServer

SUITE = "web"
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
# Breaches on every suite below: a third of the trials pass.
RULE = Rule(name="low", suite=SUITE, k=1, below=0.9, trigger="ci-low")
# (snapshot, rule state) as another version or damage leaves them: cut short (not JSON),
# and JSON of another shape (what another schema version writes).
DAMAGED = [
    (b'{"schema": 1, "suite": "web", "tasks": 4', b'{"state": "firing", "started_at'),
    (b'{"schema": 99, "suite": "web"}', b'{"state": "escalated", "seq": "three"}'),
]


def events() -> list[TrialEvent]:
    return [
        TrialEvent(SUITE, f"t{i}", f"r{j}", "pass" if j == 0 else "fail")
        for i in range(4)
        for j in range(3)
    ]


def config(redis_server: RedisServer, prefix: str) -> Config:
    cfg = http_config(redis_server, prefix, ks=[1])
    # One tick at start, then none unless the test runs one.
    stats = msgspec.structs.replace(cfg.stats, ci_interval=3600.0)
    return msgspec.structs.replace(cfg, alerts=[RULE], stats=stats)


async def damage(store: Store, snap: bytes, state: bytes, *, row: bool = False) -> None:
    await store.client.hset(store.key(SUITE, "snapshot"), "json", snap)
    await store.client.hset(store.keys.alert(SUITE, RULE.name), "doc", state)
    if row:  # the suite's summary row, which the index and /metrics read
        await store.client.hset(store.keys.rows, SUITE, b"\x93not a row")


@pytest.mark.parametrize(("doc", "state_doc"), DAMAGED)
async def test_the_store_hands_out_undecodable_never_bytes(
    store: Store, doc: bytes, state_doc: bytes
) -> None:
    await store.ingest.apply({SUITE: events()}, windows={}, dedup_ttl=3600)
    await store.client.hset(store.key(SUITE, "snapshot"), mapping={"json": doc, "version": 1})
    key = store.keys.alert(SUITE, RULE.name)
    await store.client.hset(key, mapping={"doc": state_doc, "seq": 3, "snap": 1})
    snap = await store.snapshots.document(SUITE)
    assert isinstance(snap, Undecodable)
    assert (snap.document, snap.key) == ("snapshot", store.key(SUITE, "snapshot"))
    assert snap.error
    assert await store.snapshots.documents([SUITE, Series(SUITE, "no-such-slice")]) == [snap, None]
    (state,) = await store.alerts.alert_states([(SUITE, RULE.name)])
    assert isinstance(state, Undecodable)
    assert (state.document, state.key, state.seq, state.snapshot_version) == (
        "alert_state",
        key,
        3,
        1,
    )
    # Unreadable seq and snap fields are one more undecodable state, not an exception.
    await store.client.hset(key, "seq", "three")
    (state,) = await store.alerts.alert_states([(SUITE, RULE.name)])
    assert isinstance(state, Undecodable)
    assert "seq" in state.error


async def test_every_surface_shows_the_undecodable_documents_and_goes_on(
    redis_server: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = config(redis_server, prefix)
    async with store_for(cfg) as store:
        await store.ingest.apply({SUITE: events()}, windows={}, dedup_ttl=3600)
    async with serving(cfg) as (daemon, base), store_for(cfg) as store:
        await wait_until(lambda: _evaluated(daemon, 1))  # the start-up tick: snapshot, verdict
        first = await stored_snapshot(store, SUITE)
        assert first is not None
        (judged,) = await store.alerts.alert_states([(SUITE, RULE.name)])
        assert isinstance(judged, AlertState)
        assert judged.state == "firing"
        await damage(store, *DAMAGED[0], row=True)

        # The pages: the index row and the suite page say so; the JSON answer is the bytes.
        # (The index's state column is as of the last tick's verdicts.)
        code, index = await _page(base, "/")
        assert code == 200
        row = index.split(f'data-suite="{SUITE}"', 1)[1].split("</tr>", 1)[0]
        assert '<span class="undecodable">undecodable</span>' in row
        code, page = await _page(base, f"/suites/{SUITE}")
        assert code == 200
        assert "The stored snapshot is undecodable" in page
        assert f'{RULE.name} <span class="state undecodable">undecodable</span>' in page
        assert await get(base, f"/suites/{SUITE}") == (200, DAMAGED[0][0])

        # /metrics: no gauge of the suite and no alert state it cannot know.
        code, body = await get(base, "/metrics")
        assert code == 200
        text = body.decode()
        assert f'reliabilityd_tasks{{suite="{SUITE}"}}' not in text
        assert "reliabilityd_alert_state{" not in text

        # The Client raises for the one document, and the summary and states carry it.
        async with AsyncClient(redis_server.url, prefix=prefix) as client:
            with pytest.raises(UndecodableError, match="does not decode") as raised:
                await client.snapshot(SUITE)
            assert raised.value.undecodable.key == store.key(SUITE, "snapshot")
            summary = await client.summary(SUITE)
            assert isinstance(summary.snapshot, Undecodable)
            assert summary.counters.trials == 12
            states = await client.alert_states(SUITE, [RULE.name])
            assert isinstance(states[RULE.name], Undecodable)
            lines: list[str] = []
            assert (
                await status(client, SUITE, ks=[], rules=[RULE], as_json=False, out=lines.append)
                == 0
            )
            shown = "\n".join(lines)
            assert "snapshot undecodable (--k K computes now)" in shown
            rows = [line.split()[:3] for line in shown.splitlines()]
            assert [SUITE, RULE.name, "undecodable"] in rows
            lines.clear()
            assert (
                await status(client, SUITE, ks=[], rules=[RULE], as_json=True, out=lines.append)
                == 0
            )
            assert msgspec.json.decode(lines[0])["undecodable"]

        # forecast says why it has no pace; the live view shows both.
        said: list[str] = []
        assert await forecast(store, cfg, SUITE, out=said.append) == 0
        assert any("stored snapshot undecodable" in line for line in said)
        (view,) = await liveview.read(store, [RULE])
        line = liveview.plain(view, [1], 0.0)
        assert "(snapshot undecodable)" in line
        assert f"alert[{RULE.name}]=undecodable" in line
        console = Console(record=True, width=100)
        console.print(liveview.render([view], [1], header="", phase="", log=[], footer=[]))
        assert "undecodable" in console.export_text()

        # The evaluator logs the snapshot, judges nothing on it, and marks it for a recompute.
        caplog.set_level(logging.WARNING)
        async with daemon.recompute.tick:
            await daemon.evaluator.evaluate([SUITE])
        assert f"event=snapshot_undecodable key={store.key(SUITE, 'snapshot')}" in caplog.text
        assert await store.snapshots.changed() == [SUITE]

        # The next tick writes a new snapshot over it, and the rule, judged afresh from its
        # stored sequence number, overwrites the state by compare-and-set.
        async with daemon.recompute.tick:
            await daemon.recompute._tick()
        assert "event=alert_state_undecodable" in caplog.text
        snap = await store.snapshots.document(SUITE)
        assert isinstance(snap, Snapshot)
        assert snap.version == first.version
        (state,) = await store.alerts.alert_states([(SUITE, RULE.name)])
        assert isinstance(state, AlertState)
        assert (state.state, state.seq) == ("firing", judged.seq + 1)
        code, page = await _page(base, f"/suites/{SUITE}")
        assert code == 200
        assert "undecodable" not in page
        code, body = await get(base, "/metrics")
        assert code == 200
        text = body.decode()
        assert f'reliabilityd_tasks{{suite="{SUITE}"}} 4.0' in text
        assert (
            f'reliabilityd_alert_state{{suite="{SUITE}",rule="{RULE.name}",state="firing"}} 1.0'
            in text
        )


async def _evaluated(daemon: Daemon, passes: int) -> bool:
    return evaluations(daemon) >= passes


async def _page(base: str, path: str) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(base + path, headers={"Accept": BROWSER}) as resp,
    ):
        return resp.status, (await resp.read()).decode()
