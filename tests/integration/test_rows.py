"""The summary rows against a real redis-server: written by the tick after its verdicts,
paged and filtered by name and state, honest about a suite without a snapshot, and gone
with ``reset`` (rewritten after ``forget``)."""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Sequence

import msgspec

from reliabilityd.alerting import registry
from reliabilityd.backoff import Backoff
from reliabilityd.cli.status import status
from reliabilityd.client import AsyncClient
from reliabilityd.config import Config, MqttConfig, RedisConfig, StatsConfig
from reliabilityd.daemon._daemon import Daemon
from reliabilityd.daemon._rows import DAY, trend_of
from reliabilityd.daemon.ui import _data, _index
from reliabilityd.events import TrialEvent
from reliabilityd.rejections import Rejected
from reliabilityd.rules import AlertState, CanaryRule, Rule
from reliabilityd.rules.canary import Compare
from reliabilityd.stats.history import SCALE
from reliabilityd.stats.snapshot import Snapshot
from reliabilityd.store import Row, Series, Store, Undecodable, connect
from reliabilityd.store._rows import TREND_POINTS
from tests.support.daemon import store_for
from tests.support.helpers import wait_until
from tests.support.http import get, http_config, serving
from tests.support.servers import RedisServer


def _events(suite: str, tasks: int, passes: int) -> list[TrialEvent]:
    """``tasks`` tasks of 4 trials each, the first ``passes`` tasks passing every one."""
    return [
        TrialEvent(suite, f"t{t}", f"r{j}", "pass" if t < passes else "fail")
        for t in range(tasks)
        for j in range(4)
    ]


def _config(redis_url: str, prefix: str) -> Config:
    cfg = Config(
        redis=RedisConfig(url=redis_url, prefix=prefix),
        mqtt=MqttConfig(enabled=False),
        stats=StatsConfig(k=[1, 3], ci_interval=5.0, n_boot=300),
    )
    # alpha-* is judged (and breaches: half its tasks always fail); the rest has no rule.
    rule = Rule(name="low", suite="alpha-*", k=1, below=0.9, trigger="ci-low")
    return msgspec.structs.replace(cfg, alerts=[rule])


async def _ticked_alpha(cfg: Config, store: Store) -> Daemon:
    """A daemon after its first tick over suite alpha-1 (10 tasks, half always failing)."""
    await store.ingest.apply(
        {"alpha-1": _events("alpha-1", 10, 5)}, windows={"alpha-1": 0}, dedup_ttl=3600
    )
    daemon = Daemon(cfg, store)
    await daemon.recompute._tick()
    return daemon


async def test_rows_are_written_paged_filtered_and_dropped(
    redis_server: RedisServer, prefix: str
) -> None:
    cfg = _config(redis_server.url, prefix)
    client = connect(redis_server.url)
    store = Store(client, prefix)
    try:
        names = ["alpha-1", "alpha-2", "beta-1", "beta-2", "gamma"]
        batch = {name: _events(name, 10, 5 if name.startswith("alpha") else 10) for name in names}
        await store.ingest.apply(batch, windows=dict.fromkeys(names, 0), dedup_ttl=3600)
        daemon = Daemon(cfg, store)
        await daemon.recompute._tick()

        page = await store.rows.page()
        assert page.suites == names
        assert page.total == 5
        assert page.states == ["firing", "firing", "none", "none", "none"]
        row = page.rows[0]
        assert isinstance(row, Row)
        snap = await store.snapshots.document("alpha-1")
        assert isinstance(snap, Snapshot)
        est = snap.get("pass^k", 1)
        assert est is not None
        assert (row.k, row.value, row.tasks) == (1, est.value, 10)
        assert row.rules == [("low", "firing", "alpha-1")]
        assert row.below == 0.9
        assert len(row.trend) == 1  # the tick's own history point

        assert (await store.rows.page(state="firing")).suites == ["alpha-1", "alpha-2"]
        assert (await store.rows.page(state="none", prefix="beta")).suites == ["beta-1", "beta-2"]
        assert (await store.rows.page(contains="-2")).suites == ["alpha-2", "beta-2"]
        assert (await store.rows.page(contains="a-")).total == 4
        two = await store.rows.page(offset=2, limit=2)
        assert (two.suites, two.total) == (["beta-1", "beta-2"], 5)
        limited = await store.rows.page(readable=lambda s: [x for x in s if "beta" in x])
        assert limited.suites == ["beta-1", "beta-2"]

        # A suite Redis has without a snapshot yet is listed, with no row.
        await store.ingest.apply(
            {"delta": _events("delta", 2, 2)}, windows={"delta": 0}, dedup_ttl=3600
        )
        await daemon.recompute.rows.write(cfg, await store.reads.suites(), {})
        page = await store.rows.page(prefix="delta")
        assert (page.suites, page.rows, page.states) == (["delta"], [None], ["none"])

        # forget: the row is rewritten with the suite's new counts on the next tick.
        await store.admin.forget_task("gamma", "t0")
        await daemon.recompute._tick()
        (gamma,) = (await store.rows.page(prefix="gamma")).rows
        assert isinstance(gamma, Row)
        assert gamma.tasks == 9

        # reset: the suite's row and its index entries are gone.
        await store.admin.reset_suite("alpha-1")
        assert (await store.rows.page(state="firing")).suites == ["alpha-2"]
        assert "alpha-1" not in (await store.rows.page()).suites
        assert await store.rows.read([Series("alpha-1")]) == [None]
    finally:
        await client.aclose()


async def test_a_newer_row_is_never_overwritten_by_an_older_one(
    redis_server: RedisServer, prefix: str
) -> None:
    client = connect(redis_server.url)
    store = Store(client, prefix)
    try:
        new = Row("s", None, 7, "t7", 1, 0.5, None, 3, None)
        old = Row("s", None, 6, "t6", 1, 0.9, None, 3, None)
        assert await store.rows.write([new]) == 1
        assert await store.rows.write([old]) == 0
        assert await store.rows.read([Series("s")]) == [new]
    finally:
        await client.aclose()


async def test_the_index_pages_and_filters_over_http_and_every_list_read_reads_the_rows(
    redis_server: RedisServer, prefix: str
) -> None:
    """250 suites: the index's pages of 100, its filters, ``GET /v1/suites``, the Client's
    ``rows`` and ``status`` all list what the rows hold."""
    cfg = http_config(redis_server, prefix, ks=[1])
    rule = Rule(name="low", suite="bad-*", k=1, below=0.9, trigger="ci-low")
    cfg = msgspec.structs.replace(
        cfg, alerts=[rule], stats=msgspec.structs.replace(cfg.stats, ci_interval=3600.0)
    )
    names = [f"bad-{i:03d}" for i in range(20)] + [f"good-{i:03d}" for i in range(230)]
    async with store_for(cfg) as store:
        batch = {n: _events(n, 4, 2 if n.startswith("bad") else 4) for n in names}
        await store.ingest.apply(batch, windows=dict.fromkeys(names, 0), dedup_ttl=3600)
    async with serving(cfg) as (_daemon, base), store_for(cfg) as store:

        async def indexed() -> bool:
            return (await store.rows.page(limit=1)).total == len(names) and all(
                r is not None for r in (await store.rows.page(limit=300)).rows
            )

        await wait_until(indexed, 60)
        code, html = await get(base, "/")
        assert code == 200
        shown = re.findall(r'<tr class="suite" data-suite="([^"]+)"', html.decode())
        assert shown == sorted(names)[:100]
        assert "1&ndash;100 of 250" in html.decode()
        code, html = await get(base, "/?page=3")
        assert re.findall(r'data-suite="([^"]+)"', html.decode()) == sorted(names)[200:]
        code, html = await get(base, "/?state=firing&q=-01")
        assert re.findall(r'data-suite="([^"]+)"', html.decode()) == [
            f"bad-{i:03d}" for i in range(10, 20)
        ]
        assert (await get(base, "/?page=0"))[0] == 400
        assert (await get(base, "/?state=burning"))[0] == 400

        code, raw = await get(base, "/v1/suites?prefix=good-&page=3")
        assert code == 200
        doc = msgspec.json.decode(raw)
        assert (doc["total"], doc["page"], doc["pages"]) == (230, 3, 3)
        assert [s["suite"] for s in doc["suites"]] == [f"good-{i}" for i in range(200, 230)]
        assert doc["suites"][0]["state"] == "none"
        assert doc["suites"][0]["row"]["tasks"] == 4

        async with AsyncClient(redis_server.url, prefix=prefix) as client:
            page = await client.rows(state="firing", page_size=5, page=4)
            assert page.suites == [f"bad-{i:03d}" for i in range(15, 20)]
            assert page.total == 20
            lines: list[str] = []
            assert (
                await status(client, None, ks=[], rules=cfg.alerts, as_json=False, out=lines.append)
                == 0
            )
        table = [line.split() for line in "\n".join(lines).splitlines()]
        assert [r[0] for r in table if r and r[0] in names] == [
            *names,
            *(f"bad-{i:03d}" for i in range(20)),
        ]
        (good,) = [r for r in table if r[:1] == ["good-000"]]
        assert good[1:5] == ["4", "16", "1", "4"]  # tasks, trials, k, runs
        assert good[5].startswith("100.0%")


async def test_a_state_that_moves_without_a_new_snapshot_moves_the_row(
    redis_server: RedisServer, prefix: str
) -> None:
    """A rule's `for` runs out between two ticks with no new trial: no snapshot is written,
    and still the row's rules and the state index say firing; a suite gone from Redis
    without `reset` loses its rows at the sweep."""
    cfg = _config(redis_server.url, prefix)
    rule = Rule(name="low", suite="alpha-*", k=1, below=0.9, trigger="ci-low", for_seconds=0.5)
    cfg = msgspec.structs.replace(cfg, alerts=[rule])
    client = connect(redis_server.url)
    store = Store(client, prefix)
    try:
        daemon = await _ticked_alpha(cfg, store)
        assert (await store.rows.page(state="pending")).suites == ["alpha-1"]
        await asyncio.sleep(0.6)
        (before,) = await store.rows.read([Series("alpha-1")])
        assert isinstance(before, Row)
        tick = await daemon.recompute.ci_tick()
        assert tick.snapshots == {}  # nothing new to compute
        await daemon.evaluator.evaluate(["alpha-1"], {})
        await daemon.recompute.rows.write(cfg, ["alpha-1"], {})
        (row,) = await store.rows.read([Series("alpha-1")])
        assert isinstance(row, Row)
        assert row.rules == [("low", "firing", "alpha-1")]
        assert row.version == before.version
        assert (await store.rows.page(state="firing")).suites == ["alpha-1"]
        assert (await store.rows.page(state="pending")).suites == []

        # Gone from the suite set behind the daemon's back: the sweep drops its rows.
        await client.srem(store.keys.suites, "alpha-1")
        daemon.recompute.rows._next_sweep = 0.0
        await daemon.recompute.rows.write(cfg, await store.reads.suites(), {})
        assert (await store.rows.page()).suites == []
        assert await store.rows.series() == []
    finally:
        await client.aclose()


async def test_a_page_counts_its_suites_dead_letters_of_the_last_hour(
    redis_server: RedisServer, prefix: str
) -> None:
    """The index's page, its JSON and the Client's ``rows`` carry each suite's dead
    letters of the last hour and those that named no suite, read with the page's rows;
    a minute past the hour counts no more."""
    cfg = _config(redis_server.url, prefix)
    client = connect(redis_server.url)
    store = Store(client, prefix)
    try:
        names = ["alpha-1", "beta-1", "gamma"]
        batch = {name: _events(name, 4, 4) for name in names}
        await store.ingest.apply(batch, windows=dict.fromkeys(names, 0), dedup_ttl=3600)
        await Daemon(cfg, store).recompute._tick()
        letters = [
            (Rejected(b"x", "bad", "invalid_field", suite="beta-1"), "http:test"),
            (Rejected(b"x", "bad", "invalid_field", suite="beta-1"), "http:test"),
            (Rejected(b"x", "bad", "invalid_field", suite="gamma"), "http:test"),
            (Rejected(b"not json", "bad", "undecodable"), "mqtt:x"),
        ]
        await store.ingest.deadletter(letters, maxlen=100)
        now = time.time()
        # Dead letters of beta-1 an hour and a minute ago: past the page's hour.
        await client.hincrby(store.keys.rejected_minute(int(now // 60) - 61), "beta-1", 50)

        page = await store.rows.page(now=now)
        assert (page.suites, page.rejected, page.unattributed) == (names, [0, 2, 1], 1)
        assert (await store.rows.page(prefix="g", now=now)).rejected == [1]
        # The suite's own page reads its count alone.
        assert await store.reads.rejected_of("beta-1", now) == 2
        empty = await store.rows.page(prefix="zeta", now=now)
        assert (empty.suites, empty.rejected, empty.unattributed) == ([], [], 1)

        index = await _data.index(store, now)
        assert [(r.suite, r.rejected) for r in index.rows] == [
            ("alpha-1", 0),
            ("beta-1", 2),
            ("gamma", 1),
        ]
        doc = msgspec.json.decode(_index.index_json(index))
        assert [s["rejected"] for s in doc["suites"]] == [0, 2, 1]
        assert doc["unattributed"] == 1
        html = _index.index_main(index)
        assert '<td class="rejected">2</td>' in html
        async with AsyncClient(redis_server.url, prefix=prefix) as reader:
            assert (await reader.rows()).rejected == [0, 2, 1]
    finally:
        await client.aclose()


async def test_the_rows_carry_the_states_the_verdicts_left_without_reading_them_again(
    redis_server: RedisServer, prefix: str
) -> None:
    """A tick reads the rules' states once, for its verdicts (the threshold rules' and
    the canaries'); the rows get the states those verdicts left. A state another writer
    moved behind a verdict's back (its compare-and-set lost) is read for the rows."""
    cfg = _config(redis_server.url, prefix)
    canary = CanaryRule(
        name="beta-worse",
        compare=Compare(baseline={"suite": "beta-1"}, candidate={"suite": "alpha-1"}),
        k=1,
    )
    cfg = msgspec.structs.replace(cfg, alerts=[*cfg.alerts, canary])
    client = connect(redis_server.url)
    store = Store(client, prefix)
    reads: list[list[tuple[str, str]]] = []
    states = store.alerts.alert_states

    async def counted(pairs: Sequence[tuple[str, str]]) -> list[AlertState | Undecodable]:
        reads.append(list(pairs))
        return await states(pairs)

    try:
        names = ["alpha-1", "beta-1"]
        batch = {"alpha-1": _events("alpha-1", 10, 5), "beta-1": _events("beta-1", 10, 10)}
        await store.ingest.apply(batch, windows=dict.fromkeys(names, 0), dedup_ttl=3600)
        daemon = Daemon(cfg, store)
        store.alerts.alert_states = counted  # type: ignore[method-assign]
        await daemon.recompute._tick()
        # The evaluator's read and the canary judge's: none for the rows (a read of no
        # state makes no round trip).
        assert [r for r in reads if r] == [[("alpha-1", "low")], [("alpha-1", "beta-worse")]]
        rows = await store.rows.read([Series("alpha-1"), Series("beta-1")])
        # What the verdicts left is what Redis holds (the canary shares too few tasks
        # to be judged: inactive).
        stored = await states([("alpha-1", "low"), ("alpha-1", "beta-worse")])
        assert [s.state for s in stored if isinstance(s, AlertState)] == ["firing", "inactive"]
        assert [r.rules for r in rows if isinstance(r, Row)] == [
            [("low", "firing", "alpha-1"), ("beta-worse", "inactive", "alpha-1")],
            [("beta-worse", "inactive", "alpha-1")],
        ]
        assert (await store.rows.page(state="firing")).suites == ["alpha-1"]

        # A verdict that does not know its state (another replica's write won): read.
        reads.clear()
        watches = await registry.watched(store, cfg.alerts, names)
        await daemon.recompute.rows.write(cfg, names, {}, watches, {("alpha-1", "low"): None})
        assert [r for r in reads if r] == [[("alpha-1", "low"), ("alpha-1", "beta-worse")]]
    finally:
        await client.aclose()


async def test_a_kept_trend_grows_by_each_snapshot_as_its_history_does(
    redis_server: RedisServer, prefix: str
) -> None:
    """Between reads of the history, a row's trend is the kept read with each new
    snapshot's point appended as the history stores it: what a read gives."""
    cfg = _config(redis_server.url, prefix)
    client = connect(redis_server.url)
    store = Store(client, prefix)
    try:
        daemon = await _ticked_alpha(cfg, store)
        kept = daemon.recompute.rows._trends[Series("alpha-1")]
        for round_ in range(3):
            await asyncio.sleep(1.1)  # each point in a second of its own
            more = [TrialEvent("alpha-1", "t9", f"more{round_}", "pass")]
            await store.ingest.apply({"alpha-1": more}, windows={"alpha-1": 0}, dedup_ttl=3600)
            await daemon.recompute._tick()
            assert daemon.recompute.rows._trends[Series("alpha-1")] is kept  # not read again
            (row,) = (await store.rows.page(prefix="alpha-1")).rows
            assert isinstance(row, Row)
            now = time.time()
            (read,) = await store.history.pass_hat_many(
                [(Series("alpha-1"), 1)], since=now - DAY, until=now, span=DAY / TREND_POINTS
            )
            assert [tuple(p) for p in row.trend] == trend_of(read, now)
            assert row.value is not None
            assert abs(row.trend[-1][1] - row.value) <= 1 / SCALE  # type: ignore[operator]
    finally:
        await client.aclose()


async def test_the_tick_and_the_backoff_leave_the_process_wide_random_generator_alone(
    redis_server: RedisServer, prefix: str
) -> None:
    """The daemon runs inside an application (or beside a Hypothesis search, which fails a
    strategy whose draw moved ``random``'s state): its jitters draw from generators of
    their own."""
    # No rule: nothing fires, so no notification is still on its way at the end.
    cfg = msgspec.structs.replace(_config(redis_server.url, prefix), alerts=[])
    client = connect(redis_server.url)
    store = Store(client, prefix)
    try:
        state = random.getstate()
        daemon = await _ticked_alpha(cfg, store)  # reads the trend, spreading its re-read
        assert daemon.recompute.rows._trends[Series("alpha-1")]
        one, other = (Backoff(start=0.1, cap=1.0, jitter=0.5) for _ in range(2))
        assert [one.next_delay() for _ in range(5)] != [other.next_delay() for _ in range(5)]
        assert random.getstate() == state
    finally:
        await client.aclose()
